import type { FastifyBaseLogger } from 'fastify'
import type { AuditEntry, AuditStore } from '../stores/types.js'

/**
 * Appends audit entries in batches, by group commit: one append at a time, and the entries that arrive while it
 * is in flight go in the next one, so that a busy store gets fewer, larger writes. `commit()` resolves once its
 * entry's batch is in the store (docs/stores.md: a state-changing request's entry is committed before its answer);
 * `write()` queues an entry behind, nothing waiting for it. A batch that fails is logged and counted (its entries
 * lost) and its commits resolve all the same: a failing audit store never fails a response. `flush()` (called on
 * close) waits until everything queued has been written or has failed.
 */
export class AuditWriter {
  #store: AuditStore
  #log: FastifyBaseLogger
  #onFailure: (count: number) => void
  #queue: AuditEntry[] = []
  /** the commits waiting for the next batch */
  #waiting: Array<() => void> = []
  #scheduled = false
  #writing = false
  /** flush()es waiting for the queue to be empty and no append in flight */
  #idle: Array<() => void> = []

  constructor (store: AuditStore, log: FastifyBaseLogger, onFailure: (count: number) => void) {
    this.#store = store
    this.#log = log
    this.#onFailure = onFailure
  }

  /** Queues the entry; it is written behind. */
  write (entry: AuditEntry): void {
    this.#queue.push(entry)
    this.#schedule()
  }

  /** Queues the entry; resolves once it is in the store (or counted as lost). */
  commit (entry: AuditEntry): Promise<void> {
    this.#queue.push(entry)
    const committed = new Promise<void>((resolve) => { this.#waiting.push(resolve) })
    this.#schedule()
    return committed
  }

  #schedule (): void {
    if (this.#scheduled || this.#writing) return
    this.#scheduled = true
    // the entries of one tick (a burst of answers) go in one batch
    setImmediate(() => {
      this.#scheduled = false
      void this.#append()
    })
  }

  async #append (): Promise<void> {
    this.#writing = true
    // what arrived while a batch was in flight is the next batch, at once
    while (this.#queue.length > 0) {
      const batch = this.#queue
      const waiting = this.#waiting
      this.#queue = []
      this.#waiting = []
      try {
        await this.#store.append(batch)
      } catch (err) {
        this.#onFailure(batch.length)
        this.#log.error({ err, entries: batch.length }, 'audit store append failed; entries lost')
      }
      for (const resolve of waiting) resolve()
    }
    this.#writing = false
    for (const resolve of this.#idle.splice(0)) resolve()
  }

  /** Resolves once every entry queued so far is in the store (or counted as lost). */
  flush (): Promise<void> {
    if (this.#queue.length === 0 && !this.#writing && !this.#scheduled) return Promise.resolve()
    return new Promise((resolve) => { this.#idle.push(resolve) })
  }
}
