// The in-process run store: records and event logs of one instance, watched in-process.
import { RunLeaseLostError, RunLogGapError } from '../core/errors.js'
import {
  cancelledRequeue, checkCount, checkLimit, decodeSeqCursor, encodeSeqCursor, endedBeforeStartEvent, heldCount, requeuedEvent,
  runningEnd, storeClosedError, toMs, unheldEvents
} from './common.js'
import { RunWatchHub } from './run-watch.js'
import type {
  CancelRunResult, CreateRunResult, LapsedRun, NewRun, ReopenRunResult, RunEnd, RunLease, RunListQuery, RunPage, RunRecord, RunSpec,
  RunStore, StartRunResult, StoredEvent
} from './types.js'

export const DEFAULT_MAX_RETAINED_RUNS = 10_000
export const MAX_RUN_LIST_LIMIT = 500

interface StoredRun {
  record: RunRecord
  spec: RunSpec
  ephemeral: boolean
  events: StoredEvent[]
  cancelRequested: boolean
  detachable: boolean
  lease: RunLease | null
  /** set when the run ends: after this it is gone */
  expiresAt: number
  /** the order of creation in this store: lists are most recent first, in this order */
  order: number
  /** its neighbours in the store's list of ended runs (longest-ended first), while it is in it */
  endedBefore: StoredRun | null
  endedAfter: StoredRun | null
  inEndedList: boolean
}

export interface MemoryRunStoreOptions {
  /** the most ended runs kept (default 10,000): past it, the longest-ended go first */
  maxRetainedRuns?: number | undefined
}

function ended (record: RunRecord): boolean {
  return record.status === 'completed' || record.status === 'failed' || record.status === 'cancelled'
}

/**
 * The record of a run that has ended, made afresh field by field: adding properties to the copy create() made with
 * a spread takes V8's slow path (bench/README.md).
 */
function endedRecord (running: RunRecord, end: RunEnd): RunRecord {
  const record: RunRecord = {
    runId: running.runId,
    agent: running.agent,
    sessionId: running.sessionId,
    principal: running.principal,
    status: end.status,
    background: running.background,
    attempt: running.attempt,
    lastSeq: running.lastSeq,
    createdAt: running.createdAt,
    requestId: running.requestId,
    traceId: running.traceId
  }
  if (running.startedAt !== undefined) record.startedAt = running.startedAt
  record.endedAt = end.endedAt
  if (end.result !== undefined) record.result = end.result
  if (end.error !== undefined) record.error = end.error
  return record
}

export class MemoryRunStore implements RunStore {
  readonly maxRetainedRuns: number
  readonly #runs = new Map<string, StoredRun>()
  /** session id → the run that holds it */
  readonly #holders = new Map<string, string>()
  // Ended runs, longest-ended first: the bound and the purge take from the front. A list through the runs rather
  // than a Set: each delete at a Set's front leaves a hole that every later look at its first entry walks.
  #oldestEnded: StoredRun | null = null
  #newestEnded: StoredRun | null = null
  #endedCount = 0
  readonly #hub = new RunWatchHub()
  #created = 0
  readonly #queueWatchers = new Set<() => void>()
  // the queued detachable runs (and some that no longer are, dropped as claim meets them): claim looks at these
  // rather than at every retained run
  readonly #queue = new Set<string>()
  #closed = false

  constructor (options: MemoryRunStoreOptions = {}) {
    this.maxRetainedRuns = checkCount('maxRetainedRuns', options.maxRetainedRuns ?? DEFAULT_MAX_RETAINED_RUNS)
  }

  #live (runId: string, now = Date.now()): StoredRun | undefined {
    const stored = this.#runs.get(runId)
    if (stored === undefined || stored.expiresAt <= now) return undefined
    return stored
  }

  #check (): void {
    if (this.#closed) throw storeClosedError()
  }

  /** The session is free, or held by a run that has ended (given back late, or never: its instance died), or by `runId`. */
  #sessionFree (sessionId: string, runId?: string): boolean {
    const holder = this.#holders.get(sessionId)
    if (holder === undefined || holder === runId) return true
    const run = this.#runs.get(holder)
    return run === undefined || ended(run.record)
  }

  async create (run: NewRun, options: { exclusive: boolean }): Promise<CreateRunResult> {
    this.#check()
    const { record } = run
    const sessionId = record.sessionId
    if (options.exclusive && sessionId !== null) {
      if (!this.#sessionFree(sessionId)) return { outcome: 'session_busy', holder: this.#holders.get(sessionId)! }
      this.#holders.set(sessionId, record.runId)
    }
    // a run created afresh under the id of one past its retention replaces it, and is queued, or not, as it says
    const previous = this.#runs.get(record.runId)
    if (previous !== undefined) {
      this.#unlistEnded(previous)
      this.#queue.delete(record.runId)
    }
    this.#runs.set(record.runId, {
      record: { ...record },
      spec: run.spec,
      ephemeral: run.ephemeral,
      events: [],
      cancelRequested: false,
      detachable: run.detachable,
      lease: run.lease === null ? null : { ...run.lease },
      expiresAt: Infinity,
      order: ++this.#created,
      endedBefore: null,
      endedAfter: null,
      inEndedList: false
    })
    if (record.status === 'queued' && run.detachable) {
      this.#queue.add(record.runId)
      this.#notifyQueue()
    }
    return { outcome: 'created' }
  }

  async reopen (run: NewRun, options: { exclusive: boolean }): Promise<ReopenRunResult> {
    this.#check()
    const stored = this.#live(run.record.runId)
    if (stored === undefined) return { outcome: 'not_found' }
    if (!ended(stored.record)) return { outcome: 'in_progress' }
    const sessionId = stored.record.sessionId
    if (options.exclusive && sessionId !== null) {
      if (!this.#sessionFree(sessionId)) return { outcome: 'session_busy', holder: this.#holders.get(sessionId)! }
      this.#holders.set(sessionId, stored.record.runId)
    }
    const attempt = stored.record.attempt + 1
    // its next attempt follows its last one's terminal event, after the event that says so (a follower reads on)
    this.#appendTo(stored, [requeuedEvent(stored.record, attempt, 'RESUMED')])
    const { endedAt: _endedAt, result: _result, error: _error, ...kept } = stored.record
    stored.record = {
      ...kept,
      status: 'running',
      attempt,
      startedAt: run.record.startedAt!,
      requestId: run.record.requestId,
      traceId: run.record.traceId
    }
    stored.spec = run.spec
    stored.cancelRequested = false
    stored.detachable = run.detachable
    stored.lease = run.lease === null ? null : { ...run.lease }
    stored.expiresAt = Infinity
    this.#unlistEnded(stored)
    this.#hub.events(stored.record.runId, stored.record.lastSeq)
    return { outcome: 'reopened', record: { ...stored.record } }
  }

  async start (runId: string, startedAt: string, lease: RunLease): Promise<StartRunResult> {
    this.#check()
    const stored = this.#live(runId)
    if (stored === undefined || stored.record.status !== 'queued') return { outcome: 'gone' }
    if (!this.#take(stored)) return { outcome: 'session_busy', holder: this.#holders.get(stored.record.sessionId!)! }
    this.#run(stored, startedAt, lease)
    return { outcome: 'started', record: { ...stored.record } }
  }

  /** Takes the run's session if it is free (or already the run's); false when another run holds it. */
  #take (stored: StoredRun): boolean {
    const sessionId = stored.record.sessionId
    if (sessionId === null) return true
    if (!this.#sessionFree(sessionId, stored.record.runId)) return false
    this.#holders.set(sessionId, stored.record.runId)
    return true
  }

  #run (stored: StoredRun, startedAt: string, lease: RunLease): void {
    stored.record.status = 'running'
    stored.record.startedAt = startedAt
    stored.lease = { ...lease }
  }

  async claim (lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]> {
    this.#check()
    const claimed: RunRecord[] = []
    const waiting: StoredRun[] = []
    for (const runId of this.#queue) {
      // a run gone is out of the queue (#delete); one started or ended since it was queued leaves it now
      const stored = this.#runs.get(runId)!
      if (stored.record.status !== 'queued') this.#queue.delete(runId)
      else waiting.push(stored)
    }
    // oldest first, in the order of creation
    waiting.sort((a, b) => a.order - b.order)
    for (const stored of waiting) {
      if (claimed.length >= limit) break
      if (!this.#take(stored)) continue
      this.#run(stored, startedAt, lease)
      this.#queue.delete(stored.record.runId)
      claimed.push({ ...stored.record })
    }
    return claimed
  }

  /** The run, if `owner` holds its lease while it runs; else the append or finish is refused as the lease's loser's. */
  #owned (runId: string, owner: string): StoredRun | undefined {
    const stored = this.#live(runId)
    if (stored === undefined || ended(stored.record)) return undefined
    if (stored.record.status !== 'running' || stored.lease?.owner !== owner) throw new RunLeaseLostError(runId)
    return stored
  }

  async renew (owner: string, runIds: readonly string[], until: number): Promise<string[]> {
    this.#check()
    const held: string[] = []
    for (const runId of runIds) {
      const stored = this.#live(runId)
      if (stored === undefined || stored.record.status !== 'running' || stored.lease?.owner !== owner) continue
      stored.lease.until = until
      held.push(runId)
    }
    return held
  }

  async lapsed (now: number, limit: number): Promise<LapsedRun[]> {
    this.#check()
    const found: LapsedRun[] = []
    for (const stored of this.#runs.values()) {
      if (found.length >= limit) break
      if (stored.record.status === 'running' && stored.lease !== null && stored.lease.until < now) {
        found.push({ record: { ...stored.record }, detachable: stored.detachable, cancelRequested: stored.cancelRequested })
      }
    }
    return found
  }

  #lapsedOrOwned (stored: StoredRun | undefined, condition: { owner: string } | { lapsedBefore: number }): stored is StoredRun {
    if (stored === undefined || stored.record.status !== 'running' || stored.lease === null) return false
    return 'owner' in condition ? stored.lease.owner === condition.owner : stored.lease.until < condition.lapsedBefore
  }

  async requeue (runId: string, condition: { owner: string } | { lapsedBefore: number }, reason: 'SHUTDOWN' | 'INSTANCE_LOST', cancelled: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    this.#check()
    const stored = this.#live(runId)
    if (!this.#lapsedOrOwned(stored, condition)) return null
    const ending = cancelledRequeue(stored.cancelRequested, stored.record, cancelled)
    if (ending !== null) return this.#endWith(stored, ending, retentionMs)
    const attempt = stored.record.attempt + 1
    this.#appendTo(stored, [requeuedEvent(stored.record, attempt, reason)])
    const { startedAt: _startedAt, ...kept } = stored.record
    stored.record = { ...kept, status: 'queued', attempt }
    stored.lease = null
    stored.detachable = true
    stored.cancelRequested = false
    this.#queue.add(runId)
    this.#hub.events(runId, stored.record.lastSeq)
    this.#notifyQueue()
    return { ...stored.record }
  }

  async abandon (runId: string, lapsedBefore: number, end: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    this.#check()
    const stored = this.#live(runId)
    if (!this.#lapsedOrOwned(stored, { lapsedBefore })) return null
    return this.#endWith(stored, runningEnd(stored.cancelRequested, stored.record.traceId, [endedBeforeStartEvent(stored.record, end)], end), retentionMs)
  }

  /** Ends a running run with its last events, and tells its watchers. */
  #endWith (stored: StoredRun, ending: { events: readonly StoredEvent[], end: RunEnd }, retentionMs: number): RunRecord {
    this.#appendTo(stored, ending.events)
    this.#end(stored, ending.end, retentionMs)
    this.#hub.events(stored.record.runId, stored.record.lastSeq)
    return { ...stored.record }
  }

  watchQueue (listener: () => void): () => void {
    this.#queueWatchers.add(listener)
    return () => { this.#queueWatchers.delete(listener) }
  }

  #notifyQueue (): void {
    for (const listener of [...this.#queueWatchers]) listener()
  }

  /** Appends what the log does not hold yet (see unheldEvents: a retried write is acknowledged again); false when that is nothing. */
  #appendTo (stored: StoredRun, batch: readonly StoredEvent[]): boolean {
    const { runId, lastSeq } = stored.record
    const first = batch[0]?.seq ?? 0
    const events = unheldEvents(runId, lastSeq, batch, stored.events.slice(first - 1, first - 1 + heldCount(first, batch.length, lastSeq)))
    let seq = lastSeq
    for (const event of events) {
      if (event.seq !== ++seq) throw new RunLogGapError(runId, seq, event.seq)
    }
    for (const event of events) stored.events.push(event)
    stored.record.lastSeq = seq
    return events.length > 0
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string): Promise<void> {
    this.#appendNow(runId, events, owner)
  }

  appendNow (runId: string, events: readonly StoredEvent[], owner: string): void {
    this.#appendNow(runId, events, owner)
  }

  #appendNow (runId: string, events: readonly StoredEvent[], owner: string): void {
    this.#check()
    const stored = this.#owned(runId, owner)
    if (stored === undefined || events.length === 0) return
    if (this.#appendTo(stored, events)) this.#hub.events(runId, stored.record.lastSeq)
  }

  #end (stored: StoredRun, end: RunEnd, retentionMs: number): void {
    const record = endedRecord(stored.record, end)
    stored.record = record
    stored.expiresAt = toMs('endedAt', end.endedAt) + retentionMs
    this.#listEnded(stored)
    const sessionId = record.sessionId
    if (sessionId !== null && this.#holders.get(sessionId) === record.runId) {
      this.#holders.delete(sessionId)
      this.#hub.sessionFree(sessionId)
      // a queued background run may have waited for this session (with none queued, no claim is woken for nothing)
      if (this.#queue.size > 0) this.#notifyQueue()
    }
    // the longest-ended go past the bound, and once past their retention (an ephemeral run's is a second): what
    // nobody can read any more is not kept until the purge
    const now = Date.now()
    for (let oldest = this.#oldestEnded; oldest !== null && (this.#endedCount > this.maxRetainedRuns || oldest.expiresAt <= now); oldest = this.#oldestEnded) {
      this.#delete(oldest)
    }
  }

  #listEnded (stored: StoredRun): void {
    stored.inEndedList = true
    stored.endedBefore = this.#newestEnded
    stored.endedAfter = null
    if (this.#newestEnded === null) this.#oldestEnded = stored
    else this.#newestEnded.endedAfter = stored
    this.#newestEnded = stored
    this.#endedCount++
  }

  #unlistEnded (stored: StoredRun): void {
    if (!stored.inEndedList) return
    if (stored.endedBefore === null) this.#oldestEnded = stored.endedAfter
    else stored.endedBefore.endedAfter = stored.endedAfter
    if (stored.endedAfter === null) this.#newestEnded = stored.endedBefore
    else stored.endedAfter.endedBefore = stored.endedBefore
    stored.endedBefore = null
    stored.endedAfter = null
    stored.inEndedList = false
    this.#endedCount--
  }

  async finish (runId: string, events: readonly StoredEvent[], end: RunEnd, retentionMs: number, owner: string): Promise<RunRecord | null> {
    this.#check()
    // a queued run has nothing to finish (an old owner's late finish after a requeue lands here too)
    if (this.#live(runId)?.record.status === 'queued') return null
    const stored = this.#owned(runId, owner)
    if (stored === undefined) return null
    // cancel and finish are one compare-and-set: a cancel requested first wins
    return this.#endWith(stored, runningEnd(stored.cancelRequested, stored.record.traceId, events, end), retentionMs)
  }

  async get (runId: string): Promise<RunRecord | null> {
    this.#check()
    const stored = this.#live(runId)
    return stored === undefined ? null : { ...stored.record }
  }

  async spec (runId: string): Promise<RunSpec | null> {
    this.#check()
    return this.#live(runId)?.spec ?? null
  }

  async events (runId: string, afterSeq: number, limit: number): Promise<StoredEvent[]> {
    this.#check()
    const stored = this.#live(runId)
    if (stored === undefined) return []
    // seqs run from 1 without gaps: the event after `afterSeq` is at index afterSeq
    return stored.events.slice(afterSeq, afterSeq + limit)
  }

  async cancel (runId: string, end: RunEnd, retentionMs: number): Promise<CancelRunResult> {
    this.#check()
    const stored = this.#live(runId)
    if (stored === undefined) return { outcome: 'not_found' }
    if (ended(stored.record)) return { outcome: 'ended', record: { ...stored.record } }
    if (stored.record.status === 'queued') {
      this.#appendTo(stored, [endedBeforeStartEvent(stored.record, end)])
      this.#end(stored, end, retentionMs)
      this.#hub.events(runId, stored.record.lastSeq)
      return { outcome: 'cancelled', record: { ...stored.record } }
    }
    stored.cancelRequested = true
    // the record as the cancel found it (whoever runs it may end it at once, below)
    const record = { ...stored.record }
    this.#hub.cancel(runId)
    return { outcome: 'requested', record }
  }

  watch (runId: string, listener: Parameters<RunStore['watch']>[1]): () => void {
    return this.#hub.watch(runId, listener)
  }

  watchSession (sessionId: string, listener: () => void): () => void {
    return this.#hub.watchSession(sessionId, listener)
  }

  #page (filter: (record: RunRecord) => boolean, limit: number, cursor: string | undefined): RunPage {
    const before = cursor === undefined ? Infinity : Number(decodeSeqCursor(cursor))
    const now = Date.now()
    const matching: StoredRun[] = []
    for (const stored of this.#runs.values()) {
      if (stored.expiresAt > now && stored.order < before && filter(stored.record)) matching.push(stored)
    }
    matching.sort((a, b) => b.order - a.order)
    const page = matching.slice(0, limit)
    const last = page.at(-1)
    return {
      runs: page.map((stored) => ({ ...stored.record })),
      nextCursor: matching.length > limit && last !== undefined ? encodeSeqCursor(last.order) : null
    }
  }

  async listBySession (sessionId: string, query: { limit: number, cursor?: string }): Promise<RunPage> {
    this.#check()
    const limit = checkLimit(query.limit, MAX_RUN_LIST_LIMIT)
    return this.#page((record) => record.sessionId === sessionId, limit, query.cursor)
  }

  async list (query: RunListQuery): Promise<RunPage> {
    this.#check()
    const limit = checkLimit(query.limit, MAX_RUN_LIST_LIMIT)
    return this.#page((record) =>
      (query.status === undefined || record.status === query.status) &&
      (query.agent === undefined || record.agent === query.agent) &&
      (query.sessionId === undefined || record.sessionId === query.sessionId) &&
      (query.principal === undefined || record.principal === query.principal), limit, query.cursor)
  }

  #delete (stored: StoredRun): void {
    const runId = stored.record.runId
    this.#unlistEnded(stored)
    this.#runs.delete(runId)
    this.#queue.delete(runId)
  }

  async delete (runId: string): Promise<boolean> {
    this.#check()
    const stored = this.#live(runId)
    if (stored === undefined || stored.record.status === 'queued' || stored.record.status === 'running') return false
    this.#delete(stored)
    return true
  }

  async purge (now: number, batch: number): Promise<number> {
    this.#check()
    let purged = 0
    for (let stored = this.#oldestEnded; stored !== null && purged < batch;) {
      const next = stored.endedAfter
      if (stored.expiresAt <= now) {
        this.#delete(stored)
        purged++
      }
      stored = next
    }
    return purged
  }

  async close (): Promise<void> {
    this.#closed = true
    this.#hub.close()
  }
}
