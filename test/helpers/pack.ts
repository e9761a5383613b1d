// The package as npm would publish it, and projects that install it from the registry: for the tests that check
// what a user gets (test/app/package.test.ts, test/app/install.test.ts, test/adapters/ai-sdk-majors.test.ts).
import { execFile } from 'node:child_process'
import { copyFile, cp, mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { projectRoot } from './files.js'

export const run = promisify(execFile)

export const root = projectRoot()

/** The compiled sources (not the tests), .js and .d.ts, without their source-map comments. */
export async function copyBuild (from: string, to: string): Promise<void> {
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const source = join(from, entry.name)
    if (entry.isDirectory()) {
      if (from.endsWith('.build') && !['adapters', 'app', 'bin', 'client', 'lib', 'plugins', 'routes', 'schemas'].includes(entry.name)) continue
      await copyBuild(source, join(to, entry.name))
    } else if (/\.(js|d\.ts)$/.test(entry.name)) {
      await mkdir(to, { recursive: true })
      await writeFile(join(to, entry.name), (await readFile(source, 'utf8')).replace(/\n\/\/# sourceMappingURL=.*\n?$/, '\n'))
    }
  }
}

export interface Packed {
  /** the tarball's path */
  tarball: string
  files: string[]
}

/**
 * `npm pack` of this project into `dir`: the build `npm test` compiled into .build/ (tsconfig.test.json: the options
 * of tsconfig.build.json plus source maps) as `npm run build` writes it to dist/, with the manifest and the docs.
 */
export async function pack (dir: string): Promise<Packed> {
  const pkg = join(dir, 'pkg')
  await mkdir(pkg)
  for (const file of ['package.json', 'README.md', 'CHANGELOG.md']) await copyFile(join(root, file), join(pkg, file))
  await cp(join(root, 'docs'), join(pkg, 'docs'), { recursive: true })
  await copyBuild(join(root, '.build'), join(pkg, 'dist'))
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: pkg })
  const [packed] = JSON.parse(stdout) as Array<{ filename: string, files: Array<{ path: string }> }>
  return { tarball: join(dir, packed!.filename), files: packed!.files.map((f) => f.path) }
}

/** Whether npm reaches its registry (the tests that install from it are skipped without it). */
export async function registryReachable (): Promise<boolean> {
  return run('npm', ['ping'], { timeout: 20_000 }).then(() => true, () => false)
}

/** A new, empty ES-module project in `dir`. */
export async function emptyProject (dir: string): Promise<void> {
  await mkdir(dir, { recursive: true })
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }, null, 2))
}

export interface Outcome {
  code: number
  stdout: string
  stderr: string
}

/** A shell command line, as a user types it, in `cwd`; its exit code and output (never a rejection). */
export async function shell (line: string, cwd: string, timeout = 300_000): Promise<Outcome> {
  // npm's own settings for this project only: no audit or funding requests, nothing from the runner's npm_config_*;
  // yes to npx's "Ok to proceed?", which a person answers at the prompt
  // and nothing of the test runner's (its NODE_OPTIONS loaders break a user's tsc)
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(npm_|TAP|_TAPJS)/i.test(name)))
  // (the runner adds its loaders to the NODE_OPTIONS of every child it sees start: sh drops them before the line)
  return run('sh', ['-c', `unset NODE_OPTIONS; ${line}`], { cwd, timeout, maxBuffer: 64 * 1024 * 1024, env: { ...env, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false', npm_config_yes: 'true' } })
    .then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }), (error: { code?: number | string, stdout?: string, stderr?: string }) => ({
      code: typeof error.code === 'number' ? error.code : 1,
      stdout: error.stdout ?? '',
      stderr: error.stderr ?? String(error)
    }))
}
