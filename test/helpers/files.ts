// The project's files, wherever a compiled test runs from (.build/test/…).
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The folder of the nearest package.json above this file: the sources' root. */
export function projectRoot (): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir)
  return dir
}
