// The SQLite counts of the `quotas` option (docs/auth-and-traffic.md): slots and token windows in two tables of the file. An
// acquire is one IMMEDIATE transaction (the write lock first), so that processes sharing the file never admit more
// than the quota between them.
import type Database from 'better-sqlite3'
import { SqliteStore } from './sqlite-connection.js'
import { immediateWrites } from './sqlite-writes.js'
import type { SqliteWrites } from './sqlite-writes.js'
import type { QuotaSlot, QuotaStore } from './types.js'

type Db = Database.Database

function statements (db: Db, prefix: string) {
  const slots = `"${prefix}quota_slots"`
  const windows = `"${prefix}quota_tokens"`
  db.exec(`
    CREATE TABLE IF NOT EXISTS ${slots} (principal TEXT NOT NULL, slot_id TEXT NOT NULL, until INTEGER NOT NULL, PRIMARY KEY (principal, slot_id));
    CREATE INDEX IF NOT EXISTS "${prefix}quota_slots_until" ON ${slots} (until);
    CREATE TABLE IF NOT EXISTS ${windows} (
      principal TEXT NOT NULL, window_start INTEGER NOT NULL, window_end INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (principal, window_start));
    CREATE INDEX IF NOT EXISTS "${prefix}quota_tokens_end" ON ${windows} (window_end);
  `)
  return {
    dropExpired: db.prepare<[string, number]>(`DELETE FROM ${slots} WHERE principal = ? AND until <= ?`),
    held: db.prepare<[string, string], number>(`SELECT count(*) FROM ${slots} WHERE principal = ? AND slot_id = ?`).pluck(),
    count: db.prepare<[string], number>(`SELECT count(*) FROM ${slots} WHERE principal = ?`).pluck(),
    take: db.prepare<[string, string, number]>(`INSERT OR REPLACE INTO ${slots} (principal, slot_id, until) VALUES (?, ?, ?)`),
    renew: db.prepare<[number, string, string]>(`UPDATE ${slots} SET until = ? WHERE principal = ? AND slot_id = ?`),
    release: db.prepare<[string, string]>(`DELETE FROM ${slots} WHERE principal = ? AND slot_id = ?`),
    add: db.prepare<[string, number, number, number]>(`
      INSERT INTO ${windows} (principal, window_start, window_end, tokens) VALUES (?, ?, ?, ?)
      ON CONFLICT (principal, window_start) DO UPDATE SET tokens = tokens + excluded.tokens`),
    tokens: db.prepare<[string, number], number>(`SELECT tokens FROM ${windows} WHERE principal = ? AND window_start = ?`).pluck(),
    purgeSlots: db.prepare<[number, number]>(`DELETE FROM ${slots} WHERE rowid IN (SELECT rowid FROM ${slots} WHERE until <= ? LIMIT ?)`),
    purgeWindows: db.prepare<[number, number]>(`DELETE FROM ${windows} WHERE rowid IN (SELECT rowid FROM ${windows} WHERE window_end <= ? LIMIT ?)`)
  }
}

type Statements = ReturnType<typeof statements>

export class SqliteQuotaStore extends SqliteStore implements QuotaStore {
  #prepared: SqliteWrites<Statements> | null = null

  #use (): SqliteWrites<Statements> {
    const db = this.database() as Db
    return (this.#prepared ??= immediateWrites(db, statements(db, this.prefix)))
  }

  async acquire ({ principal, slotId }: QuotaSlot, max: number, now: number, until: number): Promise<boolean> {
    return this.#use().write((s) => {
      s.dropExpired.run(principal, now)
      if (s.held.get(principal, slotId) === 0 && s.count.get(principal)! >= max) return false
      s.take.run(principal, slotId, until)
      return true
    })
  }

  async renew (slots: readonly QuotaSlot[], until: number): Promise<string[]> {
    return this.#use().write((s) => slots.filter(({ principal, slotId }) => s.renew.run(until, principal, slotId).changes === 1).map((slot) => slot.slotId))
  }

  async release ({ principal, slotId }: QuotaSlot): Promise<void> {
    this.#use().statements.release.run(principal, slotId)
  }

  async addTokens (principal: string, window: { start: number, end: number }, n: number): Promise<void> {
    this.#use().statements.add.run(principal, window.start, window.end, n)
  }

  async tokens (principal: string, windowStart: number): Promise<number> {
    return this.#use().statements.tokens.get(principal, windowStart) ?? 0
  }

  async purge (now: number, batch: number): Promise<number> {
    return this.#use().write((s) => {
      const slots = s.purgeSlots.run(now, batch).changes
      return slots + s.purgeWindows.run(now, batch - slots).changes
    })
  }

  /** For health checks: creates the tables and statements if they are not yet, then `SELECT 1`. */
  override async probe (): Promise<void> {
    this.#use()
    await super.probe()
  }
}
