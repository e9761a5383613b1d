// The in-process run store: records and event logs of one instance, watched in-process. Its primitives answer at
// once (no promise), so that a run's log costs no promise per event (`appendNow`).
import { checkCount, storeClosedError } from './common.js'
import { checkBatch, heldCount, isEnded, mayWrite, meets, unheldEvents, withinBudget } from './run-policy.js'
import type { RunCondition, StoredRun } from './run-policy.js'
import { BackedRunStore } from './run-store.js'
import type { RunBackend, RunEnded, RunFilters, Taken } from './run-store.js'
import { RunSignals } from './run-watch.js'
import type { NewRun, RunEnd, RunLease, RunRecord, RunSpec, StoredEvent } from './types.js'

export const DEFAULT_MAX_RETAINED_RUNS = 10_000

interface Kept {
  record: RunRecord
  spec: RunSpec
  events: StoredEvent[]
  cancelRequested: boolean
  detachable: boolean
  lease: RunLease | null
  /** set when the run ends: after this it is gone */
  expiresAt: number
  /** the order of creation in this store: lists are most recent first, in this order */
  order: number
  /** its neighbours in the store's list of ended runs (longest-ended first), while it is in it */
  endedBefore: Kept | null
  endedAfter: Kept | null
  inEndedList: boolean
}

export interface MemoryRunStoreOptions {
  /** the most ended runs kept (default 10,000): past it, the longest-ended go first */
  maxRetainedRuns?: number | undefined
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
  if (running.scheduleId !== undefined) {
    record.scheduleId = running.scheduleId
    record.scheduledFor = running.scheduledFor!
  }
  return record
}

function meetsKept (kept: Kept | undefined, condition: RunCondition): kept is Kept {
  return kept !== undefined && meets({
    status: kept.record.status,
    lastSeq: kept.record.lastSeq,
    owner: kept.lease?.owner ?? null,
    leaseUntil: kept.lease?.until ?? null,
    cancelRequested: kept.cancelRequested
  }, condition)
}

class MemoryRunBackend implements RunBackend {
  readonly name = 'memory'
  readonly text = 'any'
  readonly signals = new RunSignals()
  readonly maxRetainedRuns: number
  readonly #runs = new Map<string, Kept>()
  /** session id → the run that holds it */
  readonly #holders = new Map<string, string>()
  // Ended runs, longest-ended first: the bound and the purge take from the front. A list through the runs rather
  // than a Set: each delete at a Set's front leaves a hole that every later look at its first entry walks.
  #oldestEnded: Kept | null = null
  #newestEnded: Kept | null = null
  #endedCount = 0
  #created = 0
  // the queued detachable runs (and some that no longer are, dropped as claim meets them): claim looks at these
  // rather than at every retained run
  readonly #queue = new Set<string>()
  #closed = false

  constructor (maxRetainedRuns: number) {
    this.maxRetainedRuns = maxRetainedRuns
  }

  check (): void {
    if (this.#closed) throw storeClosedError()
  }

  listen (): void {}

  #live (runId: string, now = Date.now()): Kept | undefined {
    const kept = this.#runs.get(runId)
    if (kept === undefined || kept.expiresAt <= now) return undefined
    return kept
  }

  /** Takes the run's session if it is free, held by a run that ended (or is gone), or its own: else the holder. */
  #take (sessionId: string | null, runId: string): string | null {
    if (sessionId === null) return null
    const holder = this.#holders.get(sessionId)
    if (holder !== undefined && holder !== runId) {
      const run = this.#runs.get(holder)
      if (run !== undefined && !isEnded(run.record.status)) return holder
    }
    this.#holders.set(sessionId, runId)
    return null
  }

  insert (run: NewRun, takeSession: boolean): string | null {
    const { record } = run
    if (takeSession) {
      const holder = this.#take(record.sessionId, record.runId)
      if (holder !== null) return holder
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
    if (record.status === 'queued' && run.detachable) this.#queue.add(record.runId)
    return null
  }

  read (runId: string): StoredRun | null {
    const kept = this.#live(runId)
    if (kept === undefined) return null
    return { record: { ...kept.record }, detachable: kept.detachable, cancelRequested: kept.cancelRequested, lease: kept.lease === null ? null : { ...kept.lease } }
  }

  spec (runId: string): RunSpec | null {
    return this.#live(runId)?.spec ?? null
  }

  events (runId: string, afterSeq: number, limit: number, budget: number): StoredEvent[] {
    // seqs run from 1 without gaps: the event after `afterSeq` is at index afterSeq
    return withinBudget(this.#live(runId)?.events.slice(afterSeq, afterSeq + limit) ?? [], budget)
  }

  #push (kept: Kept, events: readonly StoredEvent[]): void {
    for (const event of events) kept.events.push(event)
    kept.record.lastSeq += events.length
  }

  append (runId: string, events: readonly StoredEvent[], owner: string, lastSeq: number): number | null {
    const kept = this.#live(runId)
    if (kept === undefined || kept.record.status !== 'running' || kept.lease?.owner !== owner || kept.record.lastSeq !== lastSeq) return null
    this.#push(kept, events)
    return kept.record.lastSeq
  }

  end (runId: string, condition: RunCondition, events: readonly StoredEvent[], end: RunEnd, expiresAt: number): RunEnded | null {
    const kept = this.#live(runId)
    if (!meetsKept(kept, condition)) return null
    this.#push(kept, events)
    const record = endedRecord(kept.record, end)
    kept.record = record
    kept.lease = null
    kept.expiresAt = expiresAt
    this.#listEnded(kept)
    let freed: string | null = null
    const sessionId = record.sessionId
    if (sessionId !== null && this.#holders.get(sessionId) === record.runId) {
      this.#holders.delete(sessionId)
      freed = sessionId
    }
    // the longest-ended go past the bound, and once past their retention (an ephemeral run's is a second): what
    // nobody can read any more is not kept until the purge
    const now = Date.now()
    for (let oldest = this.#oldestEnded; oldest !== null && (this.#endedCount > this.maxRetainedRuns || oldest.expiresAt <= now); oldest = this.#oldestEnded) {
      this.#delete(oldest)
    }
    // a queued background run may have waited for this session (with none queued, no claim is woken for nothing)
    return { record: { ...record }, freed, queueWaits: freed !== null && this.#queue.size > 0 }
  }

  #run (kept: Kept, startedAt: string, lease: RunLease): RunRecord {
    kept.record.status = 'running'
    kept.record.startedAt = startedAt
    kept.lease = { ...lease }
    this.#queue.delete(kept.record.runId)
    return { ...kept.record }
  }

  start (runId: string, startedAt: string, lease: RunLease): Taken | null {
    const kept = this.#live(runId)
    if (kept === undefined || kept.record.status !== 'queued') return null
    const holder = this.#take(kept.record.sessionId, runId)
    return holder !== null ? { holder } : { record: this.#run(kept, startedAt, lease) }
  }

  requeue (runId: string, condition: RunCondition, event: StoredEvent): RunRecord | null {
    const kept = this.#live(runId)
    if (!meetsKept(kept, condition)) return null
    this.#push(kept, [event])
    const { startedAt: _startedAt, ...rest } = kept.record
    kept.record = { ...rest, status: 'queued', attempt: rest.attempt + 1 }
    kept.lease = null
    kept.detachable = true
    kept.cancelRequested = false
    this.#queue.add(runId)
    return { ...kept.record }
  }

  reopen (runId: string, condition: RunCondition, event: StoredEvent, run: NewRun, takeSession: boolean): Taken | null {
    const kept = this.#live(runId)
    if (!meetsKept(kept, condition)) return null
    if (takeSession) {
      const holder = this.#take(kept.record.sessionId, runId)
      if (holder !== null) return { holder }
    }
    this.#push(kept, [event])
    const { endedAt: _endedAt, result: _result, error: _error, ...rest } = kept.record
    kept.record = {
      ...rest,
      status: 'running',
      attempt: rest.attempt + 1,
      startedAt: run.record.startedAt!,
      requestId: run.record.requestId,
      traceId: run.record.traceId
    }
    kept.spec = run.spec
    kept.cancelRequested = false
    kept.detachable = run.detachable
    kept.lease = run.lease === null ? null : { ...run.lease }
    kept.expiresAt = Infinity
    this.#unlistEnded(kept)
    return { record: { ...kept.record } }
  }

  requestCancel (runId: string): RunRecord | null {
    const kept = this.#live(runId)
    if (kept === undefined || kept.record.status !== 'running') return null
    kept.cancelRequested = true
    return { ...kept.record }
  }

  claim (lease: RunLease, startedAt: string, limit: number): RunRecord[] {
    const claimed: RunRecord[] = []
    const waiting: Kept[] = []
    for (const runId of this.#queue) {
      // a run gone is out of the queue (#delete); one started or ended since it was queued leaves it now
      const kept = this.#runs.get(runId)!
      if (kept.record.status !== 'queued') this.#queue.delete(runId)
      else waiting.push(kept)
    }
    // oldest first, in the order of creation
    waiting.sort((a, b) => a.order - b.order)
    for (const kept of waiting) {
      if (claimed.length >= limit) break
      if (this.#take(kept.record.sessionId, kept.record.runId) === null) claimed.push(this.#run(kept, startedAt, lease))
    }
    return claimed
  }

  renew (owner: string, runIds: readonly string[], until: number): string[] {
    return runIds.filter((runId) => {
      const kept = this.#live(runId)
      if (kept === undefined || kept.record.status !== 'running' || kept.lease?.owner !== owner) return false
      kept.lease.until = until
      return true
    })
  }

  lapsed (now: number, limit: number): StoredRun[] {
    const found: StoredRun[] = []
    for (const kept of this.#runs.values()) {
      if (kept.record.status === 'running' && kept.lease !== null && kept.lease.until < now) found.push(this.read(kept.record.runId)!)
    }
    return found.slice(0, limit)
  }

  page (filters: RunFilters, before: string | null, limit: number): Array<{ record: RunRecord, place: number }> {
    const after = before === null ? Infinity : Number(before)
    const now = Date.now()
    const matching: Kept[] = []
    for (const kept of this.#runs.values()) {
      const { record } = kept
      if (kept.expiresAt > now && kept.order < after &&
        (filters.status === undefined || record.status === filters.status) &&
        (filters.agent === undefined || record.agent === filters.agent) &&
        (filters.sessionId === undefined || record.sessionId === filters.sessionId) &&
        (filters.principal === undefined || record.principal === filters.principal)) matching.push(kept)
    }
    matching.sort((a, b) => b.order - a.order)
    return matching.slice(0, limit).map((kept) => ({ record: { ...kept.record }, place: kept.order }))
  }

  remove (runId: string): boolean {
    const kept = this.#live(runId)
    if (kept === undefined || !isEnded(kept.record.status)) return false
    this.#delete(kept)
    return true
  }

  purge (now: number, batch: number): number {
    let purged = 0
    for (let kept = this.#oldestEnded; kept !== null && purged < batch;) {
      const next = kept.endedAfter
      if (kept.expiresAt <= now) {
        this.#delete(kept)
        purged++
      }
      kept = next
    }
    return purged
  }

  #delete (kept: Kept): void {
    const runId = kept.record.runId
    this.#unlistEnded(kept)
    this.#runs.delete(runId)
    this.#queue.delete(runId)
  }

  #listEnded (kept: Kept): void {
    kept.inEndedList = true
    kept.endedBefore = this.#newestEnded
    kept.endedAfter = null
    if (this.#newestEnded === null) this.#oldestEnded = kept
    else this.#newestEnded.endedAfter = kept
    this.#newestEnded = kept
    this.#endedCount++
  }

  #unlistEnded (kept: Kept): void {
    if (!kept.inEndedList) return
    if (kept.endedBefore === null) this.#oldestEnded = kept.endedAfter
    else kept.endedBefore.endedAfter = kept.endedAfter
    if (kept.endedAfter === null) this.#newestEnded = kept.endedBefore
    else kept.endedAfter.endedBefore = kept.endedBefore
    kept.endedBefore = null
    kept.endedAfter = null
    kept.inEndedList = false
    this.#endedCount--
  }

  async close (): Promise<void> {
    this.#closed = true
    this.signals.close()
  }
}

export class MemoryRunStore extends BackedRunStore {
  readonly #memory: MemoryRunBackend

  constructor (options: MemoryRunStoreOptions = {}) {
    const backend = new MemoryRunBackend(checkCount('maxRetainedRuns', options.maxRetainedRuns ?? DEFAULT_MAX_RETAINED_RUNS))
    super(backend)
    this.#memory = backend
  }

  get maxRetainedRuns (): number {
    return this.#memory.maxRetainedRuns
  }

  override async append (runId: string, events: readonly StoredEvent[], owner: string): Promise<void> {
    this.#appendNow(runId, events, owner)
  }

  appendNow (runId: string, events: readonly StoredEvent[], owner: string): void {
    this.#appendNow(runId, events, owner)
  }

  /** `append`'s rules (run-store.ts) over primitives that answer at once. */
  #appendNow (runId: string, events: readonly StoredEvent[], owner: string): void {
    const memory = this.#memory
    memory.check()
    checkBatch(runId, events)
    if (events.length > 0) {
      const lastSeq = memory.append(runId, events, owner, events[0]!.seq - 1)
      if (lastSeq !== null) {
        memory.signals.events(runId, lastSeq)
        return
      }
    }
    const state = memory.read(runId)
    if (!mayWrite(state, owner)) return
    const { lastSeq } = state.record
    const first = events[0]?.seq ?? 0
    const rest = unheldEvents(runId, lastSeq, events, memory.events(runId, first - 1, heldCount(first, events.length, lastSeq), Infinity))
    if (rest.length > 0) memory.signals.events(runId, memory.append(runId, rest, owner, lastSeq)!)
  }
}
