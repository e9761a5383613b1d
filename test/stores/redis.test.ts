import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyBaseLogger } from 'fastify'
import { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { RedisConnection, RedisIdempotencyStore, RedisSessionStore, redisStores } from '../../lib/stores/redis.js'
import { redisReachable, redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { idempotencyStoreConformance, sessionStoreConformance } from '../../lib/testing/conformance.js'
import { OTHER, OWNER, event, lease, newRun, runStoreConformance } from '../../lib/testing/runs.js'
import { eventually, idempotencyRecord, percentile, tapTest } from '../helper.js'
import type { NewRun, RunEnd } from '../../lib/stores/types.js'

const OPTIONS = { ttlMs: 60_000, leaseMs: 60_000 }

t.test('an unreachable Redis is reported as such', async (t) => {
  t.equal(await redisReachable('redis://127.0.0.1:1'), false)
})

if (await requireRedis(t)) {
  const shared = new Redis(redisUrl())
  t.teardown(() => shared.quit())

  const stores = (t: Test) => redisStores(shared, { prefix: withRedisPrefix(t, shared) })
  sessionStoreConformance(tapTest(t), (t) => stores(t).sessionStore)
  idempotencyStoreConformance(tapTest(t), (t) => stores(t).idempotency.store)
  // the twin is another instance: a client of its own on the same prefix
  runStoreConformance(tapTest(t), {
    store: (t) => stores(t).runStore,
    twin: (t, first) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisRunStore(client, { prefix: (first as RedisRunStore).prefix })
    }
  })

  t.test('two stores sharing a prefix: one reserver wins across both', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const other = new Redis(redisUrl())
    t.teardown(() => other.quit())
    const a = new RedisIdempotencyStore(shared, { prefix })
    const b = new RedisIdempotencyStore(other, { prefix })
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).reserve('k1', `fp-${i}`, OPTIONS)))
    t.equal(results.filter((r) => r.outcome === 'reserved').length, 1)
    const { token } = results.find((r) => r.outcome === 'reserved') as { token: string }
    t.equal(await a.complete('k1', token, { status: 200, body: 'done', contentType: 'text/plain' }, 60_000), true, 'the token counts, whichever client sends it')
    t.match(await b.get('k1'), { state: 'completed', response: { body: 'done' } })
    const c = new RedisIdempotencyStore(shared, { prefix: `${prefix}other:` })
    t.match(await c.reserve('k1', 'fp', OPTIONS), { outcome: 'reserved' }, 'another prefix is another namespace')
  })

  t.test('list() drops ids whose session expired, across several batches', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisSessionStore(shared, { prefix })
    for (const id of ['a', 'b', 'c', 'd', 'e', 'f', 'g']) {
      await store.create({ id, agent: null, principal: 'p', metadata: {} }, ['b', 'c', 'd', 'f'].includes(id) ? 30 : 60_000)
      await sleep(2)
    }
    await sleep(50)
    const first = await store.list({ limit: 1 })
    t.same(first.sessions.map((s) => s.id), ['g'])
    const second = await store.list({ limit: 1, cursor: first.nextCursor as string })
    t.same(second.sessions.map((s) => s.id), ['e'])
    const rest = await store.list({ limit: 5, cursor: second.nextCursor as string })
    t.same(rest.sessions.map((s) => s.id), ['a'])
    t.equal(rest.nextCursor, null)
    t.same(await shared.zrange(`${prefix}sessions`, '0', '-1'), ['a', 'e', 'g'], 'expired ids removed from the index')
  })

  t.test('a client you pass is never closed; one made from a URL is quit with the last store', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const mine = redisStores(shared, { prefix })
    await mine.sessionStore.create({ id: 's1', agent: null, principal: 'p', metadata: {} }, 60_000)
    await mine.sessionStore.close?.()
    await mine.sessionStore.close?.()
    await mine.idempotency.store.close?.()
    t.equal(shared.status, 'ready')
    await t.rejects(mine.sessionStore.get('s1'), { code: 'FA_STORE_CLOSED' })

    const connection = new RedisConnection(redisUrl())
    const sessions = new RedisSessionStore(connection, { prefix })
    const idempotency = new RedisIdempotencyStore(connection, { prefix })
    t.match(await sessions.get('s1'), { id: 's1' })
    await idempotency.reserve('k1', 'fp', OPTIONS)
    const probe = {}
    const client = connection.acquire(probe) as Redis
    await connection.release(probe)
    await sessions.close()
    t.equal(client.status, 'ready', 'the idempotency store still uses it')
    await idempotency.close()
    if (client.status !== 'end') await once(client, 'end')
    t.equal(client.status, 'end')

    const owned = redisStores(redisUrl(), { prefix })
    t.match(await idempotencyRecord(owned.idempotency.store, 'k1'), { state: 'in_progress' })
    await owned.idempotency.store.close?.()
    await owned.sessionStore.close?.()
  })

  t.test('scripts are sent in full when the server does not know them', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const failing = (message: string): Redis => new Proxy(shared, {
      get (target, property) {
        if (property === 'evalsha') return async () => { throw new Error(message) }
        const value = Reflect.get(target, property) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
    })
    const store = new RedisIdempotencyStore(failing('NOSCRIPT No matching script. Please use EVAL.'), { prefix })
    t.match(await store.reserve('k1', 'fp', OPTIONS), { outcome: 'reserved' })
    const broken = new RedisIdempotencyStore(failing('ERR something else'), { prefix })
    await t.rejects(broken.reserve('k1', 'fp', OPTIONS), { message: 'ERR something else' })
  })

  t.test("keys live under 'fa:' unless told otherwise", async (t) => {
    const store = new RedisIdempotencyStore(shared)
    const key = `default-prefix-${process.pid}-${Date.now()}`
    const { token } = await store.reserve(key, 'fp', OPTIONS) as { token: string }
    t.equal(await shared.exists(`fa:idem:${key}`), 1)
    await store.release(key, token)
    t.equal(await shared.exists(`fa:idem:${key}`), 0)
    await store.close()
  })

  t.test('bad arguments throw a TypeError naming the problem', async (t) => {
    t.throws(() => redisStores('http://localhost:6379'), { name: 'TypeError', message: /redis:\/\// })
    t.throws(() => redisStores(42 as unknown as string), TypeError)
    t.throws(() => redisStores({} as unknown as string), TypeError)
    t.throws(() => new RedisSessionStore(shared, { prefix: 42 as unknown as string }), { name: 'TypeError', message: /prefix/ })
  })
}

const HOUR = 3_600_000
const cancelledEnd = (): RunEnd => ({ status: 'cancelled', endedAt: new Date().toISOString(), error: { code: 'CANCELLED', message: 'The run was cancelled' } })

/** A client whose commands are counted, and whose first `hgetall` can be followed by something of the test's. */
function spied (client: Redis, afterRead: { once?: () => Promise<unknown> } = {}): { client: Redis, calls: string[] } {
  const calls: string[] = []
  const proxy = new Proxy(client, {
    get (target, property) {
      const value = Reflect.get(target, property) as unknown
      if (typeof value !== 'function') return value
      if (property === 'hgetall') {
        return async (...args: unknown[]) => {
          calls.push('hgetall')
          const reply = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
          const once = afterRead.once
          afterRead.once = undefined
          if (once !== undefined) await once()
          return reply
        }
      }
      return (...args: unknown[]) => {
        if (typeof property === 'string' && property !== 'duplicate') calls.push(property)
        return (value as (...a: unknown[]) => unknown).apply(target, args)
      }
    }
  })
  return { client: proxy, calls }
}

if (await redisReachable()) {
  const admin = new Redis(redisUrl())
  t.teardown(() => admin.quit())

  t.test('runs: what a run leaves in Redis, and the expiry its keys get when it ends', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const store = new RedisRunStore(admin, { prefix })
    t.teardown(() => store.close())
    const run = newRun({ sessionId: 's1', agent: 'echo' })
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    await store.append(id, [event(1), event(2)], OWNER)
    t.equal(await admin.get(`${prefix}run-session:s1`), id, 'the session lock')
    t.equal(await admin.pttl(`${prefix}run:${id}`), -1, 'no expiry while it runs')
    await store.finish(id, [event(3, 'run.failed')], cancelledEnd(), HOUR, OWNER)
    for (const key of [`${prefix}run:${id}`, `${prefix}run-events:${id}`]) {
      const ttl = await admin.pttl(key)
      t.ok(ttl > HOUR - 5_000 && ttl <= HOUR, `${key} expires with the retention`)
    }
    t.equal(await admin.exists(`${prefix}run-session:s1`), 0, 'the lock given back')
    for (const set of ['runs', 'runs:session:s1', 'runs:agent:echo', 'runs:status:cancelled']) {
      t.same(await admin.zrange(`${prefix}${set}`, '0', '-1'), [id], `listed in ${set}`)
    }
    t.equal(await admin.zcard(`${prefix}runs:status:running`), 0)
    t.equal(await admin.zcard(`${prefix}runs:expiring`), 1)
  })

  t.test('runs: purge unlists runs whose keys Redis expired already, and deletes the others, in batches', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const store = new RedisRunStore(admin, { prefix })
    t.teardown(() => store.close())
    const kept = newRun({ agent: 'echo' })
    await store.create(kept, { exclusive: false })
    for (let i = 0; i < 7; i++) {
      const run = newRun({ sessionId: `s${i}`, agent: 'echo' })
      await store.create(run, { exclusive: true })
      await store.append(run.record.runId, [event(1)], OWNER)
      // some expire in Redis before the purge, the others are purged ahead of their keys' expiry
      await store.finish(run.record.runId, [event(2, 'run.failed')], cancelledEnd(), i < 4 ? 20 : HOUR, OWNER)
    }
    await sleep(60)
    const later = Date.now() + 2 * HOUR
    t.same([await store.purge(later, 3), await store.purge(later, 3), await store.purge(later, 3), await store.purge(later, 3)], [3, 3, 1, 0])
    t.same(await admin.zrange(`${prefix}runs`, '0', '-1'), [kept.record.runId])
    t.same(await admin.zrange(`${prefix}runs:agent:echo`, '0', '-1'), [kept.record.runId])
    const left = await admin.keys(`${prefix}*`)
    t.same(left.sort(), [
      `${prefix}run:${kept.record.runId}`, `${prefix}runs`, `${prefix}runs:agent:echo`, `${prefix}runs:status:running`,
      `${prefix}runs:session:${kept.record.sessionId}`, `${prefix}runs:seq`, `${prefix}runs:leases`
    ].sort(), 'nothing else left: no session, status, expiry or queue set, no log')
    t.same(await admin.zrange(`${prefix}runs:leases`, '0', '-1'), [kept.record.runId], 'the running one\'s lease only')
  })

  t.test('runs: lists drop members whose run is gone or no longer belongs; a clock ahead of Redis hides expired runs', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const store = new RedisRunStore(admin, { prefix })
    t.teardown(() => store.close())
    const runs = Array.from({ length: 5 }, () => newRun({ sessionId: 'listed' }))
    for (const run of runs) await store.create(run, { exclusive: false })
    await store.finish(runs[1]!.record.runId, [], cancelledEnd(), 20, OWNER)
    await store.finish(runs[3]!.record.runId, [], cancelledEnd(), 20, OWNER)
    await sleep(50)
    const page = await store.listBySession('listed', { limit: 2 })
    t.same(page.runs.map((r) => r.runId), [runs[4]!.record.runId, runs[2]!.record.runId])
    t.same((await store.listBySession('listed', { limit: 2, cursor: page.nextCursor! })).runs.map((r) => r.runId), [runs[0]!.record.runId])
    t.same(await admin.zrevrange(`${prefix}runs:session:listed`, '0', '-1'), [4, 2, 0].map((i) => runs[i]!.record.runId), 'the expired ones dropped')
    await admin.zadd(`${prefix}runs:status:queued`, 1, runs[0]!.record.runId)
    t.same((await store.list({ limit: 10, status: 'queued' })).runs, [])
    t.equal(await admin.zcard(`${prefix}runs:status:queued`), 0, 'a member in the wrong status set is dropped')

    // Redis has not expired it yet (its clock, or a PERSIST): by the store's clock it is gone all the same
    const late = newRun()
    const id = late.record.runId
    await store.create(late, { exclusive: false })
    await store.append(id, [event(1)], OWNER)
    await store.finish(id, [event(2, 'run.failed')], cancelledEnd(), 20, OWNER)
    await admin.persist(`${prefix}run:${id}`)
    await sleep(40)
    t.equal(await admin.exists(`${prefix}run:${id}`), 1)
    t.equal(await store.get(id), null)
    t.equal(await store.spec(id), null)
    t.same(await store.events(id, 0, 10), [])
    t.same(await store.cancel(id, cancelledEnd(), HOUR), { outcome: 'not_found' })
    t.equal(await store.purge(Date.now(), 10), 3)
    t.equal(await admin.exists(`${prefix}run:${id}`), 0)
  })

  t.test('runs: append and finish are one command whatever the number of events', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const { client, calls } = spied(admin)
    const store = new RedisRunStore(client, { prefix })
    t.teardown(() => store.close())
    const timings: number[] = []
    for (let i = 0; i < 10; i++) {
      const run = newRun()
      await store.create(run, { exclusive: false })
      calls.length = 0
      const started = performance.now()
      await store.append(run.record.runId, Array.from({ length: 100 }, (_, n) => event(n + 1)), OWNER)
      timings.push(performance.now() - started)
      t.same(calls, ['evalsha'], 'append of 100 events: one script')
      calls.length = 0
      await store.finish(run.record.runId, [event(101), event(102, 'run.completed')], cancelledEnd(), HOUR, OWNER)
      t.same(calls, ['evalsha'], 'finish: one script')
    }
    t.comment(`Redis append of 100 events in one call: median ${percentile(timings, 0.5).toFixed(1)} ms`)
  })

  t.test('runs: another instance hears each event within 250 ms (p99 on loopback)', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const a = new RedisRunStore(admin, { prefix })
    const b = new RedisRunStore(redisUrl(), { prefix, pollIntervalMs: 60_000 })
    t.teardown(async () => { await a.close(); await b.close() })
    const run = newRun()
    await a.create(run, { exclusive: false })
    const heard = new Map<number, number>()
    const stop = b.watch(run.record.runId, (change) => { if (change.kind === 'events') heard.set(change.lastSeq, performance.now()) })
    t.teardown(stop)
    let seq = 0
    await eventually(async () => { await a.append(run.record.runId, [event(++seq)], OWNER); await sleep(10); return heard.has(seq) }, 2_000)
    const delays: number[] = []
    while (delays.length < 100) {
      seq++
      const sent = performance.now()
      await a.append(run.record.runId, [event(seq)], OWNER)
      await eventually(() => heard.has(seq), 1_000)
      delays.push(heard.get(seq)! - sent)
    }
    t.ok(percentile(delays, 0.99) < 250, `p50 ${percentile(delays, 0.5).toFixed(1)} ms, p99 ${percentile(delays, 0.99).toFixed(1)} ms`)
    t.comment(`Redis cross-instance event notification: p50 ${percentile(delays, 0.5).toFixed(2)} ms, p99 ${percentile(delays, 0.99).toFixed(2)} ms`)
  })

  t.test('runs: a change nobody published is found by the poll; a dropped subscriber subscribes again', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const name = `fa-test-${process.pid}-${Date.now()}`
    // the store's polls (pipelines): held (not sent) while `pollsHeld` is set, counted while on their way
    let polling = 0
    let pollsHeld: Promise<void> | null = null
    const client = new Proxy(new Redis(redisUrl(), { connectionName: name }), {
      get (target, property) {
        if (property === 'pipeline') {
          return () => {
            const pipeline = target.pipeline()
            const exec = pipeline.exec.bind(pipeline)
            return Object.assign(pipeline, {
              exec: async () => {
                await pollsHeld
                polling++
                try { return await exec() } finally { polling-- }
              }
            })
          }
        }
        const value = Reflect.get(target, property) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
    })
    t.teardown(() => client.quit())
    const store = new RedisRunStore(client, { prefix, pollIntervalMs: 100 })
    const other = new RedisRunStore(admin, { prefix })
    t.teardown(async () => { await store.close(); await other.close() })
    const run = newRun()
    await store.create(run, { exclusive: false })
    const changes: number[] = []
    let cancels = 0
    const stop = store.watch(run.record.runId, (change) => { if (change.kind === 'events') changes.push(change.lastSeq); else cancels++ })
    t.teardown(stop)
    await admin.hset(`${prefix}run:${run.record.runId}`, 'lastSeq', '7', 'cancel', '1')
    await eventually(() => changes.includes(7) && cancels === 1, 10_000)

    const subscribers = async (): Promise<string[]> => (await admin.client('LIST') as string).split('\n')
      .filter((line) => line.includes(`name=${name}`) && / sub=1 /.test(line)).map((line) => /id=(\d+)/.exec(line)![1]!)
    const [id] = await eventually(async () => { const ids = await subscribers(); return ids.length === 1 && ids }, 10_000)
    await admin.client('KILL', 'ID', id!)
    await eventually(async () => { const ids = await subscribers(); return ids.length === 1 && ids[0] !== id }, 10_000)
    const watched = newRun()
    await other.create(watched, { exclusive: false })
    const heard: number[] = []
    const stopToo = store.watch(watched.record.runId, (change) => { if (change.kind === 'events') heard.push(change.lastSeq) })
    t.teardown(stopToo)
    // no poll on its way nor any to come until it is heard: what is heard was published (whatever the machine's load)
    let release!: () => void
    pollsHeld = new Promise((resolve) => { release = resolve })
    t.teardown(() => release())
    await new Promise((resolve) => setImmediate(resolve))
    await eventually(() => polling === 0, 10_000, 'no poll on its way')
    await other.append(watched.record.runId, [event(1)], OWNER)
    await eventually(() => heard.includes(1), 10_000, 'heard while the polls are held')
    release()
    t.pass('subscribed again: heard by publication')
  })

  t.test('runs: cancel reads again when the run changes between its read and its write', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const race: { once?: () => Promise<unknown> } = {}
    const { client } = spied(admin, race)
    const store = new RedisRunStore(client, { prefix })
    const other = new RedisRunStore(admin, { prefix })
    t.teardown(async () => { await store.close(); await other.close() })
    const startedAt = (): string => new Date().toISOString()

    const starts = newRun({ status: 'queued', sessionId: null })
    await store.create(starts, { exclusive: false })
    race.once = () => other.start(starts.record.runId, startedAt(), lease())
    t.match(await store.cancel(starts.record.runId, cancelledEnd(), HOUR), { outcome: 'requested', record: { status: 'running' } }, 'it started meanwhile')

    const grows = newRun({ status: 'queued', sessionId: null })
    await store.create(grows, { exclusive: false })
    // started, and handed back to the queue with an event or two, meanwhile
    race.once = async () => {
      await other.start(grows.record.runId, startedAt(), lease())
      await other.append(grows.record.runId, [event(1, 'run.started')], OWNER)
      await other.requeue(grows.record.runId, { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR)
    }
    t.match(await store.cancel(grows.record.runId, cancelledEnd(), HOUR), { outcome: 'cancelled', record: { lastSeq: 3 } }, 'events came in meanwhile')
    t.same((await store.events(grows.record.runId, 0, 10)).map((e) => e.type), ['run.started', 'run.requeued', 'run.failed'])

    const ends = newRun()
    await store.create(ends, { exclusive: false })
    race.once = () => other.finish(ends.record.runId, [event(1, 'run.completed')], cancelledEnd(), HOUR, OWNER)
    t.match(await store.cancel(ends.record.runId, cancelledEnd(), HOUR), { outcome: 'ended' }, 'it ended meanwhile')
  })

  t.test('runs: the queue and the lease set follow a run through its leases', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const store = new RedisRunStore(admin, { prefix })
    t.teardown(() => store.close())
    const queue = async (): Promise<string[]> => await admin.zrange(`${prefix}runs:queue`, '0', '-1')
    const leases = async (): Promise<string[]> => await admin.zrange(`${prefix}runs:leases`, '0', '-1', 'WITHSCORES')
    const queued = newRun({ status: 'queued', background: true, sessionId: 'leased' })
    delete queued.record.startedAt
    queued.detachable = true
    const id = queued.record.runId
    const own = newRun({ status: 'queued' })
    delete own.record.startedAt
    await store.create(queued, { exclusive: true })
    await store.create(own, { exclusive: false })
    t.same(await queue(), [id], 'a queued detachable run is queued; one its own instance starts is not')
    t.same(await leases(), [])

    const until = Date.now() + HOUR
    t.same((await store.claim({ owner: OWNER, until }, new Date().toISOString(), 10)).map((r) => r.runId), [id])
    t.same(await queue(), [])
    t.same(await leases(), [id, String(until)], 'leased until then')
    t.match(await admin.hgetall(`${prefix}run:${id}`), { owner: OWNER, leaseUntil: String(until), detachable: '1' })
    t.same(await store.renew(OWNER, [id, 'lone \ud800 id'], until + 1), [id], 'an id no store keeps is held by nobody')
    t.same(await leases(), [id, String(until + 1)])

    // back in the queue, keeping its session: started again by `start` (the session's lock names it already)
    t.match(await store.requeue(id, { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), { status: 'queued', attempt: 2 })
    t.same(await queue(), [id])
    t.same(await leases(), [])
    t.notOk(await admin.hexists(`${prefix}run:${id}`, 'owner'))
    t.match(await store.start(id, new Date().toISOString(), { owner: OWNER, until }), { outcome: 'started', record: { attempt: 2 } })
    t.same(await queue(), [])
    t.same(await leases(), [id, String(until)])
    await store.finish(id, [event(2, 'run.completed')], cancelledEnd(), HOUR, OWNER)
    t.same(await leases(), [], 'an ended run holds no lease')
    t.notOk(await admin.hexists(`${prefix}run:${id}`, 'owner'))

    const cancelled = newRun({ status: 'queued' })
    delete cancelled.record.startedAt
    cancelled.detachable = true
    await store.create(cancelled, { exclusive: false })
    await store.cancel(cancelled.record.runId, cancelledEnd(), HOUR)
    t.same(await queue(), [], 'a cancelled queued run leaves the queue')

    // a running run without a lease (none given): neither lapsed nor requeued
    const unleased = newRun()
    unleased.lease = null
    await store.create(unleased, { exclusive: false })
    t.same(await leases(), [])
    t.equal(await store.requeue(unleased.record.runId, { lapsedBefore: Date.now() + HOUR }, 'INSTANCE_LOST', cancelledEnd(), HOUR), null)
    t.same(await store.lapsed(Date.now() + HOUR, 10), [])
    t.equal(await store.requeue('lone \ud800 id', { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), null)
    t.equal(await store.abandon('lone \ud800 id', Date.now(), cancelledEnd(), HOUR), null)

    // what Redis holds but should not (a key changed by hand) is dropped, never claimed or reported
    await admin.zadd(`${prefix}runs:queue`, 0, own.record.runId)
    await admin.zadd(`${prefix}runs:leases`, 0, cancelled.record.runId)
    t.same(await store.claim(lease(), new Date().toISOString(), 10), [])
    t.same(await store.lapsed(Date.now(), 10), [])
    t.same([await queue(), await leases()], [[], []])
  })

  t.test('runs: requeue and abandon read again when the run changes between their read and their write', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const race: { once?: () => Promise<unknown> } = {}
    const { client } = spied(admin, race)
    const store = new RedisRunStore(client, { prefix })
    const owner = new RedisRunStore(admin, { prefix })
    t.teardown(async () => { await store.close(); await owner.close() })
    const lapsing = async (): Promise<string> => {
      const run = newRun()
      run.lease = lease(OWNER, -1)
      run.detachable = true
      await store.create(run, { exclusive: false })
      return run.record.runId
    }
    const failed: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'INSTANCE_LOST', message: 'lost' } }

    const written = await lapsing()
    race.once = () => owner.append(written, [event(1)], OWNER)
    t.match(await store.requeue(written, { lapsedBefore: Date.now() }, 'INSTANCE_LOST', cancelledEnd(), HOUR), { status: 'queued', lastSeq: 2, attempt: 2 }, 'its owner wrote meanwhile')
    t.same((await store.events(written, 0, 10)).map((e) => e.type), ['message.delta', 'run.requeued'])

    const renewed = await lapsing()
    race.once = () => owner.renew(OWNER, [renewed], Date.now() + HOUR)
    t.equal(await store.requeue(renewed, { lapsedBefore: Date.now() }, 'INSTANCE_LOST', cancelledEnd(), HOUR), null, 'renewed meanwhile')

    const cancelling = await lapsing()
    race.once = () => owner.cancel(cancelling, cancelledEnd(), HOUR)
    t.match(await store.requeue(cancelling, { lapsedBefore: Date.now() }, 'INSTANCE_LOST', cancelledEnd(), HOUR), { status: 'cancelled', attempt: 1, lastSeq: 1 },
      'its cancel asked for meanwhile: ended cancelled')
    t.same((await store.events(cancelling, 0, 10)).map((e) => e.type), ['run.failed'])

    const ending = await lapsing()
    race.once = () => owner.append(ending, [event(1)], OWNER)
    t.match(await store.abandon(ending, Date.now(), failed, HOUR), { status: 'failed', lastSeq: 2 }, 'its owner wrote meanwhile')
    t.same((await store.events(ending, 0, 10)).map((e) => e.type), ['message.delta', 'run.failed'])

    const kept = await lapsing()
    race.once = () => owner.renew(OWNER, [kept], Date.now() + HOUR)
    t.equal(await store.abandon(kept, Date.now(), failed, HOUR), null, 'renewed meanwhile')
    t.match(await store.get(kept), { status: 'running' })
  })

  t.test('runs: another instance is woken when a run is queued or a session freed while runs wait; a store hears itself once', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const a = new RedisRunStore(admin, { prefix })
    const b = new RedisRunStore(redisUrl(), { prefix })
    t.teardown(async () => { await a.close(); await b.close() })
    let onA = 0
    let onB = 0
    const stops = [a.watchQueue(() => { onA++ }), b.watchQueue(() => { onB++ })]
    t.teardown(() => { for (const stop of stops) stop() })
    // each catches up twice, when its connection is ready and once it is subscribed (whatever was queued before is
    // claimed then), however long the machine takes; counted from there
    await eventually(() => onA >= 2 && onB >= 2, 10_000)
    t.same([onA, onB], [2, 2], 'no more catching up')
    onA = onB = 1
    const queued = (sessionId: string | null): NewRun => {
      const run = newRun({ status: 'queued', background: true, sessionId })
      delete run.record.startedAt
      run.detachable = true
      return run
    }

    const holder = newRun({ sessionId: 'woken' })
    await a.create(holder, { exclusive: true })
    const waiting = queued('woken')
    await a.create(waiting, { exclusive: false })
    t.equal(onA, 2, 'told at once, here')
    await eventually(() => onB === 2, 10_000)
    t.same(await b.claim(lease(OTHER), new Date().toISOString(), 10), [], 'its session is busy')
    await a.finish(holder.record.runId, [], cancelledEnd(), HOUR, OWNER)
    t.equal(onA, 3)
    await eventually(() => onB === 3, 10_000)
    t.same((await b.claim(lease(OTHER), new Date().toISOString(), 10)).map((r) => r.runId), [waiting.record.runId])
    await b.requeue(waiting.record.runId, { owner: OTHER }, 'SHUTDOWN', cancelledEnd(), HOUR)
    t.equal(onB, 4)
    await eventually(() => onA === 4, 10_000)
    await sleep(50)
    t.same([onA, onB], [4, 4], 'nobody hears its own message twice')

    // nothing queued: a freed session wakes nobody
    await a.cancel(waiting.record.runId, cancelledEnd(), HOUR)
    const lone = newRun({ sessionId: 'woken' })
    await a.create(lone, { exclusive: true })
    await a.finish(lone.record.runId, [], cancelledEnd(), HOUR, OWNER)
    await sleep(50)
    t.same([onA, onB], [4, 4])
  })

  t.test('runs: a queued run is claimed by another instance woken over pub/sub (claim latency)', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const a = new RedisRunStore(admin, { prefix })
    // no poll: the notification is the only way the claimer learns of the run
    const b = new RedisRunStore(redisUrl(), { prefix, pollIntervalMs: 60_000 })
    t.teardown(async () => { await a.close(); await b.close() })
    const claimedAt = new Map<string, number>()
    let claiming = Promise.resolve()
    const stop = b.watchQueue(() => {
      claiming = claiming.then(async () => {
        for (const record of await b.claim(lease(OTHER), new Date().toISOString(), 10)) claimedAt.set(record.runId, performance.now())
      })
    })
    t.teardown(stop)
    await sleep(50)
    const delays: number[] = []
    for (let i = 0; i < 200; i++) {
      const run = newRun({ status: 'queued', background: true, sessionId: null })
      delete run.record.startedAt
      run.detachable = true
      const sent = performance.now()
      await a.create(run, { exclusive: false })
      await eventually(() => claimedAt.has(run.record.runId), 1_000)
      delays.push(claimedAt.get(run.record.runId)! - sent)
    }
    const p50 = percentile(delays, 0.5)
    const p99 = percentile(delays, 0.99)
    t.ok(p99 < 250, `p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`)
    t.comment(`Redis claim latency (created on one instance, claimed by another woken over pub/sub), 200 trials: p50 ${p50.toFixed(2)} ms, p99 ${p99.toFixed(2)} ms`)
  })

  t.test('runs: scripts are sent in full when the server does not know them', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const failing = (message: string): Redis => new Proxy(admin, {
      get (target, property) {
        if (property === 'evalsha') return async () => { throw new Error(message) }
        const value = Reflect.get(target, property) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
    })
    const store = new RedisRunStore(failing('NOSCRIPT No matching script. Please use EVAL.'), { prefix })
    t.same(await store.create(newRun(), { exclusive: true }), { outcome: 'created' })
    const broken = new RedisRunStore(failing('ERR something else'), { prefix })
    await t.rejects(broken.create(newRun(), { exclusive: true }), { message: 'ERR something else' })
    await store.close()
    await broken.close()
  })

  t.test('runs: a client you pass is never closed, the subscriber always is; a closed store refuses every call', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    const store = new RedisRunStore(admin, { prefix })
    t.equal(store.channel, `${prefix}runs`)
    const stop = store.watch('r1', () => {})
    const subscribedTo = async (): Promise<number> => ((await admin.pubsub('NUMSUB', store.channel)) as [string, number])[1]
    await eventually(async () => await subscribedTo() === 1, 10_000, 'subscribed')
    t.equal(await subscribedTo(), 1)
    stop()
    await store.close()
    await store.close()
    await eventually(async () => await subscribedTo() === 0, 10_000)
    t.equal(admin.status, 'ready')
    const closed = { code: 'FA_STORE_CLOSED' }
    await t.rejects(store.create(newRun(), { exclusive: false }), closed)
    await t.rejects(store.get('r1'), closed)
    await t.rejects(store.spec('r1'), closed)
    await t.rejects(store.events('r1', 0, 1), closed)
    await t.rejects(store.append('r1', [event(1)], OWNER), closed)
    await t.rejects(store.finish('r1', [], cancelledEnd(), HOUR, OWNER), closed)
    await t.rejects(store.start('r1', new Date().toISOString(), lease()), closed)
    await t.rejects(store.claim(lease(), new Date().toISOString(), 1), closed)
    await t.rejects(store.renew(OWNER, ['r1'], Date.now()), closed)
    await t.rejects(store.lapsed(Date.now(), 1), closed)
    await t.rejects(store.requeue('r1', { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), closed)
    await t.rejects(store.abandon('r1', Date.now(), cancelledEnd(), HOUR), closed)
    await t.rejects(store.cancel('r1', cancelledEnd(), HOUR), closed)
    await t.rejects(store.list({ limit: 1 }), closed)
    await t.rejects(store.purge(Date.now(), 1), closed)
    store.watch('r1', () => {})()

    const owned = new RedisRunStore(redisUrl(), { prefix })
    t.equal(await owned.get('r1'), null)
    t.equal(owned.ownsConnection, true, 'opened from a URL: the service closes it')
    t.equal(store.ownsConnection, false)
    owned.useLogger({ warn: () => {}, info: () => {} } as unknown as FastifyBaseLogger)
    await owned.probe()
    await owned.close()
    t.equal(new RedisRunStore(admin).prefix, 'fa:')
    t.throws(() => new RedisRunStore(admin, { prefix: 42 as unknown as string }), { name: 'TypeError', message: /prefix/ })
    t.throws(() => new RedisRunStore(admin, { pollIntervalMs: 0 }), { name: 'RangeError', message: /pollIntervalMs/ })
  })
  t.test('runs: a client that lost its connection fails calls; watching goes on, polling in vain', async (t) => {
    const client = new Redis(redisUrl())
    const store = new RedisRunStore(client, { prefix: withRedisPrefix(t, admin), pollIntervalMs: 10 })
    t.equal(await store.get('r1'), null)
    const stop = store.watch('r1', () => {})
    const stopSession = store.watchSession('s1', () => {})
    await sleep(30)
    client.disconnect()
    await t.rejects(store.get('r1'), { message: /Connection is closed/ })
    await sleep(50)
    stop()
    stopSession()
    await store.close()
  })
}
