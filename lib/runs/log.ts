import type { FastifyBaseLogger } from 'fastify'
import { iso } from '../stores/common.js'
import type { RunEnd, RunStore, StoredEvent } from '../stores/types.js'
import type { RunEvent, RunOutcome, RunSink } from './run.js'

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

/** How a run's outcome is recorded. */
export function runEnd (outcome: Exclude<RunOutcome, { status: 'detached' }>): RunEnd {
  const endedAt = iso(Date.now())
  if (outcome.status === 'completed') return { status: 'completed', endedAt, result: outcome.result }
  return { status: outcome.code === 'CANCELLED' ? 'cancelled' : 'failed', endedAt, error: { code: outcome.code, message: outcome.message } }
}

/**
 * A run's event log in the run store. Events are appended in order, in batches: while one append is on its
 * way, the events that follow gather for the next (a run streaming 100 deltas costs a few round trips, not
 * 100). The terminal event and the end are written together, after everything before them. A store that
 * refuses a write is logged and counted; the batch is tried again with the next one (no gap in the log), and
 * the live stream goes on meanwhile.
 */
export class RunLog implements RunSink {
  readonly #options: RunLogOptions
  #pending: StoredEvent[] = []
  #writing: Promise<void> | null = null

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
      this.#options.onStored?.(batch)
    } catch (err) {
      if (this.#taken(err)) return
      this.#failed(err, 'append')
      // kept: the next event's write (or the end) tries it again, in front
      this.#pending = batch
    }
  }

  async #write (): Promise<void> {
    // the events of this tick go in one batch
    await Promise.resolve()
    while (this.#pending.length > 0 && !this.#lost) {
      const batch = this.#pending
      this.#pending = []
      try {
        await this.#options.store.append(this.#options.runId, batch, this.#options.owner)
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

  async finish (event: RunEvent, outcome: Exclude<RunOutcome, { status: 'detached' }>): Promise<void> {
    await this.flush()
    if (this.#lost) return
    const events = this.#pending
    this.#pending = []
    events.push(stored(event))
    const { store, runId, retentionMs, owner } = this.#options
    try {
      if (await store.finish(runId, events, runEnd(outcome), retentionMs, owner) !== null) this.#options.onStored?.(events)
    } catch (err) {
      if (!this.#taken(err)) this.#failed(err, 'finish')
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
