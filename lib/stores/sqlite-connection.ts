// Internal to the SQLite stores: the shared database and the base class that takes it.
import { fileURLToPath } from 'node:url'
import type Database from 'better-sqlite3'
import { ConnectedStore, SharedConnection, checkIdentifier } from './common.js'
import { loadDriver } from './drivers.js'

type Db = Database.Database

/**
 * The part of a better-sqlite3 `Database` the public types name (structural: typing against it needs neither
 * better-sqlite3 nor @types/better-sqlite3). A better-sqlite3 Database fits it.
 */
export interface SqliteDatabase {
  prepare(sql: string): unknown
  exec(sql: string): unknown
  transaction(fn: (...args: never[]) => unknown): unknown
  close(): unknown
}

export interface SqliteStoreOptions {
  /** prepended to every table name (default 'fa_') */
  tablePrefix?: string
}

function isDatabase (value: unknown): value is SqliteDatabase {
  return typeof value === 'object' && value !== null &&
    typeof (value as Db).prepare === 'function' && typeof (value as Db).exec === 'function' &&
    typeof (value as Db).transaction === 'function'
}

/** Accepts a path, `:memory:`, `file:./relative.db` or `file:///absolute.db`. */
function filenameOf (source: string): string {
  if (source.startsWith('file://')) return fileURLToPath(source)
  if (source.startsWith('file:')) return decodeURIComponent(source.slice(5).replace(/[?#].*$/s, ''))
  return source
}

function openDatabase (Driver: typeof Database, filename: string): Db {
  const db = new Driver(filename, { timeout: 5000 })
  // WAL lets readers in other processes go on while one writes; NORMAL is durable against a crash of
  // the process (not of the machine), at a fraction of FULL's fsyncs.
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = NORMAL')
  return db
}

/**
 * One better-sqlite3 Database shared by several stores. Given a filename it opens the file on first use and
 * closes it when the last store using it closes; given a Database it never closes it (nor changes its pragmas).
 */
export class SqliteConnection extends SharedConnection<SqliteDatabase> {
  constructor (source: string | SqliteDatabase) {
    if (typeof source === 'string' && source !== '') {
      const filename = filenameOf(source)
      const Driver = loadDriver<typeof Database>('better-sqlite3', 'sqliteStores()')
      super(() => openDatabase(Driver, filename), (db) => { db.close() }, true)
    } else if (isDatabase(source)) {
      super(() => source, () => {}, false)
    } else {
      throw new TypeError('expected a filename, a file: URL or a better-sqlite3 Database')
    }
  }
}

export type SqliteSource = string | SqliteDatabase | SqliteConnection

/** What every SQLite store shares: its table prefix, and the database taken from its connection (and given back on close). */
export abstract class SqliteStore extends ConnectedStore<SqliteDatabase> {
  protected readonly prefix: string

  constructor (source: SqliteSource, options: SqliteStoreOptions = {}) {
    const prefix = checkIdentifier('tablePrefix', options.tablePrefix ?? 'fa_', 32)
    super(source instanceof SqliteConnection ? source : new SqliteConnection(source))
    this.prefix = prefix
  }

  /** The Database, opened on first use; each store creates its tables and statements on it once. */
  protected database (): SqliteDatabase {
    return this.connected()
  }

  /** For health checks: opens the database if it is not yet (a path that cannot be opened fails here), then `SELECT 1`. */
  async probe (): Promise<void> {
    (this.database() as Db).prepare('SELECT 1').get()
  }
}
