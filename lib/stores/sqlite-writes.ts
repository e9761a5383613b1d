// Internal to the SQLite stores, and kept out of sqlite.ts: the published declarations name no driver type.
import type Database from 'better-sqlite3'

/** A store's prepared statements, and its writes: each one IMMEDIATE transaction over them. */
export interface SqliteWrites<S> {
  statements: S
  write: <T>(fn: (statements: S) => T) => T
}

/**
 * IMMEDIATE: the write lock first, so that no other connection writes between a transaction's reads and its writes
 * (a count and its insert, a claim's read and its update).
 */
export function immediateWrites<S> (db: Database.Database, statements: S): SqliteWrites<S> {
  const transaction = db.transaction((fn: (statements: S) => unknown) => fn(statements))
  return { statements, write: <T>(fn: (statements: S) => T): T => transaction.immediate(fn) as T }
}
