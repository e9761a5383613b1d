import type { Server } from 'node:http'
import type { RunRegistry } from '../runs/registry.js'
import type { RunWorker } from '../runs/worker.js'

export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000
/** How long after the deadline the connections still open are cut, so that the final events can flush. */
const CUTOFF_GRACE_MS = 1_000
const SWEEP_INTERVAL_MS = 50

/**
 * The graceful shutdown (docs/operations.md), in one place: refuse new work, let runs finish until the deadline,
 * abort the rest with SHUTDOWN, close the transports that stay open (WebSockets), and for a server this
 * service owns, stop accepting at once and close connections as they go idle.
 */
export class Drain {
  readonly #runs: RunRegistry
  readonly #worker: RunWorker
  readonly #transports = new Set<() => Promise<void>>()
  #draining = false
  #done: Promise<void> | null = null
  #serverClosed: Promise<void> = Promise.resolve()
  #timers: NodeJS.Timeout[] = []

  constructor (runs: RunRegistry, worker: RunWorker) {
    this.#runs = runs
    this.#worker = worker
  }

  /** true from the start of the drain: new requests get 503 SHUTDOWN. */
  get draining (): boolean {
    return this.#draining
  }

  /** Resolves once the drain that has begun is over (at once when none has). */
  get finished (): Promise<void> {
    return this.#done ?? Promise.resolve()
  }

  /** How a transport closes its connections once their runs have ended; returns the function that takes it back. */
  onShutdown (close: () => Promise<void>): () => void {
    this.#transports.add(close)
    return () => { this.#transports.delete(close) }
  }

  /**
   * Starts the drain with its deadline (a later call joins the first and its deadline). With `server`,
   * the server stops accepting now, idle connections are closed as they go idle, and whatever is still
   * open a second after the deadline is cut. Resolves once every run has ended and every transport closed.
   */
  begin (deadlineMs: number, server?: Server): Promise<void> {
    this.#done ??= this.#drain(deadlineMs, server)
    return this.#done
  }

  async #drain (deadlineMs: number, server: Server | undefined): Promise<void> {
    this.#draining = true
    // no new work: queued runs are left to instances that stay
    this.#worker.stopClaiming()
    if (server?.listening === true) {
      this.#serverClosed = new Promise((resolve) => server.close(() => resolve()))
      const sweeper = setInterval(() => server.closeIdleConnections(), SWEEP_INTERVAL_MS)
      const cutoff = setTimeout(() => server.closeAllConnections(), deadlineMs + CUTOFF_GRACE_MS)
      sweeper.unref()
      cutoff.unref()
      this.#timers.push(sweeper, cutoff)
    }
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<void>((resolve) => { timer = setTimeout(resolve, deadlineMs) })
    await Promise.race([this.#runs.idle(), deadline])
    clearTimeout(timer)
    // what can go on elsewhere is handed off; the rest ends with SHUTDOWN
    await this.#worker.handOff()
    this.#runs.abortAll('SHUTDOWN')
    await this.#runs.idle()
    // let the aborted runs' replies and final events reach their sockets before the transports close
    await new Promise((resolve) => setImmediate(resolve))
    await Promise.all([...this.#transports].map((close) => close()))
  }

  /** After the app has closed: waits for the server to finish closing, then stops sweeping. */
  async end (): Promise<void> {
    try {
      await this.#serverClosed
    } finally {
      for (const timer of this.#timers) clearTimeout(timer)
      this.#timers = []
    }
  }
}
