// Internal to the PostgreSQL stores: the shared pool and the base class that takes it. The public types name no
// type of pg's own (see below).
import { createHash } from 'node:crypto'
import type { Pool, PoolConfig } from 'pg'
import { ConnectedStore, SharedConnection, checkIdentifier, storeClosedError } from './common.js'
import { loadDriver } from './drivers.js'

// The public types name no type of pg's own: a user who installed pg without @types/pg (or who never uses
// these stores) type-checks against these. A pg Pool fits them.

/** The part of a pg `Pool` the stores use. */
export interface PgPool {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>
  connect(): Promise<unknown>
  end(): Promise<void>
  readonly totalCount: number
}

/** Options for the pool the stores make (those of pg's `PoolConfig`: `connectionString`, `max`, `ssl`, …). */
export interface PostgresPoolOptions {
  connectionString?: string
  host?: string
  port?: number
  user?: string
  password?: string
  database?: string
  max?: number
  idleTimeoutMillis?: number
  connectionTimeoutMillis?: number
  statement_timeout?: number
  query_timeout?: number
  [option: string]: unknown
}

export interface PostgresStoreOptions {
  /** the schema holding the tables, created when missing (default 'public') */
  schema?: string
  /** prepended to every table name (default 'fa_') */
  tablePrefix?: string
}

type Row = object

/** A named (prepared) statement: see `named`. */
export interface NamedStatement {
  name: string
  text: string
}

/**
 * A statement pg prepares once per connection, then sends by name: the server parses and plans it once, not at each
 * call (a group append, ~400 µs of the server's CPU of ~750 per call unnamed, measured: bench/README.md). The name is
 * the text's hash: one name is always one text, whatever store or schema made it. For the hot statements only: each
 * connection keeps every statement it was sent by name.
 */
export function named (text: string): NamedStatement {
  return { name: `fa_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`, text }
}

const JSONB_REFUSES = /\\u(0000|d[89a-f])/i

/**
 * Whether jsonb would refuse this JSON (an escaped NUL or lone surrogate): written in a group's statement, it would
 * fail the whole group, so it goes in one of its own, its failure its caller's alone. (A string holding a backslash
 * followed by such text matches too: it merely goes on its own.)
 */
export function jsonbRefuses (json: string): boolean {
  return JSONB_REFUSES.test(json)
}

/**
 * A store as it is, through the deadline wrapper the service puts around it (a Proxy: its reads are the store's):
 * how one store knows another for the very object it was made with.
 */
export const UNWRAPPED = Symbol('fastify-agents.unwrapped')

/** pg's escapeIdentifier, without loading pg for it. */
export function quote (name: string): string {
  return `"${name.replace(/"/g, '""')}"`
}

export function isPool (value: unknown): value is PgPool {
  return typeof value === 'object' && value !== null && 'totalCount' in value &&
    typeof (value as PgPool).connect === 'function' && typeof (value as PgPool).query === 'function'
}

function ownedPool (Pg: { Pool: new (config: PoolConfig) => Pool }, config: PoolConfig): Pool {
  const pool = new Pg.Pool(config)
  // An idle client losing its connection (a server restart) is reported here; without a listener the
  // process would crash. The next query gets the error instead.
  pool.on('error', () => {})
  return pool
}

/**
 * One pg Pool shared by several stores. A connection string or pool options make a pool, created on first
 * use and ended when the last store using it closes; a Pool you pass is never ended.
 */
export class PostgresConnection extends SharedConnection<PgPool> {
  constructor (source: string | PgPool | PostgresPoolOptions) {
    if (isPool(source)) {
      super(() => source, () => {}, false)
    } else if (typeof source === 'string') {
      if (!/^postgres(ql)?:\/\//.test(source)) throw new TypeError('expected a postgres:// connection string')
      const Pg = loadDriver<typeof import('pg')>('pg', 'postgresStores()')
      super(() => ownedPool(Pg, { connectionString: source }), (pool) => pool.end(), true)
    } else if (typeof source === 'object' && source !== null) {
      const Pg = loadDriver<typeof import('pg')>('pg', 'postgresStores()')
      super(() => ownedPool(Pg, source as PoolConfig), (pool) => pool.end(), true)
    } else {
      throw new TypeError('expected a postgres:// connection string, a pg Pool or pool options')
    }
  }
}

export type PostgresSource = string | PgPool | PostgresPoolOptions | PostgresConnection

/**
 * What every PostgreSQL store shares: its schema and table prefix, the pool taken from its connection (its tables
 * created before the first query) and given back on close.
 */
export abstract class PostgresStore extends ConnectedStore<PgPool> {
  readonly schema: string
  readonly tablePrefix: string
  /** the store itself, read through any wrapper */
  readonly [UNWRAPPED]: PostgresStore = this
  #ready: Promise<void> | null = null

  constructor (source: PostgresSource, options: PostgresStoreOptions = {}) {
    const schema = checkIdentifier('schema', options.schema ?? 'public', 63)
    const tablePrefix = checkIdentifier('tablePrefix', options.tablePrefix ?? 'fa_', 32)
    super(source instanceof PostgresConnection ? source : new PostgresConnection(source))
    this.schema = schema
    this.tablePrefix = tablePrefix
  }

  /** CREATE TABLE IF NOT EXISTS ... for this store, run once before its first query. */
  protected abstract ddl (): string

  protected table (name: string): string {
    return `${quote(this.schema)}.${quote(this.tablePrefix + name)}`
  }

  protected index (name: string): string {
    return quote(this.tablePrefix + name)
  }

  /** Throws once the store is closed. */
  protected check (): void {
    if (this.closed) throw storeClosedError()
  }

  protected async pool (): Promise<PgPool> {
    const pool = this.connected()
    this.#ready ??= this.#init(pool)
    await this.#ready
    return pool
  }

  protected async sql<R extends Row> (text: string | NamedStatement, values: unknown[] = []): Promise<R[]> {
    const pool = await this.pool()
    if (typeof text === 'string') return (await pool.query(text, values)).rows as R[]
    return (await (pool as unknown as { query: (config: object) => Promise<{ rows: unknown[] }> }).query({ ...text, values })).rows as R[]
  }

  /**
   * For health checks: O(1), one `SELECT 1` shared by the stores of a pool probing at once (the first probe of a
   * store also creates its tables, so that a store that cannot be used fails its probe).
   */
  probe (): Promise<void> {
    return this.connection.probe(async () => { await this.sql('SELECT 1') })
  }

  async #init (pool: PgPool): Promise<void> {
    // Instances starting together would race on CREATE ... IF NOT EXISTS (it is not atomic in PostgreSQL):
    // a lock per schema serialises them. Several statements in one simple query run as one transaction,
    // which holds the lock until the end.
    const key = createHash('sha256').update(`fastify-agents:${this.schema}`).digest()
    try {
      await pool.query(`
        SELECT pg_advisory_xact_lock(${key.readInt32BE(0)}, ${key.readInt32BE(4)});
        CREATE SCHEMA IF NOT EXISTS ${quote(this.schema)};
        ${this.ddl()}`)
    } catch (error) {
      this.#ready = null
      throw error
    }
  }
}
