// Internal helpers shared by the store backends. Not part of the public API (index.ts does not export it).
import { StoreApprovalExistsError, StoreApprovalNotFoundError, StoreClosedError } from '../core/errors.js'
import type { ApprovalRecord } from './types.js'

export function storeClosedError (): Error {
  return new StoreClosedError()
}

export function approvalNotFoundError (id: string): Error {
  return new StoreApprovalNotFoundError(JSON.stringify(id))
}

export function approvalExistsError (id: string): Error {
  return new StoreApprovalExistsError(JSON.stringify(id))
}

export const MAX_AUDIT_LIMIT = 500

export function checkLimit (limit: unknown, max: number): number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > max) {
    throw new RangeError(`limit must be an integer between 1 and ${max}`)
  }
  return limit
}

/** A store option that counts something (a capacity, a bound): a positive safe integer, else a TypeError naming it. */
export function checkCount (name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new TypeError(`${name} must be a positive integer, got ${String(value)}`)
  return value
}

export function checkTtl (name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new RangeError(`${name} must be a positive number of milliseconds`)
  }
  return value
}

/**
 * SQL identifiers are interpolated into statements, so only plain names are accepted; PostgreSQL cuts
 * names at 63 bytes, which bounds a table prefix (index names add up to 20 characters to it).
 */
export function checkIdentifier (name: string, value: unknown, maxLength: number): string {
  if (typeof value !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(value) || value.length > maxLength) {
    throw new TypeError(`${name} must be letters, digits and _ (not first), at most ${maxLength} long, got ${JSON.stringify(value)}`)
  }
  return value
}

// Cursors are written and read in one place for every listing of every backend (a cursor is client input).
export { decodeKeyCursor, decodeSeqCursor, encodeKeyCursor, encodeSeqCursor } from '../core/cursors.js'

// The last millisecond formatted: a JSON run formats "now" four or five times (session, turn, audit), and
// under load many runs share a millisecond.
let lastMs = 0
let lastIso = '1970-01-01T00:00:00.000Z'

export function iso (value: number | string | Date): string {
  if (typeof value !== 'number') return new Date(value).toISOString()
  if (value !== lastMs) {
    lastIso = new Date(value).toISOString()
    lastMs = value
  }
  return lastIso
}

export function toMs (name: string, value: string): number {
  // the instant just formatted, read back (a run's end is formatted, then stored): no parse
  if (value === lastIso) return lastMs
  const ms = Date.parse(value)
  if (Number.isNaN(ms)) throw new TypeError(`${name} must be an ISO-8601 date, got ${JSON.stringify(value)}`)
  return ms
}

/** JSON has no `undefined`: every backend stores it as null so that they all read back the same. */
export function toJson (value: unknown): string {
  return JSON.stringify(value ?? null)
}

interface Waiter {
  resolve: (record: ApprovalRecord) => void
  reject: (error: unknown) => void
}

/**
 * The in-process side of `waitForDecision`: every backend registers waiters here and settles them when it
 * learns (by its own writes, a notification or a poll) that an approval left `pending`.
 */
export class ApprovalWaiters {
  readonly #byId = new Map<string, Set<Waiter>>()
  readonly #onActive: () => void
  readonly #onIdle: () => void

  constructor (hooks: { onActive?: () => void, onIdle?: () => void } = {}) {
    this.#onActive = hooks.onActive ?? noop
    this.#onIdle = hooks.onIdle ?? noop
  }

  get ids (): string[] {
    return [...this.#byId.keys()]
  }

  has (id: string): boolean {
    return this.#byId.has(id)
  }

  /**
   * Registers first and reads second, so that a decision landing between the two is not missed:
   * either the read sees it or `settle` does.
   */
  wait (id: string, signal: AbortSignal, read: () => Promise<ApprovalRecord | null>): Promise<ApprovalRecord> {
    if (signal.aborted) return Promise.reject(signal.reason)
    return new Promise((resolve, reject) => {
      let done = false
      const finish = (): boolean => {
        if (done) return false
        done = true
        signal.removeEventListener('abort', onAbort)
        // the set lives until its last waiter finishes, and this one has not yet
        const set = this.#byId.get(id)!
        set.delete(waiter)
        if (set.size === 0) {
          this.#byId.delete(id)
          if (this.#byId.size === 0) this.#onIdle()
        }
        return true
      }
      const waiter: Waiter = {
        resolve: (record) => { if (finish()) resolve(record) },
        reject: (error) => { if (finish()) reject(error) }
      }
      const onAbort = (): void => waiter.reject(signal.reason)
      signal.addEventListener('abort', onAbort, { once: true })
      const set = this.#byId.get(id)
      if (set === undefined) {
        this.#byId.set(id, new Set([waiter]))
        if (this.#byId.size === 1) this.#onActive()
      } else {
        set.add(waiter)
      }
      read().then((record) => {
        if (record === null) waiter.reject(approvalNotFoundError(id))
        else if (record.status !== 'pending') waiter.resolve(record)
      }, waiter.reject)
    })
  }

  settle (record: ApprovalRecord): void {
    if (record.status === 'pending') return
    const set = this.#byId.get(record.id)
    if (set === undefined) return
    for (const waiter of [...set]) waiter.resolve(record)
  }

  rejectAll (error: unknown): void {
    for (const set of [...this.#byId.values()]) {
      for (const waiter of [...set]) waiter.reject(error)
    }
  }
}

function noop (): void {}

/**
 * One connection (Database, Pool, client) shared by the stores of a factory. It is opened when the first
 * store uses it and closed when the last store that used it closes, so that closing the stores one by one
 * (as the service does) neither closes it under a store still in use nor leaves it open. A connection the
 * user handed in is never closed: `close` is then a no-op.
 */
export class SharedConnection<T> {
  /** true when the connection was opened from a URL, a filename or options; false for one the user handed in */
  readonly owned: boolean
  readonly #open: () => T
  readonly #close: (value: T) => Promise<void> | void
  readonly #users = new Set<object>()
  #value: T | null = null
  #probe: Promise<void> | null = null

  constructor (open: () => T, close: (value: T) => Promise<void> | void, owned: boolean) {
    this.#open = open
    this.#close = close
    this.owned = owned
  }

  /**
   * Runs `check` once for every store probing at the same time: the stores of one factory share this connection,
   * and a health check probing each of them makes one round trip, not five.
   */
  probe (check: () => Promise<void>): Promise<void> {
    this.#probe ??= check().finally(() => { this.#probe = null })
    return this.#probe
  }

  acquire (user: object): T {
    if (this.#value === null) this.#value = this.#open()
    this.#users.add(user)
    return this.#value
  }

  async release (user: object): Promise<void> {
    if (!this.#users.delete(user) || this.#users.size > 0) return
    const value = this.#value as T
    this.#value = null
    await this.#close(value)
  }
}

/**
 * What a store on a shared connection is: the connection taken on use (and given back on close), refused once
 * closed. Each backend's base class (PostgreSQL, Redis, SQLite) adds its own options and probe.
 */
export abstract class ConnectedStore<T> {
  readonly #connection: SharedConnection<T>
  #closed = false

  constructor (connection: SharedConnection<T>) {
    this.#connection = connection
  }

  protected get connection (): SharedConnection<T> {
    return this.#connection
  }

  protected get closed (): boolean {
    return this.#closed
  }

  /** The connection's client or database, opened on first use. */
  protected connected (): T {
    if (this.#closed) throw storeClosedError()
    return this.#connection.acquire(this)
  }

  /** Whether the store opened its own connection (from a URL or a filename): then the service closes it. */
  get ownsConnection (): boolean {
    return this.#connection.owned
  }

  async close (): Promise<void> {
    if (this.#closed) return
    // closed first: calls still on their way in now fail instead of taking the connection again
    this.#closed = true
    await this.stop()
    await this.#connection.release(this)
  }

  /** Stops what the store runs on its own, before its connection is given back. */
  protected stop (): Promise<void> | void {}
}

/** setInterval that never keeps the process alive. */
export function unrefInterval (fn: () => void, ms: number): NodeJS.Timeout {
  const timer = setInterval(fn, ms)
  timer.unref()
  return timer
}
