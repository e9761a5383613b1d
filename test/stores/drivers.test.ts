// The drivers are optional peer dependencies, loaded by the factories that need them (lib/stores/drivers.ts).
// test/app/package.test.ts checks the same in a project where they are not installed; here a missing driver is
// simulated in a process of its own, whose require() cannot find the drivers, and through the loader of one call.
import t from 'tap'
import { execFile } from 'node:child_process'
import { rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { loadDriver } from '../../lib/stores/drivers.js'
import { PostgresConnection } from '../../lib/stores/postgres.js'
import { RedisConnection } from '../../lib/stores/redis.js'
import { SqliteConnection } from '../../lib/stores/sqlite.js'

function missing (name: string): Error {
  return Object.assign(new Error(`Cannot find module '${name}'\nRequire stack:\n- /app/node_modules/fastify-agents/dist/lib/stores/drivers.js`), { code: 'MODULE_NOT_FOUND' })
}

// preloaded in the child: require() finds no driver, as in a project that has not installed them
const hideDrivers = `const Module = require('node:module')
const resolve = Module._resolveFilename
Module._resolveFilename = function (request, ...rest) {
  if (['pg', 'ioredis', 'better-sqlite3'].includes(request)) {
    globalThis.loadedDrivers = [...(globalThis.loadedDrivers ?? []), request]
    throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' })
  }
  return resolve.call(this, request, ...rest)
}
`

const withoutDrivers = `
const { PostgresApprovalStore, postgresStores } = await import(${JSON.stringify(new URL('../../lib/stores/postgres.js', import.meta.url).href)})
const { redisStores } = await import(${JSON.stringify(new URL('../../lib/stores/redis.js', import.meta.url).href)})
const { sqliteStores } = await import(${JSON.stringify(new URL('../../lib/stores/sqlite.js', import.meta.url).href)})
const errors = []
for (const make of [() => sqliteStores('./data.db'), () => postgresStores('postgres://localhost/db'), () => postgresStores({ connectionString: 'postgres://localhost/db' }),
  () => new PostgresApprovalStore('postgres://localhost/db'), () => redisStores('redis://localhost')]) {
  try { make(); errors.push(null) } catch (error) { errors.push({ code: error.code, message: error.message }) }
}
console.log(JSON.stringify({ errors, loaded: globalThis.loadedDrivers }))
`

t.test('a missing driver is an error naming the package to install', async (t) => {
  const preload = join(tmpdir(), `fastify-agents-hide-drivers-${process.pid}.cjs`)
  writeFileSync(preload, hideDrivers)
  t.teardown(() => rmSync(preload, { force: true }))
  const { stdout } = await promisify(execFile)(process.execPath, ['--require', preload, '--input-type=module', '-e', withoutDrivers])
  const { errors, loaded } = JSON.parse(stdout)
  t.match(errors, [
    { code: 'FA_MISSING_DRIVER', message: 'sqliteStores() needs the optional dependency better-sqlite3: npm install better-sqlite3@12' },
    { message: 'postgresStores() needs the optional dependency pg: npm install pg' },
    { message: /npm install pg$/ },
    { message: /npm install pg$/ },
    { message: 'redisStores() needs the optional dependency ioredis: npm install ioredis' }
  ])
  t.same(loaded, ['better-sqlite3', 'pg', 'pg', 'pg', 'ioredis'])
})

t.test('a client you pass needs no driver loaded by us', async (t) => {
  const pool = { query: async () => ({ rows: [] }), connect: async () => ({}), end: async () => {}, totalCount: 0 }
  t.equal(new PostgresConnection(pool).owned, false)
  t.equal(new SqliteConnection({ prepare: () => ({}), exec: () => ({}), transaction: () => ({}), close: () => {} }).owned, false)
  t.equal(new RedisConnection({ evalsha: async () => 1, hgetall: async () => ({}), quit: async () => 'OK' }).owned, false)
})

t.test('a driver that is installed but fails to load says why, unchanged', async (t) => {
  t.throws(() => loadDriver('pg', 'postgresStores()', (name) => { throw missing(name) }), { code: 'FA_MISSING_DRIVER' })
  const broken = Object.assign(new Error("Cannot find module 'bindings'"), { code: 'MODULE_NOT_FOUND' })
  t.throws(() => loadDriver('better-sqlite3', 'sqliteStores()', () => { throw broken }), broken)
  t.throws(() => loadDriver('better-sqlite3', 'sqliteStores()', () => { throw new Error('NODE_MODULE_VERSION mismatch') }), /NODE_MODULE_VERSION mismatch/)
})

t.test('the default loader finds the installed drivers', async (t) => {
  t.equal(typeof loadDriver<{ Pool: unknown }>('pg', 'x').Pool, 'function')
  t.equal(typeof loadDriver<{ Redis: unknown }>('ioredis', 'x').Redis, 'function')
  t.equal(typeof loadDriver<unknown>('better-sqlite3', 'x'), 'function')
})
