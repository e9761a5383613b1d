import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyBaseLogger } from 'fastify'
import { iso } from '../stores/common.js'
import { cancelledFinish } from '../stores/run-policy.js'
import { isUnavailable } from '../stores/deadline.js'
import { RunLeaseLostError, StoreUnavailableError } from '../core/errors.js'
import type { EndTurn, RunEnd, RunStore, StoredEvent } from '../stores/types.js'
import { turnLost } from './capabilities.js'
import type { LeaseHolder, RunEvent, RunOutcome, RunSink } from './run.js'

/**
 * How long the log's first write waits: a run that ends meanwhile (a JSON run of a quick agent) stores its first
 * events with its end, in one write (docs/stores.md, "Group commit"); a longer one's first events gather meanwhile.
 */
const FIRST_WRITE_MS = 10
/** A write of the run's end that failed for an outage is tried again after this, then twice as long each time, up to the max. */
const RETRY_FIRST_MS = 100
const RETRY_MAX_MS = 1_000

export interface RunLogOptions {
  store: RunStore
  runId: string
  retentionMs: number
  log: FastifyBaseLogger
  /** the instance whose lease the run holds: only it writes the run's log */
  owner: string
  /** a write the store refused: counted (`runLogFailures`) */
  onFailure: () => void
  /** the store says the run is no longer this instance's (its lease lapsed and someone took it over) */
  onLost: () => void
  /** told of each batch once stored */
  onStored?: (events: readonly StoredEvent[]) => void
}

function stored (event: RunEvent): StoredEvent {
  return { seq: event.seq, type: event.type, data: event.json }
}

function runEvent (event: StoredEvent): RunEvent {
  return { seq: event.seq, type: event.type, data: JSON.parse(event.data), json: event.data }
}

/**
 * A store that could not answer (its deadline passed, its server away) and may answer a retry; a closed store will
 * not (the service is closing).
 */
function transient (err: unknown): boolean {
  const { code, cause } = Object(err) as { code?: unknown, cause?: unknown }
  return (code === 'STORE_UNAVAILABLE' || isUnavailable(err)) && code !== 'FA_STORE_CLOSED' && (Object(cause) as { code?: unknown }).code !== 'FA_STORE_CLOSED'
}

/** What a write retried through an outage came to when it gave up: the run was taken over, or the store never took it. */
const LOST = Symbol('lost')
const FAILED = Symbol('failed')

/** How a run's outcome is recorded. */
export function runEnd (outcome: Exclude<RunOutcome, { status: 'detached' }>): RunEnd {
  const endedAt = iso(Date.now())
  if (outcome.status === 'completed') return { status: 'completed', endedAt, result: outcome.result }
  return { status: outcome.code === 'CANCELLED' ? 'cancelled' : 'failed', endedAt, error: { code: outcome.code, message: outcome.message } }
}

/**
 * A run's event log in the run store. Events are appended in order, in batches: while one append is on its
 * way, the events that follow gather for the next (a run streaming 100 deltas costs a few round trips, not
 * 100), and the first write waits a moment (FIRST_WRITE_MS): a run that ends meanwhile writes its events with its
 * end. The terminal event and the end are written together, after everything before them. A store that
 * refuses a write is logged and counted; the batch is tried again with the next one (no gap in the log), and
 * the live stream goes on meanwhile. A write past its deadline may still have been applied: the store takes the
 * retry all the same (appends are idempotent by seq). The end is tried again through an outage for as long as the
 * run's lease lasts, and what the store holds decides what the run's client is sent.
 */
export class RunLog implements RunSink {
  readonly #options: RunLogOptions
  #pending: StoredEvent[] = []
  #writing: Promise<void> | null = null
  /** the first write has not begun: it waits FIRST_WRITE_MS, or for finish() */
  #first = true
  /** ends the first write's wait at once (finish() takes its events) */
  #hurry: (() => void) | null = null
  #ending = false
  /** the last seq the store acknowledged */
  #storedSeq = 0
  /** the last seq a durable step waits for: a batch holding it is written as urgent (not held for the store's window) */
  #awaitedSeq = 0

  constructor (options: RunLogOptions) {
    this.#options = options
  }

  event (event: RunEvent): void {
    // A store that keeps its log in the process takes each event at once: no promise, no batch. Only with nothing
    // waiting before it, so that the log keeps the events' order.
    if (this.#options.store.appendNow !== undefined && this.#writing === null && this.#pending.length === 0) {
      if (!this.#lost) this.#appendNow([stored(event)])
      return
    }
    this.#pending.push(stored(event))
    this.#writing ??= this.#write()
  }

  #appendNow (batch: StoredEvent[]): void {
    try {
      this.#options.store.appendNow!(this.#options.runId, batch, this.#options.owner)
      this.#storedSeq = batch.at(-1)!.seq
      this.#options.onStored?.(batch)
    } catch (err) {
      if (this.#taken(err)) return
      this.#failed(err, 'append')
      // kept: the next event's write (or the end) tries it again, in front
      this.#pending = batch
    }
  }

  async #write (): Promise<void> {
    if (this.#first) {
      this.#first = false
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, FIRST_WRITE_MS)
        this.#hurry = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      this.#hurry = null
      // the run ended meanwhile: its end takes these events
      if (this.#ending) {
        this.#writing = null
        return
      }
    } else {
      // the events of this tick go in one batch
      await Promise.resolve()
    }
    // once the run is ending, what is left goes with its end: one write at the end of a stream, not two
    while (this.#pending.length > 0 && !this.#lost && !this.#ending) {
      const batch = this.#pending
      this.#pending = []
      try {
        await this.#options.store.append(this.#options.runId, batch, this.#options.owner, this.#awaitedSeq > this.#storedSeq)
        this.#storedSeq = batch.at(-1)!.seq
        this.#options.onStored?.(batch)
      } catch (err) {
        if (this.#taken(err)) break
        this.#failed(err, 'append')
        // kept, in front of what came since: the next write (or the end) tries them again
        this.#pending = batch.concat(this.#pending)
        break
      }
    }
    this.#writing = null
  }

  /**
   * The run's result is in: its end follows once what the run leaves behind is persisted (a session's turn). A first
   * write still waiting is left to the end, which takes its events (a quick run whose turn took longer than
   * FIRST_WRITE_MS is one write, not two).
   */
  ending (): void {
    this.#ending = true
  }

  /**
   * Stores the terminal event and the end, after everything before them, and resolves with the terminal event as
   * stored, the one to send: `event`, or the one the store ended the run with instead — cancelled (a cancel was
   * asked for first: see cancelledFinish), or by another instance once this one's lease lapsed. When there is none
   * to send, why: the run is not this instance's to end any more (INSTANCE_LOST: it goes on elsewhere), or its end
   * could not be stored while its lease lasted (STORE_UNAVAILABLE). Never rejects.
   */
  async finish (event: RunEvent, outcome: Exclude<RunOutcome, { status: 'detached' }>, lease: LeaseHolder, turn?: EndTurn): Promise<RunEvent | 'INSTANCE_LOST' | 'STORE_UNAVAILABLE'> {
    this.#ending = true
    this.#hurry?.()
    await this.flush()
    const events = this.#pending
    this.#pending = []
    events.push(stored(event))
    const { store, runId, retentionMs, owner } = this.#options
    const end = runEnd(outcome)
    // with the session's turn (capabilities.finish left it to this write): written if the run ends here
    const record = this.#lost ? LOST : await this.#retried('finish', lease, () => store.finish(runId, events, end, retentionMs, owner, turn))
    if (turn?.recorded === false) turnLost(this.#options.log, runId, turn.sessionId)
    if (record === FAILED) return 'STORE_UNAVAILABLE'
    if (record === LOST || record === null) return this.#endedElsewhere(events[0]!.seq, lease)
    if (record.status === end.status) {
      this.#options.onStored?.(events)
      return event
    }
    // a cancel was asked for first: the store ended the run cancelled, as cancelledFinish says
    const cancelled = cancelledFinish(record.traceId, events, end).events
    this.#options.onStored?.(cancelled)
    return runEvent(cancelled.at(-1)!)
  }

  /**
   * The terminal event of a run that another write ended (another instance, once this one's lease lapsed; or this
   * one's own finish, applied though its answer was lost), told as stored with the events from `from` on;
   * INSTANCE_LOST when the run has not ended (it goes on elsewhere) or is gone, STORE_UNAVAILABLE when it cannot be read.
   */
  async #endedElsewhere (from: number, lease: LeaseHolder): Promise<RunEvent | 'INSTANCE_LOST' | 'STORE_UNAVAILABLE'> {
    const { store, runId } = this.#options
    const record = await this.#retried('read', lease, () => store.get(runId))
    if (typeof record === 'symbol') return 'STORE_UNAVAILABLE'
    if (record === null || record.status === 'queued' || record.status === 'running') return 'INSTANCE_LOST'
    const after = Math.min(from, record.lastSeq) - 1
    const events = await this.#retried('read', lease, () => store.events(runId, after, record.lastSeq - after))
    if (typeof events === 'symbol') return 'STORE_UNAVAILABLE'
    // purged between the two reads (an ephemeral run's second of retention)
    if (events.at(-1)?.seq !== record.lastSeq) return 'INSTANCE_LOST'
    this.#options.onStored?.(events)
    return runEvent(events.at(-1)!)
  }

  /**
   * A write of the run's end (or a read of it), tried again while the store is away and the run's lease lasts:
   * LOST when the store says the run is another instance's, FAILED when it gives up.
   */
  async #retried<T> (what: string, lease: LeaseHolder, write: () => Promise<T>): Promise<T | typeof LOST | typeof FAILED> {
    let wait = RETRY_FIRST_MS
    for (;;) {
      try {
        return await write()
      } catch (err) {
        if (this.#taken(err)) return LOST
        this.#failed(err, what)
        if (!transient(err) || Date.now() + wait >= lease.leaseUntil) return FAILED
      }
      await sleep(wait)
      wait = Math.min(2 * wait, RETRY_MAX_MS)
    }
  }

  /**
   * Resolves once the store holds the event of `seq` (a durable step's, docs/durable-agents.md): the write on its way,
   * and writes tried again through an outage while the run's lease lasts. Rejects when the run is another instance's
   * now, or the store stayed away: the step is then not acknowledged, and runs again on the run's next attempt.
   */
  async durable (seq: number, lease: LeaseHolder): Promise<void> {
    // set before the write on its way sends the batch (it waits a microtask at least): that batch is urgent
    this.#awaitedSeq = Math.max(this.#awaitedSeq, seq)
    let wait = RETRY_FIRST_MS
    for (;;) {
      // the first write's wait is for a run that ends at once: a step's caller waits for its event instead
      this.#hurry?.()
      await this.flush()
      if (this.#storedSeq >= seq) return
      if (this.#lost) throw new RunLeaseLostError(this.#options.runId)
      if (Date.now() + wait >= lease.leaseUntil) throw new StoreUnavailableError(`the run store did not take step event ${seq} of run ${this.#options.runId}`)
      await sleep(wait)
      wait = Math.min(2 * wait, RETRY_MAX_MS)
      if (this.#pending.length > 0) this.#writing ??= this.#write()
    }
  }

  /** Resolves once the events so far are written (or their write has failed). */
  async flush (): Promise<void> {
    if (this.#writing !== null) await this.#writing
  }

  #lost = false

  /** The run was taken over by another instance: this one writes no more of its log, and stops it. */
  #taken (err: unknown): boolean {
    if ((err as { code?: unknown } | null)?.code !== 'FA_RUN_LEASE_LOST') return false
    // once: nothing is written after this (the writes loop and finish both stop on #lost)
    this.#lost = true
    this.#pending = []
    this.#options.log.warn({ runId: this.#options.runId }, 'the run was taken over by another instance (its lease lapsed): stopping it here')
    this.#options.onLost()
    return true
  }

  #failed (err: unknown, what: string): void {
    this.#options.onFailure()
    this.#options.log.error({ err, runId: this.#options.runId }, `run store failed to ${what} the run's events: followers see them late, or not at all`)
  }
}
