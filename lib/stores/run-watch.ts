// The watching side of a run store, shared by every backend: who listens to which run and session, and a poll
// that makes up for a notification lost on the way (a listener reconnecting, a dropped pub/sub message).
import type { RunChange } from './types.js'

/** What the poll learns of a watched run. */
export interface RunState {
  runId: string
  lastSeq: number
  cancelRequested: boolean
}

type RunListener = (change: RunChange) => void

interface Watched {
  listeners: Set<RunListener>
  lastSeq: number
  cancelSeen: boolean
}

export interface RunWatchHubOptions {
  /** Reads the state of the watched runs, for the poll; none: no poll (a store whose every write is in-process). */
  poll?: (runIds: string[]) => Promise<RunState[]>
  /** Reads whether the watched sessions are free, for the poll. */
  pollSessions?: (sessionIds: string[]) => Promise<string[]>
  pollIntervalMs?: number
  onPollError?: (error: unknown) => void
}

export class RunWatchHub {
  readonly #runs = new Map<string, Watched>()
  readonly #sessions = new Map<string, Set<() => void>>()
  readonly #options: RunWatchHubOptions
  #timer: NodeJS.Timeout | null = null
  #polling = false

  constructor (options: RunWatchHubOptions = {}) {
    this.#options = options
  }

  /** Whether anything watches this run (a backend may then skip work). */
  watching (runId: string): boolean {
    return this.#runs.has(runId)
  }

  watch (runId: string, listener: RunListener): () => void {
    let watched = this.#runs.get(runId)
    if (watched === undefined) {
      watched = { listeners: new Set(), lastSeq: 0, cancelSeen: false }
      this.#runs.set(runId, watched)
    }
    watched.listeners.add(listener)
    this.#schedule()
    return () => {
      watched.listeners.delete(listener)
      if (watched.listeners.size === 0 && this.#runs.get(runId) === watched) this.#runs.delete(runId)
      this.#unschedule()
    }
  }

  watchSession (sessionId: string, listener: () => void): () => void {
    let listeners = this.#sessions.get(sessionId)
    if (listeners === undefined) {
      listeners = new Set()
      this.#sessions.set(sessionId, listeners)
    }
    listeners.add(listener)
    this.#schedule()
    return () => {
      listeners.delete(listener)
      if (listeners.size === 0 && this.#sessions.get(sessionId) === listeners) this.#sessions.delete(sessionId)
      this.#unschedule()
    }
  }

  /** New events up to `lastSeq` (a notification may arrive twice, or late: only news is passed on). */
  events (runId: string, lastSeq: number): void {
    const watched = this.#runs.get(runId)
    if (watched === undefined || lastSeq <= watched.lastSeq) return
    watched.lastSeq = lastSeq
    for (const listener of [...watched.listeners]) listener({ kind: 'events', lastSeq })
  }

  cancel (runId: string): void {
    const watched = this.#runs.get(runId)
    if (watched === undefined || watched.cancelSeen) return
    watched.cancelSeen = true
    for (const listener of [...watched.listeners]) listener({ kind: 'cancel' })
  }

  sessionFree (sessionId: string): void {
    const listeners = this.#sessions.get(sessionId)
    if (listeners === undefined) return
    for (const listener of [...listeners]) listener()
  }

  /** Polls now: a backend whose notifications just (re)connected catches up on what it may have missed. */
  refresh (): Promise<void> {
    return this.#poll()
  }

  close (): void {
    this.#runs.clear()
    this.#sessions.clear()
    this.#unschedule()
  }

  #schedule (): void {
    if (this.#timer !== null || this.#options.poll === undefined) return
    this.#timer = setInterval(() => { void this.#poll() }, this.#options.pollIntervalMs ?? 1_000)
    this.#timer.unref()
  }

  #unschedule (): void {
    if (this.#timer === null || this.#runs.size > 0 || this.#sessions.size > 0) return
    clearInterval(this.#timer)
    this.#timer = null
  }

  async #poll (): Promise<void> {
    // one poll at a time: a slow store does not pile them up
    if (this.#polling) return
    this.#polling = true
    try {
      const runIds = [...this.#runs.keys()]
      if (runIds.length > 0) {
        for (const state of await this.#options.poll!(runIds)) {
          if (state.cancelRequested) this.cancel(state.runId)
          this.events(state.runId, state.lastSeq)
        }
      }
      const sessionIds = [...this.#sessions.keys()]
      if (sessionIds.length > 0 && this.#options.pollSessions !== undefined) {
        for (const sessionId of await this.#options.pollSessions(sessionIds)) this.sessionFree(sessionId)
      }
    } catch (error) {
      this.#options.onPollError?.(error)
    } finally {
      this.#polling = false
    }
  }
}

/** A backend's watchers in this process: the hub, and those who wait for runs to claim. */
export class RunSignals extends RunWatchHub {
  readonly #queue = new Set<() => void>()

  get queueWatched (): boolean {
    return this.#queue.size > 0
  }

  watchQueue (listener: () => void): () => void {
    this.#queue.add(listener)
    return () => { this.#queue.delete(listener) }
  }

  /** A detachable run was queued, or a session freed that one waits for. */
  queue (): void {
    for (const listener of [...this.#queue]) listener()
  }

  /**
   * A notification from another instance (NOTIFY, PUBLISH), as the backends' writes word it: `e:<runId>:<lastSeq>`,
   * `g:[[runId, lastSeq], …]` (a group of appends), `c:<runId>`, `s:<sessionId>` or `q:<tag>` (a run to claim;
   * `own`: this store's tag, whose watchers were told at once).
   */
  heard (message: string, own: string): void {
    const body = message.slice(2)
    switch (message[0]) {
      case 'e': {
        const cut = body.lastIndexOf(':')
        this.events(body.slice(0, cut), Number(body.slice(cut + 1)))
        break
      }
      case 'g': {
        for (const [runId, lastSeq] of JSON.parse(body) as Array<[string, number]>) this.events(runId, lastSeq)
        break
      }
      case 'c': this.cancel(body); break
      case 'q': if (body !== own) this.queue(); break
      default: this.sessionFree(body)
    }
  }

  override close (): void {
    super.close()
    this.#queue.clear()
  }
}
