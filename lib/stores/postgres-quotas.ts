// The PostgreSQL counts of the `quotas` option (docs/auth-and-traffic.md), shared by every instance on the database: slots and
// token windows in two tables. An acquire is one short transaction under `pg_advisory_xact_lock` on the principal, so
// that instances admitting runs of one principal at once queue on it (and never admit more than the quota between
// them), while other principals go on. Times are epoch milliseconds (bigint).
import { createHash } from 'node:crypto'
import type { PoolClient } from 'pg'
import { PostgresStore } from './postgres-connection.js'
import type { PostgresSource, PostgresStoreOptions } from './postgres-connection.js'
import { transaction } from './postgres-clients.js'
import type { QuotaSlot, QuotaStore } from './types.js'

export class PostgresQuotaStore extends PostgresStore implements QuotaStore {
  readonly #slots: string
  readonly #windows: string
  /** the first key of the principals' advisory locks: these tables' own (the second is the principal's hash) */
  readonly #lockSpace: number

  constructor (source: PostgresSource, options: PostgresStoreOptions = {}) {
    super(source, options)
    this.#slots = this.table('quota_slots')
    this.#windows = this.table('quota_tokens')
    this.#lockSpace = createHash('sha256').update(`fastify-agents:quotas:${this.schema}.${this.tablePrefix}`).digest().readInt32BE(0)
  }

  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.#slots} (
        principal text NOT NULL, slot_id text NOT NULL, until bigint NOT NULL, PRIMARY KEY (principal, slot_id));
      CREATE INDEX IF NOT EXISTS ${this.index('quota_slots_until')} ON ${this.#slots} (until);
      CREATE TABLE IF NOT EXISTS ${this.#windows} (
        principal text NOT NULL, window_start bigint NOT NULL, window_end bigint NOT NULL, tokens bigint NOT NULL,
        PRIMARY KEY (principal, window_start));
      CREATE INDEX IF NOT EXISTS ${this.index('quota_tokens_end')} ON ${this.#windows} (window_end);`
  }

  /**
   * One transaction; its commit does not wait for the disk: the run admitted is stored next, with a commit that does,
   * which flushes the log past this one (a slot is a lease anyway).
   */
  async #transaction<T> (fn: (client: PoolClient) => Promise<T>): Promise<T> {
    return transaction(await this.pool(), 'BEGIN; SET LOCAL synchronous_commit = off', fn)
  }

  async acquire ({ principal, slotId }: QuotaSlot, max: number, now: number, until: number): Promise<boolean> {
    return this.#transaction(async (client) => {
      // READ COMMITTED: the statement below takes its snapshot after the lock, so it sees every earlier holder's commit
      await client.query('SELECT pg_advisory_xact_lock($1::integer, hashtext($2))', [this.#lockSpace, principal])
      // The expired slots go (the slot asked for is left to the upsert: one statement cannot delete and insert one row);
      // the live ones are counted from the same snapshot.
      const { rows } = await client.query<{ taken: number }>(`
        WITH expired AS (DELETE FROM ${this.#slots} WHERE principal = $1 AND until <= $3 AND slot_id <> $2),
        live AS (
          SELECT count(*) FILTER (WHERE slot_id <> $2) AS others, bool_or(slot_id = $2) AS mine
          FROM ${this.#slots} WHERE principal = $1 AND until > $3),
        taken AS (
          INSERT INTO ${this.#slots} (principal, slot_id, until) SELECT $1, $2, $5 FROM live WHERE mine OR others < $4
          ON CONFLICT (principal, slot_id) DO UPDATE SET until = excluded.until
          RETURNING 1)
        SELECT count(*)::integer AS taken FROM taken`, [principal, slotId, now, max, until])
      return rows[0]!.taken === 1
    })
  }

  async renew (slots: readonly QuotaSlot[], until: number): Promise<string[]> {
    if (slots.length === 0) return []
    const rows = await this.sql<{ slot_id: string }>(`
      UPDATE ${this.#slots} s SET until = $3 FROM unnest($1::text[], $2::text[]) AS held (principal, slot_id)
      WHERE s.principal = held.principal AND s.slot_id = held.slot_id
      RETURNING s.slot_id`, [slots.map((s) => s.principal), slots.map((s) => s.slotId), until])
    return rows.map((row) => row.slot_id)
  }

  async release ({ principal, slotId }: QuotaSlot): Promise<void> {
    await this.sql(`DELETE FROM ${this.#slots} WHERE principal = $1 AND slot_id = $2`, [principal, slotId])
  }

  async addTokens (principal: string, window: { start: number, end: number }, n: number): Promise<void> {
    await this.sql(`
      INSERT INTO ${this.#windows} (principal, window_start, window_end, tokens) VALUES ($1, $2, $3, $4)
      ON CONFLICT (principal, window_start) DO UPDATE SET tokens = ${this.#windows}.tokens + excluded.tokens`,
    [principal, window.start, window.end, n])
  }

  async tokens (principal: string, windowStart: number): Promise<number> {
    const [row] = await this.sql<{ tokens: string }>(`SELECT tokens FROM ${this.#windows} WHERE principal = $1 AND window_start = $2`, [principal, windowStart])
    return row === undefined ? 0 : Number(row.tokens)
  }

  async purge (now: number, batch: number): Promise<number> {
    const [row] = await this.sql<{ purged: number }>(`
      WITH slots AS (
        DELETE FROM ${this.#slots} WHERE ctid IN (SELECT ctid FROM ${this.#slots} WHERE until <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
        RETURNING 1),
      windows AS (
        DELETE FROM ${this.#windows} WHERE ctid IN (
          SELECT ctid FROM ${this.#windows} WHERE window_end <= $1 LIMIT greatest($2 - (SELECT count(*) FROM slots), 0) FOR UPDATE SKIP LOCKED)
        RETURNING 1)
      SELECT ((SELECT count(*) FROM slots) + (SELECT count(*) FROM windows))::integer AS purged`, [now, batch])
    return row!.purged
  }
}
