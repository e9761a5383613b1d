// BackedRunStore (lib/stores/run-store.ts): a write whose condition failed, because another write came between the
// read and it, is decided again from the run as it now is. The races are made on purpose here, on every backend: each
// one runs a write of its own, straight to the backend's primitives, just before the primitive it races.
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { GroupCommit } from '../../lib/stores/group-commit.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import type { BackedRunStore, RunBackend } from '../../lib/stores/run-store.js'
import { SqliteRunStore } from '../../lib/stores/sqlite-runs.js'
import type { NewRun, RunEnd, StoredEvent } from '../../lib/stores/types.js'
import { pgReachable, pgUrl, redisReachable, redisUrl, requireService, withPgSchema, withRedisPrefix } from '../helpers/services.js'

const OWNER = 'instance-a'
const HOUR = 3_600_000
let ids = 0

function newRun (extra: Partial<NewRun> = {}): NewRun {
  const now = new Date().toISOString()
  return {
    record: {
      runId: `race-${process.pid}-${++ids}`, agent: 'echo', sessionId: `session-${process.pid}-${ids}`, principal: 'p', status: 'running',
      background: false, attempt: 1, lastSeq: 0, createdAt: now, startedAt: now, requestId: 'req', traceId: 'a'.repeat(32)
    },
    spec: { input: null },
    ephemeral: false,
    detachable: true,
    lease: { owner: OWNER, until: Date.now() + HOUR },
    ...extra
  }
}

const event = (seq: number, type = 'message.delta'): StoredEvent => ({ seq, type, data: `{"n":${seq}}` })
const end = (status: RunEnd['status'] = 'completed'): RunEnd => ({ status, endedAt: new Date().toISOString(), error: { code: 'X', message: 'x' } })

/** Makes primitive `name` of the store's backend run `race` (on the backend) just before its next `times` calls. */
function race (store: BackedRunStore, name: keyof RunBackend, race: (backend: RunBackend, call: number) => unknown, times = 1): void {
  const backend = (store as unknown as { backend: Record<string, (...args: unknown[]) => unknown> }).backend
  const real = backend[name]!.bind(backend)
  // the race's own writes go straight to the backend
  const unraced = new Proxy(backend, {
    get: (target, key) => key === name ? real : typeof target[key as string] === 'function' ? target[key as string]!.bind(target) : target[key as string]
  }) as unknown as RunBackend
  let calls = 0
  backend[name] = (...args: unknown[]) => {
    if (calls >= times) return real(...args)
    const raced = race(unraced, calls++)
    // the in-process backend answers at once, and so does its race
    return raced instanceof Promise ? raced.then(() => real(...args)) : real(...args)
  }
}

interface Backend {
  name: string
  reachable: () => Promise<boolean>
  store: (t: Test) => Promise<BackedRunStore>
}

const backends: Backend[] = [
  { name: 'memory', reachable: async () => true, store: async () => new MemoryRunStore() },
  { name: 'SQLite', reachable: async () => true, store: async (t) => new SqliteRunStore(join(t.testdir(), 'runs.db')) },
  { name: 'PostgreSQL', reachable: () => pgReachable(), store: async (t) => new PostgresRunStore(pgUrl(), { schema: withPgSchema(t) }) },
  {
    name: 'Redis',
    reachable: () => redisReachable(),
    store: async (t) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisRunStore(client, { prefix: withRedisPrefix(t, client) })
    }
  }
]

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    if (!requireService(t, await backend.reachable(), `${backend.name}: start it, or set PG_URL / REDIS_URL`)) return
    const open = async (t: Test): Promise<BackedRunStore> => {
      const store = await backend.store(t)
      t.teardown(() => store.close())
      return store
    }
    races(t, open)
  })
}

function races (t: Test, open: (t: Test) => Promise<BackedRunStore>): void {
  t.test('finish: an event written between its read and its end is read again, then the run ends', async (t) => {
    const store = await open(t)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    await store.append(id, [event(1)], OWNER)
    // the first end fails on a cancel asked for meanwhile, the second on an event written meanwhile: the third ends it
    race(store, 'end', (backend, call) => {
      if (call === 0) return backend.requestCancel(id)
      return backend.append(id, [event(2)], OWNER, 1)
    }, 2)
    const ended = await store.finish(id, [event(2), event(3, 'run.completed')], end(), HOUR, OWNER)
    t.match(ended, { status: 'cancelled', lastSeq: 3 }, 'the cancel asked for first wins; the event written meanwhile is acknowledged')
    t.same((await store.events(id, 0, 10)).map((e) => e.type), ['message.delta', 'message.delta', 'run.failed'])
  })

  t.test('append: a batch whose events are written meanwhile, one by one, is acknowledged', async (t) => {
    const store = await open(t)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: false })
    race(store, 'append', (backend, call) => backend.append(id, [event(call + 1)], OWNER, call), 2)
    await store.append(id, [event(1), event(2)], OWNER)
    t.same(await store.events(id, 0, 10), [event(1), event(2)], 'stored once')
  })

  t.test('append: urgent (a durable step waits for it) reaches the backend\'s group commit as urgent', async (t) => {
    const store = await open(t)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: false })
    // the backends with a window (SQLite, PostgreSQL, Redis) gather their appends in a GroupCommit
    const seen: boolean[] = []
    const add = GroupCommit.prototype.add
    GroupCommit.prototype.add = function (item: unknown, urgent?: boolean) {
      seen.push(urgent === true)
      return add.call(this, item, urgent)
    }
    t.teardown(() => { GroupCommit.prototype.add = add })
    await store.append(id, [event(1)], OWNER, true)
    await store.append(id, [event(2)], OWNER)
    GroupCommit.prototype.add = add
    t.same(await store.events(id, 0, 10), [event(1), event(2)])
    // (the in-process backend writes at once: nothing to gather)
    t.same(seen, store instanceof MemoryRunStore ? [] : [true, false], 'the first urgent, the second not')
  })

  t.test('events: a budget ends a page once its events\' data reach it, the one that reaches it the last', async (t) => {
    const store = await open(t)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: false })
    // data of 10, 10, 100, 10 and 10 characters, in three batches (SQLite keeps a batch as one chunk)
    const sized = (seq: number, length: number): StoredEvent => ({ seq, type: 'custom.x', data: `"${'x'.repeat(length - 2)}"` })
    const log = [sized(1, 10), sized(2, 10), sized(3, 100), sized(4, 10), sized(5, 10)]
    await store.append(id, log.slice(0, 2), OWNER)
    await store.append(id, log.slice(2, 3), OWNER)
    await store.append(id, log.slice(3), OWNER)
    const seqs = async (after: number, limit: number, budget?: number): Promise<number[]> => (await store.events(id, after, limit, budget)).map((e) => e.seq)
    t.same(await seqs(0, 10, 15), [1, 2], 'the second reaches it: the last')
    t.same(await seqs(0, 10, 20), [1, 2], 'one that would begin at the budget is left')
    t.same(await seqs(0, 10, 21), [1, 2, 3], 'across batches')
    t.same(await seqs(0, 10, 5), [1], 'one at least, however large')
    t.same(await seqs(2, 10, 50), [3])
    t.same(await seqs(3, 10, 11), [4, 5], 'to the end of the log')
    t.same(await seqs(0, 2, 1_000), [1, 2], 'the limit still holds')
    t.same(await seqs(0, 10, 1_000), [1, 2, 3, 4, 5])
    t.same(await seqs(0, 10), [1, 2, 3, 4, 5], 'no budget')
    t.same(await seqs(0, 10, 0), [1, 2, 3, 4, 5], 'none that is not a positive number of characters')
    t.same(await store.events('nope', 0, 10, 15), [])
    const ended = newRun()
    await store.create(ended, { exclusive: false })
    await store.append(ended.record.runId, log.slice(0, 2), OWNER)
    await store.finish(ended.record.runId, [{ seq: 3, type: 'run.failed', data: '{}' }], end('failed'), 1, OWNER)
    await sleep(10)
    t.same(await store.events(ended.record.runId, 0, 10, 15), [], 'none of a run past its retention')
  })

  t.test('requeue: a run that moves between its read and its write is read again', async (t) => {
    const store = await open(t)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    race(store, 'requeue', (backend) => backend.append(id, [event(1)], OWNER, 0))
    t.match(await store.requeue(id, { owner: OWNER }, 'SHUTDOWN', end('cancelled'), HOUR), { status: 'queued', attempt: 2, lastSeq: 2 })

    // a cancel asked for: it ends cancelled instead, read again when an event came meanwhile
    const cancelled = newRun()
    const cid = cancelled.record.runId
    await store.create(cancelled, { exclusive: true })
    await store.cancel(cid, end('cancelled'), HOUR)
    race(store, 'end', (backend) => backend.append(cid, [event(1)], OWNER, 0))
    t.match(await store.requeue(cid, { owner: OWNER }, 'SHUTDOWN', end('cancelled'), HOUR), { status: 'cancelled', lastSeq: 2 })
  })

  t.test('abandon and cancel: read again when the run moves meanwhile', async (t) => {
    const store = await open(t)
    const run = newRun({ lease: { owner: OWNER, until: 1 } })
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    race(store, 'end', (backend) => backend.append(id, [event(1)], OWNER, 0))
    t.match(await store.abandon(id, Date.now(), end('failed'), HOUR), { status: 'failed', lastSeq: 2 })

    // the run ends between the cancel's read and its request: ended, as it is
    const running = newRun()
    await store.create(running, { exclusive: false })
    race(store, 'requestCancel', (backend) => backend.end(running.record.runId, { status: 'running' }, [], end(), Date.now() + HOUR))
    t.match(await store.cancel(running.record.runId, end('cancelled'), HOUR), { outcome: 'ended', record: { status: 'completed' } })

    // a queued run that starts between the cancel's read and its end: asked to stop instead
    const queued = newRun({ lease: null })
    queued.record.status = 'queued'
    await store.create(queued, { exclusive: false })
    race(store, 'end', (backend) => backend.start(queued.record.runId, new Date().toISOString(), { owner: OWNER, until: Date.now() + HOUR }))
    t.match(await store.cancel(queued.record.runId, end('cancelled'), HOUR), { outcome: 'requested', record: { status: 'running' } })
  })

  t.test('reopen: a run reopened by someone else meanwhile is in progress', async (t) => {
    const store = await open(t)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: false })
    await store.finish(id, [event(1, 'run.completed')], end(), HOUR, OWNER)
    race(store, 'reopen', (backend) => backend.reopen(id, { status: 'completed', lastSeq: 1 }, event(2, 'run.requeued'), run, false))
    t.same(await store.reopen(run, { exclusive: false }), { outcome: 'in_progress' })
  })
}
