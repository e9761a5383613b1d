// The SQLite run store: run records, event logs and session locks in three tables of the file (and a counter of
// queue changes in a fourth), every write one IMMEDIATE transaction; a run's log is kept in chunks, one row per run
// per group commit (docs/stores.md, "Group commit"). Watchers in this process hear this store's
// writes at once; writes made through another connection (another process on the same file) are only found by
// polling, every `pollIntervalMs`: SQLite has no notifications across connections.
import type Database from 'better-sqlite3'
import { checkTtl, iso, toMs, unrefInterval } from './common.js'
import { isEnded, meets, withinBudget } from './run-policy.js'
import type { RunCondition, StoredRun } from './run-policy.js'
import { BackedRunStore } from './run-store.js'
import type { RunBackend, RunEnded, RunFilters, Taken } from './run-store.js'
import { RunSignals } from './run-watch.js'
import type { RunState } from './run-watch.js'
import { GroupCommit } from './group-commit.js'
import { SqliteStore } from './sqlite-connection.js'
import type { SqliteSource, SqliteStoreOptions } from './sqlite-connection.js'
import type { NewRun, RunEnd, RunLease, RunRecord, RunSpec, RunStatus, StoredEvent } from './types.js'

type Db = Database.Database

export interface SqliteRunStoreOptions extends SqliteStoreOptions {
  /** how often watchers look for writes made through other connections (default 250 ms) */
  pollIntervalMs?: number
}

const POLL_MS = 250
/** Queued runs read per step of a claim, at least (runs whose session is busy are stepped over). */
const CLAIM_PAGE = 32
/** How long the log's writes gather before their transaction (a run's create and end do not wait): see #group. */
const GROUP_WINDOW_MS = 20
/** Events per chunk when the log of an earlier version is moved into chunks (see migrate). */
const MIGRATED_CHUNK = 256

interface RunRow {
  /** the run's place in the order of creation, and the key of its log's chunks */
  created_seq: number
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
  schedule_id: string | null
  scheduled_for: number | null
}

const COLUMNS = 'created_seq, run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at, ended_at, ' +
  'result, error, request_id, trace_id, owner, lease_until, detachable, cancel_requested, schedule_id, scheduled_for'

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
  if (row.schedule_id !== null) {
    record.scheduleId = row.schedule_id
    record.scheduledFor = iso(row.scheduled_for!)
  }
  return record
}

/**
 * A batch of events as one chunk of the log: the types and data one after the other in `body`, their lengths in
 * `sizes` (the text is kept as given: no encoding to undo, no JSON to parse).
 */
function toChunk (events: readonly StoredEvent[]): { sizes: string, body: string } {
  let sizes = ''
  let body = ''
  for (const event of events) {
    sizes += `${sizes === '' ? '' : ','}${event.type.length},${event.data.length}`
    body += event.type + event.data
  }
  return { sizes, body }
}

/** The events of a chunk whose first is `firstSeq`, from seq `from` on, pushed onto `into` until it holds `limit`. */
function fromChunk (chunk: { first_seq: number, sizes: string, body: string }, from: number, limit: number, into: StoredEvent[]): void {
  const sizes = chunk.sizes.split(',')
  let at = 0
  for (let i = 0, seq = chunk.first_seq; i < sizes.length && into.length < limit; i += 2, seq++) {
    const typeEnd = at + Number(sizes[i])
    const dataEnd = typeEnd + Number(sizes[i + 1])
    if (seq >= from) into.push({ seq, type: chunk.body.slice(at, typeEnd), data: chunk.body.slice(typeEnd, dataEnd) })
    at = dataEnd
  }
}

/**
 * A file of an earlier version kept each event in a row of `run_events`: its logs move into chunks, once, in one
 * transaction (the first process to open the file does it; the others find it done). Events of runs that are gone
 * are dropped with the table: nothing read them.
 */
function migrate (db: Db, prefix: string, insertChunk: Database.Statement<unknown[]>): void {
  const old = `${prefix}run_events`
  const exists = db.prepare<[string], number>("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").pluck()
  if (exists.get(old) === undefined) return
  db.transaction(() => {
    /* c8 ignore next: another process moved it between the look above and this transaction's lock */
    if (exists.get(old) === undefined) return
    const runs = db.prepare<[], { created_seq: number, run_id: string }>(
      `SELECT created_seq, run_id FROM "${prefix}runs" WHERE run_id IN (SELECT DISTINCT run_id FROM "${old}")`).all()
    const events = db.prepare<[string], StoredEvent>(`SELECT seq, type, data FROM "${old}" WHERE run_id = ? ORDER BY seq`)
    for (const run of runs) {
      const log = events.all(run.run_id)
      for (let i = 0; i < log.length; i += MIGRATED_CHUNK) {
        const chunk = log.slice(i, i + MIGRATED_CHUNK)
        const { sizes, body } = toChunk(chunk)
        insertChunk.run(run.created_seq, chunk[0]!.seq, chunk.at(-1)!.seq, sizes, body)
      }
    }
    db.exec(`DROP TABLE "${old}"`)
  }).immediate()
}

function runStatements (db: Db, prefix: string) {
  const runs = `"${prefix}runs"`
  const log = `"${prefix}run_log"`
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
      owner TEXT, lease_until INTEGER, detachable INTEGER NOT NULL DEFAULT 0, schedule_id TEXT, scheduled_for INTEGER);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_session" ON ${runs} (session_id, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_agent" ON ${runs} (agent, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_status" ON ${runs} (status, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_principal" ON ${runs} (principal, created_seq);
    CREATE INDEX IF NOT EXISTS "${prefix}runs_expires" ON ${runs} (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX IF NOT EXISTS "${prefix}runs_lease" ON ${runs} (status, lease_until) WHERE status = 'running';
    CREATE INDEX IF NOT EXISTS "${prefix}runs_waiting" ON ${runs} (session_id) WHERE status = 'queued' AND detachable = 1;
    CREATE INDEX IF NOT EXISTS "${prefix}runs_live" ON ${runs} (run_id, expires_at);
    CREATE TABLE IF NOT EXISTS ${log} (
      run INTEGER NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, sizes TEXT NOT NULL, body TEXT NOT NULL);
    CREATE UNIQUE INDEX IF NOT EXISTS "${prefix}run_log_seq" ON ${log} (run, last_seq);
    CREATE TABLE IF NOT EXISTS ${sessions} (session_id TEXT PRIMARY KEY, run_id TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ${queue} (id INTEGER PRIMARY KEY, version INTEGER NOT NULL);
  `)
  // a schedule's fire (docs/schedules.md), added to a table made before schedules: its runs have neither
  const columns = db.prepare<[], { name: string }>(`SELECT name FROM pragma_table_info('${prefix}runs')`).all()
  if (!columns.some((column) => column.name === 'schedule_id')) db.exec(`ALTER TABLE ${runs} ADD COLUMN schedule_id TEXT; ALTER TABLE ${runs} ADD COLUMN scheduled_for INTEGER`)
  // Chunks go to the end of the table (rowids in the order of writing: one group's chunks share their pages), and
  // the index finds a run's by seq (runs keyed by created_seq: the runs streaming at once sit side by side in it).
  const insertChunk = db.prepare<unknown[]>(`INSERT INTO ${log} (run, first_seq, last_seq, sizes, body) VALUES (?, ?, ?, ?, ?)`)
  migrate(db, prefix, insertChunk)
  const chunks = db.prepare<[number, number], { first_seq: number, sizes: string, body: string }>(
    `SELECT first_seq, sizes, body FROM ${log} WHERE run = ? AND last_seq > ? ORDER BY last_seq`)
  const live = '(expires_at IS NULL OR expires_at > @now)'
  const lists = new Map<string, Database.Statement<[Record<string, unknown>], RunRow>>()
  const statements = {
    run: db.prepare<[{ runId: string, now: number }], RunRow>(`SELECT ${COLUMNS} FROM ${runs} WHERE run_id = @runId AND ${live}`),
    spec: db.prepare<[{ runId: string, now: number }], string>(`SELECT spec FROM ${runs} WHERE run_id = @runId AND ${live}`).pluck(),
    // whether the run is there, from runs_live alone: expires_at sits after the result in the row, and reading it
    // there walks the whole result (a run of many large deltas has a large one) at every page a follower reads
    // (created_seq is the rowid, in every index)
    alive: db.prepare<[{ runId: string, now: number }], number>(`SELECT created_seq FROM ${runs} INDEXED BY "${prefix}runs_live" WHERE run_id = @runId AND ${live}`).pluck(),
    insert: db.prepare<[Record<string, unknown>]>(`
      INSERT OR REPLACE INTO ${runs} (run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at,
        started_at, request_id, trace_id, spec, ephemeral, owner, lease_until, detachable, schedule_id, scheduled_for)
      VALUES (@runId, @agent, @sessionId, @principal, @status, @background, @attempt, @lastSeq, @createdAt, @startedAt, @requestId,
        @traceId, @spec, @ephemeral, @owner, @leaseUntil, @detachable, @scheduleId, @scheduledFor)`),
    // the log of a run past its retention whose id a new run takes
    clearLogOf: db.prepare<[string]>(`DELETE FROM ${log} WHERE run = (SELECT created_seq FROM ${runs} WHERE run_id = ?)`),
    clearLog: db.prepare<[number]>(`DELETE FROM ${log} WHERE run = ?`),
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
    queued: db.prepare<[number, number], RunRow>(`
      SELECT ${COLUMNS} FROM ${runs} WHERE status = 'queued' AND detachable = 1 AND created_seq > ?
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
    lastSeq: db.prepare<[number, number]>(`UPDATE ${runs} SET last_seq = ? WHERE created_seq = ?`),
    // an append's condition and its new last seq in one statement: the key of its chunks, or nothing (not written)
    appendTo: db.prepare<[{ runId: string, owner: string, lastSeq: number, next: number, now: number }], number>(`
      UPDATE ${runs} SET last_seq = @next
      WHERE run_id = @runId AND status = 'running' AND owner = @owner AND last_seq = @lastSeq AND ${live}
      RETURNING created_seq`).pluck(),
    end: db.prepare<[Record<string, unknown>], RunRow>(`
      UPDATE ${runs} SET status = @status, ended_at = @endedAt, result = @result, error = @error, expires_at = @expiresAt,
        last_seq = @lastSeq
      WHERE run_id = @runId RETURNING ${COLUMNS}`),
    requestCancel: db.prepare<[string], RunRow>(`UPDATE ${runs} SET cancel_requested = 1 WHERE run_id = ? RETURNING ${COLUMNS}`),
    state: db.prepare<[string], { last_seq: number, cancel_requested: number }>(`SELECT last_seq, cancel_requested FROM ${runs} WHERE run_id = ?`),
    doomed: db.prepare<[number, number], number>(`SELECT created_seq FROM ${runs} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`).pluck(),
    deleteRun: db.prepare<[number]>(`DELETE FROM ${runs} WHERE created_seq = ?`),
    deleteEnded: db.prepare<[{ runId: string, now: number }], number>(`
      DELETE FROM ${runs} WHERE run_id = @runId AND status NOT IN ('queued', 'running') AND ${live} RETURNING created_seq`).pluck(),
    /** A batch as one chunk of the log of the run `run` (its created_seq). */
    insertEvents (run: number, batch: readonly StoredEvent[]): void {
      if (batch.length === 0) return
      const { sizes, body } = toChunk(batch)
      insertChunk.run(run, batch[0]!.seq, batch.at(-1)!.seq, sizes, body)
    },
    /** At most `limit` events of the run `run` after `afterSeq`, in order, within `budget`, from the chunks that hold them. */
    events (run: number, afterSeq: number, limit: number, budget: number): StoredEvent[] {
      const found: StoredEvent[] = []
      let taken = 0
      // chunks are read one by one, and no further than the page needs
      for (const chunk of chunks.iterate(run, afterSeq)) {
        const from = found.length
        fromChunk(chunk, afterSeq + 1, limit, found)
        for (let i = from; i < found.length; i++) taken += found[i]!.data.length
        if (found.length >= limit || taken >= budget) break
      }
      return withinBudget(found, budget)
    },
    list (filters: RunFilters): Database.Statement<[Record<string, unknown>], RunRow> {
      const key = `${filters.sessionId !== undefined}${filters.agent !== undefined}${filters.status !== undefined}${filters.principal !== undefined}`
      let statement = lists.get(key)
      if (statement === undefined) {
        // one statement per combination of filters: `(@x IS NULL OR x = @x)` would keep SQLite off the indexes
        statement = db.prepare(`
          SELECT ${COLUMNS} FROM ${runs}
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
}

function prepare (db: Db, prefix: string): Prepared {
  const statements = runStatements(db, prefix)
  const transaction = db.transaction((fn: (statements: Statements, now: number) => unknown) => fn(statements, Date.now()))
  return {
    statements,
    write: <T>(fn: (statements: Statements, now: number) => T): T => transaction.immediate(fn) as T
  }
}

function toState (row: RunRow): StoredRun {
  return {
    record: toRecord(row),
    detachable: row.detachable === 1,
    cancelRequested: row.cancel_requested === 1,
    lease: row.status === 'running' && row.owner !== null && row.lease_until !== null ? { owner: row.owner, until: row.lease_until } : null
  }
}

function rowMeets (row: RunRow | undefined, condition: RunCondition): row is RunRow {
  return row !== undefined && meets({
    status: row.status, lastSeq: row.last_seq, owner: row.owner, leaseUntil: row.lease_until, cancelRequested: row.cancel_requested === 1
  }, condition)
}

/** A log write of one run waiting for its group: what it does inside the group's transaction. */
interface Grouped {
  runId: string
  /** its value, and the queue counter when the write gave claimers something new */
  write: (statements: Statements, now: number) => { value: unknown, queue?: number }
}

class SqliteRunBackend extends SqliteStore implements RunBackend {
  readonly name = 'SQLite'
  readonly text = 'utf8'
  readonly signals: RunSignals
  readonly #pollMs: number
  #queueTimer: NodeJS.Timeout | null = null
  /** the queue counter as last seen (null: not read yet) */
  #queueSeen: number | null = null
  #prepared: Prepared | null = null
  /**
   * The log's writes (append, end) and the runs' creates, every run's, go in one transaction every GROUP_WINDOW_MS,
   * a run's create and end at the end of the turn: better-sqlite3 writes synchronously, so nothing is ever in flight to
   * gather behind, and each commit writes every page it changed to the WAL (the group's chunks share theirs).
   */
  readonly group = new GroupCommit<Grouped, unknown>({
    write: (items) => this.#writeGroup(items),
    key: (item) => item.runId,
    start: 'tick',
    windowMs: GROUP_WINDOW_MS
  })

  constructor (source: SqliteSource, options: SqliteRunStoreOptions = {}) {
    super(source, options)
    this.#pollMs = options.pollIntervalMs === undefined ? POLL_MS : checkTtl('pollIntervalMs', options.pollIntervalMs)
    this.signals = new RunSignals({
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

  check (): void {
    this.#use()
  }

  #writeGroup (items: readonly Grouped[]): Array<unknown> {
    // each write checks its own condition (none throws for a run's sake): what throws, throws for the whole group
    const done = this.#write((statements, now) => items.map((item) => item.write(statements, now)))
    return done.map((result) => {
      if (result.queue !== undefined) this.#queued(result.queue)
      return result.value
    })
  }

  /** One run's log write, in the next group's transaction (`urgent`: at the end of this turn). */
  async #grouped<T> (runId: string, write: (statements: Statements, now: number) => { value: T, queue?: number }, urgent = false): Promise<T> {
    return await this.group.add({ runId, write }, urgent) as T
  }

  /** The queue counter a committed write moved: heard here at once, so the poll need not tell it again. */
  #queued (version: number): void {
    this.#queueSeen = version
  }

  /** The session for `runId`, unless another run that has not ended holds it: then that run's id. */
  #take (statements: Statements, sessionId: string | null, runId: string): string | null {
    if (sessionId === null) return null
    const holder = statements.holder.get(sessionId)
    if (holder !== undefined && holder.run_id !== runId && holder.status !== null && !isEnded(holder.status)) return holder.run_id
    statements.take.run(sessionId, runId)
    return null
  }

  async insert (run: NewRun, takeSession: boolean): Promise<string | null> {
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
      detachable: run.detachable ? 1 : 0,
      scheduleId: record.scheduleId ?? null,
      scheduledFor: record.scheduledFor === undefined ? null : toMs('scheduledFor', record.scheduledFor)
    }
    this.#use()
    // in the next group, at the end of this turn: a run streaming at once is created in its first events' commit
    return this.#grouped(record.runId, (statements): { value: string | null, queue?: number } => {
      if (takeSession) {
        const holder = this.#take(statements, record.sessionId, record.runId)
        if (holder !== null) return { value: holder }
      }
      // a run created under the id of one past its retention (not purged yet) starts afresh: new record (and place
      // in the lists), empty log
      statements.clearLogOf.run(record.runId)
      statements.insert.run(values)
      return record.status === 'queued' && run.detachable ? { value: null, queue: statements.queueChanged.get()! } : { value: null }
    }, true)
  }

  read (runId: string): StoredRun | null {
    const row = this.#statements().run.get({ runId, now: Date.now() })
    return row === undefined ? null : toState(row)
  }

  spec (runId: string): RunSpec | null {
    const spec = this.#statements().spec.get({ runId, now: Date.now() })
    return spec === undefined ? null : JSON.parse(spec) as RunSpec
  }

  events (runId: string, afterSeq: number, limit: number, budget: number): StoredEvent[] {
    const statements = this.#statements()
    const run = statements.alive.get({ runId, now: Date.now() })
    return run === undefined ? [] : statements.events(run, afterSeq, limit, budget)
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string, lastSeq: number, urgent = false): Promise<number | null> {
    this.#use()
    const next = lastSeq + events.length
    // urgent (a durable step waits for it): at the end of this turn, not after the window
    return this.#grouped(runId, (statements, now) => {
      const run = statements.appendTo.get({ runId, owner, lastSeq, next, now })
      if (run === undefined) return { value: null }
      statements.insertEvents(run, events)
      return { value: next }
    }, urgent)
  }

  async end (runId: string, condition: RunCondition, events: readonly StoredEvent[], end: RunEnd, expiresAt: number): Promise<RunEnded | null> {
    this.#use()
    return this.#grouped(runId, (statements, now): { value: RunEnded | null, queue?: number } => {
      const row = statements.run.get({ runId, now })
      if (!rowMeets(row, condition)) return { value: null }
      statements.insertEvents(row.created_seq, events)
      const ended = statements.end.get({
        runId,
        status: end.status,
        endedAt: toMs('endedAt', end.endedAt),
        result: end.result === undefined ? null : JSON.stringify(end.result),
        error: end.error === undefined ? null : JSON.stringify(end.error),
        expiresAt,
        lastSeq: row.last_seq + events.length
      })!
      const freed = row.session_id !== null && statements.release.run(row.session_id, runId).changes === 1 ? row.session_id : null
      // a queued background run may have waited for this session
      const queueWaits = freed !== null && statements.waiting.get(freed) !== undefined
      const value = { record: toRecord(ended), freed, queueWaits }
      return queueWaits ? { value, queue: statements.queueChanged.get()! } : { value }
    }, true)
  }

  start (runId: string, startedAt: string, lease: RunLease): Taken | null {
    const values = { runId, startedAt: toMs('startedAt', startedAt), owner: lease.owner, until: lease.until }
    return this.#write((statements, now): Taken | null => {
      const row = statements.run.get({ runId, now })
      if (row === undefined || row.status !== 'queued') return null
      const holder = this.#take(statements, row.session_id, runId)
      return holder !== null ? { holder } : { record: toRecord(statements.start.get(values)!) }
    })
  }

  requeue (runId: string, condition: RunCondition, event: StoredEvent): RunRecord | null {
    const done = this.#write((statements, now) => {
      const row = statements.run.get({ runId, now })
      if (!rowMeets(row, condition)) return null
      statements.insertEvents(row.created_seq, [event])
      const record = toRecord(statements.requeue.get(row.attempt + 1, row.last_seq + 1, runId)!)
      return { record, queue: statements.queueChanged.get()! }
    })
    if (done === null) return null
    this.#queued(done.queue)
    return done.record
  }

  reopen (runId: string, condition: RunCondition, event: StoredEvent, run: NewRun, takeSession: boolean): Taken | null {
    const { record } = run
    const values = {
      runId,
      startedAt: toMs('startedAt', record.startedAt!),
      requestId: record.requestId,
      traceId: record.traceId,
      spec: JSON.stringify(run.spec),
      owner: run.lease?.owner ?? null,
      leaseUntil: run.lease?.until ?? null,
      detachable: run.detachable ? 1 : 0
    }
    return this.#write((statements, now): Taken | null => {
      const row = statements.run.get({ runId, now })
      if (!rowMeets(row, condition)) return null
      if (takeSession) {
        const holder = this.#take(statements, row.session_id, runId)
        if (holder !== null) return { holder }
      }
      statements.insertEvents(row.created_seq, [event])
      statements.lastSeq.run(row.last_seq + 1, row.created_seq)
      return { record: toRecord(statements.reopen.get(values)!) }
    })
  }

  requestCancel (runId: string): RunRecord | null {
    return this.#write((statements, now) => {
      const row = statements.run.get({ runId, now })
      return row?.status === 'running' ? toRecord(statements.requestCancel.get(runId)!) : null
    })
  }

  claim (lease: RunLease, startedAt: string, limit: number): RunRecord[] {
    const startedMs = toMs('startedAt', startedAt)
    // read in pages (better-sqlite3 runs no statement while another's rows are being read): most queued runs are
    // claimable, so one page is usually all it takes; runs whose session is busy are stepped over
    const page = Math.max(limit, CLAIM_PAGE)
    return this.#write((statements) => {
      const claimed: RunRecord[] = []
      let after = 0
      for (;;) {
        const rows = statements.queued.all(after, page)
        for (const row of rows) {
          if (this.#take(statements, row.session_id, row.run_id) !== null) continue
          claimed.push(toRecord(statements.start.get({ runId: row.run_id, startedAt: startedMs, owner: lease.owner, until: lease.until })!))
          if (claimed.length === limit) return claimed
        }
        if (rows.length < page) return claimed
        after = rows.at(-1)!.created_seq
      }
    })
  }

  renew (owner: string, runIds: readonly string[], until: number): string[] {
    return this.#write((statements) => runIds.filter((runId) => statements.renew.run(until, runId, owner).changes === 1))
  }

  lapsed (now: number, limit: number): StoredRun[] {
    return this.#statements().lapsed.all(now, limit).map(toState)
  }

  page (filters: RunFilters, before: string | null, limit: number): Array<{ record: RunRecord, place: number }> {
    const statements = this.#statements()
    const values: Record<string, unknown> = { now: Date.now(), before: before === null ? Number.MAX_SAFE_INTEGER : Number(before), limit }
    for (const [name, value] of Object.entries(filters)) if (value !== undefined) values[name] = value
    return statements.list(filters).all(values).map((row) => ({ record: toRecord(row), place: row.created_seq }))
  }

  remove (runId: string): boolean {
    return this.#write((statements) => {
      const run = statements.deleteEnded.get({ runId, now: Date.now() })
      if (run === undefined) return false
      statements.clearLog.run(run)
      return true
    })
  }

  purge (now: number, batch: number): number {
    return this.#write((statements) => {
      const doomed = statements.doomed.all(now, batch)
      for (const run of doomed) {
        statements.clearLog.run(run)
        statements.deleteRun.run(run)
      }
      return doomed.length
    })
  }

  listen (): void {
    if (this.closed || this.#queueTimer !== null || !this.signals.queueWatched) return
    // read now, so that what another process queues from here on is heard at the next tick
    this.#queueSeen = this.#queueVersion()
    this.#queueTimer = unrefInterval(() => { this.#pollQueue() }, this.#pollMs)
  }

  #stopQueuePoll (): void {
    if (this.#queueTimer === null) return
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
    if (!this.signals.queueWatched) {
      this.#stopQueuePoll()
      return
    }
    const version = this.#queueVersion()
    if (version === null || version === this.#queueSeen) return
    // a first read after a failed one is told too: a wake-up too many costs one claim
    this.#queueSeen = version
    this.signals.queue()
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
    this.signals.close()
    this.#stopQueuePoll()
  }
}

export class SqliteRunStore extends BackedRunStore {
  readonly #sqlite: SqliteRunBackend

  constructor (source: SqliteSource, options: SqliteRunStoreOptions = {}) {
    const backend = new SqliteRunBackend(source, options)
    super(backend)
    this.#sqlite = backend
  }

  /** Groups written so far (each one transaction): what the tests and the bench count. */
  get groupWrites (): number {
    return this.#sqlite.group.writes
  }

  get ownsConnection (): boolean {
    return this.#sqlite.ownsConnection
  }

  async probe (): Promise<void> {
    await this.#sqlite.probe()
  }
}
