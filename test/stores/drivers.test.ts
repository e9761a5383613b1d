// The drivers are optional peer dependencies, loaded by the factories that need them (lib/stores/drivers.ts).
// test/app/package.test.ts checks the same in a project where they are not installed; here a missing driver is
// simulated through the loader seam.
import t from 'tap'
import { loadDriver, useDriverLoader } from '../../lib/stores/drivers.js'
import { PostgresApprovalStore, PostgresConnection, postgresStores } from '../../lib/stores/postgres.js'
import { RedisConnection, redisStores } from '../../lib/stores/redis.js'
import { SqliteConnection, sqliteStores } from '../../lib/stores/sqlite.js'

function missing (name: string): Error {
  return Object.assign(new Error(`Cannot find module '${name}'\nRequire stack:\n- /app/node_modules/fastify-agents/dist/lib/stores/drivers.js`), { code: 'MODULE_NOT_FOUND' })
}

t.test('a missing driver is an error naming the package to install', async (t) => {
  const loaded: string[] = []
  t.teardown(useDriverLoader((name) => { loaded.push(name); throw missing(name) }))
  t.throws(() => sqliteStores('./data.db'), { code: 'FA_MISSING_DRIVER', message: 'sqliteStores() needs the optional dependency better-sqlite3: npm install better-sqlite3@12' })
  t.throws(() => postgresStores('postgres://localhost/db'), { message: 'postgresStores() needs the optional dependency pg: npm install pg' })
  t.throws(() => postgresStores({ connectionString: 'postgres://localhost/db' }), { message: /npm install pg$/ })
  t.throws(() => new PostgresApprovalStore('postgres://localhost/db'), { message: /npm install pg$/ }, 'the classes too')
  t.throws(() => redisStores('redis://localhost'), { message: 'redisStores() needs the optional dependency ioredis: npm install ioredis' })
  t.same(loaded, ['better-sqlite3', 'pg', 'pg', 'pg', 'ioredis'])
})

t.test('a client you pass needs no driver loaded by us', async (t) => {
  t.teardown(useDriverLoader((name) => { throw missing(name) }))
  const pool = { query: async () => ({ rows: [] }), connect: async () => ({}), end: async () => {}, totalCount: 0 }
  t.equal(new PostgresConnection(pool).owned, false)
  t.equal(new SqliteConnection({ prepare: () => ({}), exec: () => ({}), transaction: () => ({}), close: () => {} }).owned, false)
  t.equal(new RedisConnection({ evalsha: async () => 1, hgetall: async () => ({}), quit: async () => 'OK' }).owned, false)
})

t.test('a driver that is installed but fails to load says why, unchanged', async (t) => {
  const broken = Object.assign(new Error("Cannot find module 'bindings'"), { code: 'MODULE_NOT_FOUND' })
  t.teardown(useDriverLoader(() => { throw broken }))
  t.throws(() => loadDriver('better-sqlite3', 'sqliteStores()'), broken)
  useDriverLoader(() => { throw new Error('NODE_MODULE_VERSION mismatch') })
  t.throws(() => loadDriver('better-sqlite3', 'sqliteStores()'), /NODE_MODULE_VERSION mismatch/)
})

t.test('the default loader finds the installed drivers', async (t) => {
  t.equal(typeof loadDriver<{ Pool: unknown }>('pg', 'x').Pool, 'function')
  t.equal(typeof loadDriver<{ Redis: unknown }>('ioredis', 'x').Redis, 'function')
  t.equal(typeof loadDriver<unknown>('better-sqlite3', 'x'), 'function')
})
