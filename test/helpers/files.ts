// The project's files, wherever a compiled test runs from (.build/test/…).
import { existsSync, readdirSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The folder of the nearest package.json above this file: the sources' root. */
export function projectRoot (): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir)
  return dir
}

/** The TypeScript sources under `dir` (a path from the project's root), as paths from the root; declarations left out. */
export function sources (dir: string): string[] {
  const root = projectRoot()
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(join(root, path)).isDirectory()) return sources(path)
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : []
  })
}
