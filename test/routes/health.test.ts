import t from 'tap'
import Database from 'better-sqlite3'
import pg from 'pg'
import { Redis } from 'ioredis'
import { build } from '../helper.js'
import { pgUrl, redisUrl, requirePg, requireRedis } from '../helpers/services.js'

t.test('liveness without a db', async (t) => {
  const { app } = build(t)
  for (const url of ['/health', '/v1/health']) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 200, url)
    t.match(res.json(), { status: 'ok', uptimeSeconds: Number, checks: {} })
    t.equal(res.json().checks.db, undefined)
  }
  const wrong = await app.inject({ method: 'POST', url: '/health' })
  t.equal(wrong.statusCode, 405)
  t.equal(wrong.headers.allow, 'GET, HEAD')
  t.equal((await app.inject({ method: 'DELETE', url: '/v1/health' })).statusCode, 405)
  t.equal((await app.inject({ method: 'GET', url: '/health/deeper' })).statusCode, 404)
})

t.test('a db with health(): each unhealthy answer is a 503 degraded', async (t) => {
  const answers: Array<[string, () => Promise<unknown>, RegExp | undefined]> = [
    ['rejects', async () => { throw new Error('connection refused') }, /connection refused/],
    ['false', async () => false, /unhealthy/],
    ['ok: false', async () => ({ ok: false, error: 'replica lag' }), /replica lag/],
    ['ok: false without error', async () => ({ ok: false }), /unhealthy/],
    ['rejects with an empty error', () => Promise.reject(new Error('')), /^$/],
    ['rejects with a string', () => Promise.reject('socket hang up'), /^socket hang up$/], // eslint-disable-line prefer-promise-reject-errors
    ['rejects with nothing', () => Promise.reject(), /^undefined$/] // eslint-disable-line prefer-promise-reject-errors
  ]
  for (const [name, health, error] of answers) {
    const { app } = build(t, { db: { health: health as () => Promise<boolean> } })
    const res = await app.inject({ method: 'GET', url: '/v1/health' })
    t.equal(res.statusCode, 503, name)
    t.match(res.json(), { status: 'degraded', checks: { db: { status: 'error', latencyMs: Number, error } } }, name)
    t.match(res.headers['x-request-id'], /./)
  }
  const healthy = build(t, { db: { health: async () => ({ ok: true, latencyMs: 7 }) } }).app
  const res = await healthy.inject({ method: 'GET', url: '/health' })
  t.equal(res.statusCode, 200)
  t.same(res.json().checks, { db: { status: 'ok', latencyMs: 7 } })
})

t.test('a hanging db is unhealthy after healthTimeoutMs', async (t) => {
  const { app } = build(t, { db: { health: () => new Promise(() => {}) }, healthTimeoutMs: 100 })
  const res = await app.inject({ method: 'GET', url: '/health' })
  t.equal(res.statusCode, 503)
  t.match(res.json(), { status: 'degraded', checks: { db: { status: 'error', error: 'health probe timed out after 100 ms' } } })
  t.ok(res.json().checks.db.latencyMs >= 90)
})

t.test('a better-sqlite3 Database is probed live', async (t) => {
  const db = new Database(':memory:')
  const { app } = build(t, { db })
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200)
  db.close()
  const res = await app.inject({ method: 'GET', url: '/health' })
  t.equal(res.statusCode, 503, 'a closed database is degraded')
  t.match(res.json().checks.db.error, /not open/)
})

t.test('a pg Pool is probed live', async (t) => {
  if (!await requirePg(t)) return
  const pool = new pg.Pool({ connectionString: pgUrl() })
  const { app } = build(t, { db: pool })
  const res = await app.inject({ method: 'GET', url: '/health' })
  t.equal(res.statusCode, 200)
  t.equal(res.json().checks.db.status, 'ok')
  await pool.end()
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 503, 'an ended pool is degraded')
  const unreachable = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 500 })
  t.teardown(() => unreachable.end())
  const down = build(t, { db: unreachable }).app
  t.equal((await down.inject({ method: 'GET', url: '/health' })).statusCode, 503, 'a server that is down is degraded')
})

t.test('an ioredis client is probed live', async (t) => {
  if (!await requireRedis(t)) return
  const redis = new Redis(redisUrl())
  const { app } = build(t, { db: redis })
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200)
  const wrongAnswer = build(t, { db: { ping: async () => 'NOPE' } }).app
  t.equal((await wrongAnswer.inject({ method: 'GET', url: '/health' })).statusCode, 503)
  redis.disconnect()
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 503, 'a disconnected client is degraded')
  const unreachable = new Redis('redis://127.0.0.1:1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  unreachable.on('error', () => {})
  // an ended client's disconnect() waits 2 s for a socket that closed already: the file would idle that long at its end
  t.teardown(() => { if (unreachable.status !== 'end') unreachable.disconnect() })
  const down = build(t, { db: unreachable }).app
  t.equal((await down.inject({ method: 'GET', url: '/health' })).statusCode, 503, 'a server that is down is degraded')
})
