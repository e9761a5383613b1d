// The behaviour every run store must have (docs/runs.md), run by each backend's test file against a factory that
// makes a fresh, empty store for a subtest (closed in teardown). `twin` (shared backends) makes a second store on
// the same data, as another instance would have: what one writes, the other sees and hears.
import { setTimeout as sleep } from 'node:timers/promises'
import type { NewRun, RunChange, RunEnd, RunLease, RunRecord, RunStore, StoredEvent } from '../stores/types.js'
import { type Check, type Registrar, type StoreFactory, checked, eventually } from './check.js'

export interface RunStoreFactories<C = unknown> {
  store: StoreFactory<RunStore, C>
  /** a second store on the same data (another instance); absent for an in-process store */
  twin?: (context: C, first: RunStore) => RunStore | Promise<RunStore>
}

const HOUR = 3_600_000
let counter = 0
/** The instance these tests run runs as, and another one. */
export const OWNER = 'instance-a'
export const OTHER = 'instance-b'

export function lease (owner = OWNER, ms = HOUR): RunLease {
  return { owner, until: Date.now() + ms }
}

export function newRun (extra: Partial<RunRecord> = {}, ephemeral = false): NewRun {
  counter++
  const createdAt = new Date(1_700_000_000_000 + counter * 1000).toISOString()
  const runId = extra.runId ?? `run-${counter}-${Math.random().toString(36).slice(2, 8)}`
  return {
    record: {
      runId,
      agent: 'echo',
      sessionId: `session-${runId}`,
      principal: 'alice',
      status: 'running',
      background: false,
      attempt: 1,
      lastSeq: 0,
      createdAt,
      startedAt: createdAt,
      requestId: `req-${runId}`,
      traceId: 'a'.repeat(32),
      ...extra
    },
    spec: { input: { q: runId }, metadata: { n: counter } },
    ephemeral,
    detachable: false,
    lease: extra.status === 'queued' ? null : lease()
  }
}

export function event (seq: number, type = 'message.delta', data: unknown = { text: `t${seq}` }): StoredEvent {
  return { seq, type, data: JSON.stringify(data) }
}

function completed (record: RunRecord): RunEnd {
  return {
    status: 'completed',
    endedAt: new Date().toISOString(),
    result: {
      runId: record.runId, agent: record.agent, sessionId: record.sessionId, status: 'completed', output: 'done',
      usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 }, finishReason: 'stop', requestId: record.requestId, traceId: record.traceId
    }
  }
}

const cancelled = (): RunEnd => ({ status: 'cancelled', endedAt: new Date().toISOString(), error: { code: 'CANCELLED', message: 'The run was cancelled' } })

async function open<C> (t: Check<C>, factory: StoreFactory<RunStore, C>): Promise<RunStore> {
  const store = await factory(t.context)
  t.teardown(async () => { await store.close?.() })
  return store
}

/** Collects a watcher's changes. */
function watcher (store: RunStore, runId: string): { changes: RunChange[], stop: () => void } {
  const changes: RunChange[] = []
  const stop = store.watch(runId, (change) => changes.push(change))
  return { changes, stop }
}

export function runStoreConformance<C> (registrar: Registrar<C>, factories: RunStoreFactories<C>): void {
  const test = checked(registrar)
  const factory = factories.store

  test('runs: create, get and spec; unknown runs are null', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    t.same(await store.create(run, { exclusive: false }), { outcome: 'created' })
    t.same(await store.get(run.record.runId), run.record)
    t.same(await store.spec(run.record.runId), run.spec)
    const background = newRun({ background: true, attempt: 2 }, true)
    await store.create(background, { exclusive: true })
    t.same(await store.get(background.record.runId), background.record, 'background, attempt, ephemeral: kept as given')
    t.equal(await store.get('nope'), null)
    t.equal(await store.spec('nope'), null)
    t.same(await store.events('nope', 0, 10), [])
  })

  test('runs: a schedule\'s fire keeps scheduleId and scheduledFor on its record, claimed, requeued, ended, listed', async (t) => {
    const store = await open(t, factory)
    const fire = { scheduleId: 'schedule-1', scheduledFor: '2026-03-29T01:30:00.000Z' }
    const run = newRun({ ...fire, status: 'queued', background: true, startedAt: undefined })
    delete run.record.startedAt
    run.detachable = true
    run.spec.schedule = { id: fire.scheduleId, scheduledFor: fire.scheduledFor }
    await store.create(run, { exclusive: false })
    const id = run.record.runId
    t.same(await store.get(id), run.record)
    const [claimed] = await store.claim(lease(), new Date().toISOString(), 10)
    t.match(claimed, { runId: id, status: 'running', ...fire }, 'claimed')
    const requeued = await store.requeue(id, { owner: OWNER }, 'SHUTDOWN', cancelled(), HOUR)
    t.match(requeued, { status: 'queued', attempt: 2, ...fire }, 'requeued')
    const [again] = await store.claim(lease(), new Date().toISOString(), 10)
    t.match(again, { runId: id, ...fire })
    const end = completed(again!)
    const ended = await store.finish(id, [event(2, 'run.completed')], end, HOUR, OWNER)
    t.match(ended, { status: 'completed', ...fire }, 'ended')
    // the result is the end's, whatever the terminal event's data says
    t.same((await store.get(id))?.result, end.result, 'its result stored')
    t.match((await store.list({ limit: 10 })).runs, [{ runId: id, ...fire }], 'listed')
    t.match((await store.listBySession(run.record.sessionId!, { limit: 10 })).runs, [{ runId: id, ...fire }])
    const plain = newRun()
    await store.create(plain, { exclusive: false })
    const record = await store.get(plain.record.runId)
    t.notOk(record !== null && ('scheduleId' in record || 'scheduledFor' in record), 'a run that is no fire has neither')
    for (const half of [{ scheduleId: 'schedule-1' }, { scheduledFor: fire.scheduledFor }]) {
      await t.rejects(store.create(newRun(half), { exclusive: false }), TypeError, `${Object.keys(half)[0]!} alone is refused`)
    }
    await t.rejects(store.create(newRun({ ...fire, scheduledFor: 'soon' }), { exclusive: false }), TypeError, 'scheduledFor is a time')
  })

  test('runs: events are appended in order, read after a cursor, in pages; a gap is refused', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    await store.create(run, { exclusive: false })
    const id = run.record.runId
    await store.append(id, [event(1, 'run.started', { runId: id })], OWNER)
    await store.append(id, [event(2), event(3), event(4)], OWNER)
    await store.append(id, [], OWNER)
    t.equal((await store.get(id))!.lastSeq, 4)
    t.same(await store.events(id, 0, 100), [event(1, 'run.started', { runId: id }), event(2), event(3), event(4)])
    t.same(await store.events(id, 2, 1), [event(3)])
    t.same(await store.events(id, 4, 10), [])
    await t.rejects(store.append(id, [event(6)], OWNER), { code: 'FA_RUN_LOG_GAP' })
    await t.rejects(store.append(id, [event(5), event(7)], OWNER), { code: 'FA_RUN_LOG_GAP' })
    t.equal((await store.get(id))!.lastSeq, 4, 'nothing of a refused batch is kept')
    // data is kept as the exact text sent, unicode and all
    const odd = { seq: 5, type: 'custom.x', data: '{"s":"é ✓ 😀 \\u2028","n":1.50}' }
    await store.append(id, [odd], OWNER)
    t.same(await store.events(id, 4, 10), [odd])
  })

  test('runs: finish stores the last events and the end in one step, once', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    await store.create(run, { exclusive: true })
    const id = run.record.runId
    await store.append(id, [event(1, 'run.started')], OWNER)
    const end = completed(run.record)
    const done = await store.finish(id, [event(2), event(3, 'run.completed', end.result)], end, HOUR, OWNER)
    t.match(done, { runId: id, status: 'completed', lastSeq: 3, endedAt: end.endedAt, result: end.result })
    t.same(await store.get(id), done)
    t.equal(await store.finish(id, [event(4, 'run.failed')], cancelled(), HOUR, OWNER), null, 'an ended run ends once')
    t.equal((await store.get(id))!.lastSeq, 3)
    await store.append(id, [event(4)], OWNER)
    t.equal((await store.get(id))!.lastSeq, 3, 'nothing is appended after the end')
    t.equal(await store.finish('nope', [], cancelled(), HOUR, OWNER), null)
    const failed = newRun()
    await store.create(failed, { exclusive: false })
    const end2: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'AGENT_ERROR', message: 'boom' } }
    t.match(await store.finish(failed.record.runId, [event(1, 'run.failed')], end2, HOUR, OWNER), { status: 'failed', error: end2.error })
  })

  test('runs: a write tried again after its answer was lost is idempotent by seq: held events acknowledged, the rest stored', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    await store.create(run, { exclusive: true })
    const id = run.record.runId
    const heard = watcher(store, id)
    t.teardown(heard.stop)
    await store.append(id, [event(1, 'run.started'), event(2), event(3)], OWNER)
    // the same batch again (its first answer lost, though the store applied it): nothing more, no error
    await store.append(id, [event(1, 'run.started'), event(2), event(3)], OWNER)
    t.equal((await store.get(id))!.lastSeq, 3)
    // the failed batch tried again in front of the events that came since
    await store.append(id, [event(2), event(3), event(4), event(5)], OWNER)
    t.match(await store.get(id), { status: 'running', lastSeq: 5 })
    t.same(await store.events(id, 0, 10), [event(1, 'run.started'), event(2), event(3), event(4), event(5)], 'each event once, in order')
    await eventually(() => heard.changes.some((c) => c.kind === 'events' && c.lastSeq === 5))
    await t.rejects(store.append(id, [event(4), event(5, 'message.delta', { text: 'other' }), event(6)], OWNER), { code: 'FA_RUN_LOG_CONFLICT' },
      'a held seq with another event is refused')
    await t.rejects(store.append(id, [event(5), event(7)], OWNER), { code: 'FA_RUN_LOG_GAP' }, 'what is not held must follow the log')
    t.equal((await store.get(id))!.lastSeq, 5, 'nothing of a refused batch is kept')
    await t.rejects(store.append(id, [event(5), event(6)], OTHER), { code: 'FA_RUN_LEASE_LOST' }, 'only the lease\'s owner, retry or not')
    // the end, with the events before it that a lost answer had stored already
    const end = completed(run.record)
    const done = await store.finish(id, [event(4), event(5), event(6), event(7, 'run.completed', end.result)], end, HOUR, OWNER)
    t.match(done, { status: 'completed', lastSeq: 7, result: end.result })
    t.same((await store.events(id, 3, 10)).map((e) => [e.seq, e.type]), [[4, 'message.delta'], [5, 'message.delta'], [6, 'message.delta'], [7, 'run.completed']])
    // a finish tried again once the run has ended: nothing to do
    t.equal(await store.finish(id, [event(7, 'run.completed', end.result)], end, HOUR, OWNER), null)
    t.equal((await store.get(id))!.lastSeq, 7)

    const conflicted = newRun()
    await store.create(conflicted, { exclusive: false })
    await store.append(conflicted.record.runId, [event(1, 'run.started'), event(2)], OWNER)
    await t.rejects(store.finish(conflicted.record.runId, [event(2, 'other.type'), event(3, 'run.completed')], completed(conflicted.record), HOUR, OWNER),
      { code: 'FA_RUN_LOG_CONFLICT' })
    t.match(await store.get(conflicted.record.runId), { status: 'running', lastSeq: 2 }, 'a refused finish changes nothing')
  })

  test('runs: cancel and finish are one compare-and-set: a finish after a requested cancel ends the run cancelled', async (t) => {
    const store = await open(t, factory)
    const traceId = 'e'.repeat(32)
    const cancelledEvent = (seq: number): StoredEvent => event(seq, 'run.failed', { error: { code: 'CANCELLED', message: 'The run was cancelled' }, traceId })
    // the cancel first: 202, so the run ends cancelled, whatever it came to
    const first = newRun({ sessionId: 'cas-session', traceId })
    const id = first.record.runId
    await store.create(first, { exclusive: true })
    await store.append(id, [event(1, 'run.started')], OWNER)
    t.match(await store.cancel(id, cancelled(), HOUR), { outcome: 'requested' })
    const end = completed(first.record)
    const done = await store.finish(id, [event(2), event(3, 'run.completed', end.result)], end, HOUR, OWNER)
    t.match(done, { status: 'cancelled', lastSeq: 3, error: { code: 'CANCELLED', message: 'The run was cancelled' } })
    t.equal(done!.result, undefined, 'no result')
    t.same(await store.events(id, 1, 10), [event(2), cancelledEvent(3)], 'its terminal event is the one a cancelled run sends')
    t.same(await store.get(id), done)
    t.match(await store.cancel(id, cancelled(), HOUR), { outcome: 'ended', record: { status: 'cancelled' } })
    t.same(await store.create(newRun({ sessionId: 'cas-session' }), { exclusive: true }), { outcome: 'created' }, 'its session given back')

    // a failure too
    const failing = newRun({ traceId })
    await store.create(failing, { exclusive: false })
    await store.cancel(failing.record.runId, cancelled(), HOUR)
    const failed: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'AGENT_ERROR', message: 'boom' } }
    t.match(await store.finish(failing.record.runId, [event(1, 'run.failed', { error: failed.error, traceId })], failed, HOUR, OWNER),
      { status: 'cancelled', error: { code: 'CANCELLED' } })
    t.same(await store.events(failing.record.runId, 0, 10), [cancelledEvent(1)])

    // a finish that adds no event
    const quiet = newRun({ traceId })
    await store.create(quiet, { exclusive: false })
    await store.append(quiet.record.runId, [event(1, 'run.started')], OWNER)
    await store.cancel(quiet.record.runId, cancelled(), HOUR)
    t.match(await store.finish(quiet.record.runId, [], completed(quiet.record), HOUR, OWNER), { status: 'cancelled', lastSeq: 1, error: { code: 'CANCELLED' } })

    // the finish first: the run has ended, and a cancel then changes nothing (409 RUN_ALREADY_ENDED)
    const finished = newRun({ traceId })
    await store.create(finished, { exclusive: false })
    await store.finish(finished.record.runId, [event(1, 'run.completed', completed(finished.record).result)], completed(finished.record), HOUR, OWNER)
    t.match(await store.cancel(finished.record.runId, cancelled(), HOUR), { outcome: 'ended', record: { status: 'completed' } })

    // once its lease lapsed, whoever ends it ends it cancelled too
    const lapsing = newRun({ traceId })
    lapsing.lease = lease(OWNER, 60_000)
    await store.create(lapsing, { exclusive: false })
    await store.cancel(lapsing.record.runId, cancelled(), HOUR)
    const lost: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'INSTANCE_LOST', message: 'lost' } }
    t.match(await store.abandon(lapsing.record.runId, lapsing.lease.until + 1, lost, HOUR), { status: 'cancelled', error: { code: 'CANCELLED' } })
    t.same(await store.events(lapsing.record.runId, 0, 10), [cancelledEvent(1)])
  })

  test('runs: of a cancel and a finish at once, the one the store takes first decides how the run ends', async (t) => {
    const store = await open(t, factory)
    const outcomes = { requested: 0, ended: 0 }
    await Promise.all(Array.from({ length: 20 }, async (_, i) => {
      const run = newRun()
      const id = run.record.runId
      await store.create(run, { exclusive: false })
      await store.append(id, [event(1, 'run.started')], OWNER)
      const end = completed(run.record)
      // sent a little apart, one or the other first, so that the store sees both orders and the two at once
      const [cancel, done] = await Promise.all([
        sleep(i % 3).then(() => store.cancel(id, cancelled(), HOUR)),
        sleep(3 * (i % 2)).then(() => store.finish(id, [event(2), event(3, 'run.completed', end.result)], end, HOUR, OWNER))
      ])
      const record = await store.get(id)
      const last = (await store.events(id, 2, 1))[0]!
      if (cancel.outcome === 'requested') {
        outcomes.requested++
        t.match([done, record, last], [{ status: 'cancelled' }, { status: 'cancelled' }, { type: 'run.failed' }], 'a cancel answered 202 ends the run cancelled')
      } else {
        outcomes.ended++
        t.match([cancel, done, record, last], [{ outcome: 'ended', record: { status: 'completed' } }, { status: 'completed' }, { status: 'completed' }, { type: 'run.completed' }],
          'a finish first: the cancel finds the run ended')
      }
    }))
    t.comment(`cancel first: ${outcomes.requested}, finish first: ${outcomes.ended}`)
  })

  test('runs: an exclusive run holds its session until it ends', async (t) => {
    const store = await open(t, factory)
    const first = newRun({ sessionId: 'shared-session' })
    const second = newRun({ sessionId: 'shared-session' })
    t.same(await store.create(first, { exclusive: true }), { outcome: 'created' })
    t.same(await store.create(second, { exclusive: true }), { outcome: 'session_busy', holder: first.record.runId })
    t.equal(await store.get(second.record.runId), null, 'a busy create stores nothing')
    t.same(await store.create(newRun({ sessionId: 'shared-session' }), { exclusive: false }), { outcome: 'created' }, 'a non-exclusive run does not ask')
    await store.finish(first.record.runId, [event(1, 'run.completed')], completed(first.record), HOUR, OWNER)
    t.same(await store.create(second, { exclusive: true }), { outcome: 'created' })
    t.same(await store.create(newRun({ sessionId: null }), { exclusive: true }), { outcome: 'created' }, 'no session, nothing to hold')
  })

  test('runs: of 20 concurrent exclusive creates on one session, exactly one wins', async (t) => {
    const store = await open(t, factory)
    const runs = Array.from({ length: 20 }, () => newRun({ sessionId: 'contested' }))
    const results = await Promise.all(runs.map((run) => store.create(run, { exclusive: true })))
    const winners = results.filter((r) => r.outcome === 'created')
    t.equal(winners.length, 1)
    const winner = runs[results.findIndex((r) => r.outcome === 'created')]!
    for (const r of results) if (r.outcome === 'session_busy') t.equal(r.holder, winner.record.runId)
  })

  test('runs: a queued run starts when its session is free', async (t) => {
    const store = await open(t, factory)
    const holder = newRun({ sessionId: 'q-session' })
    const queued = newRun({ sessionId: 'q-session', status: 'queued' })
    delete queued.record.startedAt
    await store.create(holder, { exclusive: true })
    await store.create(queued, { exclusive: false })
    t.match(await store.get(queued.record.runId), { status: 'queued' })
    t.same(await store.start(queued.record.runId, new Date().toISOString(), lease()), { outcome: 'session_busy', holder: holder.record.runId })
    let freed = 0
    const stop = store.watchSession('q-session', () => { freed++ })
    t.teardown(stop)
    await store.finish(holder.record.runId, [event(1, 'run.completed')], completed(holder.record), HOUR, OWNER)
    await eventually(() => freed > 0)
    const startedAt = new Date().toISOString()
    const started = await store.start(queued.record.runId, startedAt, lease())
    t.match(started, { outcome: 'started', record: { runId: queued.record.runId, status: 'running', startedAt } })
    t.same(await store.start(queued.record.runId, startedAt, lease()), { outcome: 'gone' }, 'a run starts once')
    t.same(await store.start('nope', startedAt, lease()), { outcome: 'gone' })
    t.same(await store.create(newRun({ sessionId: 'q-session' }), { exclusive: true }), { outcome: 'session_busy', holder: queued.record.runId })
    const lone = newRun({ sessionId: null, status: 'queued' })
    await store.create(lone, { exclusive: false })
    t.match(await store.start(lone.record.runId, startedAt, lease()), { outcome: 'started' })
  })

  test('runs: a resumed run reopens its record: its next attempt, its log going on after a run.requeued RESUMED, its session taken', async (t) => {
    const store = await open(t, factory)
    const run = newRun({ sessionId: 'resumed-session' })
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    await store.append(id, [event(1, 'run.started'), event(2)], OWNER)
    const again = newRun({ runId: id, sessionId: 'resumed-session', requestId: 'req-again', traceId: 'c'.repeat(32) })
    again.spec = { input: 'again' }
    t.same(await store.reopen(again, { exclusive: true }), { outcome: 'in_progress' }, 'not while it runs')
    const failed: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'AGENT_ERROR', message: 'x' } }
    await store.finish(id, [event(3, 'run.failed')], failed, HOUR, OWNER)
    const holder = newRun({ sessionId: 'resumed-session' })
    await store.create(holder, { exclusive: true })
    t.same(await store.reopen(again, { exclusive: true }), { outcome: 'session_busy', holder: holder.record.runId })
    await store.finish(holder.record.runId, [event(1, 'run.completed')], completed(holder.record), HOUR, OWNER)
    const heard = watcher(store, id)
    t.teardown(heard.stop)
    const reopened = await store.reopen(again, { exclusive: true })
    t.same(reopened, {
      outcome: 'reopened',
      record: { ...run.record, status: 'running', attempt: 2, lastSeq: 4, startedAt: again.record.startedAt, requestId: 'req-again', traceId: 'c'.repeat(32) }
    })
    t.same(await store.events(id, 3, 10), [{ seq: 4, type: 'run.requeued', data: JSON.stringify({ attempt: 2, reason: 'RESUMED' }) }],
      'the next attempt follows the last one\'s terminal event, after the event that says so')
    await eventually(() => heard.changes.some((c) => c.kind === 'events' && c.lastSeq === 4))
    t.same(await store.get(id), (reopened as { record: RunRecord }).record, 'no end, no error any more')
    t.same(await store.spec(id), { input: 'again' })
    t.same(await store.create(newRun({ sessionId: 'resumed-session' }), { exclusive: true }), { outcome: 'session_busy', holder: id })
    await store.append(id, [event(5, 'run.started')], OWNER)
    t.same((await store.events(id, 0, 10)).map((e) => e.seq), [1, 2, 3, 4, 5], 'one log, one sequence')
    t.match(await store.finish(id, [event(6, 'run.completed')], completed(run.record), HOUR, OWNER), { status: 'completed', attempt: 2, lastSeq: 6 })
    t.same(await store.reopen(newRun({ runId: 'never-stored' }), { exclusive: true }), { outcome: 'not_found' })
  })

  test('runs: cancel ends a queued run at once, asks a running one, leaves an ended one', async (t) => {
    const store = await open(t, factory)
    t.same(await store.cancel('nope', cancelled(), HOUR), { outcome: 'not_found' })
    const queued = newRun({ status: 'queued', traceId: 'b'.repeat(32) })
    await store.create(queued, { exclusive: false })
    const result = await store.cancel(queued.record.runId, cancelled(), HOUR)
    t.match(result, { outcome: 'cancelled', record: { status: 'cancelled', lastSeq: 1, error: { code: 'CANCELLED' } } })
    t.same(await store.events(queued.record.runId, 0, 10), [{
      seq: 1, type: 'run.failed', data: JSON.stringify({ error: { code: 'CANCELLED', message: 'The run was cancelled' }, traceId: 'b'.repeat(32) })
    }], 'its log is the one event a run would have sent')
    t.match(await store.start(queued.record.runId, new Date().toISOString(), lease()), { outcome: 'gone' })

    const running = newRun()
    await store.create(running, { exclusive: true })
    const heard = watcher(store, running.record.runId)
    t.teardown(heard.stop)
    t.match(await store.cancel(running.record.runId, cancelled(), HOUR), { outcome: 'requested', record: { status: 'running' } })
    await eventually(() => heard.changes.some((c) => c.kind === 'cancel'))
    await store.finish(running.record.runId, [event(1, 'run.failed')], cancelled(), HOUR, OWNER)
    t.match(await store.cancel(running.record.runId, cancelled(), HOUR), { outcome: 'ended', record: { status: 'cancelled' } })
  })

  test('runs: watchers hear new events, once each, and stop hearing when they stop', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    await store.create(run, { exclusive: false })
    const id = run.record.runId
    const heard = watcher(store, id)
    await store.append(id, [event(1), event(2)], OWNER)
    await eventually(() => heard.changes.some((c) => c.kind === 'events' && c.lastSeq === 2))
    await store.finish(id, [event(3, 'run.completed')], completed(run.record), HOUR, OWNER)
    await eventually(() => heard.changes.some((c) => c.kind === 'events' && c.lastSeq === 3))
    const seqs = heard.changes.filter((c) => c.kind === 'events').map((c) => (c as { lastSeq: number }).lastSeq)
    t.same(seqs, [...seqs].sort((a, b) => a - b), 'in order, no repeats')
    t.equal(new Set(seqs).size, seqs.length)
    heard.stop()
    const other = newRun()
    await store.create(other, { exclusive: false })
    const before = heard.changes.length
    await store.append(other.record.runId, [event(1)], OWNER)
    await sleep(50)
    t.equal(heard.changes.length, before, 'another run is not heard')
  })

  test('runs: a session\'s runs and every run, most recent first, by cursor, with filters', async (t) => {
    const store = await open(t, factory)
    const mine = Array.from({ length: 5 }, () => newRun({ sessionId: 'listed' }))
    for (const run of mine) await store.create(run, { exclusive: false })
    const others = [newRun({ sessionId: 'elsewhere', agent: 'other' }), newRun({ sessionId: 'elsewhere', status: 'queued' })]
    for (const run of others) await store.create(run, { exclusive: false })
    const first = await store.listBySession('listed', { limit: 2 })
    t.same(first.runs.map((r) => r.runId), [mine[4]!.record.runId, mine[3]!.record.runId])
    const second = await store.listBySession('listed', { limit: 2, cursor: first.nextCursor! })
    const third = await store.listBySession('listed', { limit: 2, cursor: second.nextCursor! })
    t.same([...second.runs, ...third.runs].map((r) => r.runId), [mine[2], mine[1], mine[0]].map((r) => r!.record.runId))
    t.equal(third.nextCursor, null)
    t.same(await store.listBySession('nobody', { limit: 10 }), { runs: [], nextCursor: null })

    const all = await store.list({ limit: 500 })
    t.ok(all.runs.length >= 7)
    t.same((await store.list({ limit: 10, agent: 'other' })).runs.map((r) => r.runId), [others[0]!.record.runId])
    t.same((await store.list({ limit: 10, status: 'queued', sessionId: 'elsewhere' })).runs.map((r) => r.runId), [others[1]!.record.runId])
    t.same((await store.list({ limit: 10, sessionId: 'listed', status: 'running' })).runs.length, 5)
    t.same((await store.list({ limit: 10, status: 'queued' })).runs.map((r) => r.runId), [others[1]!.record.runId])
    t.same((await store.list({ limit: 10, agent: 'other', status: 'queued' })).runs, [])
    // who started it: alone (an admin search) and with the others
    const bob = `bob-${Math.random().toString(36).slice(2)}`
    const bobs = [newRun({ sessionId: 'elsewhere', principal: bob }), newRun({ sessionId: 'elsewhere', principal: bob, agent: 'other', status: 'queued' })]
    for (const run of bobs) await store.create(run, { exclusive: false })
    t.same((await store.list({ limit: 10, principal: bob })).runs.map((r) => r.runId), [bobs[1]!.record.runId, bobs[0]!.record.runId])
    const firstBob = await store.list({ limit: 1, principal: bob })
    t.same((await store.list({ limit: 1, principal: bob, cursor: firstBob.nextCursor! })).runs.map((r) => r.runId), [bobs[0]!.record.runId])
    t.same((await store.list({ limit: 10, principal: bob, agent: 'other' })).runs.map((r) => r.runId), [bobs[1]!.record.runId])
    t.same((await store.list({ limit: 10, principal: bob, status: 'running', sessionId: 'elsewhere' })).runs.map((r) => r.runId), [bobs[0]!.record.runId])
    t.same((await store.list({ limit: 10, principal: 'nobody' })).runs, [])
    await t.rejects(store.list({ limit: 10, cursor: 'garbage' }), { code: 'FA_INVALID_CURSOR', statusCode: 400 })
    await t.rejects(store.list({ limit: 0 }), RangeError)
    await t.rejects(store.listBySession('listed', { limit: 501 }), RangeError)
  })

  test('runs: runs created in the same millisecond list in the order they were created', async (t) => {
    const store = await open(t, factory)
    const at = new Date().toISOString()
    const runs = ['b', 'a', 'c'].map((name) => newRun({ runId: `${name}-${Math.random().toString(36).slice(2, 8)}`, sessionId: 'same-ms', createdAt: at }))
    for (const run of runs) await store.create(run, { exclusive: false })
    const expected = runs.map((run) => run.record.runId).reverse()
    t.same((await store.listBySession('same-ms', { limit: 10 })).runs.map((r) => r.runId), expected)
    const first = await store.listBySession('same-ms', { limit: 1 })
    t.same((await store.listBySession('same-ms', { limit: 10, cursor: first.nextCursor! })).runs.map((r) => r.runId), expected.slice(1))
  })

  test('runs: an ended run is kept for its retention, then gone, and purged in batches', async (t) => {
    const store = await open(t, factory)
    const short = newRun()
    const long = newRun()
    for (const run of [short, long]) {
      await store.create(run, { exclusive: false })
      await store.append(run.record.runId, [event(1)], OWNER)
    }
    await store.finish(short.record.runId, [event(2, 'run.completed')], completed(short.record), 50, OWNER)
    await store.finish(long.record.runId, [event(2, 'run.completed')], completed(long.record), HOUR, OWNER)
    await sleep(120)
    t.equal(await store.get(short.record.runId), null, 'past its retention: gone')
    t.same(await store.events(short.record.runId, 0, 10), [])
    t.notOk((await store.list({ limit: 500 })).runs.some((r) => r.runId === short.record.runId))
    t.ok(await store.get(long.record.runId))
    t.ok(await store.purge(Date.now(), 1000) >= 1)
    t.equal(await store.purge(Date.now(), 1000), 0, 'nothing left to purge')
    t.ok(await store.get(long.record.runId), 'not yet')
    t.equal(await store.purge(Date.now() + 2 * HOUR, 0), 0, 'a batch of 0 deletes nothing')
    t.equal(await store.purge(Date.now() + 2 * HOUR, 1), 1)
    t.equal(await store.get(long.record.runId), null)
  })

  test('runs: delete removes an ended run\'s record and log at once; a run in progress, an unknown one stay as they are', async (t) => {
    const store = await open(t, factory)
    const ended = newRun()
    const running = newRun()
    for (const run of [ended, running]) {
      await store.create(run, { exclusive: true })
      await store.append(run.record.runId, [event(1)], OWNER)
    }
    await store.finish(ended.record.runId, [event(2, 'run.completed')], completed(ended.record), HOUR, OWNER)
    t.equal(await store.delete(running.record.runId), false, 'in progress: kept')
    t.ok(await store.get(running.record.runId))
    t.equal(await store.delete(ended.record.runId), true)
    t.equal(await store.get(ended.record.runId), null)
    t.equal(await store.spec(ended.record.runId), null)
    t.same(await store.events(ended.record.runId, 0, 10), [])
    t.notOk((await store.list({ limit: 500 })).runs.some((r) => r.runId === ended.record.runId), 'out of the lists')
    t.same((await store.listBySession(ended.record.sessionId!, { limit: 10 })).runs, [])
    t.equal(await store.delete(ended.record.runId), false, 'gone: nothing to delete')
    t.equal(await store.delete('no-such-run'), false)
    t.equal(await store.purge(Date.now() + 2 * HOUR, 10), 0, 'nothing left for the purge')
    const past = newRun()
    await store.create(past, { exclusive: false })
    await store.finish(past.record.runId, [event(1, 'run.completed')], completed(past.record), 1, OWNER)
    await sleep(20)
    t.equal(await store.delete(past.record.runId), false, 'past its retention: not there to delete')
  })

  test('runs: a reopen without exclusive leaves the session lock as it is', async (t) => {
    const store = await open(t, factory)
    const run = newRun({ sessionId: 'reopen-shared' })
    await store.create(run, { exclusive: true })
    await store.finish(run.record.runId, [event(1, 'run.failed')], cancelled(), HOUR, OWNER)
    const holder = newRun({ sessionId: 'reopen-shared' })
    await store.create(holder, { exclusive: true })
    t.match(await store.reopen(newRun({ runId: run.record.runId }), { exclusive: false }), {
      outcome: 'reopened', record: { status: 'running', attempt: 2, lastSeq: 2, sessionId: 'reopen-shared' }
    })
    t.same(await store.create(newRun({ sessionId: 'reopen-shared' }), { exclusive: true }), { outcome: 'session_busy', holder: holder.record.runId })
  })

  test('runs: a run created under the id of one past its retention starts a new record and log', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    await store.append(id, [event(1), event(2)], OWNER)
    await store.finish(id, [event(3, 'run.failed')], { ...cancelled(), endedAt: new Date(Date.now() - 1_000).toISOString() }, 500, OWNER)
    t.equal(await store.get(id), null, 'gone (not purged yet)')
    t.same(await store.reopen(newRun({ runId: id }), { exclusive: true }), { outcome: 'not_found' }, 'nothing to resume')
    const again = newRun({ runId: id, sessionId: run.record.sessionId })
    t.same(await store.create(again, { exclusive: true }), { outcome: 'created' }, 'its session was given back')
    t.same(await store.get(id), again.record)
    t.same(await store.events(id, 0, 10), [])
    await store.append(id, [event(1, 'run.started')], OWNER)
    t.same(await store.events(id, 0, 10), [event(1, 'run.started')])
    t.same((await store.list({ limit: 1 })).runs.map((r) => r.runId), [id], 'the newest in the lists')
    t.match(await store.finish(id, [event(2, 'run.completed')], completed(again.record), HOUR, OWNER), { status: 'completed', lastSeq: 2 })
  })

  test('runs: a refused finish changes nothing; only a running run finishes', async (t) => {
    const store = await open(t, factory)
    const run = newRun({ sessionId: 'finish-gap' })
    const id = run.record.runId
    await store.create(run, { exclusive: true })
    await store.append(id, [event(1)], OWNER)
    await t.rejects(store.finish(id, [event(3, 'run.completed')], completed(run.record), HOUR, OWNER), { code: 'FA_RUN_LOG_GAP' })
    await t.rejects(store.finish(id, [event(2), event(4, 'run.completed')], completed(run.record), HOUR, OWNER), { code: 'FA_RUN_LOG_GAP' })
    t.match(await store.get(id), { status: 'running', lastSeq: 1 })
    t.same(await store.events(id, 0, 10), [event(1)])
    t.match(await store.create(newRun({ sessionId: 'finish-gap' }), { exclusive: true }), { outcome: 'session_busy', holder: id }, 'still held')
    t.match(await store.finish(id, [], cancelled(), HOUR, OWNER), { status: 'cancelled', lastSeq: 1 }, 'a finish may add no event')
    const queued = newRun({ status: 'queued' })
    delete queued.record.startedAt
    await store.create(queued, { exclusive: false })
    t.equal(await store.finish(queued.record.runId, [event(1, 'run.completed')], completed(queued.record), HOUR, OWNER), null)
    t.match(await store.get(queued.record.runId), { status: 'queued', lastSeq: 0 })
  })

  test('runs: a batch of 5,000 events goes in one call and reads back in pages', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: false })
    const batch = Array.from({ length: 5_000 }, (_, i) => event(i + 1, 'message.delta', { text: `delta ${i + 1}`, escaped: '\u0000\u2028"\\' }))
    await store.append(id, batch, OWNER)
    t.equal((await store.get(id))!.lastSeq, 5_000)
    const read: StoredEvent[] = []
    for (let after = 0; after < 5_000; after = read.at(-1)!.seq) read.push(...await store.events(id, after, 1_000))
    t.same(read, batch)
    t.same(await store.events(id, 4_999, 1_000), [batch[4_999]])
  })

  test('runs: pages stay stable while runs are created', async (t) => {
    const store = await open(t, factory)
    const base = Date.parse('2030-01-01T00:00:00.000Z')
    const at = (ms: number): Partial<RunRecord> => ({ sessionId: 'paged', createdAt: new Date(ms).toISOString(), startedAt: new Date(ms).toISOString() })
    // three runs per millisecond
    const first = Array.from({ length: 12 }, (_, i) => newRun({ ...at(base + Math.floor(i / 3)), runId: `paged-${String(i).padStart(2, '0')}` }))
    for (const run of first) await store.create(run, { exclusive: false })
    const seen: string[] = []
    let cursor: string | undefined
    let later = 0
    do {
      const page = await store.listBySession('paged', cursor === undefined ? { limit: 5 } : { limit: 5, cursor })
      seen.push(...page.runs.map((r) => r.runId))
      cursor = page.nextCursor ?? undefined
      // newer runs arrive between pages: they are not in this listing, and nothing is seen twice or skipped
      await store.create(newRun({ ...at(base + 1_000 + later), runId: `paged-new-${later++}` }), { exclusive: false })
    } while (cursor !== undefined)
    t.same(seen, first.map((r) => r.record.runId).reverse())
    const all = await store.list({ limit: 500, sessionId: 'paged' })
    t.equal(all.runs.length, 12 + later)
    t.equal(all.runs[0]!.runId, `paged-new-${later - 1}`)
  })

  test('runs: a string a store cannot keep as it is is refused (FA_UNSTORABLE_TEXT, 400), or kept faithfully', async (t) => {
    const store = await open(t, factory)
    const odd = ['nul\u0000inside', 'lone \ud800 surrogate', 'lone \udc00 low']
    for (const value of odd) {
      for (const field of ['runId', 'sessionId', 'principal', 'agent'] as const) {
        const run = newRun({ [field]: field === 'runId' ? `${value}-${Math.random()}` : value })
        const created = await store.create(run, { exclusive: true }).catch((error: { code?: string, statusCode?: number }) => error)
        if ('outcome' in created) {
          t.same(await store.get(run.record.runId), run.record, `${field} ${JSON.stringify(value)} kept as it is`)
          if (field === 'sessionId') t.same((await store.listBySession(value, { limit: 10 })).runs.map((r) => r.runId), [run.record.runId])
        } else {
          t.match(created, { code: 'FA_UNSTORABLE_TEXT', statusCode: 400 }, `${field} ${JSON.stringify(value)} refused`)
          t.equal(await store.get(run.record.runId), null, 'nothing stored')
        }
      }
      // reads and writes naming what cannot be stored find nothing, and never fail
      for (const filter of [{ sessionId: value }, { agent: value }, { principal: value }]) {
        const page = await store.list({ limit: 10, ...filter })
        t.ok(page.runs.every((r) => r.sessionId === value || r.agent === value || r.principal === value), `list ${JSON.stringify(filter)}`)
      }
      t.equal(await store.get(value), null)
      t.equal(await store.spec(value), null)
      t.same(await store.events(value, 0, 10), [])
      t.same(await store.cancel(value, cancelled(), HOUR), { outcome: 'not_found' })
      t.same(await store.start(value, new Date().toISOString(), lease()), { outcome: 'gone' })
      t.same(await store.reopen(newRun({ runId: value }), { exclusive: true }), { outcome: 'not_found' })
      t.equal(await store.finish(value, [], cancelled(), HOUR, OWNER), null)
      t.equal(await store.delete(value), false)
      await store.append(value, [event(1)], OWNER)
    }
    const events: StoredEvent[] = [event(1, 'custom.nul\u0000'), event(1, 'custom.lone\ud800'), { seq: 1, type: 'custom.x', data: '"raw \ud800"' }]
    for (const odd of events) {
      const run = newRun()
      await store.create(run, { exclusive: false })
      const appended = await store.append(run.record.runId, [odd], OWNER).then(() => null, (error: { code?: string }) => error)
      if (appended === null) {
        t.same(await store.events(run.record.runId, 0, 1), [odd], `event ${JSON.stringify(odd)} kept as it is`)
      } else {
        t.match(appended, { code: 'FA_UNSTORABLE_TEXT' }, `event ${JSON.stringify(odd)} refused`)
        t.equal((await store.get(run.record.runId))!.lastSeq, 0)
      }
    }
  })

  test('runs: only the lease\'s owner writes a running run\'s log; renew keeps what it still holds', async (t) => {
    const store = await open(t, factory)
    const run = newRun()
    const id = run.record.runId
    await store.create(run, { exclusive: false })
    await t.rejects(store.append(id, [event(1)], OTHER), { code: 'FA_RUN_LEASE_LOST' })
    await t.rejects(store.finish(id, [event(1, 'run.completed')], completed(run.record), HOUR, OTHER), { code: 'FA_RUN_LEASE_LOST' })
    t.equal((await store.get(id))!.lastSeq, 0, 'nothing written by the loser')
    await store.append(id, [event(1)], OWNER)
    const other = newRun()
    await store.create(other, { exclusive: false })
    t.same((await store.renew(OWNER, [id, other.record.runId, 'nope'], Date.now() + HOUR)).sort(), [id, other.record.runId].sort())
    t.same(await store.renew(OTHER, [id], Date.now() + HOUR), [], 'not the other instance\'s')
    await store.finish(other.record.runId, [event(1, 'run.completed')], completed(other.record), HOUR, OWNER)
    t.same(await store.renew(OWNER, [other.record.runId], Date.now() + HOUR), [], 'an ended run is held by nobody')
    await store.append(other.record.runId, [event(2)], OTHER)
    t.equal(await store.finish(other.record.runId, [event(2)], completed(other.record), HOUR, OTHER), null, 'an ended run: nothing to refuse')
  })

  test('runs: lapsed leases are found; requeue and abandon are compare-and-sets on the lapse (or the owner)', async (t) => {
    const store = await open(t, factory)
    // leases end at chosen times and the clock is passed in: no sleep, whatever the machine's load
    const lapsing = newRun({ sessionId: 'lapse-session', traceId: 'd'.repeat(32) })
    lapsing.lease = lease(OWNER, 10 * 60_000)
    lapsing.detachable = true
    const fresh = newRun()
    await store.create(lapsing, { exclusive: true })
    await store.create(fresh, { exclusive: false })
    const id = lapsing.record.runId
    await store.append(id, [event(1, 'run.started')], OWNER)
    t.same(await store.lapsed(Date.now(), 10), [], 'not yet')
    const now = lapsing.lease.until + 1
    const found = await store.lapsed(now, 10)
    t.same(found.map((l) => l.record.runId), [id])
    t.match(found[0], { detachable: true, cancelRequested: false, record: { status: 'running', lastSeq: 1 } })
    t.same(await store.lapsed(now, 0), [], 'a limit of 0 finds nothing')
    t.equal(await store.requeue(fresh.record.runId, { lapsedBefore: now }, 'INSTANCE_LOST', cancelled(), HOUR), null, 'a lease that has not lapsed stays')
    t.equal(await store.requeue(id, { owner: OTHER }, 'SHUTDOWN', cancelled(), HOUR), null, 'only its owner hands it off')
    const requeued = await store.requeue(id, { lapsedBefore: now }, 'INSTANCE_LOST', cancelled(), HOUR)
    t.match(requeued, { runId: id, status: 'queued', attempt: 2, lastSeq: 2 })
    t.equal(requeued!.startedAt, undefined)
    t.same((await store.events(id, 1, 10)), [{ seq: 2, type: 'run.requeued', data: JSON.stringify({ attempt: 2, reason: 'INSTANCE_LOST' }) }])
    t.equal(await store.requeue(id, { lapsedBefore: now }, 'INSTANCE_LOST', cancelled(), HOUR), null, 'once')
    t.same(await store.create(newRun({ sessionId: 'lapse-session' }), { exclusive: true }), { outcome: 'session_busy', holder: id }, 'a requeued run keeps its session')
    await t.rejects(store.append(id, [event(3)], OWNER), { code: 'FA_RUN_LEASE_LOST' }, 'its old owner writes no more')

    // claimed by another instance: its next attempt, under a new lease
    const claimed = await store.claim(lease(OTHER), new Date().toISOString(), 10)
    t.same(claimed.map((r) => r.runId), [id])
    t.match(claimed[0], { status: 'running', attempt: 2, startedAt: String })
    await store.append(id, [event(3, 'run.started')], OTHER)
    t.same(await store.claim(lease(OTHER), new Date().toISOString(), 10), [], 'claimed once')

    // handed off by its owner (a drain), then abandoned when its next lease lapses
    t.match(await store.requeue(id, { owner: OTHER }, 'SHUTDOWN', cancelled(), HOUR), { status: 'queued', attempt: 3, lastSeq: 4 })
    const thirdLease = lease(OWNER, 10 * 60_000)
    const third = await store.claim(thirdLease, new Date().toISOString(), 10)
    t.equal(third.length, 1)
    const later = thirdLease.until + 1
    const end: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'INSTANCE_LOST', message: 'lost' } }
    t.equal(await store.abandon(id, Date.now(), end, HOUR), null, 'not lapsed yet')
    t.equal(await store.abandon(fresh.record.runId, later, end, HOUR), null, 'not lapsed')
    const abandoned = await store.abandon(id, later, end, HOUR)
    t.match(abandoned, { status: 'failed', error: { code: 'INSTANCE_LOST' }, lastSeq: 5 })
    t.same((await store.events(id, 4, 10)), [{ seq: 5, type: 'run.failed', data: JSON.stringify({ error: { code: 'INSTANCE_LOST', message: 'lost' }, traceId: 'd'.repeat(32) }) }])
    t.equal(await store.abandon(id, later, end, HOUR), null, 'once')
    t.same(await store.create(newRun({ sessionId: 'lapse-session' }), { exclusive: true }), { outcome: 'created' }, 'its session is free again')
  })

  test('runs: a requeue of a run whose cancel was asked for ends it cancelled instead (a drain\'s hand-off, recovery)', async (t) => {
    const store = await open(t, factory)
    const traceId = 'f'.repeat(32)
    const cancelledEvent = (seq: number): StoredEvent => event(seq, 'run.failed', { error: { code: 'CANCELLED', message: 'The run was cancelled' }, traceId })
    // handed off by its owner (a drain) after its cancel was answered 202
    const handed = newRun({ sessionId: 'handed-session', traceId })
    handed.detachable = true
    await store.create(handed, { exclusive: true })
    const id = handed.record.runId
    await store.append(id, [event(1, 'run.started')], OWNER)
    t.match(await store.cancel(id, cancelled(), HOUR), { outcome: 'requested' })
    const ended = await store.requeue(id, { owner: OWNER }, 'SHUTDOWN', cancelled(), HOUR)
    t.match(ended, { runId: id, status: 'cancelled', attempt: 1, lastSeq: 2, error: { code: 'CANCELLED', message: 'The run was cancelled' } })
    t.ok(ended!.endedAt, 'ended')
    t.same(await store.get(id), ended)
    t.same(await store.events(id, 0, 10), [event(1, 'run.started'), cancelledEvent(2)], 'no run.requeued: its last event the one a cancelled run sends')
    t.same(await store.claim(lease(OTHER), new Date().toISOString(), 10), [], 'nothing queued: never run again')
    t.equal(await store.requeue(id, { owner: OWNER }, 'SHUTDOWN', cancelled(), HOUR), null, 'once')
    t.match(await store.cancel(id, cancelled(), HOUR), { outcome: 'ended', record: { status: 'cancelled' } })
    t.same(await store.create(newRun({ sessionId: 'handed-session' }), { exclusive: true }), { outcome: 'created' }, 'its session given back')

    // found lapsed (recovery), its cancel asked for after it was found
    const lapsing = newRun({ traceId })
    lapsing.lease = lease(OWNER, 60_000)
    lapsing.detachable = true
    await store.create(lapsing, { exclusive: false })
    const now = lapsing.lease.until + 1
    t.match(await store.lapsed(now, 10), [{ cancelRequested: false }])
    await store.cancel(lapsing.record.runId, cancelled(), HOUR)
    t.match(await store.requeue(lapsing.record.runId, { lapsedBefore: now }, 'INSTANCE_LOST', cancelled(), HOUR), { status: 'cancelled', attempt: 1, lastSeq: 1 })
    t.same(await store.events(lapsing.record.runId, 0, 10), [cancelledEvent(1)])
    t.same(await store.lapsed(now, 10), [], 'no longer running')

    // kept for the retention given, as any ended run
    t.ok(await store.purge(Date.now() + 2 * HOUR, 100) >= 2)
    t.equal(await store.get(id), null)
  })

  test('runs: claim takes queued detachable runs, oldest first, whose session is free; each goes to one claimer', async (t) => {
    const store = await open(t, factory)
    const queued = (extra: Partial<RunRecord> = {}): NewRun => {
      const run = newRun({ status: 'queued', background: true, ...extra })
      delete run.record.startedAt
      run.detachable = true
      return run
    }
    const waiting = newRun({ status: 'queued' })
    delete waiting.record.startedAt
    await store.create(waiting, { exclusive: false })
    const busy = newRun({ sessionId: 'claim-busy' })
    await store.create(busy, { exclusive: true })
    const blocked = queued({ sessionId: 'claim-busy' })
    const runs = [queued(), queued({ sessionId: null }), queued()]
    await store.create(blocked, { exclusive: false })
    for (const run of runs) await store.create(run, { exclusive: false })
    let heard = 0
    const stop = store.watchQueue(() => { heard++ })
    t.teardown(stop)
    await store.create(queued(), { exclusive: false })
    await eventually(() => heard > 0)
    const claims = await Promise.all([1, 2, 3].map((n) => store.claim(lease(`claimer-${n}`), new Date().toISOString(), 2)))
    const ids = claims.flat().map((r) => r.runId)
    t.equal(ids.length, 4, 'the four claimable ones')
    t.equal(new Set(ids).size, 4, 'each to one claimer')
    t.notOk(ids.includes(waiting.record.runId), 'a queued run that is not detachable waits for its own instance')
    t.notOk(ids.includes(blocked.record.runId), 'a run whose session is busy stays queued')
    t.same(await store.claim(lease(), new Date().toISOString(), 0), [], 'a limit of 0 claims nothing')
    await store.finish(busy.record.runId, [event(1, 'run.completed')], completed(busy.record), HOUR, OWNER)
    t.same((await store.claim(lease(), new Date().toISOString(), 5)).map((r) => r.runId), [blocked.record.runId], 'once its session is free')
  })

  test('runs: queued runs are claimed oldest first: one at a time, in the order they were created', async (t) => {
    const store = await open(t, factory)
    const ids: string[] = []
    for (let i = 0; i < 6; i++) {
      const run = newRun({ status: 'queued', background: true, sessionId: i % 2 === 0 ? null : `claim-order-${i}` })
      delete run.record.startedAt
      run.detachable = true
      await store.create(run, { exclusive: false })
      ids.push(run.record.runId)
    }
    const claimed: string[] = []
    for (let i = 0; i < ids.length; i++) claimed.push(...(await store.claim(lease(), new Date().toISOString(), 1)).map((r) => r.runId))
    t.same(claimed, ids)
    t.same(await store.claim(lease(), new Date().toISOString(), 1), [], 'none left')
  })

  if (factories.twin !== undefined) {
    const makeTwin = factories.twin

    test('runs: another instance sees the records and hears the events, cancels and freed sessions', async (t) => {
      const a = await open(t, factory)
      const b = await makeTwin(t.context, a)
      t.teardown(async () => { await b.close?.() })
      const run = newRun({ sessionId: 'across' })
      await a.create(run, { exclusive: true })
      const id = run.record.runId
      t.same(await b.get(id), run.record)
      const onB = watcher(b, id)
      const onA = watcher(a, id)
      t.teardown(() => { onA.stop(); onB.stop() })
      const started = Date.now()
      await a.append(id, [event(1, 'run.started')], OWNER)
      await eventually(() => onB.changes.some((c) => c.kind === 'events' && c.lastSeq === 1), 1_000)
      t.ok(Date.now() - started < 1_000, 'heard within a second')
      t.same(await b.events(id, 0, 10), [event(1, 'run.started')])
      t.same(await b.create(newRun({ sessionId: 'across' }), { exclusive: true }), { outcome: 'session_busy', holder: id })
      t.match(await b.cancel(id, cancelled(), HOUR), { outcome: 'requested' })
      await eventually(() => onA.changes.some((c) => c.kind === 'cancel'), 1_000)
      let freed = false
      const stop = b.watchSession('across', () => { freed = true })
      t.teardown(stop)
      await a.finish(id, [event(2, 'run.failed')], cancelled(), HOUR, OWNER)
      await eventually(() => freed, 2_000)
      await eventually(() => onB.changes.some((c) => c.kind === 'events' && c.lastSeq === 2), 1_000)
      t.same(await b.create(newRun({ sessionId: 'across' }), { exclusive: true }), { outcome: 'created' })
    })
  }
}
