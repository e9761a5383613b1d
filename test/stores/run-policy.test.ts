// The run state machine's rules, called as plain functions: no store (docs/stores.md, "Run stores").
import t from 'tap'
import {
  CANCELLED_ERROR, abandonedEnd, cancelDecision, cancelledFinish, cancelledRequeue, checkBatch, checkEvents, checkNewRun, checkText,
  expiry, heldCount, isEnded, leaseHeld, mayWrite, meets, reopenDecision, requeuedEvent, runningEnd, storable, unheldEvents, withinBudget
} from '../../lib/stores/run-policy.js'
import type { StoredRun } from '../../lib/stores/run-policy.js'
import type { NewRun, RunEnd, RunRecord, RunStatus, StoredEvent } from '../../lib/stores/types.js'

const TRACE = 'a'.repeat(32)

function record (status: RunStatus, extra: Partial<RunRecord> = {}): RunRecord {
  return {
    runId: 'r1', agent: 'echo', sessionId: 's1', principal: 'p', status, background: false, attempt: 1, lastSeq: 3,
    createdAt: '2026-01-01T00:00:00.000Z', requestId: 'req', traceId: TRACE, ...extra
  }
}

function run (status: RunStatus, extra: Partial<StoredRun> = {}): StoredRun {
  return { record: record(status), detachable: true, cancelRequested: false, lease: status === 'running' ? { owner: 'a', until: 1_000 } : null, ...extra }
}

const event = (seq: number, type = 'message.delta', data = `{"n":${seq}}`): StoredEvent => ({ seq, type, data })
const completed: RunEnd = { status: 'completed', endedAt: '2026-01-01T00:01:00.000Z' }
const failed: RunEnd = { status: 'failed', endedAt: '2026-01-01T00:01:00.000Z', error: { code: 'INSTANCE_LOST', message: 'lost' } }

t.test('cancel: not found, ended as it is, a queued run ends at once, a running one is asked to stop', async (t) => {
  t.equal(cancelDecision(null), 'not_found')
  for (const status of ['completed', 'failed', 'cancelled'] as const) {
    t.equal(cancelDecision(run(status)), 'ended', status)
    t.ok(isEnded(status))
  }
  t.equal(cancelDecision(run('queued')), 'end')
  t.equal(cancelDecision(run('running')), 'request')
  t.notOk(isEnded('queued'))
  t.notOk(isEnded('running'))
})

t.test('reopen: only a run that ended is resumed; an unknown one is created afresh', async (t) => {
  t.equal(reopenDecision(null), 'not_found')
  t.equal(reopenDecision(run('queued')), 'in_progress')
  t.equal(reopenDecision(run('running')), 'in_progress')
  t.equal(reopenDecision(run('failed')), 'reopen')
  t.same(requeuedEvent({ lastSeq: 3 }, 2, 'RESUMED'), { seq: 4, type: 'run.requeued', data: '{"attempt":2,"reason":"RESUMED"}' })
})

t.test('a lease is held by its owner, or lapsed before a time; only a running run has one', async (t) => {
  t.ok(leaseHeld(run('running'), { owner: 'a' }))
  t.notOk(leaseHeld(run('running'), { owner: 'b' }))
  t.ok(leaseHeld(run('running'), { lapsedBefore: 1_001 }))
  t.notOk(leaseHeld(run('running'), { lapsedBefore: 1_000 }), 'a lease ending at the time given has not lapsed before it')
  t.notOk(leaseHeld(run('running', { lease: null }), { lapsedBefore: Infinity }), 'no lease, never lapsed')
  t.notOk(leaseHeld(run('queued'), { lapsedBefore: Infinity }))
  t.notOk(leaseHeld(null, { owner: 'a' }))
})

t.test('who writes a log: its lease\'s owner; an ended or unknown run is nothing to write to; a late finish of a queued run is nothing', async (t) => {
  t.ok(mayWrite(run('running'), 'a'))
  t.throws(() => mayWrite(run('running'), 'b'), { code: 'FA_RUN_LEASE_LOST' })
  t.throws(() => mayWrite(run('queued'), 'a'), { code: 'FA_RUN_LEASE_LOST' }, 'requeued: the old owner lost it')
  t.notOk(mayWrite(run('queued'), 'a', true), 'a finish after a requeue changes nothing')
  t.notOk(mayWrite(run('completed'), 'a'))
  t.notOk(mayWrite(null, 'a'))
})

t.test('a condition is the run as read: each field given is checked, the others are not', async (t) => {
  const stored = { status: 'running' as const, lastSeq: 3, owner: 'a', leaseUntil: 1_000, cancelRequested: false }
  t.ok(meets(stored, { status: 'running' }))
  t.notOk(meets(stored, { status: 'queued' }))
  t.ok(meets(stored, { status: 'running', lastSeq: 3, owner: 'a', lapsedBefore: 1_001, cancelRequested: false }))
  t.notOk(meets(stored, { status: 'running', lastSeq: 2 }))
  t.notOk(meets(stored, { status: 'running', owner: 'b' }))
  t.notOk(meets(stored, { status: 'running', lapsedBefore: 1_000 }))
  t.notOk(meets({ ...stored, leaseUntil: null }, { status: 'running', lapsedBefore: Infinity }))
  t.notOk(meets(stored, { status: 'running', cancelRequested: true }))
})

t.test('cancel and finish are one compare-and-set: a cancel asked for first ends the run cancelled, its terminal event replaced', async (t) => {
  const events = [event(4), event(5, 'run.completed')]
  t.same(runningEnd(false, TRACE, events, completed), { events, end: completed }, 'no cancel: as it says')
  const cancelled = runningEnd(true, TRACE, events, completed)
  t.same(cancelled.events, [event(4), { seq: 5, type: 'run.failed', data: JSON.stringify({ error: CANCELLED_ERROR, traceId: TRACE }) }])
  t.same(cancelled.end, { status: 'cancelled', endedAt: completed.endedAt, error: { ...CANCELLED_ERROR } })
  const already: RunEnd = { status: 'cancelled', endedAt: completed.endedAt, error: { ...CANCELLED_ERROR } }
  t.same(runningEnd(true, TRACE, events, already), { events, end: already }, 'ending cancelled already: as it says')
  t.same(cancelledFinish(TRACE, [], completed).events, [], 'no events: nothing to replace')
})

t.test('abandon ends a run with its error, or cancelled; a requeue of a run whose cancel was asked for ends it instead', async (t) => {
  t.same(abandonedEnd(run('running'), failed), {
    events: [{ seq: 4, type: 'run.failed', data: JSON.stringify({ error: failed.error, traceId: TRACE }) }], end: failed
  })
  t.match(abandonedEnd(run('running', { cancelRequested: true }), failed), { end: { status: 'cancelled', error: CANCELLED_ERROR } })
  t.equal(cancelledRequeue(false, record('running'), failed), null, 'no cancel: the requeue goes on')
  const ending = cancelledRequeue(true, record('running'), failed)!
  t.same(ending.events, [{ seq: 4, type: 'run.failed', data: JSON.stringify({ error: CANCELLED_ERROR, traceId: TRACE }) }])
  t.equal(ending.end.status, 'cancelled')
})

t.test('a retried batch: what the log holds is acknowledged again, the rest must follow; another event at a held seq is a conflict', async (t) => {
  t.equal(heldCount(1, 3, 0), 0)
  t.equal(heldCount(2, 3, 3), 2)
  t.equal(heldCount(2, 3, 10), 3)
  const batch = [event(3), event(4), event(5)]
  t.same(unheldEvents('r1', 2, batch, []), batch, 'nothing held: all of it')
  t.same(unheldEvents('r1', 4, batch, [event(3), event(4)]), [event(5)], 'held ones acknowledged')
  t.same(unheldEvents('r1', 5, batch, batch), [], 'all of it held')
  t.same(unheldEvents('r1', 5, [], []), [])
  t.throws(() => unheldEvents('r1', 4, batch, [event(3), event(4, 'other')]), { code: 'FA_RUN_LOG_CONFLICT' })
  t.throws(() => unheldEvents('r1', 4, batch, [event(3)]), { code: 'FA_RUN_LOG_CONFLICT' }, 'held, but not read back')
  t.throws(() => unheldEvents('r1', 1, batch, []), { code: 'FA_RUN_LOG_GAP' })
  t.doesNotThrow(() => checkBatch('r1', batch))
  t.throws(() => checkBatch('r1', [event(1), event(3)]), { code: 'FA_RUN_LOG_GAP' })
})

t.test('a read\'s budget: events go while those before them are under it, so one at least', async (t) => {
  const page = [10, 10, 100, 10].map((size, i): StoredEvent => ({ seq: i + 1, type: 'x', data: 'd'.repeat(size) }))
  const seqs = (budget: number): number[] => withinBudget(page, budget).map((event) => event.seq)
  t.same([seqs(1), seqs(10), seqs(11), seqs(20), seqs(21), seqs(120), seqs(121), seqs(Infinity)], [[1], [1], [1, 2], [1, 2], [1, 2, 3], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4]])
  t.equal(withinBudget(page, Infinity), page, 'a page within it, as it is')
  t.same(withinBudget([], 5), [])
})

t.test('retention: a run is kept its retention past its end; a date that is not one is refused', async (t) => {
  t.equal(expiry(completed, 1_000), Date.parse(completed.endedAt) + 1_000)
  t.throws(() => expiry({ status: 'completed', endedAt: 'yesterday' }, 1), { name: 'TypeError', message: /endedAt/ })
})

t.test('text: what each kind of backend keeps as given, refused before anything is written', async (t) => {
  const nul = 'a\u0000b'
  const lone = 'a\ud800b'
  t.ok(storable(nul, 'any'))
  t.ok(storable(lone, 'any'))
  t.ok(storable(nul, 'utf8'))
  t.notOk(storable(lone, 'utf8'))
  t.notOk(storable(nul, 'utf8-no-nul'))
  t.ok(storable('é ✓ 😀', 'utf8-no-nul'))
  t.throws(() => checkText('PostgreSQL', 'utf8-no-nul', 'runId', nul), { code: 'FA_UNSTORABLE_TEXT', message: /NUL/ })
  t.throws(() => checkText('Redis', 'utf8', 'runId', lone), { code: 'FA_UNSTORABLE_TEXT', message: /lone surrogate/ })
  t.doesNotThrow(() => checkEvents('memory', 'any', [event(1, lone)]))
  t.throws(() => checkEvents('SQLite', 'utf8', [event(1, 'x', lone)]), { code: 'FA_UNSTORABLE_TEXT' })
  const newRun: NewRun = { record: record('running', { startedAt: completed.endedAt }), spec: { input: null }, ephemeral: false, detachable: false, lease: null }
  t.doesNotThrow(() => checkNewRun('SQLite', 'utf8', newRun))
  t.throws(() => checkNewRun('SQLite', 'utf8', { ...newRun, record: { ...newRun.record, sessionId: lone } }), { code: 'FA_UNSTORABLE_TEXT' })
  t.throws(() => checkNewRun('memory', 'any', { ...newRun, record: { ...newRun.record, createdAt: 'soon' } }), { name: 'TypeError', message: /createdAt/ })
  t.throws(() => checkNewRun('memory', 'any', { ...newRun, record: { ...newRun.record, startedAt: 'soon' } }), { name: 'TypeError', message: /startedAt/ })
})
