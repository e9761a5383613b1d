import type { FastifyBaseLogger } from 'fastify'
import type { AuditEntry, AuditStore } from '../stores/types.js'

/**
 * Queues audit entries and appends them in batches, off the response path: a slow or failing store
 * never delays or fails a response. Failures are logged and counted; `flush()` (called on close)
 * waits until everything queued has been written or has failed.
 */
export class AuditWriter {
  #store: AuditStore
  #log: FastifyBaseLogger
  #onFailure: (count: number) => void
  #queue: AuditEntry[] = []
  #scheduled = false
  #inFlight: Promise<void> = Promise.resolve()

  constructor (store: AuditStore, log: FastifyBaseLogger, onFailure: (count: number) => void) {
    this.#store = store
    this.#log = log
    this.#onFailure = onFailure
  }

  write (entry: AuditEntry): void {
    this.#queue.push(entry)
    if (this.#scheduled) return
    this.#scheduled = true
    setImmediate(() => { void this.#drainQueue() })
  }

  #drainQueue (): Promise<void> {
    this.#scheduled = false
    const batch = this.#queue
    if (batch.length === 0) return this.#inFlight
    this.#queue = []
    // Batches are appended one after another so that the store sees entries in order.
    this.#inFlight = this.#inFlight.then(async () => {
      try {
        await this.#store.append(batch)
      } catch (err) {
        this.#onFailure(batch.length)
        this.#log.error({ err, entries: batch.length }, 'audit store append failed; entries lost')
      }
    })
    return this.#inFlight
  }

  async flush (): Promise<void> {
    await this.#drainQueue()
  }
}
