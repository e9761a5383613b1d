// The run state machine (docs/stores.md, "Run stores"): every rule a run's record follows, written once as plain
// functions over what a backend stored, whatever that backend is. The backends only store, read and write under the
// conditions these rules give them (run-store.ts); test/stores/run-policy.test.ts checks the rules without a store.
import { RunLeaseLostError, RunLogConflictError, RunLogGapError, UnstorableTextError } from '../core/errors.js'
import { toMs } from './common.js'
import type { NewRun, RunEnd, RunLease, RunRecord, RunStatus, StoredEvent } from './types.js'

export const MAX_RUN_LIST_LIMIT = 500

/** How often a store polls for what its notifications may have missed, unless told otherwise. */
export const RUN_POLL_MS = 1_000

/** What the rules read of a run: its record, and what its store keeps beside it. */
export interface StoredRun {
  record: RunRecord
  detachable: boolean
  /** a cancel was asked for while it ran */
  cancelRequested: boolean
  lease: RunLease | null
}

/** What a conditional write checks of a run before it writes (atomically with the write): the run as it was read. */
export interface RunCondition {
  status: RunStatus
  /** the log's last seq (the events written follow it); left out: not checked */
  lastSeq?: number
  /** the lease is this owner's */
  owner?: string
  /** the lease ended before this time (epoch ms) */
  lapsedBefore?: number
  cancelRequested?: boolean
}

/** Who may requeue a run: its owner handing it off, or anyone once its lease lapsed. */
export type LeaseCondition = { owner: string } | { lapsedBefore: number }

export function isEnded (status: RunStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'cancelled'
}

/**
 * Whether a run as stored meets a condition: for the backends that check one in JavaScript (memory, SQLite inside
 * its transaction); PostgreSQL and Redis check the same in their statement or script.
 */
export function meets (
  run: { status: RunStatus, lastSeq: number, owner: string | null, leaseUntil: number | null, cancelRequested: boolean },
  condition: RunCondition
): boolean {
  return run.status === condition.status &&
    (condition.lastSeq === undefined || run.lastSeq === condition.lastSeq) &&
    (condition.owner === undefined || run.owner === condition.owner) &&
    (condition.lapsedBefore === undefined || (run.leaseUntil !== null && run.leaseUntil < condition.lapsedBefore)) &&
    (condition.cancelRequested === undefined || run.cancelRequested === condition.cancelRequested)
}

/** The condition that a running run's lease holds: `owner`'s, or lapsed before a time. */
export function leaseHeld (state: StoredRun | null, condition: LeaseCondition): state is StoredRun {
  if (state === null || state.record.status !== 'running' || state.lease === null) return false
  return 'owner' in condition ? state.lease.owner === condition.owner : state.lease.until < condition.lapsedBefore
}

/**
 * Whether `owner` may write a run's log: false when there is nothing to write to (unknown, past its retention, or
 * ended); throws FA_RUN_LEASE_LOST when the run is not running under its lease (someone else runs it, or it was
 * requeued). A finish of a queued run (an old owner's, late, after a requeue) is nothing to do, not a loss.
 */
export function mayWrite (state: StoredRun | null, owner: string, finishing = false): state is StoredRun {
  if (state === null || isEnded(state.record.status)) return false
  if (finishing && state.record.status === 'queued') return false
  if (state.record.status !== 'running' || state.lease?.owner !== owner) throw new RunLeaseLostError(state.record.runId)
  return true
}

/** What a cancel does, given the run as it is: a queued run ends at once, a running one is asked to stop. */
export function cancelDecision (state: StoredRun | null): 'not_found' | 'ended' | 'end' | 'request' {
  if (state === null) return 'not_found'
  if (isEnded(state.record.status)) return 'ended'
  return state.record.status === 'queued' ? 'end' : 'request'
}

/** What a resume (`resumeRunId`) does: only a run that ended is reopened. */
export function reopenDecision (state: StoredRun | null): 'not_found' | 'in_progress' | 'reopen' {
  if (state === null) return 'not_found'
  return isEnded(state.record.status) ? 'reopen' : 'in_progress'
}

/** The time a run that ends is kept until (epoch ms): its end plus the retention. */
export function expiry (end: RunEnd, retentionMs: number): number {
  return toMs('endedAt', end.endedAt) + retentionMs
}

/** The one event of a run that ended before it started (cancelled while queued): what a run would have sent. */
export function endedBeforeStartEvent (record: { lastSeq: number, traceId: string }, end: { error?: { code: string, message: string } }): StoredEvent {
  return { seq: record.lastSeq + 1, type: 'run.failed', data: JSON.stringify({ error: end.error, traceId: record.traceId }) }
}

/**
 * What a requeued run's log says: the attempt about to start and why (`SHUTDOWN`, `INSTANCE_LOST`; `RESUMED` for a
 * run resumed with `resumeRunId`, whose next attempt follows its last one's terminal event).
 */
export function requeuedEvent (record: { lastSeq: number }, attempt: number, reason: string): StoredEvent {
  return { seq: record.lastSeq + 1, type: 'run.requeued', data: JSON.stringify({ attempt, reason }) }
}

/** The error a cancelled run ends with (its record's, and its `run.failed` event's). */
export const CANCELLED_ERROR: { readonly code: 'CANCELLED', readonly message: string } = { code: 'CANCELLED', message: 'The run was cancelled' }

/**
 * A cancel answered "requested" (202) promises that the run ends CANCELLED: a finish that comes after it ends the
 * run so, whatever the run came to. Its last event, the terminal one, becomes `run.failed` CANCELLED (as the run
 * itself would have sent it), and its end the cancelled one. Applied in the write that ends the run, so that cancel
 * and finish are one compare-and-set; the run's log makes the same event to send its client.
 */
export function cancelledFinish (traceId: string, events: readonly StoredEvent[], end: RunEnd): { events: StoredEvent[], end: RunEnd } {
  const cancelled = events.slice()
  const last = cancelled.pop()
  if (last !== undefined) cancelled.push({ seq: last.seq, type: 'run.failed', data: JSON.stringify({ error: CANCELLED_ERROR, traceId }) })
  return { events: cancelled, end: { status: 'cancelled', endedAt: end.endedAt, error: { ...CANCELLED_ERROR } } }
}

/**
 * How a write that ends a running run (its finish, or its abandon once its lease lapsed) ends it: as it says, or
 * cancelled when a cancel was asked for first (see cancelledFinish).
 */
export function runningEnd (cancelRequested: boolean, traceId: string, events: readonly StoredEvent[], end: RunEnd): { events: readonly StoredEvent[], end: RunEnd } {
  return cancelRequested && end.status !== 'cancelled' ? cancelledFinish(traceId, events, end) : { events, end }
}

/** How an abandon (its lease lapsed) ends a run: `run.failed` with `end.error`, or cancelled when a cancel was asked for. */
export function abandonedEnd (state: StoredRun, end: RunEnd): { events: readonly StoredEvent[], end: RunEnd } {
  return runningEnd(state.cancelRequested, state.record.traceId, [endedBeforeStartEvent(state.record, end)], end)
}

/**
 * How a requeue (a hand-off at a drain, recovery once a lease lapsed) ends a run whose cancel was asked for first:
 * a 202 on cancel promises that the run ends CANCELLED, so instead of going back to the queue (where nothing would
 * remember the cancel) it ends so, its last event `run.failed` CANCELLED. null: the requeue goes on. Applied in the
 * requeue's own compare-and-set, as runningEnd is in a finish.
 */
export function cancelledRequeue (cancelRequested: boolean, record: { lastSeq: number, traceId: string }, end: RunEnd): { events: StoredEvent[], end: RunEnd } | null {
  return cancelRequested ? cancelledFinish(record.traceId, [endedBeforeStartEvent(record, end)], end) : null
}

/**
 * A read's budget (RunStore.events): an event is given while the data of those before it in the page are under
 * `budget` characters, so one at least, and the one that reaches it is the last. PostgreSQL's and Redis' reads
 * apply it where the log is (postgres-runs.ts, redis-runs.ts).
 */
export function withinBudget (events: StoredEvent[], budget: number): StoredEvent[] {
  let taken = 0
  let count = 0
  while (count < events.length && taken < budget) taken += events[count++]!.data.length
  return count === events.length ? events : events.slice(0, count)
}

/**
 * How many of a batch's events (seqs from `first`, in order) the log holds already, given its `lastSeq`: those a
 * retried write brings again.
 */
export function heldCount (first: number, count: number, lastSeq: number): number {
  return Math.max(0, Math.min(count, lastSeq - first + 1))
}

/**
 * The events of a batch that the log does not hold yet. A write whose answer was lost (past its deadline, though
 * the store applied it) is retried with the same events: those the log holds already at the same seqs (the same
 * type and data) are acknowledged again, not stored twice, and the rest must follow the log. `held` is what the log
 * holds from the batch's first seq (heldCount of them). Throws FA_RUN_LOG_CONFLICT for a held seq with another
 * event, FA_RUN_LOG_GAP when the rest does not follow `lastSeq`.
 */
export function unheldEvents (runId: string, lastSeq: number, events: readonly StoredEvent[], held: readonly StoredEvent[]): readonly StoredEvent[] {
  if (events.length === 0) return events
  const count = heldCount(events[0]!.seq, events.length, lastSeq)
  for (let i = 0; i < count; i++) {
    const event = events[i]!
    const kept = held[i]
    if (kept === undefined || kept.seq !== event.seq || kept.type !== event.type || kept.data !== event.data) throw new RunLogConflictError(runId, event.seq)
  }
  const rest = count === 0 ? events : events.slice(count)
  if (rest.length > 0 && rest[0]!.seq !== lastSeq + 1) throw new RunLogGapError(runId, lastSeq + 1, rest[0]!.seq)
  return rest
}

/**
 * The seqs of a batch follow each other; the store checks the first against the run's `lastSeq`, atomically
 * with the write.
 */
export function checkBatch (runId: string, events: readonly StoredEvent[]): void {
  for (let i = 1; i < events.length; i++) {
    const expected = events[0]!.seq + i
    if (events[i]!.seq !== expected) throw new RunLogGapError(runId, expected, events[i]!.seq)
  }
}

const wellFormed = (String.prototype as unknown as { isWellFormed: (this: string) => boolean }).isWellFormed

/**
 * What text a backend keeps as it was given: any JavaScript string (in the process), UTF-8 (a lone surrogate would
 * become U+FFFD and two ids one), or UTF-8 without NUL (PostgreSQL `text` refuses it outright).
 */
export type TextKind = 'any' | 'utf8' | 'utf8-no-nul'

/** Whether a string survives the store unchanged. */
export function storable (value: string, text: TextKind): boolean {
  return text === 'any' || (wellFormed.call(value) && (text === 'utf8' || !value.includes('\u0000')))
}

/** Refuses, before anything is written, a string the store would not give back as it was. */
export function checkText (backend: string, text: TextKind, name: string, value: string): void {
  if (storable(value, text)) return
  throw new UnstorableTextError(name, backend, wellFormed.call(value) ? 'a NUL character' : 'a lone surrogate')
}

export function checkNewRun (backend: string, text: TextKind, run: NewRun): void {
  const { record } = run
  for (const name of ['runId', 'agent', 'principal', 'requestId', 'traceId'] as const) checkText(backend, text, name, record[name])
  if (record.sessionId !== null) checkText(backend, text, 'sessionId', record.sessionId)
  toMs('createdAt', record.createdAt)
  if (record.startedAt !== undefined) toMs('startedAt', record.startedAt)
  // a schedule's fire names both its schedule and its due time, or neither (docs/schedules.md)
  if ((record.scheduleId === undefined) !== (record.scheduledFor === undefined)) {
    throw new TypeError('a run record has scheduleId and scheduledFor together, or neither')
  }
  if (record.scheduleId !== undefined) checkText(backend, text, 'scheduleId', record.scheduleId)
  if (record.scheduledFor !== undefined) toMs('scheduledFor', record.scheduledFor)
}

export function checkEvents (backend: string, text: TextKind, events: readonly StoredEvent[]): void {
  if (text === 'any') return
  for (const event of events) {
    checkText(backend, text, 'an event type', event.type)
    checkText(backend, text, 'an event\'s data', event.data)
  }
}
