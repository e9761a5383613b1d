// The SQLite schedules (docs/schedules.md): one row per schedule in a table of the file, its state as JSON. A write is
// one IMMEDIATE transaction compared on the revision, so that processes sharing the file claim a due time once between
// them. SQLite tells no other connection of a change: every write bumps one counter row, which a watcher in another
// process reads every `pollIntervalMs` while it watches (one row, never the schedules).
import type Database from 'better-sqlite3'
import { SqliteStore } from './sqlite-connection.js'
import type { SqliteSource, SqliteStoreOptions } from './sqlite-connection.js'
import { immediateWrites } from './sqlite-writes.js'
import type { SqliteWrites } from './sqlite-writes.js'
import { checkLimit, checkTtl, decodeKeyCursor, encodeKeyCursor, unrefInterval } from './common.js'
import { MAX_SCHEDULE_LIST_LIMIT } from './memory-schedules.js'
import type { ScheduleListQuery, ScheduleRow, ScheduleRowPage, ScheduleState, ScheduleStore, ScheduleWrite } from './types.js'

type Db = Database.Database

export interface SqliteScheduleStoreOptions extends SqliteStoreOptions {
  /** how often a watcher reads whether another process changed a schedule (default 1,000 ms) */
  pollIntervalMs?: number
}

interface Row {
  id: string
  principal: string
  created_at: number
  wake_at: number | null
  revision: number
  state: string
}

const COLUMNS = 'id, principal, created_at, wake_at, revision, state'

function toRow (row: Row): ScheduleRow {
  return { id: row.id, principal: row.principal, createdAt: row.created_at, wakeAt: row.wake_at, revision: row.revision, state: JSON.parse(row.state) as ScheduleState }
}

function statements (db: Db, prefix: string) {
  const table = `"${prefix}schedules"`
  const version = `"${prefix}schedule_version"`
  db.exec(`
    CREATE TABLE IF NOT EXISTS ${table} (
      id TEXT PRIMARY KEY, principal TEXT NOT NULL, created_at INTEGER NOT NULL, wake_at INTEGER, revision INTEGER NOT NULL, state TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS "${prefix}schedules_wake" ON ${table} (wake_at) WHERE wake_at IS NOT NULL;
    CREATE INDEX IF NOT EXISTS "${prefix}schedules_created" ON ${table} (created_at DESC, id DESC);
    CREATE INDEX IF NOT EXISTS "${prefix}schedules_principal" ON ${table} (principal, created_at DESC, id DESC);
    CREATE TABLE IF NOT EXISTS ${version} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
    INSERT OR IGNORE INTO ${version} (id, version) VALUES (1, 0);
  `)
  return {
    insert: db.prepare<[string, string, number, number | null, string]>(`
      INSERT OR IGNORE INTO ${table} (id, principal, created_at, wake_at, revision, state) VALUES (?, ?, ?, ?, 1, ?)`),
    get: db.prepare<[string], Row>(`SELECT ${COLUMNS} FROM ${table} WHERE id = ?`),
    write: db.prepare<[number | null, string, string, number], Row>(`
      UPDATE ${table} SET wake_at = ?, state = ?, revision = revision + 1 WHERE id = ? AND revision = ? RETURNING ${COLUMNS}`),
    delete: db.prepare<[string]>(`DELETE FROM ${table} WHERE id = ?`),
    list: db.prepare<[number], Row>(`SELECT ${COLUMNS} FROM ${table} ORDER BY created_at DESC, id DESC LIMIT ?`),
    listAfter: db.prepare<[number, number, string, number], Row>(`
      SELECT ${COLUMNS} FROM ${table} WHERE created_at < ? OR (created_at = ? AND id < ?) ORDER BY created_at DESC, id DESC LIMIT ?`),
    listOf: db.prepare<[string, number], Row>(`SELECT ${COLUMNS} FROM ${table} WHERE principal = ? ORDER BY created_at DESC, id DESC LIMIT ?`),
    listOfAfter: db.prepare<[string, number, number, string, number], Row>(`
      SELECT ${COLUMNS} FROM ${table} WHERE principal = ? AND (created_at < ? OR (created_at = ? AND id < ?)) ORDER BY created_at DESC, id DESC LIMIT ?`),
    due: db.prepare<[number, number], Row>(`SELECT ${COLUMNS} FROM ${table} WHERE wake_at IS NOT NULL AND wake_at <= ? ORDER BY wake_at LIMIT ?`),
    take: db.prepare<[number, string], Row>(`UPDATE ${table} SET wake_at = ?, revision = revision + 1 WHERE id = ? RETURNING ${COLUMNS}`),
    nextWake: db.prepare<[], number | null>(`SELECT min(wake_at) FROM ${table} WHERE wake_at IS NOT NULL`).pluck(),
    bump: db.prepare(`UPDATE ${version} SET version = version + 1 WHERE id = 1`),
    version: db.prepare<[], number>(`SELECT version FROM ${version} WHERE id = 1`).pluck()
  }
}

type Statements = ReturnType<typeof statements>

export class SqliteScheduleStore extends SqliteStore implements ScheduleStore {
  #prepared: SqliteWrites<Statements> | null = null
  readonly #pollMs: number
  readonly #watchers = new Set<() => void>()
  #timer: NodeJS.Timeout | null = null
  #seen = -1

  constructor (source: SqliteSource, options: SqliteScheduleStoreOptions = {}) {
    super(source, options)
    this.#pollMs = options.pollIntervalMs === undefined ? 1_000 : checkTtl('pollIntervalMs', options.pollIntervalMs)
  }

  #use (): SqliteWrites<Statements> {
    const db = this.database() as Db
    return (this.#prepared ??= immediateWrites(db, statements(db, this.prefix)))
  }

  async insert (row: Omit<ScheduleRow, 'revision'>): Promise<ScheduleRow> {
    const inserted = this.#use().write((s) => {
      const { changes } = s.insert.run(row.id, row.principal, row.createdAt, row.wakeAt, JSON.stringify(row.state))
      if (changes === 1) s.bump.run()
      return changes === 1
    })
    if (!inserted) throw new Error(`schedule ${JSON.stringify(row.id)} exists already`)
    this.#changed()
    return { ...row, revision: 1 }
  }

  async get (id: string): Promise<ScheduleRow | null> {
    const row = this.#use().statements.get.get(id)
    return row === undefined ? null : toRow(row)
  }

  async write (id: string, revision: number, change: { wakeAt: number | null, state: ScheduleState }): Promise<ScheduleRow | null> {
    const [written] = await this.writeAll([{ id, revision, ...change }])
    return written!
  }

  async writeAll (writes: readonly ScheduleWrite[]): Promise<Array<ScheduleRow | null>> {
    const rows = this.#use().write((s) => {
      const written = writes.map(({ id, revision, wakeAt, state }) => s.write.get(wakeAt, JSON.stringify(state), id, revision))
      if (written.some((row) => row !== undefined)) s.bump.run()
      return written
    })
    if (rows.some((row) => row !== undefined)) this.#changed()
    return rows.map((row) => row === undefined ? null : toRow(row))
  }

  async delete (id: string): Promise<boolean> {
    const deleted = this.#use().write((s) => {
      const { changes } = s.delete.run(id)
      if (changes === 1) s.bump.run()
      return changes === 1
    })
    if (deleted) this.#changed()
    return deleted
  }

  async list (query: ScheduleListQuery): Promise<ScheduleRowPage> {
    const limit = checkLimit(query.limit, MAX_SCHEDULE_LIST_LIMIT)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const s = this.#use().statements
    const { principal } = query
    const rows = principal === undefined
      ? after === null ? s.list.all(limit + 1) : s.listAfter.all(after.ms, after.ms, after.id, limit + 1)
      : after === null ? s.listOf.all(principal, limit + 1) : s.listOfAfter.all(principal, after.ms, after.ms, after.id, limit + 1)
    const page = rows.slice(0, limit).map(toRow)
    const last = page.at(-1)
    return { rows: page, nextCursor: rows.length > limit && last !== undefined ? encodeKeyCursor(last.createdAt, last.id) : null }
  }

  async take (now: number, limit: number, until: number): Promise<ScheduleRow[]> {
    // one IMMEDIATE transaction: another process takes what is left after it
    return this.#use().write((s) => s.due.all(now, limit).map((row) => toRow(s.take.get(until, row.id)!)))
  }

  async nextWake (): Promise<number | null> {
    return this.#use().statements.nextWake.get() ?? null
  }

  watch (listener: () => void): () => void {
    this.#watchers.add(listener)
    this.#timer ??= unrefInterval(() => { this.#poll() }, this.#pollMs)
    return () => {
      this.#watchers.delete(listener)
      if (this.#watchers.size > 0 || this.#timer === null) return
      clearInterval(this.#timer)
      this.#timer = null
    }
  }

  /** Another process wrote when the counter moved past what this one last saw. */
  #poll (): void {
    let version: number
    try {
      version = this.#use().statements.version.get()!
    /* c8 ignore next 4: a file another process holds locked past the busy timeout, or deleted under it */
    } catch {
      // the file is busy or gone: the next tick reads again
      return
    }
    if (version === this.#seen) return
    this.#seen = version
    this.#tell()
  }

  #changed (): void {
    // heard here at once; the counter read next includes this write, so it is not told twice
    this.#seen = this.#use().statements.version.get()!
    process.nextTick(() => this.#tell())
  }

  #tell (): void {
    for (const watcher of this.#watchers) watcher()
  }

  protected override stop (): void {
    this.#watchers.clear()
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
  }

  /** For health checks: creates the tables and statements if they are not yet, then `SELECT 1`. */
  override async probe (): Promise<void> {
    this.#use()
    await super.probe()
  }
}
