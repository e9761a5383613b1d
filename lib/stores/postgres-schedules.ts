// The PostgreSQL schedules (docs/schedules.md), shared by every instance on the database: one row per schedule, its
// state as JSON. A write is one UPDATE compared on the revision (`WHERE id = $1 AND revision = $2`), so that of
// instances claiming one due time at once exactly one row comes back; every change NOTIFYs the other instances from
// the same statement, and the due ones are found by a partial index on wake_at, never by reading the table.
import { createHash } from 'node:crypto'
import { PostgresStore } from './postgres-connection.js'
import type { PostgresSource, PostgresStoreOptions } from './postgres-connection.js'
import { PgListener } from './postgres-clients.js'
import { checkLimit, decodeKeyCursor, encodeKeyCursor } from './common.js'
import { MAX_SCHEDULE_LIST_LIMIT } from './memory-schedules.js'
import type { ScheduleListQuery, ScheduleRow, ScheduleRowPage, ScheduleState, ScheduleStore, ScheduleWrite } from './types.js'

interface Row {
  id: string
  principal: string
  created_at: string
  wake_at: string | null
  revision: number
  state: ScheduleState
}

const COLUMNS = 'id, principal, created_at, wake_at, revision, state'

function toRow (row: Row): ScheduleRow {
  return {
    id: row.id,
    principal: row.principal,
    createdAt: Number(row.created_at),
    wakeAt: row.wake_at === null ? null : Number(row.wake_at),
    revision: row.revision,
    state: row.state
  }
}

export class PostgresScheduleStore extends PostgresStore implements ScheduleStore {
  /** NOTIFY channel shared by every instance using this schema and prefix (a hash keeps it under 63 bytes). */
  readonly channel: string
  readonly #table: string
  readonly #listener: PgListener
  readonly #watchers = new Set<() => void>()
  readonly #notify: string

  constructor (source: PostgresSource, options: PostgresStoreOptions = {}) {
    super(source, options)
    this.channel = `fa_schedules_${createHash('sha256').update(`${this.schema}.${this.tablePrefix}`).digest('hex').slice(0, 16)}`
    this.#table = this.table('schedules')
    this.#notify = `SELECT pg_notify('${this.channel}', '')`
    // what was written before LISTEN took effect was not heard: the watchers look again once it is
    this.#listener = new PgListener(async () => this.pool(), this.channel, () => this.#tell(), () => this.#tell())
  }

  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.#table} (
        id text PRIMARY KEY, principal text NOT NULL, created_at bigint NOT NULL, wake_at bigint,
        revision integer NOT NULL, state jsonb NOT NULL);
      CREATE INDEX IF NOT EXISTS ${this.index('schedules_wake')} ON ${this.#table} (wake_at) WHERE wake_at IS NOT NULL;
      CREATE INDEX IF NOT EXISTS ${this.index('schedules_created')} ON ${this.#table} (created_at DESC, id DESC);
      CREATE INDEX IF NOT EXISTS ${this.index('schedules_principal')} ON ${this.#table} (principal, created_at DESC, id DESC);`
  }

  async insert (row: Omit<ScheduleRow, 'revision'>): Promise<ScheduleRow> {
    const [inserted] = await this.sql<Row>(`
      WITH inserted AS (
        INSERT INTO ${this.#table} (id, principal, created_at, wake_at, revision, state) VALUES ($1, $2, $3, $4, 1, $5)
        RETURNING ${COLUMNS}),
      told AS (${this.#notify} FROM inserted)
      SELECT ${COLUMNS} FROM inserted, (SELECT count(*) FROM told) AS t`, [row.id, row.principal, row.createdAt, row.wakeAt, JSON.stringify(row.state)])
    return toRow(inserted!)
  }

  async get (id: string): Promise<ScheduleRow | null> {
    const [row] = await this.sql<Row>(`SELECT ${COLUMNS} FROM ${this.#table} WHERE id = $1`, [id])
    return row === undefined ? null : toRow(row)
  }

  async write (id: string, revision: number, change: { wakeAt: number | null, state: ScheduleState }): Promise<ScheduleRow | null> {
    const [row] = await this.sql<Row>(`
      WITH written AS (
        UPDATE ${this.#table} SET wake_at = $3, state = $4, revision = revision + 1 WHERE id = $1 AND revision = $2
        RETURNING ${COLUMNS}),
      told AS (${this.#notify} FROM written)
      SELECT ${COLUMNS} FROM written, (SELECT count(*) FROM told) AS t`, [id, revision, change.wakeAt, JSON.stringify(change.state)])
    return row === undefined ? null : toRow(row)
  }

  async writeAll (writes: readonly ScheduleWrite[]): Promise<Array<ScheduleRow | null>> {
    if (writes.length === 0) return []
    // in the order of the ids: two batches sharing rows lock them in the same order, never each waiting for the other
    const sorted = [...writes].sort((a, b) => a.id < b.id ? -1 : 1)
    const rows = await this.sql<Row>(`
      WITH batch AS (
        SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::text[]) AS b (id, revision, wake_at, state)),
      written AS (
        UPDATE ${this.#table} s SET wake_at = b.wake_at, state = b.state::jsonb, revision = s.revision + 1 FROM batch b
        WHERE s.id = b.id AND s.revision = b.revision
        RETURNING s.id, s.principal, s.created_at, s.wake_at, s.revision, s.state),
      told AS (${this.#notify} FROM (SELECT 1 FROM written LIMIT 1) AS w)
      SELECT ${COLUMNS} FROM written, (SELECT count(*) FROM told) AS t`, [
      sorted.map((w) => w.id), sorted.map((w) => w.revision), sorted.map((w) => w.wakeAt), sorted.map((w) => JSON.stringify(w.state))
    ])
    const byId = new Map(rows.map((row) => [row.id, toRow(row)]))
    return writes.map((w) => byId.get(w.id) ?? null)
  }

  async delete (id: string): Promise<boolean> {
    const [row] = await this.sql<{ deleted: number }>(`
      WITH deleted AS (DELETE FROM ${this.#table} WHERE id = $1 RETURNING 1),
      told AS (${this.#notify} FROM deleted)
      SELECT (SELECT count(*) FROM deleted)::integer AS deleted, (SELECT count(*) FROM told) AS t`, [id])
    return row!.deleted === 1
  }

  async list (query: ScheduleListQuery): Promise<ScheduleRowPage> {
    const limit = checkLimit(query.limit, MAX_SCHEDULE_LIST_LIMIT)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const values: unknown[] = [limit + 1]
    const where: string[] = []
    if (query.principal !== undefined) where.push(`principal = $${values.push(query.principal)}`)
    if (after !== null) where.push(`(created_at, id) < ($${values.push(after.ms)}, $${values.push(after.id)})`)
    const rows = await this.sql<Row>(`
      SELECT ${COLUMNS} FROM ${this.#table} ${where.length === 0 ? '' : `WHERE ${where.join(' AND ')}`}
      ORDER BY created_at DESC, id DESC LIMIT $1`, values)
    const page = rows.slice(0, limit).map(toRow)
    const last = page.at(-1)
    return { rows: page, nextCursor: rows.length > limit && last !== undefined ? encodeKeyCursor(last.createdAt, last.id) : null }
  }

  async take (now: number, limit: number, until: number): Promise<ScheduleRow[]> {
    // rows another instance is taking are skipped, never waited for: instances taking at once share the due ones
    const rows = await this.sql<Row & { was: string }>(`
      WITH due AS (
        SELECT id, wake_at FROM ${this.#table} WHERE wake_at IS NOT NULL AND wake_at <= $1 ORDER BY wake_at LIMIT $2
        FOR UPDATE SKIP LOCKED)
      UPDATE ${this.#table} s SET wake_at = $3, revision = s.revision + 1 FROM due WHERE s.id = due.id
      RETURNING s.id, s.principal, s.created_at, s.wake_at, s.revision, s.state, due.wake_at AS was`, [now, limit, until])
    return rows.sort((a, b) => Number(a.was) - Number(b.was) || (a.id < b.id ? -1 : 1)).map(toRow)
  }

  async nextWake (): Promise<number | null> {
    // a watcher whose listening connection dropped listens again here (the scheduler asks on a timer too)
    if (this.#watchers.size > 0) this.#listener.listen().catch(() => {})
    const [row] = await this.sql<{ wake_at: string | null }>(`SELECT min(wake_at) AS wake_at FROM ${this.#table} WHERE wake_at IS NOT NULL`)
    return row?.wake_at == null ? null : Number(row.wake_at)
  }

  watch (listener: () => void): () => void {
    this.#watchers.add(listener)
    this.#listener.listen().catch(() => {})
    return () => { this.#watchers.delete(listener) }
  }

  #tell (): void {
    for (const watcher of this.#watchers) watcher()
  }

  protected override async stop (): Promise<void> {
    this.#watchers.clear()
    await this.#listener.stop()
  }
}
