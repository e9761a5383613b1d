// Outages for real (docs/stores.md): a private Redis and a private PostgreSQL that the test freezes (SIGSTOP) and
// kills. Runs answer 503 STORE_UNAVAILABLE within about storeTimeoutMs, health says which check failed, and
// after SIGCONT everything answers again.
import t from 'tap'
import type { Test } from 'tap'
import { postgresStores } from '../../lib/stores/postgres.js'
import { Redis } from 'ioredis'
import { redisStores } from '../../lib/stores/redis.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { RedisScheduleStore } from '../../lib/stores/redis-schedules.js'
import type { AgentServiceOptions } from '../../lib/core/types.js'
import { build, eventually } from '../helper.js'
import { privatePostgres, privateRedis } from '../helpers/private-servers.js'

const STORE_TIMEOUT_MS = 500
const run = { method: 'POST' as const, url: '/v1/agents/echo/runs', payload: { input: 'hi' } }

/** A service whose log lines the test reads. */
function service (t: Test, options: Partial<AgentServiceOptions>): { app: ReturnType<typeof build>['app'], logs: Array<Record<string, unknown>> } {
  const logs: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { logs.push(JSON.parse(line) as Record<string, unknown>) } }
  const { app } = build(t, { storeTimeoutMs: STORE_TIMEOUT_MS, healthTimeoutMs: 300, logger: { level: 'info', stream }, ...options })
  return { app, logs }
}

/** A run during an outage: 503 STORE_UNAVAILABLE, and how long it took. */
async function failingRun (t: Test, app: ReturnType<typeof build>['app'], message: RegExp): Promise<number> {
  const started = Date.now()
  const res = await app.inject(run)
  const elapsed = Date.now() - started
  t.equal(res.statusCode, 503, `503 after ${elapsed} ms`)
  t.match(res.json(), { code: 'STORE_UNAVAILABLE', message })
  t.ok(elapsed < STORE_TIMEOUT_MS + 700, `within about storeTimeoutMs (${elapsed} ms)`)
  return elapsed
}

t.test('Redis frozen, thawed, killed', async (t) => {
  const redis = await privateRedis(t)
  if (redis === null) return
  const printed: unknown[][] = []
  const consoleError = console.error
  console.error = (...args: unknown[]) => { printed.push(args) }
  t.teardown(() => { console.error = consoleError })
  const stores = redisStores(redis.url)
  const { app, logs } = service(t, { sessionStore: stores.sessionStore, idempotency: { store: stores.idempotency.store }, runStore: stores.runStore })

  t.equal((await app.inject(run)).statusCode, 200)
  const healthy = await app.inject({ method: 'GET', url: '/health' })
  t.equal(healthy.statusCode, 200)
  t.match(healthy.json().checks, { sessionStore: { status: 'ok' }, idempotencyStore: { status: 'ok' }, runStore: { status: 'ok' } })

  await redis.freeze()
  const frozen = await failingRun(t, app, /^sessionStore\.create\(\) did not answer within 500 ms$/)
  t.comment(`frozen Redis: 503 after ${frozen} ms`)
  const degraded = await app.inject({ method: 'GET', url: '/v1/health' })
  t.equal(degraded.statusCode, 503)
  t.match(degraded.json(), { status: 'degraded', checks: { sessionStore: { status: 'error', error: /timed out/ }, idempotencyStore: { status: 'error' }, runStore: { status: 'error' } } })

  await redis.thaw()
  await eventually(async () => (await app.inject(run)).statusCode === 200, 5_000, 'runs after SIGCONT')
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200, 'healthy again')

  await redis.kill()
  await failingRun(t, app, /^sessionStore\.create\(\) (did not answer|failed)/)
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 503)
  await eventually(() => logs.some((line) => line.msg === 'redis store: connection error'), 5_000, 'the connection error logged')
  t.ok(logs.filter((line) => line.msg === 'redis store: connection error').length <= 2, 'once per outage, not per reconnection attempt')
  t.same(printed.filter((args) => String(args[0]).includes('ioredis')), [], 'nothing of ioredis on stderr')

  await redis.revive()
  await eventually(async () => (await app.inject(run)).statusCode === 200, 10_000, 'runs once Redis is back')
  await eventually(() => logs.some((line) => line.msg === 'redis store: connection restored'), 5_000, 'the recovery logged')
})

t.test('PostgreSQL frozen and thawed', async (t) => {
  const pg = await privatePostgres(t)
  if (pg === null) return
  const { app } = service(t, { ...postgresStores(pg.url), idempotency: {} })

  t.equal((await app.inject(run)).statusCode, 200)
  const healthy = await app.inject({ method: 'GET', url: '/health' })
  t.equal(healthy.statusCode, 200)
  t.same(Object.keys(healthy.json().checks), ['auditStore', 'sessionStore', 'approvalStore', 'checkpointStore', 'runStore', 'scheduleStore'],
    'every store the service uses (idempotency here is the memory default)')

  await pg.freeze()
  // the first call of a run: its fresh session is made with it, in one statement (docs/stores.md, "Round trips")
  const frozen = await failingRun(t, app, /^runStore\.createWithSession\(\) did not answer within 500 ms$/)
  t.comment(`frozen PostgreSQL: 503 after ${frozen} ms`)
  const degraded = await app.inject({ method: 'GET', url: '/health' })
  t.equal(degraded.statusCode, 503)
  t.match(degraded.json().checks, { sessionStore: { status: 'error', error: /timed out/ } })
  const admin = await app.inject({ method: 'GET', url: '/v1/sessions/nope' })
  t.equal(admin.statusCode, 503, 'every route that reads a store')

  await pg.thaw()
  await eventually(async () => (await app.inject(run)).statusCode === 200, 10_000, 'runs after SIGCONT')
  t.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200, 'healthy again')
})

t.test('Redis killed while a store\'s pub/sub connection subscribes again: no unhandled rejection as the store closes', async (t) => {
  const unhandled: unknown[] = []
  const record = (reason: unknown): void => { unhandled.push(reason) }
  process.on('unhandledRejection', record)
  t.teardown(() => { process.off('unhandledRejection', record) })
  const prefix = 'outage:'
  const stores = {
    runs: (client: Redis) => {
      const store = new RedisRunStore(client, { prefix })
      store.watch('r1', () => {})
      return { store, channel: store.channel }
    },
    schedules: (client: Redis) => {
      const store = new RedisScheduleStore(client, { prefix })
      store.watch(() => {})
      return { store, channel: `${prefix}schedules` }
    }
  }
  for (const [name, open] of Object.entries(stores)) {
    const redis = await privateRedis(t)
    if (redis === null) return
    // ready as soon as connected (no HELLO, INFO nor CLIENT SETINFO first), as a client of yours may be
    const client = new Redis(redis.url, { protocol: 2, enableReadyCheck: false, disableClientInfo: true })
    client.on('error', () => {})
    t.teardown(() => client.disconnect())
    // the store's subscriber: a duplicate of the client
    let subscriber: Redis | undefined
    const duplicate = client.duplicate.bind(client)
    client.duplicate = (override) => (subscriber = duplicate(override))
    const { store, channel } = open(client)
    await eventually(async () => ((await client.pubsub('NUMSUB', channel)) as [string, number])[1] === 1, 10_000, `${name}: subscribed`)
    // the server frozen and the subscriber's connection lost: it connects again (the kernel accepts for the frozen
    // server), is ready at once and sends its SUBSCRIBE, which nobody answers; the store closes, and the server dies
    await redis.freeze()
    const ready = new Promise<void>((resolve) => subscriber!.once('ready', resolve))
    subscriber!.stream.destroy()
    await ready
    const closing = store.close()
    await redis.kill()
    await closing
    await eventually(() => subscriber!.status === 'end', 10_000, `${name}: the subscriber ended`)
    await new Promise((resolve) => setImmediate(resolve))
    t.same(unhandled, [], `${name}: no unhandled rejection`)
  }
})
