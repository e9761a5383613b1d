// The package as a user gets it: built, packed with `npm pack`, unpacked into a project that has only
// fastify-agents, its dependencies, fastify, typescript and @types/node (no pg, ioredis, better-sqlite3, no
// @types/pg, @types/better-sqlite3, @types/ws). There, the declarations type-check with skipLibCheck: false and
// importing the package loads no database driver. The slowest test of the suite (a build and a type check).
import { readFileSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import t from 'tap'
import { pack, root, run } from '../helpers/pack.js'

// a pack, an install and a type check: on a busy machine more than the suite's 60 s per file
t.setTimeout(180_000)

const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>
  peerDependencies: Record<string, string>
  peerDependenciesMeta: Record<string, { optional?: boolean }>
  devDependencies: Record<string, string>
  files: string[]
}

const drivers = ['better-sqlite3', 'ioredis', 'pg']

t.test('the database drivers are optional peer dependencies', async (t) => {
  for (const driver of drivers) {
    t.equal(manifest.dependencies[driver], undefined, `${driver} is not a dependency`)
    t.ok(manifest.peerDependencies[driver], `${driver} is a peer dependency`)
    t.equal(manifest.peerDependenciesMeta[driver]?.optional, true, `${driver} is optional`)
    t.ok(manifest.devDependencies[driver], `${driver} stays a devDependency for our tests`)
  }
})

// A user's file: the main API, every store factory, the plugin form, the schemas.
const consumerSource = `
import Fastify from 'fastify'
import agentService, {
  createAgentService, defineAgent, memoryStores, postgresStores, redisStores, sqliteStores, schemas
} from 'fastify-agents'
import type { AgentServiceOptions, PgPool, RedisClient, RunResult, SqliteDatabase } from 'fastify-agents'
import { AgentsClientError, createClient } from 'fastify-agents/client'
import type { RunStreamEvent } from 'fastify-agents/client'
import { test } from 'node:test'
import { factoriesOf, runStoreConformance, storeConformance } from 'fastify-agents/testing'
import type { RunStoreFactories } from 'fastify-agents/testing'

const echo = defineAgent({
  description: 'echo',
  async run (input: { text: string }, ctx) {
    ctx.log.info({ runId: ctx.runId }, 'echo')
    return { output: input.text, usage: { inputTokens: 1, outputTokens: 1 } }
  }
})

// a Standard Schema of the user's library types run's input (the declarations read @standard-schema/spec's types)
const shout = defineAgent({
  input: { '~standard': { version: 1, vendor: 'mine', validate: (value: unknown) => ({ value: String(value) }), types: { input: '', output: '' } } },
  async run (input) {
    const text: string = input
    return { output: text.toUpperCase() }
  }
})

export function options (pool: PgPool, redis: RedisClient, db: SqliteDatabase): AgentServiceOptions[] {
  return [
    { agents: { echo, shout }, ...memoryStores() },
    { agents: { echo }, ...sqliteStores(db), storeTimeoutMs: 1000 },
    { agents: { echo }, ...postgresStores(pool, { schema: 'agents' }), ...redisStores(redis) },
    { agents: { echo }, ...postgresStores({ connectionString: 'postgres://localhost/db', max: 5 }) }
  ]
}

export async function main (): Promise<RunResult | undefined> {
  const service = createAgentService({ agents: { echo }, host: '127.0.0.1' })
  await service.listen({ port: 0 })
  await service.close(1000)
  const app = Fastify()
  await app.register(agentService, { agents: { echo }, adminApi: { enabled: true, bearerToken: 't' } })
  void schemas.RunRequest
  return undefined
}

// the store suites under node:test, as a user checks a backend of their own
export function suites (runs: RunStoreFactories<unknown>): void {
  storeConformance(test, factoriesOf(() => memoryStores()))
  runStoreConformance(test, runs)
}

export async function client (): Promise<string> {
  const agents = createClient({ baseUrl: 'http://127.0.0.1:3000', apiKey: 'k' })
  let text = ''
  const events: RunStreamEvent[] = []
  for await (const event of agents.runs.stream('echo', { input: { text: 'hi' } })) {
    events.push(event)
    if (event.type === 'message.delta') text += event.data.text
    if (event.type === 'run.failed') throw new Error(event.data.error.code)
  }
  const { sessions, nextCursor } = await agents.sessions.list({ agent: 'echo', limit: 10 })
  const result: RunResult = await agents.runs.create('echo', { input: { text: 'hi' }, sessionId: sessions[0]?.id })
  if (nextCursor === null && result.status === 'completed') return text
  throw new AgentsClientError(500, undefined, 'never')
}
`

const tsconfig = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    skipLibCheck: false,
    noEmit: true,
    types: ['node']
  },
  files: ['index.ts']
}

// What importing does without the drivers, and the errors their factories give.
const runtimeCheck = `
const api = await import('fastify-agents')
const clientApi = await import('fastify-agents/client')
const testingApi = await import('fastify-agents/testing')
const results = { loaded: typeof api.createAgentService === 'function', client: typeof clientApi.createClient === 'function', testing: typeof testingApi.storeConformance === 'function' }
for (const [name, make] of [['sqliteStores', () => api.sqliteStores('./data.db')], ['postgresStores', () => api.postgresStores('postgres://localhost/db')], ['redisStores', () => api.redisStores('redis://localhost')]]) {
  try { make(); results[name] = 'no error' } catch (error) { results[name] = error.message }
}
for (const driver of ['pg', 'ioredis', 'better-sqlite3']) {
  try { await import(driver); results[driver] = 'installed' } catch { results[driver] = 'absent' }
}
console.log(JSON.stringify(results))
`

t.test('npm pack: the declarations type-check for a user without the drivers or their types, and importing loads none', async (t) => {
  const started = Date.now()
  // outside this project: nothing of its node_modules may be found by walking up
  const dir = await mkdtemp(join(tmpdir(), 'fa-package-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const { tarball, files } = await pack(dir)
  t.ok(files.includes('dist/index.js') && files.includes('dist/index.d.ts') && files.includes('dist/bin/fastify-agents.js'), 'the build is packed')
  t.ok(files.includes('dist/adapters/ai-sdk.js') && files.includes('dist/adapters/langchain.d.ts'), 'with the adapters')
  t.ok(files.includes('dist/lib/console/assets.js') && files.includes('dist/lib/console/script.js'), 'the operator console ships in the package (no CDN)')
  t.ok(files.includes('docs/runs.md'), "the README's docs pages ship with it (its links are relative)")
  t.ok(files.includes('dist/client/index.js') && files.includes('dist/client/index.d.ts'), 'fastify-agents/client ships with it')
  t.ok(files.includes('dist/lib/testing/index.js') && files.includes('dist/lib/testing/index.d.ts'), 'fastify-agents/testing ships with it')
  t.notOk(files.some((f) => f.endsWith('.tsbuildinfo') || f.startsWith('test/') || f.endsWith('.ts') && !f.endsWith('.d.ts')), 'and nothing else of the tree')

  const consumer = join(dir, 'consumer')
  const modules = join(consumer, 'node_modules')
  await mkdir(join(modules, 'fastify-agents'), { recursive: true })
  await run('tar', ['-xzf', tarball, '-C', join(modules, 'fastify-agents'), '--strip-components=1'])
  const installed = JSON.parse(await readFile(join(modules, 'fastify-agents/package.json'), 'utf8')) as { dependencies: Record<string, string> }
  // its dependencies, as npm would install them, from this project's node_modules; nothing else
  for (const name of [...Object.keys(installed.dependencies), '@types/node']) {
    await mkdir(dirname(join(modules, name)), { recursive: true })
    await symlink(join(root, 'node_modules', name), join(modules, name), 'dir')
  }
  await writeFile(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))
  await writeFile(join(consumer, 'tsconfig.json'), JSON.stringify(tsconfig))
  await writeFile(join(consumer, 'index.ts'), consumerSource)
  await writeFile(join(consumer, 'check.mjs'), runtimeCheck)

  const typecheck = await run(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: consumer })
    .then(() => '', (error: { stdout: string }) => error.stdout)
  t.equal(typecheck, '', 'tsc --noEmit (strict, skipLibCheck: false, NodeNext) passes')

  const results = JSON.parse((await run(process.execPath, ['check.mjs'], { cwd: consumer })).stdout) as Record<string, unknown>
  t.same(results, {
    loaded: true,
    client: true,
    testing: true,
    sqliteStores: 'sqliteStores() needs the optional dependency better-sqlite3: npm install better-sqlite3@12',
    postgresStores: 'postgresStores() needs the optional dependency pg: npm install pg',
    redisStores: 'redisStores() needs the optional dependency ioredis: npm install ioredis',
    pg: 'absent',
    ioredis: 'absent',
    'better-sqlite3': 'absent'
  }, 'the package and its store suites load without the drivers (nor tap); each factory names the one to install')
  t.comment(`packed, installed and checked in ${Date.now() - started} ms`)
})
