// The SQLite run store: run records, event logs and session locks in three tables of the file (and a counter of
// queue changes in a fourth), every write one IMMEDIATE transaction. Watchers in this process hear this store's
// writes at once; writes made through another connection (another process on the same file) are only found by
// polling, every `pollIntervalMs`: SQLite has no notifications across connections.
import type Database from 'better-sqlite3'
import { RunLeaseLostError } from '../core/errors.js'
import {
  cancelledRequeue, checkLimit, checkTtl, decodeSeqCursor, encodeSeqCursor, endedBeforeStartEvent, heldCount, iso,
  requeuedEvent, runningEnd, toMs, unheldEvents, unrefInterval
} from './common.js'
import { MAX_RUN_LIST_LIMIT, checkBatch, checkEvents, checkNewRun, checkText, isEnded, storable } from './run-common.js'
import { RunWatchHub } from './run-watch.js'
import type { RunState } from './run-watch.js'
import { GroupCommit } from './group-commit.js'
import { SqliteStore } from './sqlite-connection.js'
import type { SqliteSource, SqliteStoreOptions } from './sqlite-connection.js'
import type {
  CancelRunResult, CreateRunResult, LapsedRun, NewRun, ReopenRunResult, RunChange, RunEnd, RunLease, RunListQuery, RunPage, RunRecord, RunSpec,
  RunStatus, RunStore, StartRunResult, StoredEvent
} from './types.js'

type Db = Database.Database

export interface SqliteRunStoreOptions extends SqliteStoreOptions {
  /** how often watchers look for writes made through other connections (default 250 ms) */
  pollIntervalMs?: number
}

const BACKEND = 'SQLite'
const POLL_MS = 250
/** Queued runs read per step of a claim, at least (runs whose session is busy are stepped over). */
const CLAIM_PAGE = 32
/** How long the log's writes gather before their transaction (a run's end does not wait): see #group. */
const GROUP_WINDOW_MS = 20
/** Events inserted per statement: a batch of n is about log2(n) + n/32 statements (as the audit store does). */
const INSERT_ROWS = 32

interface RunRow {
  run_id: string
  agent: string
  session_id: string | null
  principal: string
  status: RunStatus
  background: number
  attempt: number
  last_seq: number
  created_at: number
  started_at: number | null
  ended_at: number | null
  result: string | null
  error: string | null
  request_id: string
  trace_id: string
  owner: string | null
  lease_until: number | null
  detachable: number
  cancel_requested: number
}

/** What a log write needs of its run's row. */
type LogRow = Pick<RunRow, 'run_id' | 'status' | 'owner' | 'last_seq'>

const COLUMNS = 'run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at, ended_at, ' +
  'result, error, request_id, trace_id, owner, lease_until, detachable, cancel_requested'

function toRecord (row: RunRow): RunRecord {
  const record: RunRecord = {
    runId: row.run_id,
    agent: row.agent,
    sessionId: row.session_id,
    principal: row.principal,
    status: row.status,
    background: row.background === 1,
    attempt: row.attempt,
    lastSeq: row.last_seq,
    createdAt: iso(row.created_at),
    requestId: row.request_id,
    traceId: row.trace_id
  }
  if (row.started_at !== null) record.startedAt = iso(row.started_at)
  if (row.ended_at !== null) record.endedAt = iso(row.ended_at)
  if (row.result !== null) record.result = JSON.parse(row.result) as RunRecord['result']
  if (row.error !== null) record.error = JSON.parse(row.error) as RunRecord['error']
  return record
}

interface ListFilters { sessionId?: string | undefined, agent?: string | undefined, status?: RunStatus | undefined, principal?: string | undefined }

function runStatements (db: Db, prefix: string) {
  const runs = `"${prefix}runs"`
  const events = `"${prefix}run_events"`
  const sessions = `"${prefix}run_sessions"`
  const queue = `"${prefix}run_queue"`
  // `created_seq` is the order of creation lists follow (runs created in one millisecond too; AUTOINCREMENT: never
  // reused) and the order queued runs are claimed in. `owner` and `lease_until` are the lease of a running run
  // (docs/runs.md); runs_lease holds the running runs only, `status` leading it all the same (else the planner
  // prefers runs_status). `run_queue` holds one counter, bumped by every write that gives claimers something new:
  // other processes poll that one row rather than the queue.
  db.exec(`
    CREATE TABLE IF NOT EXISTS ${runs} (
      created_seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, agent TEXT NOT NULL, session_id TEXT, principal TEXT NOT NULL, status TEXT NOT NULL,
      background INTEGER NOT NULL, attempt INTEGER NOT NULL, last_seq INTEGER NOT NULL, created_at INTEGER NOT NULL,
      started_at INTEGER, ended_at INTEGER, result TEXT, error TEXT, request_id TEXT NOT NULL, trace_id TEXT NOT NULL,
      spec TEXT NOT NULL, ephemeral INTEGER NOT NULL, cancel_requested INTEGER NOT NULL DEFAULT 0, expires_at INTEGER,
      owner TEXT, lease_until INTEGER, detachable INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_session" ON ${runs} (session_id, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_agent" ON ${runs} (agent, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_status" ON ${runs} (status, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_principal" ON ${runs} (principal, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_expires" ON ${runs} (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX IF NOT EXISTS "${prefix}runs_lease" ON ${runs} (status, lease_until) WHERE status = 'running';
    CREATE INDEX IF NOT EXISTS "${prefix}runs_waiting" ON ${runs} (session_id) WHERE status = 'queued' AND detachable = 1;
    CREATE INDEX IF NOT EXISTS "${prefix}runs_live" ON ${runs} (run_id, expires_at);
    CREATE TABLE IF NOT EXISTS ${events} (
      run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${sessions} (session_id TEXT PRIMARY KEY, run_id TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${queue} (id INTEGER PRIMARY KEY, version INTEGER NOT NULL);
  `)
  const live = '(expires_at IS NULL OR expires_at > @now)'
  const inserts = new Map<number, Database.Statement<unknown[]>>()
  for (let rows = INSERT_ROWS; rows >= 1; rows /= 2) {
    inserts.set(rows, db.prepare(`INSERT INTO ${events} (run_id, seq, type, data) VALUES ${Array(rows).fill('(?, ?, ?, ?)').join(', ')}`))
  }
  const lists = new Map<string, Database.Statement<[Record<string, unknown>], RunRow & { created_seq: number }>>()
  const statements = {
    run: db.prepare<[{ runId: string, now: number }], RunRow>(`SELECT ${COLUMNS} FROM ${runs} WHERE run_id = @runId AND ${live}`),
    // what an append reads of its run (the whole row is 19 columns: read for each run of each group)
    logRun: db.prepare<[{ runId: string, now: number }], LogRow>(`SELECT run_id, status, owner, last_seq FROM ${runs} WHERE run_id = @runId AND ${live}`),
    spec: db.prepare<[{ runId: string, now: number }], string>(`SELECT spec FROM ${runs} WHERE run_id = @runId AND ${live}`).pluck(),
    // whether the run is there, from runs_live alone: expires_at sits after the result in the row, and reading it
    // there walks the whole result (a run of many large deltas has a large one) at every page a follower reads
    alive: db.prepare<[{ runId: string, now: number }], number>(`SELECT 1 FROM ${runs} INDEXED BY "${prefix}runs_live" WHERE run_id = @runId AND ${live}`).pluck(),
    insert: db.prepare<[Record<string, unknown>]>(`
      INSERT OR REPLACE INTO ${runs} (run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at,
        started_at, request_id, trace_id, spec, ephemeral, owner, lease_until, detachable)
      VALUES (@runId, @agent, @sessionId, @principal, @status, @background, @attempt, @lastSeq, @createdAt, @startedAt, @requestId,
        @traceId, @spec, @ephemeral, @owner, @leaseUntil, @detachable)`),
    clearEvents: db.prepare<[string]>(`DELETE FROM ${events} WHERE run_id = ?`),
    // the run holding a session, and its status (null: the run is gone)
    holder: db.prepare<[string], { run_id: string, status: RunStatus | null }>(`
      SELECT h.run_id, r.status FROM ${sessions} h LEFT JOIN ${runs} r ON r.run_id = h.run_id WHERE h.session_id = ?`),
    take: db.prepare<[string, string]>(`INSERT OR REPLACE INTO ${sessions} (session_id, run_id) VALUES (?, ?)`),
    release: db.prepare<[string, string]>(`DELETE FROM ${sessions} WHERE session_id = ? AND run_id = ?`),
    // a resumed run: its next attempt, its log going on, its end forgotten
    reopen: db.prepare<[Record<string, unknown>], RunRow>(`
      UPDATE ${runs} SET status = 'running', attempt = attempt + 1, started_at = @startedAt, request_id = @requestId,
        trace_id = @traceId, spec = @spec, ended_at = NULL, result = NULL, error = NULL, cancel_requested = 0, expires_at = NULL,
        owner = @owner, lease_until = @leaseUntil, detachable = @detachable
      WHERE run_id = @runId RETURNING ${COLUMNS}`),
    start: db.prepare<[{ runId: string, startedAt: number, owner: string, until: number }], RunRow>(`
      UPDATE ${runs} SET status = 'running', started_at = @startedAt, owner = @owner, lease_until = @until WHERE run_id = @runId
      RETURNING ${COLUMNS}`),
    // queued detachable runs after `created_seq`, oldest first (runs_status: the queued ones, in order)
    queued: db.prepare<[number, number], RunRow & { created_seq: number }>(`
      SELECT ${COLUMNS}, created_seq FROM ${runs} WHERE status = 'queued' AND detachable = 1 AND created_seq > ?
      ORDER BY created_seq LIMIT ?`),
    renew: db.prepare<[number, string, string]>(`UPDATE ${runs} SET lease_until = ? WHERE run_id = ? AND status = 'running' AND owner = ?`),
    lapsed: db.prepare<[number, number], RunRow>(`
      SELECT ${COLUMNS} FROM ${runs} WHERE status = 'running' AND lease_until < ? ORDER BY lease_until LIMIT ?`),
    requeue: db.prepare<[number, number, string], RunRow>(`
      UPDATE ${runs} SET status = 'queued', attempt = ?, last_seq = ?, started_at = NULL, owner = NULL, lease_until = NULL,
        detachable = 1, cancel_requested = 0
      WHERE run_id = ? RETURNING ${COLUMNS}`),
    // whether a queued detachable run waits for the session (runs_waiting)
    waiting: db.prepare<[string], number>(`SELECT 1 FROM ${runs} WHERE session_id = ? AND status = 'queued' AND detachable = 1 LIMIT 1`).pluck(),
    queueChanged: db.prepare<[], number>(`
      INSERT INTO ${queue} (id, version) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET version = version + 1 RETURNING version`).pluck(),
    queueVersion: db.prepare<[], number>(`SELECT version FROM ${queue} WHERE id = 1`).pluck(),
    lastSeq: db.prepare<[number, string]>(`UPDATE ${runs} SET last_seq = ? WHERE run_id = ?`),
    end: db.prepare<[Record<string, unknown>], RunRow>(`
      UPDATE ${runs} SET status = @status, ended_at = @endedAt, result = @result, error = @error, expires_at = @expiresAt,
        last_seq = @lastSeq
      WHERE run_id = @runId RETURNING ${COLUMNS}`),
    requestCancel: db.prepare<[string], RunRow>(`UPDATE ${runs} SET cancel_requested = 1 WHERE run_id = ? RETURNING ${COLUMNS}`),
    events: db.prepare<[string, number, number], StoredEvent>(`SELECT seq, type, data FROM ${events} WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`),
    // what the log holds from a seq on (a retried write's events)
    held: db.prepare<[string, number, number], StoredEvent>(`SELECT seq, type, data FROM ${events} WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?`),
    state: db.prepare<[string], { last_seq: number, cancel_requested: number }>(`SELECT last_seq, cancel_requested FROM ${runs} WHERE run_id = ?`),
    doomed: db.prepare<[number, number], string>(`SELECT run_id FROM ${runs} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`).pluck(),
    deleteRun: db.prepare<[string]>(`DELETE FROM ${runs} WHERE run_id = ?`),
    deleteEnded: db.prepare<[{ runId: string, now: number }]>(`DELETE FROM ${runs} WHERE run_id = @runId AND status NOT IN ('queued', 'running') AND ${live}`),
    insertEvents (runId: string, batch: readonly StoredEvent[]): void {
      let next = 0
      for (let rows = INSERT_ROWS; rows >= 1; rows /= 2) {
        while (batch.length - next >= rows) {
          const values: unknown[] = []
          for (let i = next; i < next + rows; i++) values.push(runId, batch[i]!.seq, batch[i]!.type, batch[i]!.data)
          inserts.get(rows)!.run(values)
          next += rows
        }
      }
    },
    list (filters: ListFilters): Database.Statement<[Record<string, unknown>], RunRow & { created_seq: number }> {
      const key = `${filters.sessionId !== undefined}${filters.agent !== undefined}${filters.status !== undefined}${filters.principal !== undefined}`
      let statement = lists.get(key)
      if (statement === undefined) {
        // one statement per combination of filters: `(@x IS NULL OR x = @x)` would keep SQLite off the indexes
        statement = db.prepare(`
          SELECT ${COLUMNS}, created_seq FROM ${runs}
          WHERE ${live} AND created_seq < @before
            ${filters.sessionId === undefined ? '' : 'AND session_id = @sessionId'}
            ${filters.agent === undefined ? '' : 'AND agent = @agent'}
            ${filters.status === undefined ? '' : 'AND status = @status'}
            ${filters.principal === undefined ? '' : 'AND principal = @principal'}
          ORDER BY created_seq DESC LIMIT @limit`)
        lists.set(key, statement)
      }
      return statement
    }
  }
  return statements
}

type Statements = ReturnType<typeof runStatements>

interface Prepared {
  statements: Statements
  /** runs its callback in an IMMEDIATE transaction: the write lock first, so no other connection writes in between */
  write: <T>(fn: (statements: Statements, now: number) => T) => T
  /** inside a write: runs its callback in a savepoint, undone alone when it throws */
  savepoint: <T>(fn: () => T) => T
}

function prepare (db: Db, prefix: string): Prepared {
  const statements = runStatements(db, prefix)
  const transaction = db.transaction((fn: (statements: Statements, now: number) => unknown) => fn(statements, Date.now()))
  // called inside a transaction, a better-sqlite3 transaction function is a savepoint
  const savepoint = db.transaction((fn: () => unknown) => fn())
  return {
    statements,
    write: <T>(fn: (statements: Statements, now: number) => T): T => transaction.immediate(fn) as T,
    savepoint: <T>(fn: () => T): T => savepoint(fn) as T
  }
}

/** Thrown out of a group's transaction by an item that failed: the group is written again, an item per savepoint. */
const ITEM_FAILED = new Error('an item of the group failed')

/** A log write of one run waiting for its group: what it does inside the group's transaction. */
interface Grouped {
  runId: string
  write: (statements: Statements, now: number) => { value: unknown, heard?: Heard }
}

/** What a write tells the watchers once it has committed. */
interface Heard {
  runId: string
  lastSeq?: number
  cancel?: boolean
  freed?: string | null
  /** the queue counter, when the write gave claimers something new (a queued detachable run, a session it waits for) */
  queue?: number
}

export class SqliteRunStore extends SqliteStore implements RunStore {
  readonly #hub: RunWatchHub
  readonly #pollMs: number
  readonly #queueWatchers = new Set<() => void>()
  #queueTimer: NodeJS.Timeout | null = null
  /** the queue counter as last seen (null: not read yet) */
  #queueSeen: number | null = null
  #prepared: Prepared | null = null
  /**
   * The log's writes (append, finish), every run's, go in one transaction (each in a savepoint of its own) every
   * GROUP_WINDOW_MS, a run's end at the end of the turn: better-sqlite3 writes synchronously, so nothing is ever in
   * flight to gather behind, and each commit writes every page it changed to the WAL (one per run's log at least).
   */
  readonly #group = new GroupCommit<Grouped, unknown>({
    write: (items) => this.#writeGroup(items),
    key: (item) => item.runId,
    start: 'tick',
    windowMs: GROUP_WINDOW_MS
  })

  constructor (source: SqliteSource, options: SqliteRunStoreOptions = {}) {
    super(source, options)
    this.#pollMs = options.pollIntervalMs === undefined ? POLL_MS : checkTtl('pollIntervalMs', options.pollIntervalMs)
    this.#hub = new RunWatchHub({
      poll: async (runIds) => this.#pollRuns(runIds),
      pollSessions: async (sessionIds) => this.#pollSessions(sessionIds),
      pollIntervalMs: this.#pollMs,
      // a busy or closed database: the next tick tries again
      onPollError: () => {}
    })
  }

  #use (): Prepared {
    const db = this.database() as Db
    return (this.#prepared ??= prepare(db, this.prefix))
  }

  #statements (): Statements {
    return this.#use().statements
  }

  #write<T> (fn: (statements: Statements, now: number) => T): T {
    return this.#use().write(fn)
  }

  /** Groups written so far (each one transaction): what the tests and the bench count. */
  get groupWrites (): number {
    return this.#group.writes
  }

  #writeGroup (items: readonly Grouped[]): Array<unknown> {
    const { savepoint } = this.#use()
    let done: Array<{ value: unknown, heard?: Heard } | Error>
    try {
      // Every item in the group's transaction as it is: a savepoint each costs two more statements per run per group.
      // An item that throws undoes the whole transaction, and the group goes again with each item in a savepoint of
      // its own, undone alone (a writer whose lease was lost, a conflict: rare).
      done = this.#write((statements, now) => items.map((item) => {
        try {
          return item.write(statements, now)
        } catch {
          throw ITEM_FAILED
        }
      }))
    } catch (error) {
      if (error !== ITEM_FAILED) throw error
      done = this.#write((statements, now) => items.map((item) => {
        try {
          return savepoint(() => item.write(statements, now))
        } catch (error) {
          return error as Error
        }
      }))
    }
    // committed: now the watchers may read what they are told of
    return done.map((result) => {
      if (result instanceof Error) return result
      if (result.heard !== undefined) this.#tell(result.heard)
      return result.value
    })
  }

  /** One run's log write, in the next group's transaction (`urgent`: at the end of this turn). */
  async #grouped<T> (runId: string, write: (statements: Statements, now: number) => { value: T, heard?: Heard }, urgent = false): Promise<T> {
    return await this.#group.add({ runId, write }, urgent) as T
  }

  #tell (heard: Heard): void {
    if (heard.cancel === true) this.#hub.cancel(heard.runId)
    if (heard.lastSeq !== undefined) this.#hub.events(heard.runId, heard.lastSeq)
    if (heard.freed !== undefined && heard.freed !== null) this.#hub.sessionFree(heard.freed)
    if (heard.queue !== undefined) {
      // heard here at once: the poll need not tell it again (a change by another process since is covered too)
      this.#queueSeen = heard.queue
      this.#notifyQueue()
    }
  }

  /** The session for `runId`, unless another run that has not ended holds it: then that run's id. */
  #take (statements: Statements, sessionId: string, runId: string): string | null {
    const holder = statements.holder.get(sessionId)
    if (holder !== undefined && holder.run_id !== runId && holder.status !== null && !isEnded(holder.status)) return holder.run_id
    statements.take.run(sessionId, runId)
    return null
  }

  async create (run: NewRun, options: { exclusive: boolean }): Promise<CreateRunResult> {
    checkNewRun(BACKEND, true, run)
    const { record } = run
    const values = {
      runId: record.runId,
      agent: record.agent,
      sessionId: record.sessionId,
      principal: record.principal,
      status: record.status,
      background: record.background ? 1 : 0,
      attempt: record.attempt,
      lastSeq: record.lastSeq,
      createdAt: toMs('createdAt', record.createdAt),
      startedAt: record.startedAt === undefined ? null : toMs('startedAt', record.startedAt),
      requestId: record.requestId,
      traceId: record.traceId,
      spec: JSON.stringify(run.spec),
      ephemeral: run.ephemeral ? 1 : 0,
      owner: run.lease?.owner ?? null,
      leaseUntil: run.lease?.until ?? null,
      detachable: run.detachable ? 1 : 0
    }
    const queued = record.status === 'queued' && run.detachable
    const done = this.#write((statements): { holder: string } | { queue?: number } => {
      if (options.exclusive && record.sessionId !== null) {
        const holder = this.#take(statements, record.sessionId, record.runId)
        if (holder !== null) return { holder }
      }
      // a run created under the id of one past its retention (not purged yet) starts afresh: new record (and place
      // in the lists), empty log
      statements.clearEvents.run(record.runId)
      statements.insert.run(values)
      return queued ? { queue: statements.queueChanged.get()! } : {}
    })
    if ('holder' in done) return { outcome: 'session_busy', holder: done.holder }
    if (done.queue !== undefined) this.#tell({ runId: record.runId, queue: done.queue })
    return { outcome: 'created' }
  }

  async reopen (run: NewRun, options: { exclusive: boolean }): Promise<ReopenRunResult> {
    const { record } = run
    const values = {
      runId: record.runId,
      startedAt: toMs('startedAt', record.startedAt!),
      requestId: record.requestId,
      traceId: record.traceId,
      spec: JSON.stringify(run.spec),
      owner: run.lease?.owner ?? null,
      leaseUntil: run.lease?.until ?? null,
      detachable: run.detachable ? 1 : 0
    }
    this.#use()
    if (!storable(record.runId, true)) return { outcome: 'not_found' }
    checkText(BACKEND, true, 'requestId', record.requestId)
    checkText(BACKEND, true, 'traceId', record.traceId)
    const done = this.#write((statements, now): ReopenRunResult => {
      const row = statements.run.get({ runId: record.runId, now })
      if (row === undefined) return { outcome: 'not_found' }
      if (!isEnded(row.status)) return { outcome: 'in_progress' }
      if (options.exclusive && row.session_id !== null) {
        const holder = this.#take(statements, row.session_id, record.runId)
        if (holder !== null) return { outcome: 'session_busy', holder }
      }
      // its next attempt follows its last one's terminal event, after the event that says so (a follower reads on)
      statements.lastSeq.run(this.#append(statements, row, [requeuedEvent(toRecord(row), row.attempt + 1, 'RESUMED')]), record.runId)
      return { outcome: 'reopened', record: toRecord(statements.reopen.get(values)!) }
    })
    if (done.outcome === 'reopened') this.#tell({ runId: record.runId, lastSeq: done.record.lastSeq })
    return done
  }

  async start (runId: string, startedAt: string, lease: RunLease): Promise<StartRunResult> {
    const values = { runId, startedAt: toMs('startedAt', startedAt), owner: lease.owner, until: lease.until }
    if (!storable(runId, true)) return { outcome: 'gone' }
    return this.#write((statements, now): StartRunResult => {
      const row = statements.run.get({ runId, now })
      if (row === undefined || row.status !== 'queued') return { outcome: 'gone' }
      if (row.session_id !== null) {
        const holder = this.#take(statements, row.session_id, runId)
        if (holder !== null) return { outcome: 'session_busy', holder }
      }
      return { outcome: 'started', record: toRecord(statements.start.get(values)!) }
    })
  }

  async claim (lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]> {
    const startedMs = toMs('startedAt', startedAt)
    this.#use()
    if (limit < 1) return []
    // read in pages (better-sqlite3 runs no statement while another's rows are being read): most queued runs are
    // claimable, so one page is usually all it takes; runs whose session is busy are stepped over
    const page = Math.max(limit, CLAIM_PAGE)
    return this.#write((statements) => {
      const claimed: RunRecord[] = []
      let after = 0
      for (;;) {
        const rows = statements.queued.all(after, page)
        for (const row of rows) {
          if (row.session_id !== null && this.#take(statements, row.session_id, row.run_id) !== null) continue
          claimed.push(toRecord(statements.start.get({ runId: row.run_id, startedAt: startedMs, owner: lease.owner, until: lease.until })!))
          if (claimed.length === limit) return claimed
        }
        if (rows.length < page) return claimed
        after = rows.at(-1)!.created_seq
      }
    })
  }

  async renew (owner: string, runIds: readonly string[], until: number): Promise<string[]> {
    this.#use()
    const ids = runIds.filter((runId) => storable(runId, true))
    if (ids.length === 0) return []
    return this.#write((statements) => ids.filter((runId) => statements.renew.run(until, runId, owner).changes === 1))
  }

  async lapsed (now: number, limit: number): Promise<LapsedRun[]> {
    const statements = this.#statements()
    if (limit < 1) return []
    return statements.lapsed.all(now, limit).map((row) => ({
      record: toRecord(row), detachable: row.detachable === 1, cancelRequested: row.cancel_requested === 1
    }))
  }

  /** A running run under a lease that lapsed before `lapsedBefore`, or that `owner` holds. */
  static #lapsedOrOwned (row: RunRow | undefined, condition: { owner: string } | { lapsedBefore: number }): row is RunRow {
    if (row === undefined || row.status !== 'running' || row.lease_until === null) return false
    return 'owner' in condition ? row.owner === condition.owner : row.lease_until < condition.lapsedBefore
  }

  async requeue (runId: string, condition: { owner: string } | { lapsedBefore: number }, reason: 'SHUTDOWN' | 'INSTANCE_LOST', cancelled: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    if (!storable(runId, true)) return null
    const done = this.#write((statements, now) => {
      const row = statements.run.get({ runId, now })
      if (!SqliteRunStore.#lapsedOrOwned(row, condition)) return null
      const ending = cancelledRequeue(row.cancel_requested === 1, toRecord(row), cancelled)
      if (ending !== null) return this.#end(statements, row, ending.events, ending.end, retentionMs)
      const attempt = row.attempt + 1
      const lastSeq = this.#append(statements, row, [requeuedEvent(toRecord(row), attempt, reason)])
      const record = toRecord(statements.requeue.get(attempt, lastSeq, runId)!)
      return { record, heard: { runId, lastSeq, queue: statements.queueChanged.get()! } }
    })
    if (done === null) return null
    this.#tell(done.heard)
    return done.record
  }

  async abandon (runId: string, lapsedBefore: number, end: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    if (!storable(runId, true)) return null
    const done = this.#write((statements, now) => {
      const row = statements.run.get({ runId, now })
      if (!SqliteRunStore.#lapsedOrOwned(row, { lapsedBefore })) return null
      const ending = runningEnd(row.cancel_requested === 1, row.trace_id, [endedBeforeStartEvent(toRecord(row), end)], end)
      return this.#end(statements, row, ending.events, ending.end, retentionMs)
    })
    if (done === null) return null
    this.#tell(done.heard)
    return done.record
  }

  watchQueue (listener: () => void): () => void {
    if (this.closed) return () => {}
    this.#queueWatchers.add(listener)
    if (this.#queueTimer === null) {
      // read now, so that what another process queues from here on is heard at the next tick
      this.#queueSeen = this.#queueVersion()
      this.#queueTimer = unrefInterval(() => { this.#pollQueue() }, this.#pollMs)
    }
    return () => {
      this.#queueWatchers.delete(listener)
      this.#stopQueuePoll()
    }
  }

  #stopQueuePoll (): void {
    if (this.#queueTimer === null || this.#queueWatchers.size > 0) return
    clearInterval(this.#queueTimer)
    this.#queueTimer = null
  }

  /** The queue counter; null when it cannot be read (a busy or closed database: the next tick tries again). */
  #queueVersion (): number | null {
    try {
      return this.#statements().queueVersion.get() ?? 0
    } catch {
      return null
    }
  }

  #pollQueue (): void {
    const version = this.#queueVersion()
    if (version === null || version === this.#queueSeen) return
    // a first read after a failed one is told too: a wake-up too many costs one claim
    this.#queueSeen = version
    this.#notifyQueue()
  }

  #notifyQueue (): void {
    for (const listener of [...this.#queueWatchers]) listener()
  }

  /**
   * Inserts what a batch brings that the log does not hold yet (see unheldEvents: a retried write is acknowledged
   * again; the rest must follow the log); returns the new lastSeq (the caller stores it).
   */
  #append (statements: Statements, row: LogRow, batch: readonly StoredEvent[]): number {
    const first = batch[0]?.seq ?? 0
    const count = heldCount(first, batch.length, row.last_seq)
    const events = unheldEvents(row.run_id, row.last_seq, batch, count === 0 ? [] : statements.held.all(row.run_id, first, count))
    statements.insertEvents(row.run_id, events)
    return row.last_seq + events.length
  }

  /** The run, unless it is gone or ended (nothing to write); throws, as the lease's loser's, unless `owner` runs it. */
  static #owned<R extends LogRow> (row: R | undefined, owner: string): R | undefined {
    if (row === undefined || isEnded(row.status)) return undefined
    if (row.status !== 'running' || row.owner !== owner) throw new RunLeaseLostError(row.run_id)
    return row
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string): Promise<void> {
    if (!storable(runId, true)) return
    checkBatch(runId, events)
    checkEvents(BACKEND, true, events)
    if (events.length === 0) {
      // nothing to write, but a writer that lost its lease hears it all the same
      SqliteRunStore.#owned(this.#statements().run.get({ runId, now: Date.now() }), owner)
      return
    }
    this.#use()
    await this.#grouped(runId, (statements, now) => {
      const row = SqliteRunStore.#owned(statements.logRun.get({ runId, now }), owner)
      if (row === undefined) return { value: undefined }
      const lastSeq = this.#append(statements, row, events)
      // all of it held already: a retry acknowledged, nothing new
      if (lastSeq === row.last_seq) return { value: undefined }
      statements.lastSeq.run(lastSeq, runId)
      return { value: undefined, heard: { runId, lastSeq } }
    })
  }

  /** Ends the run (its status checked by the caller) with its last events, and gives its session back: one transaction. */
  #end (statements: Statements, row: RunRow, events: readonly StoredEvent[], end: RunEnd, retentionMs: number): { record: RunRecord, heard: Heard } {
    const lastSeq = this.#append(statements, row, events)
    const endedAt = toMs('endedAt', end.endedAt)
    const ended = statements.end.get({
      runId: row.run_id,
      status: end.status,
      endedAt,
      result: end.result === undefined ? null : JSON.stringify(end.result),
      error: end.error === undefined ? null : JSON.stringify(end.error),
      expiresAt: endedAt + retentionMs,
      lastSeq
    })!
    const freed = row.session_id !== null && statements.release.run(row.session_id, row.run_id).changes === 1 ? row.session_id : null
    const heard: Heard = { runId: row.run_id, lastSeq, freed }
    // a queued background run may have waited for this session
    if (freed !== null && statements.waiting.get(freed) !== undefined) heard.queue = statements.queueChanged.get()!
    return { record: toRecord(ended), heard }
  }

  async finish (runId: string, events: readonly StoredEvent[], end: RunEnd, retentionMs: number, owner: string): Promise<RunRecord | null> {
    if (!storable(runId, true)) return null
    checkBatch(runId, events)
    checkEvents(BACKEND, true, events)
    this.#use()
    return this.#grouped(runId, (statements, now) => {
      const row = statements.run.get({ runId, now })
      // a queued run has nothing to finish (an old owner's late finish after a requeue lands here too)
      if (row === undefined || row.status === 'queued') return { value: null }
      const owned = SqliteRunStore.#owned(row, owner)
      if (owned === undefined) return { value: null }
      // cancel and finish are one compare-and-set: a cancel requested first wins
      const ending = runningEnd(owned.cancel_requested === 1, owned.trace_id, events, end)
      const { record, heard } = this.#end(statements, owned, ending.events, ending.end, retentionMs)
      return { value: record, heard }
    }, true)
  }

  async get (runId: string): Promise<RunRecord | null> {
    const statements = this.#statements()
    if (!storable(runId, true)) return null
    const row = statements.run.get({ runId, now: Date.now() })
    return row === undefined ? null : toRecord(row)
  }

  async spec (runId: string): Promise<RunSpec | null> {
    const statements = this.#statements()
    if (!storable(runId, true)) return null
    const spec = statements.spec.get({ runId, now: Date.now() })
    return spec === undefined ? null : JSON.parse(spec) as RunSpec
  }

  async events (runId: string, afterSeq: number, limit: number): Promise<StoredEvent[]> {
    const statements = this.#statements()
    if (!storable(runId, true) || statements.alive.get({ runId, now: Date.now() }) === undefined) return []
    return statements.events.all(runId, afterSeq, limit)
  }

  async cancel (runId: string, end: RunEnd, retentionMs: number): Promise<CancelRunResult> {
    if (!storable(runId, true)) return { outcome: 'not_found' }
    const result = this.#write((statements, now): { result: CancelRunResult, heard?: Heard } => {
      const row = statements.run.get({ runId, now })
      if (row === undefined) return { result: { outcome: 'not_found' } }
      if (isEnded(row.status)) return { result: { outcome: 'ended', record: toRecord(row) } }
      if (row.status === 'queued') {
        const { record, heard } = this.#end(statements, row, [endedBeforeStartEvent(toRecord(row), end)], end, retentionMs)
        return { result: { outcome: 'cancelled', record }, heard }
      }
      const record = toRecord(statements.requestCancel.get(runId)!)
      return { result: { outcome: 'requested', record }, heard: { runId, cancel: true } }
    })
    if (result.heard !== undefined) this.#tell(result.heard)
    return result.result
  }

  watch (runId: string, listener: (change: RunChange) => void): () => void {
    return this.#hub.watch(runId, listener)
  }

  watchSession (sessionId: string, listener: () => void): () => void {
    return this.#hub.watchSession(sessionId, listener)
  }

  async listBySession (sessionId: string, query: { limit: number, cursor?: string }): Promise<RunPage> {
    return this.#page({ sessionId }, query.limit, query.cursor)
  }

  async list (query: RunListQuery): Promise<RunPage> {
    return this.#page({ sessionId: query.sessionId, agent: query.agent, status: query.status, principal: query.principal }, query.limit, query.cursor)
  }

  #page (filters: ListFilters, limitOption: number, cursor: string | undefined): RunPage {
    const statements = this.#statements()
    const limit = checkLimit(limitOption, MAX_RUN_LIST_LIMIT)
    const before = cursor === undefined ? Number.MAX_SAFE_INTEGER : Number(decodeSeqCursor(cursor))
    const values: Record<string, unknown> = { now: Date.now(), before, limit: limit + 1 }
    for (const [name, value] of Object.entries(filters)) if (value !== undefined) values[name] = value
    const rows = statements.list(filters).all(values)
    const page = rows.slice(0, limit)
    const last = page.at(-1)
    return {
      runs: page.map(toRecord),
      nextCursor: rows.length > limit && last !== undefined ? encodeSeqCursor(last.created_seq) : null
    }
  }

  async delete (runId: string): Promise<boolean> {
    this.#statements()
    if (!storable(runId, true)) return false
    return this.#write((statements) => {
      if (statements.deleteEnded.run({ runId, now: Date.now() }).changes === 0) return false
      statements.clearEvents.run(runId)
      return true
    })
  }

  async purge (now: number, batch: number): Promise<number> {
    this.#statements()
    if (batch < 1) return 0
    return this.#write((statements) => {
      const doomed = statements.doomed.all(now, batch)
      for (const runId of doomed) {
        statements.clearEvents.run(runId)
        statements.deleteRun.run(runId)
      }
      return doomed.length
    })
  }

  #pollRuns (runIds: string[]): RunState[] {
    const statements = this.#statements()
    const states: RunState[] = []
    for (const runId of runIds) {
      const row = statements.state.get(runId)
      if (row !== undefined) states.push({ runId, lastSeq: row.last_seq, cancelRequested: row.cancel_requested === 1 })
    }
    return states
  }

  #pollSessions (sessionIds: string[]): string[] {
    const statements = this.#statements()
    return sessionIds.filter((sessionId) => {
      const holder = statements.holder.get(sessionId)
      return holder === undefined || holder.status === null || isEnded(holder.status)
    })
  }

  /** For health checks: creates the tables and statements if they are not yet, then `SELECT 1`. */
  override async probe (): Promise<void> {
    this.#use()
    await super.probe()
  }

  protected override stop (): void {
    this.#hub.close()
    this.#queueWatchers.clear()
    this.#stopQueuePoll()
  }
}

