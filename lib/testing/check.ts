// What the exported store suites assert with: node:assert behind a few tap-like names, so that the same suite runs
// under node:test, tap or any runner that registers a test by name (docs/stores.md, "Checking a store of your own").
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * Registers one test: node:test's `test`, `(name, fn) => t.test(name, fn)` under tap, or any runner's. The suite
 * passes the context the runner gives the test on to the store factory, which may use it (a temporary directory,
 * a teardown).
 */
export type Registrar<C = unknown> = (name: string, fn: (context: C) => Promise<void>) => unknown

/** Makes a fresh, empty store for one test, given the runner's context for that test. */
export type StoreFactory<S, C = unknown> = (context: C) => S | Promise<S>

type Pattern = unknown

/** The assertions of one test, and what to undo once it ends (last registered, first undone). */
export class Check<C = unknown> {
  readonly context: C
  readonly #teardowns: Array<() => unknown> = []

  constructor (context: C) {
    this.context = context
  }

  teardown (fn: () => unknown): void {
    this.#teardowns.push(fn)
  }

  /** Runs every teardown, even when one throws; the first error is thrown after the others ran. */
  async end (): Promise<void> {
    let failure: unknown
    for (const fn of this.#teardowns.splice(0).reverse()) {
      try { await fn() } catch (error) { failure ??= error }
    }
    if (failure !== undefined) throw failure
  }

  /** A note in the runner's output where it has a way to print one (tap's comment, node:test's diagnostic). */
  comment (message: string): void {
    const context = this.context as { comment?: (message: string) => void, diagnostic?: (message: string) => void } | undefined
    if (typeof context?.comment === 'function') context.comment(message)
    else if (typeof context?.diagnostic === 'function') context.diagnostic(message)
  }

  equal (actual: unknown, expected: unknown, message?: string): void {
    assert.equal(actual, expected, message)
  }

  not (actual: unknown, expected: unknown, message?: string): void {
    assert.notEqual(actual, expected, message)
  }

  /** Deep equality; plain objects compared by their own enumerable properties, whatever their prototype. */
  same (actual: unknown, expected: unknown, message?: string): void {
    assert.deepStrictEqual(plain(actual), plain(expected), message)
  }

  strictSame (actual: unknown, expected: unknown, message?: string): void {
    assert.deepStrictEqual(actual, expected, message)
  }

  ok (value: unknown, message?: string): void {
    assert.ok(value, message)
  }

  notOk (value: unknown, message?: string): void {
    assert.ok(!value, message)
  }

  type (value: unknown, type: string, message?: string): void {
    assert.equal(typeof value, type, message ?? `typeof ${String(value)} is ${type}`)
  }

  /** Every field of the pattern is in the value and matches it (see `matches`); extra fields are allowed. */
  match (actual: unknown, pattern: Pattern, message?: string): void {
    if (!matches(actual, pattern)) {
      throw new assert.AssertionError({ message: message ?? 'the value does not match the pattern', actual, expected: pattern, operator: 'match' })
    }
  }

  /** The promise (or the function's) rejects with an error of that class, that very error, or one matching the pattern. */
  async rejects (promise: Promise<unknown> | (() => Promise<unknown>), expected: Pattern, message?: string): Promise<void> {
    let error: unknown
    try {
      await (typeof promise === 'function' ? promise() : promise)
    } catch (thrown) {
      error = thrown ?? new Error('rejected with nothing')
    }
    if (error === undefined) throw new assert.AssertionError({ message: message ?? 'expected a rejection', actual: undefined, expected, operator: 'rejects' })
    if (error === expected) return
    this.match(error, expected, message ?? `rejected with ${String(error)}`)
  }
}

/**
 * A loose match, as tap's `t.match` has it for the patterns these suites use: a RegExp tests the value's string, a
 * constructor its type (`String`, `Number`, `Boolean`: typeof; others: instanceof), an Error its message and name, an
 * array its first entries in order, an object each of its own fields; anything else is equal (Object.is).
 */
export function matches (actual: unknown, pattern: Pattern): boolean {
  if (Object.is(actual, pattern)) return true
  if (pattern instanceof RegExp) return pattern.test(String(actual))
  if (pattern === String) return typeof actual === 'string'
  if (pattern === Number) return typeof actual === 'number' && Number.isFinite(actual)
  if (pattern === Boolean) return typeof actual === 'boolean'
  if (typeof pattern === 'function') return typeof actual === 'object' && actual !== null && actual instanceof pattern
  if (pattern instanceof Error) return actual instanceof Error && actual.message === pattern.message && actual.name === pattern.name
  if (typeof pattern !== 'object' || pattern === null || typeof actual !== 'object' || actual === null) return false
  if (Array.isArray(pattern)) return Array.isArray(actual) && actual.length >= pattern.length && pattern.every((item, i) => matches(actual[i], item))
  return Object.entries(pattern).every(([key, value]) => key in actual && matches((actual as Record<string, unknown>)[key], value))
}

/** Objects of any prototype (a driver's rows) as plain ones, for deep equality. */
function plain (value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plain)
  if (value === null || typeof value !== 'object' || value instanceof Date || value instanceof Error || ArrayBuffer.isView(value)) return value
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, plain(item)]))
}

/** The registrar's test, given a Check for its body and undoing its teardowns once the body ends. */
export function checked<C> (test: Registrar<C>): (name: string, body: (t: Check<C>) => Promise<void>) => void {
  return (name, body) => {
    test(name, async (context) => {
      const t = new Check(context)
      try {
        await body(t)
      } finally {
        await t.end()
      }
    })
  }
}

/**
 * Polls `check` every 10 ms until it gives a value other than undefined or false (state another process, a socket or
 * a timer changes), and returns that value. An assertion: past `timeoutMs` it fails as one, naming `what` and the
 * last value seen (a runner reports it as a failed assertion, with that value, not as an error).
 */
export async function eventually<T> (check: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 5_000, what = 'the condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== false) return value
    if (Date.now() > deadline) {
      throw new assert.AssertionError({ message: `${what} not met within ${timeoutMs} ms`, actual: value, expected: 'a value other than undefined or false', operator: 'eventually' })
    }
    await sleep(10)
  }
}
