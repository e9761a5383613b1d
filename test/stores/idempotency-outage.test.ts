// Exactly-once through a store outage (docs/auth-and-traffic.md): the idempotency store (a private Redis or PostgreSQL) is
// frozen or killed while a run finishes, so that its completion cannot be written; it comes back within the lock
// lease, or after it. The client, retrying at the same instance all along and past the lease, gets 503s or 409s,
// then the replay: the agent ran once. A killed store must keep what it acknowledged (README, "Exactly once through
// a store's crash"): PostgreSQL with synchronous_commit on, Redis with appendfsync always.
import t from 'tap'
import type { Test } from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { PostgresIdempotencyStore } from '../../lib/stores/postgres.js'
import { RedisIdempotencyStore } from '../../lib/stores/redis.js'
import type { IdempotencyStore } from '../../lib/stores/types.js'
import type { Agent } from '../../lib/core/types.js'
import { build, eventually, sleep } from '../helper.js'
import { privatePostgres, privateRedis } from '../helpers/private-servers.js'

const STORE_TIMEOUT_MS = 300
const LEASE_MS = 2_500
const OUTAGE_MS = 1_000

interface Outage {
  down(): Promise<void>
  up(): Promise<void>
}

async function throughAnOutage (t: Test, store: IdempotencyStore, outage: Outage, outageMs = OUTAGE_MS): Promise<void> {
  let runs = 0
  let release: () => void = () => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  const agent: Agent = {
    async run (input) {
      runs++
      await held
      return { output: input }
    }
  }
  const service = build(t, { agents: { work: agent }, storeTimeoutMs: STORE_TIMEOUT_MS, idempotency: { store, lockLeaseMs: LEASE_MS } })
  const send = (): Promise<LightMyRequestResponse> => service.app.inject({
    method: 'POST', url: '/v1/agents/work/runs', headers: { 'idempotency-key': 'outage' }, payload: { input: 'once' }
  })

  const first = send()
  await eventually(() => runs === 1, 5_000, 'the run')
  await outage.down()
  const downAt = Date.now()
  release()
  const answer = await first
  t.equal(answer.statusCode, 200, 'the answer goes out whatever the store')
  t.equal(answer.json().output, 'once')

  // a client retrying every 100 ms, through the outage and past the lease the run was reserved with
  const statuses = new Set<number>()
  const retries = (async () => {
    for (;;) {
      const retry = await send()
      statuses.add(retry.statusCode)
      if (retry.headers['idempotent-replayed'] === 'true') return retry
      t.not(retry.statusCode, 200, 'never a second run')
      if (Date.now() - downAt > LEASE_MS + outageMs + 5_000) return retry
      await sleep(100)
    }
  })()
  await sleep(Math.max(0, outageMs - (Date.now() - downAt)))
  await outage.up()
  const replayed = await retries
  t.equal(replayed.headers['idempotent-replayed'], 'true', 'replayed')
  t.equal(replayed.body, answer.body)
  await sleep(Math.max(0, downAt + LEASE_MS + 200 - Date.now()))
  const late = await send()
  t.equal(late.headers['idempotent-replayed'], 'true', 'replayed past the lease too')
  t.equal(runs, 1, 'the agent ran once')
  t.ok(statuses.has(503) || statuses.has(409), `the retries during the outage: ${[...statuses].join(', ')}`)
}

t.test('Redis frozen while the run completes, thawed within the lease', async (t) => {
  const redis = await privateRedis(t)
  if (redis === null) return
  const store = new RedisIdempotencyStore(redis.url, { prefix: 'outage:' })
  await throughAnOutage(t, store, { down: () => redis.freeze(), up: () => redis.thaw() })
})

t.test('PostgreSQL frozen while the run completes, thawed within the lease', async (t) => {
  const pg = await privatePostgres(t)
  if (pg === null) return
  const store = new PostgresIdempotencyStore(pg.url)
  await throughAnOutage(t, store, { down: () => pg.freeze(), up: () => pg.thaw() })
})

// Issue 23: with synchronous_commit=off (as the private cluster had), the crash lost the reservation, or the table
// made for it; and a client retrying as the store came back took the key over before its holder's completion, once
// its lease had run out, while the instance that ran it lived.
for (const past of [false, true]) {
  const outageMs = past ? LEASE_MS + 500 : OUTAGE_MS
  const when = past ? 'back only after the lease ran out' : 'back within the lease'

  t.test(`PostgreSQL killed while the run completes, ${when}`, async (t) => {
    const pg = await privatePostgres(t)
    if (pg === null) return
    const store = new PostgresIdempotencyStore(pg.url)
    await throughAnOutage(t, store, { down: () => pg.kill(), up: () => pg.revive() }, outageMs)
  })

  t.test(`Redis (appendfsync always) killed while the run completes, ${when}`, async (t) => {
    const redis = await privateRedis(t, { durable: true })
    if (redis === null) return
    const store = new RedisIdempotencyStore(redis.url, { prefix: 'outage:' })
    await throughAnOutage(t, store, { down: () => redis.kill(), up: () => redis.revive() }, outageMs)
  })
}
