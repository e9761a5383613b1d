// One RunStore for every backend (docs/stores.md, "Run stores"): the rules of run-policy.ts over the few primitives a
// backend implements (RunBackend). A backend stores, reads, and writes only while the condition it is given holds,
// atomically (a conditional UPDATE … RETURNING, a Lua script, a SQLite transaction); what to write, and what a failed
// condition means, is decided here. A write whose condition failed is decided again from the run as it now is: a run
// only moves forward, so that takes a turn or two.
import { checkLimit, decodeSeqCursor, encodeSeqCursor, toMs } from './common.js'
import {
  MAX_RUN_LIST_LIMIT, abandonedEnd, cancelDecision, cancelledRequeue, checkBatch, checkEvents, checkNewRun, checkText,
  endedBeforeStartEvent, expiry, heldCount, leaseHeld, mayWrite, reopenDecision, requeuedEvent, runningEnd, storable, unheldEvents
} from './run-policy.js'
import type { LeaseCondition, RunCondition, StoredRun, TextKind } from './run-policy.js'
import type { RunSignals } from './run-watch.js'
import type {
  CancelRunResult, CreateRunResult, EndTurn, LapsedRun, NewRun, ReopenRunResult, RunChange, RunEnd, RunLease, RunListQuery, RunPage, RunRecord,
  RunSpec, RunStatus, RunStore, StartRunResult, StoredEvent
} from './types.js'

export type { LeaseCondition, RunCondition, StoredRun, TextKind }

/** A value, or its promise: the in-process backend answers at once. */
type Maybe<T> = T | Promise<T>

/** A write that ended a run: its record, and the session it gave back. */
export interface RunEnded {
  record: RunRecord
  /** the session given back (null: none) */
  freed: string | null
  /** a queued detachable run waits for that session: the claimers are woken */
  queueWaits: boolean
}

/** A write that takes the run's session: the record, or the run holding the session. */
export type Taken = { record: RunRecord } | { holder: string }

/** The filters of a listing (each one an equality), beside the place to start from. */
export interface RunFilters {
  sessionId?: string | undefined
  agent?: string | undefined
  status?: RunStatus | undefined
  principal?: string | undefined
}

/**
 * What a run backend implements: its primitives, each one atomic. Every write checks its condition and writes in one
 * step, and tells the other instances sharing the store (NOTIFY, PUBLISH, a counter others poll) as it commits;
 * `signals` is told in this process by the store above.
 */
export interface RunBackend {
  /** names the backend in errors */
  readonly name: string
  /** the text it keeps as given */
  readonly text: TextKind
  /** the watchers of this process; its poll reads the backend */
  readonly signals: RunSignals
  /**
   * Stores a new run, replacing one under the same id past its retention (record, log and place in the lists).
   * With `takeSession`, only if the run's session is free (no holder, or one that ended or is gone): else the holder.
   */
  insert(run: NewRun, takeSession: boolean): Maybe<string | null>
  /** The run, null when absent or past its retention. */
  read(runId: string): Maybe<StoredRun | null>
  spec(runId: string): Maybe<RunSpec | null>
  /**
   * Events with seq > afterSeq, in order, at most `limit`, none once their data reach `budget` characters (the one
   * that reaches it is the last: withinBudget; Infinity: no budget; a backend may ignore it); none for a run absent
   * or past its retention.
   */
  events(runId: string, afterSeq: number, limit: number, budget: number): Maybe<StoredEvent[]>
  /**
   * Appends a batch following `lastSeq` while the run runs under `owner`'s lease: the new lastSeq, or null (nothing
   * written) otherwise. May gather the appends of many runs in one write (group commit); `urgent`: without waiting for
   * more (see RunStore.append).
   */
  append(runId: string, events: readonly StoredEvent[], owner: string, lastSeq: number, urgent?: boolean): Maybe<number | null>
  /**
   * Ends the run if it meets `condition`: appends `events` (following the condition's lastSeq), sets the end, drops
   * the lease, gives the session back if the run holds it, and keeps it until `expiresAt`. null, nothing written, when
   * the condition fails. A backend that gathers writes ends a run in the next group at once. `turn` (only from a
   * backend whose store makes them: RunStore.turnWithEnd) is appended to its session in the same write, if it ends.
   */
  end(runId: string, condition: RunCondition, events: readonly StoredEvent[], end: RunEnd, expiresAt: number, turn?: EndTurn): Maybe<RunEnded | null>
  /** queued → running under `lease` at `startedAt`, taking its session (free, or its own): null when not queued. */
  start(runId: string, startedAt: string, lease: RunLease): Maybe<Taken | null>
  /**
   * Back to the queue if the run meets `condition`: queued, detachable, attempt + 1, without a lease nor start nor
   * cancel, keeping its session, `event` appended. null when the condition fails.
   */
  requeue(runId: string, condition: RunCondition, event: StoredEvent): Maybe<RunRecord | null>
  /**
   * An ended run that meets `condition` runs again: attempt + 1, `event` appended, its end and cancel forgotten (kept
   * for good again), `startedAt`, `requestId`, `traceId`, spec, detachable and lease from `run`; with `takeSession`,
   * taking its session. null when the condition fails.
   */
  reopen(runId: string, condition: RunCondition, event: StoredEvent, run: NewRun, takeSession: boolean): Maybe<Taken | null>
  /** Marks a running run's cancel as asked for: its record, null when it is not running. */
  requestCancel(runId: string): Maybe<RunRecord | null>
  /**
   * Starts at most `limit` queued detachable runs, oldest first, whose session is free (or theirs), under `lease`:
   * each taking its session. Of instances claiming at once, each run goes to one.
   */
  claim(lease: RunLease, startedAt: string, limit: number): Maybe<RunRecord[]>
  /** Extends the leases `owner` holds on running runs among `runIds` to `until`: the ids it extended. */
  renew(owner: string, runIds: readonly string[], until: number): Maybe<string[]>
  /** Running runs whose lease ended before `now`, at most `limit` (limit ≥ 1). */
  lapsed(now: number, limit: number): Maybe<StoredRun[]>
  /**
   * Unexpired runs matching every filter, placed before `before` in the order of creation (null: from the newest),
   * newest first, at most `limit`; each with its place (a page's cursor).
   */
  page(filters: RunFilters, before: string | null, limit: number): Maybe<Array<{ record: RunRecord, place: number | string }>>
  /** Deletes an ended run, unexpired, with its log: false, nothing changed, otherwise. */
  remove(runId: string): Maybe<boolean>
  /** Deletes at most `batch` (≥ 1) runs whose retention ran out by `now`: how many. */
  purge(now: number, batch: number): Maybe<number>
  /** Something started watching (a run, a session, the queue): a backend listening for others' news starts now. */
  listen(): void
  /** Throws once the store is closed. */
  check(): void
  close?(): Promise<void>
}

/** How many times a decision is made again while the run moves under it (it only moves forward). */
const ATTEMPTS = 5

/* c8 ignore next 3 */
function raced (runId: string, what: string): Error {
  return new Error(`run ${JSON.stringify(runId)} changed ${ATTEMPTS} times during one ${what}`)
}

/** The RunStore of a backend: the policy, once, over its primitives. */
export class BackedRunStore implements RunStore {
  protected readonly backend: RunBackend

  constructor (backend: RunBackend) {
    this.backend = backend
  }

  #storable (value: string): boolean {
    return storable(value, this.backend.text)
  }

  #ended (ended: RunEnded): RunRecord {
    const { signals } = this.backend
    signals.events(ended.record.runId, ended.record.lastSeq)
    if (ended.freed !== null) signals.sessionFree(ended.freed)
    if (ended.queueWaits) signals.queue()
    return ended.record
  }

  async create (run: NewRun, options: { exclusive: boolean }): Promise<CreateRunResult> {
    this.backend.check()
    checkNewRun(this.backend.name, this.backend.text, run)
    const { record } = run
    const holder = await this.backend.insert(run, options.exclusive && record.sessionId !== null)
    if (holder !== null) return { outcome: 'session_busy', holder }
    if (record.status === 'queued' && run.detachable) this.backend.signals.queue()
    return { outcome: 'created' }
  }

  async reopen (run: NewRun, options: { exclusive: boolean }): Promise<ReopenRunResult> {
    this.backend.check()
    const { record } = run
    const { backend } = this
    toMs('startedAt', record.startedAt!)
    if (!this.#storable(record.runId)) return { outcome: 'not_found' }
    checkText(backend.name, backend.text, 'requestId', record.requestId)
    checkText(backend.name, backend.text, 'traceId', record.traceId)
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const state = await backend.read(record.runId)
      const decision = reopenDecision(state)
      if (decision !== 'reopen') return { outcome: decision }
      const { status, lastSeq, sessionId } = state!.record
      // its next attempt follows its last one's terminal event, after the event that says so (a follower reads on)
      const marker = requeuedEvent(state!.record, state!.record.attempt + 1, 'RESUMED')
      const taken = await backend.reopen(record.runId, { status, lastSeq }, marker, run, options.exclusive && sessionId !== null)
      if (taken === null) continue
      if ('holder' in taken) return { outcome: 'session_busy', holder: taken.holder }
      backend.signals.events(record.runId, taken.record.lastSeq)
      return { outcome: 'reopened', record: taken.record }
    }
    /* c8 ignore next 2: the run moved under every attempt, a race no test provokes on purpose */
    throw raced(record.runId, 'reopen')
  }

  async start (runId: string, startedAt: string, lease: RunLease): Promise<StartRunResult> {
    this.backend.check()
    toMs('startedAt', startedAt)
    if (!this.#storable(runId)) return { outcome: 'gone' }
    const taken = await this.backend.start(runId, startedAt, lease)
    if (taken === null) return { outcome: 'gone' }
    return 'holder' in taken ? { outcome: 'session_busy', holder: taken.holder } : { outcome: 'started', record: taken.record }
  }

  async claim (lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]> {
    this.backend.check()
    toMs('startedAt', startedAt)
    // a queue watcher whose connection dropped listens again here: the worker claims on a timer too
    if (this.backend.signals.queueWatched) this.backend.listen()
    if (limit < 1) return []
    return this.backend.claim(lease, startedAt, limit)
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string, urgent = false): Promise<void> {
    this.backend.check()
    const { backend } = this
    if (!this.#storable(runId)) return
    checkBatch(runId, events)
    checkEvents(backend.name, backend.text, events)
    if (events.length > 0) {
      const lastSeq = await backend.append(runId, events, owner, events[0]!.seq - 1, urgent)
      if (lastSeq !== null) {
        backend.signals.events(runId, lastSeq)
        return
      }
    }
    // Not appended at once: the run is unknown or ended (nothing to do), not this owner's, or the batch does not simply
    // follow its log — a retry bringing events the log holds already, or a gap. An empty batch: a writer that lost its
    // lease hears it all the same.
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const state = await backend.read(runId)
      if (!mayWrite(state, owner)) return
      const rest = await this.#unheld(state, events)
      if (rest.length === 0) return
      const lastSeq = await backend.append(runId, rest, owner, state.record.lastSeq, urgent)
      if (lastSeq !== null) {
        backend.signals.events(runId, lastSeq)
        return
      }
    }
    /* c8 ignore next 2: the run moved under every attempt, a race no test provokes on purpose */
    throw raced(runId, 'append')
  }

  /** What a batch brings that the run's log does not hold yet (see unheldEvents). */
  async #unheld (state: StoredRun, events: readonly StoredEvent[]): Promise<readonly StoredEvent[]> {
    const { runId, lastSeq } = state.record
    const first = events[0]?.seq ?? 0
    const count = heldCount(first, events.length, lastSeq)
    return unheldEvents(runId, lastSeq, events, count === 0 ? [] : await this.backend.events(runId, first - 1, count, Infinity))
  }

  async finish (runId: string, events: readonly StoredEvent[], end: RunEnd, retentionMs: number, owner: string, turn?: EndTurn): Promise<RunRecord | null> {
    this.backend.check()
    const { backend } = this
    if (!this.#storable(runId)) return null
    checkBatch(runId, events)
    checkEvents(backend.name, backend.text, events)
    // at once when no cancel was asked for and the batch follows the log: one write
    const condition: RunCondition = { status: 'running', owner, cancelRequested: false }
    if (events.length > 0) condition.lastSeq = events[0]!.seq - 1
    const ended = await backend.end(runId, condition, events, end, expiry(end, retentionMs), turn)
    if (ended !== null) return this.#ended(ended)
    // Not at once: the run is not running (a queued run too, requeued under an old owner), not this owner's, its cancel
    // was asked for (cancel and finish are one compare-and-set: the cancel wins), or the batch brings events the log
    // holds already (a retry), or a gap.
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const state = await backend.read(runId)
      if (!mayWrite(state, owner, true)) return null
      const { cancelRequested, record } = state
      const ending = runningEnd(cancelRequested, record.traceId, events, end)
      const rest = await this.#unheld(state, ending.events)
      const again = await backend.end(runId, { status: 'running', owner, cancelRequested, lastSeq: record.lastSeq }, rest, ending.end, expiry(ending.end, retentionMs), turn)
      if (again !== null) return this.#ended(again)
    }
    /* c8 ignore next 2: the run moved under every attempt, a race no test provokes on purpose */
    throw raced(runId, 'finish')
  }

  async renew (owner: string, runIds: readonly string[], until: number): Promise<string[]> {
    this.backend.check()
    const ids = runIds.filter((id) => this.#storable(id))
    return ids.length === 0 ? [] : this.backend.renew(owner, ids, until)
  }

  async lapsed (now: number, limit: number): Promise<LapsedRun[]> {
    this.backend.check()
    if (limit < 1) return []
    const found = await this.backend.lapsed(now, limit)
    return found.map((state) => ({ record: state.record, detachable: state.detachable, cancelRequested: state.cancelRequested }))
  }

  async requeue (runId: string, condition: LeaseCondition, reason: 'SHUTDOWN' | 'INSTANCE_LOST', cancelled: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    this.backend.check()
    const { backend } = this
    if (!this.#storable(runId)) return null
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const state = await backend.read(runId)
      if (!leaseHeld(state, condition)) return null
      const { record, cancelRequested } = state
      const as: RunCondition = { ...condition, status: 'running', lastSeq: record.lastSeq, cancelRequested }
      // a run whose cancel was asked for is not requeued but ends cancelled, in the same compare-and-set
      const ending = cancelledRequeue(cancelRequested, record, cancelled)
      if (ending !== null) {
        const ended = await backend.end(runId, as, ending.events, ending.end, expiry(ending.end, retentionMs))
        if (ended !== null) return this.#ended(ended)
        continue
      }
      const event = requeuedEvent(record, record.attempt + 1, reason)
      const requeued = await backend.requeue(runId, as, event)
      if (requeued !== null) {
        backend.signals.events(runId, requeued.lastSeq)
        backend.signals.queue()
        return requeued
      }
    }
    /* c8 ignore next 2: the run moved under every attempt, a race no test provokes on purpose */
    throw raced(runId, 'requeue')
  }

  async abandon (runId: string, lapsedBefore: number, end: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    this.backend.check()
    const { backend } = this
    if (!this.#storable(runId)) return null
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const state = await backend.read(runId)
      if (!leaseHeld(state, { lapsedBefore })) return null
      const { record, cancelRequested } = state
      const ending = abandonedEnd(state, end)
      const as: RunCondition = { status: 'running', lapsedBefore, lastSeq: record.lastSeq, cancelRequested }
      const ended = await backend.end(runId, as, ending.events, ending.end, expiry(ending.end, retentionMs))
      if (ended !== null) return this.#ended(ended)
    }
    /* c8 ignore next 2: the run moved under every attempt, a race no test provokes on purpose */
    throw raced(runId, 'abandon')
  }

  async cancel (runId: string, end: RunEnd, retentionMs: number): Promise<CancelRunResult> {
    this.backend.check()
    const { backend } = this
    if (!this.#storable(runId)) return { outcome: 'not_found' }
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const state = await backend.read(runId)
      switch (cancelDecision(state)) {
        case 'not_found': return { outcome: 'not_found' }
        case 'ended': return { outcome: 'ended', record: state!.record }
        case 'end': {
          // queued: it ends at once, its log the one event it would have sent
          const { record } = state!
          const ended = await backend.end(runId, { status: 'queued', lastSeq: record.lastSeq }, [endedBeforeStartEvent(record, end)], end, expiry(end, retentionMs))
          if (ended !== null) return { outcome: 'cancelled', record: this.#ended(ended) }
          break
        }
        default: {
          const requested = await backend.requestCancel(runId)
          if (requested !== null) {
            backend.signals.cancel(runId)
            return { outcome: 'requested', record: requested }
          }
        }
      }
    }
    /* c8 ignore next 2: the run moved under every attempt, a race no test provokes on purpose */
    throw raced(runId, 'cancel')
  }

  watchQueue (listener: () => void): () => void {
    const stop = this.backend.signals.watchQueue(listener)
    this.backend.listen()
    return stop
  }

  async get (runId: string): Promise<RunRecord | null> {
    this.backend.check()
    if (!this.#storable(runId)) return null
    return (await this.backend.read(runId))?.record ?? null
  }

  async spec (runId: string): Promise<RunSpec | null> {
    this.backend.check()
    return this.#storable(runId) ? this.backend.spec(runId) : null
  }

  async events (runId: string, afterSeq: number, limit: number, budget = Infinity): Promise<StoredEvent[]> {
    this.backend.check()
    return this.#storable(runId) ? this.backend.events(runId, afterSeq, limit, budget > 0 ? budget : Infinity) : []
  }

  watch (runId: string, listener: (change: RunChange) => void): () => void {
    this.backend.listen()
    return this.backend.signals.watch(runId, listener)
  }

  watchSession (sessionId: string, listener: () => void): () => void {
    this.backend.listen()
    return this.backend.signals.watchSession(sessionId, listener)
  }

  async listBySession (sessionId: string, query: { limit: number, cursor?: string }): Promise<RunPage> {
    return this.#page({ sessionId }, query.limit, query.cursor)
  }

  async list (query: RunListQuery): Promise<RunPage> {
    return this.#page({ sessionId: query.sessionId, agent: query.agent, status: query.status, principal: query.principal }, query.limit, query.cursor)
  }

  async #page (filters: RunFilters, limitOption: number, cursor: string | undefined): Promise<RunPage> {
    this.backend.check()
    const limit = checkLimit(limitOption, MAX_RUN_LIST_LIMIT)
    const before = cursor === undefined ? null : decodeSeqCursor(cursor)
    // nothing stored can match what cannot be stored
    for (const value of [filters.sessionId, filters.agent, filters.principal]) {
      if (value !== undefined && !this.#storable(value)) return { runs: [], nextCursor: null }
    }
    const rows = await this.backend.page(filters, before, limit + 1)
    const page = rows.slice(0, limit)
    const last = page.at(-1)
    return {
      runs: page.map((row) => row.record),
      nextCursor: rows.length > limit && last !== undefined ? encodeSeqCursor(last.place) : null
    }
  }

  async delete (runId: string): Promise<boolean> {
    this.backend.check()
    return this.#storable(runId) ? this.backend.remove(runId) : false
  }

  async purge (now: number, batch: number): Promise<number> {
    this.backend.check()
    return batch < 1 ? 0 : this.backend.purge(now, batch)
  }

  async close (): Promise<void> {
    await this.backend.close?.()
  }
}
