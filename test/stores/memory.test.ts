import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { tapTest } from '../helper.js'
import {
  DEFAULT_AUDIT_CAPACITY, DEFAULT_MAX_SESSIONS, MemoryAuditStore, MemoryIdempotencyStore, MemorySessionStore, memoryStores
} from '../../lib/stores/memory.js'
import { DEFAULT_MAX_RETAINED_RUNS, MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { auditEntry, factoriesOf, storeConformance } from '../../lib/testing/conformance.js'
import { event, newRun, runStoreConformance } from '../../lib/testing/runs.js'

storeConformance(tapTest(t), factoriesOf(() => memoryStores()))
runStoreConformance(tapTest(t), { store: () => new MemoryRunStore() })

t.test('memoryStores gives the six stores, spreadable into the options', async (t) => {
  const stores = memoryStores({ auditCapacity: 2, maxRetainedRuns: 3 })
  t.same(Object.keys(stores).sort(), ['approvalStore', 'auditStore', 'checkpointStore', 'idempotency', 'quotaStore', 'runStore', 'sessionStore', 'webhookStore'])
  t.equal((stores.auditStore as MemoryAuditStore).capacity, 2)
  t.equal((memoryStores().auditStore as MemoryAuditStore).capacity, DEFAULT_AUDIT_CAPACITY)
  t.equal((stores.runStore as MemoryRunStore).maxRetainedRuns, 3)
  t.equal((memoryStores().runStore as MemoryRunStore).maxRetainedRuns, DEFAULT_MAX_RETAINED_RUNS)
  for (const store of [stores.auditStore, stores.sessionStore, stores.approvalStore, stores.checkpointStore, stores.idempotency.store, stores.runStore]) {
    await store.close?.()
  }
})

t.test('runs: the memory store keeps at most maxRetainedRuns ended runs, the longest-ended dropped first', async (t) => {
  const store = new MemoryRunStore({ maxRetainedRuns: 2 })
  t.throws(() => new MemoryRunStore({ maxRetainedRuns: 0 }), /maxRetainedRuns must be a positive integer/)
  const runs = [newRun(), newRun(), newRun(), newRun()]
  for (const run of runs) await store.create(run, { exclusive: false })
  for (const run of runs.slice(0, 3)) {
    await store.finish(run.record.runId, [event(1, 'run.completed')], { status: 'cancelled', endedAt: new Date().toISOString() }, 3_600_000, 'instance-a')
  }
  t.equal(await store.get(runs[0]!.record.runId), null, 'the longest-ended went first')
  t.ok(await store.get(runs[1]!.record.runId))
  t.ok(await store.get(runs[2]!.record.runId))
  t.ok(await store.get(runs[3]!.record.runId), 'a run in progress is never dropped')
  await store.close()
  await t.rejects(store.get(runs[1]!.record.runId), { code: 'FA_STORE_CLOSED' })
})

t.test('runs: the bound counts each ended run once: a reopened run, or one created afresh under an expired id, is not dropped in its place', async (t) => {
  const store = new MemoryRunStore({ maxRetainedRuns: 2 })
  const end = (ms = Date.now()): { status: 'cancelled', endedAt: string } => ({ status: 'cancelled', endedAt: new Date(ms).toISOString() })
  const [expired, reopened, a, b] = [newRun(), newRun(), newRun(), newRun()]
  for (const run of [expired, reopened, a, b]) await store.create(run, { exclusive: false })
  await store.finish(reopened.record.runId, [event(1, 'run.failed')], end(), 3_600_000, 'instance-a')
  t.match(await store.reopen(reopened, { exclusive: false }), { outcome: 'reopened' })
  await store.finish(expired.record.runId, [event(1, 'run.failed')], end(), 30, 'instance-a')
  await sleep(40)
  const again = newRun({ runId: expired.record.runId })
  t.same(await store.create(again, { exclusive: false }), { outcome: 'created' })
  // two runs end: the bound of 2 is reached, not passed, since neither run in progress counts
  await store.finish(a.record.runId, [event(1, 'run.failed')], end(), 3_600_000, 'instance-a')
  await store.finish(b.record.runId, [event(1, 'run.failed')], end(), 3_600_000, 'instance-a')
  t.same((await store.get(again.record.runId))?.status, 'running', 'the run created afresh is kept')
  t.same((await store.get(reopened.record.runId))?.status, 'running', 'the reopened run is kept')
  t.ok(await store.get(a.record.runId))
  t.ok(await store.get(b.record.runId))
  // created again under the id of a run still in progress, it replaces that one; once it ends, the bound is passed
  await store.create(newRun({ runId: reopened.record.runId }), { exclusive: false })
  await store.finish(reopened.record.runId, [event(1, 'run.failed')], end(), 3_600_000, 'instance-a')
  t.equal(await store.get(a.record.runId), null, 'the longest-ended went first')
  t.ok(await store.get(b.record.runId))
  t.same((await store.get(reopened.record.runId))?.status, 'cancelled')
})

t.test('runs: a session given back wakes the queue\'s watchers only while runs are queued', async (t) => {
  const store = new MemoryRunStore()
  let woken = 0
  store.watchQueue(() => { woken++ })
  const end = { status: 'cancelled' as const, endedAt: new Date().toISOString() }
  const first = newRun()
  await store.create(first, { exclusive: true })
  await store.finish(first.record.runId, [event(1, 'run.failed')], end, 3_600_000, 'instance-a')
  t.equal(woken, 0, 'nothing queued: nobody woken')
  const holder = newRun()
  const waiting = newRun({ sessionId: holder.record.sessionId, status: 'queued', background: true })
  delete waiting.record.startedAt
  waiting.detachable = true
  await store.create(holder, { exclusive: true })
  await store.create(waiting, { exclusive: false })
  t.equal(woken, 1, 'a queued run wakes them')
  await store.finish(holder.record.runId, [event(1, 'run.failed')], end, 3_600_000, 'instance-a')
  t.equal(woken, 2, 'its session given back wakes them again')
})

t.test('runs: an ended run past its retention goes at the next run\'s end, without waiting for the purge', async (t) => {
  const store = new MemoryRunStore()
  const [first, next] = [newRun(), newRun()]
  for (const run of [first, next]) await store.create(run, { exclusive: false })
  await store.finish(first.record.runId, [event(1, 'run.failed')], { status: 'cancelled', endedAt: new Date().toISOString() }, 30, 'instance-a')
  await sleep(40)
  t.same((await store.list({ limit: 10 })).runs.map((r) => r.runId), [next.record.runId], 'past its retention: unseen')
  await store.finish(next.record.runId, [event(1, 'run.failed')], { status: 'cancelled', endedAt: new Date().toISOString() }, 3_600_000, 'instance-a')
  t.equal(await store.purge(Date.now(), 10), 0, 'dropped already')
})

t.test('runs: the purge drops the expired ended runs behind ones still kept', async (t) => {
  const store = new MemoryRunStore()
  const [kept, gone] = [newRun(), newRun()]
  for (const run of [kept, gone]) await store.create(run, { exclusive: false })
  await store.finish(kept.record.runId, [event(1, 'run.failed')], { status: 'cancelled', endedAt: new Date().toISOString() }, 3_600_000, 'instance-a')
  await store.finish(gone.record.runId, [event(1, 'run.failed')], { status: 'cancelled', endedAt: new Date(Date.now() - 1_000).toISOString() }, 500, 'instance-a')
  t.equal(await store.purge(Date.now(), 10), 1)
  t.ok(await store.get(kept.record.runId))
  t.equal(await store.purge(Date.now() + 2 * 3_600_000, 10), 1)
  t.equal(await store.get(kept.record.runId), null)
})

t.test('runs: a run reopened without a lease holds none: no lapse is ever found for it', async (t) => {
  const store = new MemoryRunStore()
  const run = newRun()
  await store.create(run, { exclusive: false })
  await store.finish(run.record.runId, [event(1, 'run.completed')], { status: 'completed', endedAt: new Date().toISOString() }, 3_600_000, 'instance-a')
  t.match(await store.reopen({ ...run, lease: null }, { exclusive: false }), { outcome: 'reopened' })
  t.same(await store.lapsed(Date.now() + 10 * 3_600_000, 10), [])
})

t.test('runs: claim looks at the queue only; a queued run cancelled meanwhile leaves it', async (t) => {
  const store = new MemoryRunStore()
  const queued = (): ReturnType<typeof newRun> => {
    const run = newRun({ status: 'queued', background: true })
    delete run.record.startedAt
    run.detachable = true
    return run
  }
  const [gone, kept] = [queued(), queued()]
  await store.create(gone, { exclusive: false })
  await store.create(kept, { exclusive: false })
  await store.cancel(gone.record.runId, { status: 'cancelled', endedAt: new Date().toISOString() }, 3_600_000)
  const lease = { owner: 'instance-a', until: Date.now() + 60_000 }
  t.same((await store.claim(lease, new Date().toISOString(), 10)).map((r) => r.runId), [kept.record.runId])
  t.same(await store.claim(lease, new Date().toISOString(), 10), [], 'nothing left queued')
})

t.test('audit ring buffer: 500 by default, the oldest evicted first', async (t) => {
  const store = new MemoryAuditStore()
  t.equal(DEFAULT_AUDIT_CAPACITY, 500)
  await store.append(Array.from({ length: 499 }, (_, i) => auditEntry(i)))
  t.equal(await store.count(), 499)
  await store.append([auditEntry(499), auditEntry(500), auditEntry(501)])
  t.equal(await store.count(), 500)
  const page = await store.query({ limit: 500 })
  t.equal(page.entries[0].id, 'entry-501')
  t.equal(page.entries[499].id, 'entry-2')
  t.equal(page.nextCursor, null)
})

t.test('audit ring buffer: a cursor into evicted entries ends the paging', async (t) => {
  const store = new MemoryAuditStore({ capacity: 3 })
  await store.append([auditEntry(0), auditEntry(1), auditEntry(2)])
  const first = await store.query({ limit: 1 })
  t.same(first.entries.map((e) => e.id), ['entry-2'])
  await store.append([auditEntry(3), auditEntry(4)])
  const second = await store.query({ limit: 5, cursor: first.nextCursor as string })
  t.same(second.entries.map((e) => e.id), [], 'entry-1 and entry-0 were evicted meanwhile')
  t.equal(second.nextCursor, null)
})

t.test('audit ring buffer: a batch larger than the ring keeps its newest entries', async (t) => {
  const store = new MemoryAuditStore({ capacity: 4 })
  await store.append(Array.from({ length: 10 }, (_, i) => auditEntry(i)))
  t.equal(await store.count(), 4)
  t.same((await store.query({ limit: 10 })).entries.map((e) => e.id), ['entry-9', 'entry-8', 'entry-7', 'entry-6'])
})

t.test('audit ring buffer: entries are copies', async (t) => {
  const store = new MemoryAuditStore()
  const entry = auditEntry(0)
  await store.append([entry])
  entry.status = 500
  const [read] = (await store.query({ limit: 1 })).entries
  t.equal(read.status, 200)
  read.status = 418
  t.equal((await store.query({ limit: 1 })).entries[0].status, 200)
})

t.test('audit ring buffer: capacity must be a positive integer', async (t) => {
  for (const capacity of [0, -1, 1.5, Number.NaN, '10']) {
    t.throws(() => new MemoryAuditStore({ capacity: capacity as number }), TypeError, String(capacity))
  }
})

t.test('sessions: expired sessions are purged on the next create', async (t) => {
  const store = new MemorySessionStore()
  await store.create({ id: 'old', agent: null, principal: 'p', metadata: {} }, 10)
  await store.create({ id: 'live', agent: null, principal: 'p', metadata: {} }, 60_000)
  await sleep(20)
  await store.create({ id: 'new', agent: null, principal: 'p', metadata: {} }, 60_000)
  t.same((await store.list({ limit: 10 })).sessions.map((s) => s.id), ['new', 'live'])
})

t.test('sessions: at most maxSessions, the least recently active dropped first, with one warning', async (t) => {
  const warnings: Error[] = []
  const onWarning = (warning: Error): void => { warnings.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })
  const store = new MemorySessionStore({ maxSessions: 3 })
  t.equal(store.maxSessions, 3)
  for (const id of ['a', 'b', 'c']) await store.create({ id, agent: null, principal: 'p', metadata: {} }, 60_000)
  // a turn and a touch make a and b the most recently active: c is the one to go
  t.equal(await store.appendTurn('a', [], 60_000), true)
  t.equal(await store.appendTurn('b', [], 60_000), true)
  await store.create({ id: 'd', agent: null, principal: 'p', metadata: {} }, 60_000)
  t.equal(await store.get('c'), null)
  t.equal(store.evicted, 1)
  await store.create({ id: 'e', agent: null, principal: 'p', metadata: {} }, 60_000)
  t.equal(await store.get('a'), null)
  t.equal(store.evicted, 2)
  t.same((await store.list({ limit: 10 })).sessions.map((s) => s.id).sort(), ['b', 'd', 'e'])
  // creating an id that exists replaces it without dropping another
  await store.create({ id: 'e', agent: null, principal: 'q', metadata: {} }, 60_000)
  t.equal(store.evicted, 2)
  t.equal((await store.get('e'))?.principal, 'q')
  t.equal((await store.list({ limit: 10 })).sessions.length, 3)
  await new Promise((resolve) => setImmediate(resolve))
  const ours = warnings.filter((w) => (w as Error & { code?: string }).code === 'FASTIFY_AGENTS_WARN001')
  t.equal(ours.length, 1, 'warned once, not once per eviction')
  t.match(ours[0]!.message, /maximum of 3 sessions/)
})

t.test('sessions: expired sessions go before the bound drops a live one', async (t) => {
  const store = new MemorySessionStore({ maxSessions: 2 })
  await store.create({ id: 'short', agent: null, principal: 'p', metadata: {} }, 10)
  await store.create({ id: 'live', agent: null, principal: 'p', metadata: {} }, 60_000)
  await sleep(20)
  await store.create({ id: 'new', agent: null, principal: 'p', metadata: {} }, 60_000)
  t.equal(store.evicted, 0)
  t.same((await store.list({ limit: 10 })).sessions.map((s) => s.id), ['new', 'live'])
})

t.test('sessions: the newest, the oldest and a middle one can each be deleted, touched and re-listed', async (t) => {
  const store = new MemorySessionStore({ maxSessions: 10 })
  for (const id of ['a', 'b', 'c', 'd']) await store.create({ id, agent: null, principal: 'p', metadata: {} }, 60_000)
  t.equal(await store.delete('d'), true, 'the newest')
  t.equal(await store.delete('a'), true, 'the oldest')
  t.equal(await store.delete('a'), false, 'already gone')
  t.equal(await store.appendTurn('c', [], 60_000), true, 'touching the newest keeps it there')
  t.equal(await store.appendTurn('b', [], 60_000), true)
  await store.create({ id: 'e', agent: null, principal: 'p', metadata: {} }, 60_000)
  const ids = (await store.list({ limit: 10 })).sessions.map((s) => s.id)
  t.same(ids.sort(), ['b', 'c', 'e'])
  t.equal(await store.delete('c'), true, 'a middle one')
  t.same((await store.list({ limit: 10 })).sessions.map((s) => s.id).sort(), ['b', 'e'])
})

t.test('sessions: an expired session deleted reports nothing deleted', async (t) => {
  const store = new MemorySessionStore()
  await store.create({ id: 'short', agent: null, principal: 'p', metadata: {} }, 10)
  await sleep(20)
  t.equal(await store.delete('short'), false)
  t.equal(await store.get('short'), null)
})

t.test('sessions: maxSessions must be a positive integer; memoryStores passes it on', async (t) => {
  for (const maxSessions of [0, -1, 1.5, Number.NaN, '10']) {
    t.throws(() => new MemorySessionStore({ maxSessions: maxSessions as number }), TypeError, String(maxSessions))
  }
  t.equal(new MemorySessionStore().maxSessions, DEFAULT_MAX_SESSIONS)
  t.equal(DEFAULT_MAX_SESSIONS, 100_000)
  t.equal((memoryStores({ maxSessions: 7 }).sessionStore as MemorySessionStore).maxSessions, 7)
})

t.test('idempotency: expired records are purged on the next reserve', async (t) => {
  const store = new MemoryIdempotencyStore()
  await store.reserve('old', 'fp', { ttlMs: 10, leaseMs: 10 })
  await store.reserve('live', 'fp', { ttlMs: 60_000, leaseMs: 60_000 })
  await sleep(20)
  t.match(await store.reserve('new', 'fp', { ttlMs: 60_000, leaseMs: 60_000 }), { outcome: 'reserved' })
  t.equal(await store.get('old'), null)
  t.match(await store.get('live'), { state: 'in_progress' })
})

t.test('sessions: ties in lastActiveAt are ordered by id, descending', async (t) => {
  const realNow = Date.now
  Date.now = () => 1_700_000_000_000
  t.teardown(() => { Date.now = realNow })
  const store = new MemorySessionStore()
  for (const id of ['c', 'a', 'e', 'b', 'f', 'd']) await store.create({ id, agent: null, principal: 'p', metadata: {} }, 60_000)
  const first = await store.list({ limit: 4 })
  t.same(first.sessions.map((s) => s.id), ['f', 'e', 'd', 'c'])
  t.same((await store.list({ limit: 4, cursor: first.nextCursor as string })).sessions.map((s) => s.id), ['b', 'a'])
})
