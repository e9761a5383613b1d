// Store deadlines (docs/stores.md): every store call made while serving a request settles within `storeTimeoutMs`.
// The options resolve each configured store into a wrapper once (lib/service/settings.ts), so that no call site can
// forget it: a call past its deadline, or failing because the backend cannot be reached, rejects with
// 503 STORE_UNAVAILABLE, and a request in an outage is answered instead of hanging for its length.
import { StoreUnavailableError } from '../core/errors.js'
import { MemoryApprovalStore, MemoryAuditStore, MemoryCheckpointStore, MemoryIdempotencyStore, MemorySessionStore } from './memory.js'
import { MemoryRunStore } from './memory-runs.js'
import { MemoryWebhookStore } from './memory-webhooks.js'
import { MemoryQuotaStore } from './memory-quotas.js'

// Codes of a backend that cannot be reached or cannot work right now (as opposed to a bad call): Node's network
// errors, PostgreSQL's connection and shutdown classes, SQLite's locks and I/O, our own closed store.
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH',
  '57P01', '57P02', '57P03', 'SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_CANTOPEN', 'SQLITE_FULL', 'FA_STORE_CLOSED'
])
// pg and ioredis report a lost connection without a code
const UNAVAILABLE_MESSAGES = /^(Connection terminated|Connection is closed|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end)/

/** Whether a store's error means the backend is unavailable (an outage), rather than a mistake in the call. */
export function isUnavailable (error: unknown): boolean {
  const { code, message, name } = (error ?? {}) as { code?: unknown, message?: unknown, name?: unknown }
  if (typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || /^08/.test(code) || /^53/.test(code) || /^SQLITE_(IOERR|READONLY)/.test(code))) return true
  return name === 'MaxRetriesPerRequestError' || (typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message))
}

function deadline<T> (call: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    // Not unref()ed: the answer to a request depends on it; cleared as soon as the call settles.
    const timer = setTimeout(() => reject(new StoreUnavailableError(`${what} did not answer within ${timeoutMs} ms`)), timeoutMs)
    call.then((value) => {
      clearTimeout(timer)
      resolve(value)
    }, (error: unknown) => {
      clearTimeout(timer)
      reject(isUnavailable(error) ? new StoreUnavailableError(`${what} failed: ${(error as Error).message}`, { cause: error }) : error)
    })
  })
}

const inProcess = [MemoryAuditStore, MemorySessionStore, MemoryApprovalStore, MemoryCheckpointStore, MemoryIdempotencyStore, MemoryRunStore, MemoryWebhookStore, MemoryQuotaStore]

/** Wraps a store: `methods` get the deadline; `name` (the option) names the store in the error. */
export type DeadlineWrapper = <T extends object>(store: T, methods: readonly string[], name: string) => T

/**
 * Store wrappers with a deadline of `timeoutMs` on each of the methods given (the interface's methods, less the
 * ones that wait on purpose: `waitForDecision`). Memory stores answer in the process and are returned as they
 * are. One wrapper per store: a store named by two options stays one object.
 */
export function storeDeadlines (timeoutMs: number): DeadlineWrapper {
  const wrapped = new Map<object, object>()
  return <T extends object>(store: T, methods: readonly string[], name: string): T => {
    if (inProcess.some((Class) => store instanceof Class)) return store
    const existing = wrapped.get(store)
    if (existing !== undefined) return existing as T
    const calls = new Map<PropertyKey, unknown>()
    for (const method of methods) {
      calls.set(method, (...args: unknown[]) => {
        let call: Promise<unknown>
        try {
          call = Promise.resolve((store as Record<string, (...a: unknown[]) => unknown>)[method]!(...args))
        } catch (error) {
          call = Promise.reject(error)
        }
        return deadline(call, timeoutMs, `${name}.${method}()`)
      })
    }
    // Everything else (close, probe, a backend's own properties) is the store's own, bound to it: its private
    // fields only answer to itself. A method is bound once (some are read on every run: turnWithEnd, watch).
    const bound = new Map<PropertyKey, { method: unknown, call: unknown }>()
    const proxy = new Proxy(store, {
      get (target, property) {
        const call = calls.get(property)
        if (call !== undefined) return call
        const value = Reflect.get(target, property, target) as unknown
        if (typeof value !== 'function') return value
        const known = bound.get(property)
        if (known?.method === value) return known.call
        const method = (value as (...a: unknown[]) => unknown).bind(target)
        bound.set(property, { method: value, call: method })
        return method
      }
    })
    wrapped.set(store, proxy)
    return proxy
  }
}
