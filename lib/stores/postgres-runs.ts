// The PostgreSQL run store, shared by every instance on the database: run records, event logs and session locks
// in three tables. A write is one statement (append, finish, create, renew) or one short transaction (start,
// cancel, claim, requeue, abandon); the NOTIFY that tells the other instances is sent from inside it, so it is
// delivered when the write commits. Each store LISTENs on one connection of its own; a poll every
// `pollIntervalMs` makes up for what it missed (the queue's watchers have the worker's own poll instead).
import { createHash, randomBytes } from 'node:crypto'
import type { Pool, PoolClient } from 'pg'
import { checkTtl, iso, toMs } from './common.js'
import { RUN_POLL_MS, checkNewRun, isEnded, storable } from './run-policy.js'
import type { RunCondition, StoredRun } from './run-policy.js'
import { BackedRunStore } from './run-store.js'
import type { RunBackend, RunEnded, RunFilters, Taken } from './run-store.js'
import { RunSignals } from './run-watch.js'
import type { RunState } from './run-watch.js'
import { PostgresStore, UNWRAPPED, jsonbRefuses, named } from './postgres-connection.js'
import type { NamedStatement, PostgresSource, PostgresStoreOptions } from './postgres-connection.js'
import { PgListener, transaction } from './postgres-clients.js'
import { GroupCommit } from './group-commit.js'
import { pgArray, pgColumns } from './postgres-arrays.js'
import type { ArrayType } from './postgres-arrays.js'
import type { CreateRunResult, EndTurn, Message, NewRun, NewSession, RunEnd, RunLease, RunRecord, RunSpec, RunStatus, SessionStore, StoredEvent } from './types.js'

/** The session store a run store writes a run's fresh session with (PostgresSessionStore: postgresStores pairs them). */
interface FreshSessions {
  freshSessions(sessions: ReadonlyArray<{ session: NewSession, ttlMs: number }>, first: number): Promise<{ text: string, values: unknown[] }>
  turnsFrom(rows: string): Promise<string>
}

/** A run with its fresh session, waiting for its group's statement. */
interface Creating {
  run: NewRun
  session: NewSession
  ttlMs: number
  sessions: FreshSessions
}

export interface PostgresRunStoreOptions extends PostgresStoreOptions {
  /** how often watchers poll for what a lost notification did not tell them (default 1,000 ms) */
  pollIntervalMs?: number
}

/** pg's escapeLiteral, without loading pg for it (the channel is plain ASCII). */
const literal = (value: string): string => `'${value.replace(/'/g, "''")}'`
/** How many times a session lock is tried while its holder changes under the attempt (a race, not a wait). */
const TAKE_ATTEMPTS = 5

interface RunRow {
  run_id: string
  agent: string
  session_id: string | null
  principal: string
  status: RunStatus
  background: boolean
  attempt: number
  last_seq: number
  created_at: Date
  started_at: Date | null
  ended_at: Date | null
  result: string | null
  error: string | null
  request_id: string
  trace_id: string
  schedule_id: string | null
  scheduled_for: Date | null
}

const COLUMNS = 'run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at, ended_at, ' +
  'result, error, request_id, trace_id, schedule_id, scheduled_for'

/**
 * What an end's statement gives back: its result and error are the end's own (the caller has them), not sent back
 * and parsed again (docs/stores.md, "Round trips").
 */
const ENDED_COLUMNS = COLUMNS.split(', ').map((name) => name === 'result' || name === 'error' ? `NULL::text AS ${name}` : `r.${name}`).join(', ')

function toRecord (row: RunRow): RunRecord {
  const record: RunRecord = {
    runId: row.run_id,
    agent: row.agent,
    sessionId: row.session_id,
    principal: row.principal,
    status: row.status,
    background: row.background,
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

interface Holder { run_id: string, status: RunStatus | null }

type LeasedRow = RunRow & { owner: string | null, lease_until: Date | null, detachable: boolean, cancel_requested: boolean }

/** The lease's columns, for a run that starts under it (or a queued one, without). */
function leaseValues (lease: RunLease | null): [string | null, Date | null] {
  return lease === null ? [null, null] : [lease.owner, new Date(lease.until)]
}

type Queryable = Pick<Pool, 'query'> | Pick<PoolClient, 'query'>

/** A run ended by `#end`: the session it gave back, and whether a queued detachable run waits for that session. */
type Ended = RunRow & { freed: string | null, queue_waits: boolean }

function noop (): void {}

/** A run's end waiting for its group's statement: as `end`'s arguments. */
interface Ending {
  runId: string
  condition: RunCondition
  events: readonly StoredEvent[]
  end: RunEnd
  expiresAt: number
  /** its session's turn, written with it (PostgresRunStore.turnWithEnd) */
  turn: EndTurn | undefined
}

/** The create group's columns, `$1` to `$19` (see #values). */
const CREATE_TYPES: readonly ArrayType[] = [
  'text', 'text', 'text', 'text', 'text', 'bool', 'int4', 'int4', 'timestamptz', 'timestamptz', 'text', 'text', 'text', 'bool',
  'bool', 'text', 'timestamptz', 'text', 'timestamptz'
]
/** The end group's columns, `$1` to `$12` (run, status, end, result, error, expiry, events' count, its condition) */
const END_TYPES: readonly ArrayType[] = ['text', 'text', 'timestamptz', 'text', 'text', 'timestamptz', 'int4', 'text', 'int4', 'text', 'timestamptz', 'bool']
/** The appends group's runs, `$1` to `$4`: run, events' count, the lastSeq they follow, owner */
const APPEND_TYPES: readonly ArrayType[] = ['text', 'int4', 'int4', 'text']

/** The events of a group's runs, as the appends' and the ends' statements take them: run, seq, type, data. */
function eventColumns (items: ReadonlyArray<{ runId: string, events: readonly StoredEvent[] }>): Buffer[] {
  const runIds: string[] = []
  const seqs: number[] = []
  const types: string[] = []
  const data: string[] = []
  for (const { runId, events } of items) {
    for (const event of events) {
      runIds.push(runId)
      seqs.push(event.seq)
      types.push(event.type)
      data.push(event.data)
    }
  }
  return [pgArray('text', runIds), pgArray('int4', seqs), pgArray('text', types), pgArray('text', data)]
}

/**
 * A group whose items must not meet in one statement when they share a key (one row written twice): the first item
 * of each key go in one write, each later one after, on its own, its statement's failure its own. An item whose key
 * is undefined shares nothing.
 */
async function keysApart<I, R> (items: readonly I[], key: (item: I) => string | null | undefined, write: (items: readonly I[]) => Promise<ReadonlyArray<R | Error>>): Promise<Array<R | Error>> {
  const keys = new Set<string | null>()
  const later = new Set<I>()
  for (const item of items) {
    const itemKey = key(item)
    if (itemKey === undefined) continue
    if (keys.has(itemKey)) later.add(item)
    else keys.add(itemKey)
  }
  if (later.size === 0) return [...await write(items)]
  const outcomes = new Map<I, R | Error>()
  const first = items.filter((item) => !later.has(item))
  for (const [i, outcome] of (await write(first)).entries()) outcomes.set(first[i]!, outcome)
  for (const item of later) outcomes.set(item, await write([item]).then(([outcome]) => outcome!, (error: Error) => error))
  return items.map((item) => outcomes.get(item)!)
}

/** One run's batch waiting for its group's statement. */
interface Appending {
  runId: string
  events: readonly StoredEvent[]
  owner: string
  /** the log's lastSeq the batch follows */
  lastSeq: number
}

/**
 * A NOTIFY payload holds 8,000 bytes: a group's notification names its runs (JSON), so a group holds runs whose
 * ids fit, with room to spare for the seqs and the brackets.
 */
const NOTIFY_BYTES = 7_000
/**
 * How long a group of appends gathers before its statement, at least: what a statement costs both sides is mostly
 * per statement and per run, so a run streaming a delta per tick is written a few deltas at a time.
 */
const GROUP_WINDOW_MS = 5
const notifyWeight = (item: Appending): number => Buffer.byteLength(JSON.stringify(item.runId)) + 16

/* c8 ignore next 3 */
function lockRaceError (sessionId: string): Error {
  return new Error(`session ${JSON.stringify(sessionId)}: its lock changed hands ${TAKE_ATTEMPTS} times during one call`)
}

/** The condition of a write (see RunCondition), as parameters $from.. of its statement: status, lastSeq, owner, lapse, cancel. */
function conditionValues (condition: RunCondition): unknown[] {
  return [
    condition.status, condition.lastSeq ?? null, condition.owner ?? null,
    condition.lapsedBefore === undefined ? null : new Date(condition.lapsedBefore), condition.cancelRequested ?? null
  ]
}

function toState (row: LeasedRow): StoredRun {
  return {
    record: toRecord(row),
    detachable: row.detachable,
    cancelRequested: row.cancel_requested,
    lease: row.status === 'running' && row.owner !== null && row.lease_until !== null ? { owner: row.owner, until: row.lease_until.getTime() } : null
  }
}

class PostgresRunBackend extends PostgresStore implements RunBackend {
  readonly name = 'PostgreSQL'
  readonly text = 'utf8-no-nul'
  /** NOTIFY channel shared by every instance using this schema and prefix (a hash keeps it under 63 bytes). */
  readonly channel: string
  readonly signals: RunSignals
  readonly #runs: string
  readonly #events: string
  readonly #sessions: string
  readonly #sql: ReturnType<typeof statements>
  readonly #listener: PgListener
  /** Names this store in its queue notifications: it tells its own watchers at once, and ignores its echo. */
  readonly #nonce = randomBytes(6).toString('hex')
  /**
   * The appends that come while one is in flight go together in the next one, every run's in one statement (and
   * one NOTIFY): see docs/stores.md, "Group commit".
   */
  readonly appends = new GroupCommit<Appending, number | null>({
    write: async (items) => this.#appendGroup(items),
    key: (item) => item.runId,
    weigh: notifyWeight,
    maxWeight: NOTIFY_BYTES,
    windowMs: GROUP_WINDOW_MS
  })

  /**
   * The runs' ends that come while one is in flight go together in the next one: concurrent runs ending cost one
   * statement a group (docs/stores.md, "Round trips").
   */
  readonly #ends = new GroupCommit<Ending, RunEnded | null>({ write: async (items) => this.#endGroup(items), key: (item) => item.runId })
  /** the session store of the same database (postgresStores pairs them): a run's turn goes in with its end */
  sessions: FreshSessions | null = null
  #endTurnsStatement: NamedStatement | null = null

  constructor (source: PostgresSource, options: PostgresRunStoreOptions = {}) {
    super(source, options)
    const pollIntervalMs = options.pollIntervalMs === undefined ? RUN_POLL_MS : checkTtl('pollIntervalMs', options.pollIntervalMs)
    this.channel = `fa_runs_${createHash('sha256').update(`${this.schema}.${this.tablePrefix}`).digest('hex').slice(0, 16)}`
    this.#runs = this.table('runs')
    this.#events = this.table('run_events')
    this.#sessions = this.table('run_sessions')
    this.#sql = statements(this.#runs, this.#events, this.#sessions, literal(this.channel), literal(`q:${this.#nonce}`))
    this.signals = new RunSignals({
      poll: async (runIds) => this.#pollRuns(runIds),
      pollSessions: async (sessionIds) => this.#pollSessions(sessionIds),
      pollIntervalMs,
      // the server is away: the next tick tries again, and listens again
      onPollError: noop
    })
    this.#listener = new PgListener(async () => this.pool(), this.channel, (payload) => this.signals.heard(payload, this.#nonce), () => {
      // what was written before LISTEN took effect was not notified: the watchers catch up now
      void this.signals.refresh()
      this.signals.queue()
    })
  }

  protected ddl (): string {
    // `created_seq` is the order of creation lists follow (runs created in one millisecond too). `owner` and
    // `lease_until` are a running run's lease (docs/runs.md): the lapsed ones are found by a partial index.
    return `
      CREATE TABLE IF NOT EXISTS ${this.#runs} (
        run_id text PRIMARY KEY, created_seq bigserial NOT NULL, agent text NOT NULL, session_id text, principal text NOT NULL,
        status text NOT NULL, background boolean NOT NULL, attempt integer NOT NULL, last_seq integer NOT NULL,
        created_at timestamptz NOT NULL, started_at timestamptz, ended_at timestamptz, result text, error text,
        request_id text NOT NULL, trace_id text NOT NULL, spec text NOT NULL, ephemeral boolean NOT NULL,
        cancel_requested boolean NOT NULL DEFAULT false, expires_at timestamptz, owner text, lease_until timestamptz,
        detachable boolean NOT NULL DEFAULT false, schedule_id text, scheduled_for timestamptz);
      -- a schedule's fire (docs/schedules.md), added to a table made before schedules: its runs have neither
      ALTER TABLE ${this.#runs} ADD COLUMN IF NOT EXISTS schedule_id text, ADD COLUMN IF NOT EXISTS scheduled_for timestamptz;
      CREATE INDEX IF NOT EXISTS ${this.index('runs_created')} ON ${this.#runs} (created_seq);
      CREATE INDEX IF NOT EXISTS ${this.index('runs_session')} ON ${this.#runs} (session_id, created_seq);
      CREATE INDEX IF NOT EXISTS ${this.index('runs_agent')} ON ${this.#runs} (agent, created_seq);
      CREATE INDEX IF NOT EXISTS ${this.index('runs_status')} ON ${this.#runs} (status, created_seq);
      CREATE INDEX IF NOT EXISTS ${this.index('runs_principal')} ON ${this.#runs} (principal, created_seq);
      CREATE INDEX IF NOT EXISTS ${this.index('runs_expires')} ON ${this.#runs} (expires_at) WHERE expires_at IS NOT NULL;
      CREATE INDEX IF NOT EXISTS ${this.index('runs_lease')} ON ${this.#runs} (lease_until) WHERE status = 'running';
      CREATE TABLE IF NOT EXISTS ${this.#events} (
        run_id text NOT NULL, seq integer NOT NULL, type text NOT NULL, data text NOT NULL, PRIMARY KEY (run_id, seq));
      CREATE TABLE IF NOT EXISTS ${this.#sessions} (session_id text PRIMARY KEY, run_id text NOT NULL);`
  }

  override check (): void {
    super.check()
  }

  listen (): void {
    this.#listener.listen().catch(noop)
  }

  /** The pool, as the pg Pool it is. */
  async #pool (): Promise<Pool> {
    return await this.pool() as unknown as Pool
  }

  async #transaction<T> (fn: (client: PoolClient) => Promise<T>): Promise<T> {
    return transaction(await this.#pool(), 'BEGIN', fn)
  }

  async #holder (q: Queryable, sessionId: string): Promise<Holder | undefined> {
    const { rows } = await q.query<Holder>(this.#sql.holder, [sessionId])
    return rows[0]
  }

  /**
   * After a lock that was not taken: the run holding the session, when it has not ended; null when the lock
   * should be tried again (its holder ended, or left a lock behind without a run, which is removed here).
   */
  async #busy (q: Queryable, sessionId: string): Promise<string | null> {
    const holder = await this.#holder(q, sessionId)
    if (holder === undefined) return null
    if (holder.status === null) await q.query(this.#sql.dropOrphan, [sessionId, holder.run_id])
    return holder.status !== null && !isEnded(holder.status) ? holder.run_id : null
  }

  /** Takes a session's lock for a run: null when taken, else the run that holds it. */
  async #takeSession (client: PoolClient, sessionId: string, runId: string): Promise<string | null> {
    for (let attempt = 0; attempt < TAKE_ATTEMPTS; attempt++) {
      const { rowCount } = await client.query(this.#sql.take, [sessionId, runId])
      if (rowCount === 1) return null
      const holder = await this.#busy(client, sessionId)
      if (holder !== null) return holder
    }
    /* c8 ignore next 2: the lock changed hands under every attempt, a race no test provokes on purpose */
    throw lockRaceError(sessionId)
  }

  /**
   * Runs created with their fresh sessions while one such statement is in flight go together in the next (a burst of
   * schedules' fires, of new conversations): one statement, whatever their number.
   */
  readonly creates = new GroupCommit<Creating, true>({
    write: async (items) => this.#createGroup(items),
    key: (item) => item.run.record.runId
  })

  /** A new run's columns, `$1` to `$19` of the create statements. */
  #values (run: NewRun): unknown[] {
    const { record } = run
    return [
      record.runId, record.agent, record.sessionId, record.principal, record.status, record.background, record.attempt,
      record.lastSeq, new Date(toMs('createdAt', record.createdAt)),
      record.startedAt === undefined ? null : new Date(toMs('startedAt', record.startedAt)),
      record.requestId, record.traceId, JSON.stringify(run.spec), run.ephemeral, run.detachable, ...leaseValues(run.lease),
      record.scheduleId ?? null, record.scheduledFor === undefined ? null : new Date(toMs('scheduledFor', record.scheduledFor))
    ]
  }

  #createGroupStatement: NamedStatement | null = null

  /**
   * Runs with their fresh sessions (the session store's INSERT, its parameters from $20) and the sessions' locks, in
   * one statement (docs/stores.md, "Round trips"): each run's column an array.
   */
  async #createGroup (items: readonly Creating[]): Promise<Array<true | Error>> {
    // Two runs making one session (a caller's choice of ids) would be one row twice in one INSERT, which fails
    return await keysApart(items, (item) => item.run.record.sessionId, async (some) => await this.#createRows(some))
  }

  async #createRows (items: readonly Creating[]): Promise<Array<true | Error>> {
    const fresh = await items[0]!.sessions.freshSessions(items, 20)
    const columns = pgColumns(CREATE_TYPES, items.map(({ run }) => this.#values(run)))
    // (the session store's INSERT is the same text at every call: one statement, named once)
    this.#createGroupStatement ??= named(this.#sql.createGroup(fresh.text))
    const { rows } = await (await this.#pool()).query<{ run_id: string }>({ ...this.#createGroupStatement, values: [...columns, ...fresh.values] })
    const created = new Set(rows.map((row) => row.run_id))
    // (each session was made with its run: no other run can hold it)
    /* c8 ignore next */
    return items.map(({ run }) => created.has(run.record.runId) ? true : lockRaceError(run.record.sessionId!))
  }

  async insert (run: NewRun, takeSession: boolean): Promise<string | null> {
    const { record } = run
    const values = this.#values(run)
    if (!takeSession) {
      await (await this.#pool()).query({ ...this.#sql.create, values })
      return null
    }
    const pool = await this.#pool()
    for (let attempt = 0; attempt < TAKE_ATTEMPTS; attempt++) {
      const { rowCount } = await pool.query({ ...this.#sql.createExclusive, values })
      if (rowCount === 1) return null
      const holder = await this.#busy(pool, record.sessionId!)
      if (holder !== null) return holder
    }
    /* c8 ignore next 2: the lock changed hands under every attempt, a race no test provokes on purpose */
    throw lockRaceError(record.sessionId!)
  }

  async read (runId: string): Promise<StoredRun | null> {
    const [row] = await this.sql<LeasedRow>(this.#sql.read, [runId, new Date()])
    return row === undefined ? null : toState(row)
  }

  async spec (runId: string): Promise<RunSpec | null> {
    const [row] = await this.sql<{ spec: string }>(this.#sql.spec, [runId, new Date()])
    return row === undefined ? null : JSON.parse(row.spec) as RunSpec
  }

  async events (runId: string, afterSeq: number, limit: number, budget: number): Promise<StoredEvent[]> {
    return budget === Infinity
      ? this.sql<StoredEvent>(this.#sql.events, [runId, afterSeq, limit, new Date()])
      : this.sql<StoredEvent>(this.#sql.eventsWithin, [runId, afterSeq, limit, new Date(), budget])
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string, lastSeq: number, urgent = false): Promise<number | null> {
    // urgent (a durable step waits for it): written at the end of this turn, with every batch the turn adds, not after the window
    return this.appends.add({ runId, events, owner, lastSeq }, urgent)
  }

  /**
   * Appends each batch that follows the log of a run its owner runs, all in one statement: each one's new lastSeq,
   * null for one that does not.
   */
  async #appendGroup (items: readonly Appending[]): Promise<Array<number | null>> {
    const pool = await this.#pool()
    const runs = pgColumns(APPEND_TYPES, items.map(({ runId, events, owner, lastSeq }) => [runId, events.length, lastSeq, owner]))
    const { rows } = await pool.query<{ run_id: string, last_seq: number }>({ ...this.#sql.appendGroup, values: [...runs, ...eventColumns(items)] })
    const appended = new Map(rows.map((row) => [row.run_id, row.last_seq]))
    return items.map((item) => appended.get(item.runId) ?? null)
  }

  async end (runId: string, condition: RunCondition, events: readonly StoredEvent[], end: RunEnd, expiresAt: number, turn?: EndTurn): Promise<RunEnded | null> {
    return this.#ends.add({ runId, condition, events, end, expiresAt, turn })
  }

  /**
   * The ends of a group of runs in one statement, with their sessions' turns: each one's, null for one whose condition
   * failed (nothing written). Two turns of one session would be one row updated twice in one UPDATE, which keeps one:
   * the later one goes after, on its own.
   */
  async #endGroup (items: readonly Ending[]): Promise<Array<RunEnded | null | Error>> {
    return await keysApart(items, (item) => item.turn?.sessionId, async (some) => await this.#endRows(some))
  }

  async #endRows (items: readonly Ending[]): Promise<Array<RunEnded | null>> {
    const rows = items.map(({ runId, condition, events, end, expiresAt }) => [
      runId, end.status, new Date(toMs('endedAt', end.endedAt)), end.result === undefined ? null : JSON.stringify(end.result),
      end.error === undefined ? null : JSON.stringify(end.error), new Date(expiresAt), events.length, ...conditionValues(condition)
    ])
    const values: unknown[] = [...pgColumns(END_TYPES, rows), ...eventColumns(items)]
    let statement = this.#sql.endGroup
    if (items.some((item) => item.turn !== undefined)) {
      // the turns' columns ($17 to $20: session, messages, at, expiry), null for an end without one
      this.#endTurnsStatement ??= named(this.#sql.endGroupWithTurns(await this.sessions!.turnsFrom(
        '(SELECT b.t_session, b.t_messages, b.t_at, b.t_expires FROM batch b JOIN ended e ON e.run_id = b.id WHERE b.t_session IS NOT NULL) AS t (id, messages, at, expires)')))
      statement = this.#endTurnsStatement
      const now = Date.now()
      values.push(
        pgArray('text', items.map(({ turn }) => turn?.sessionId)), pgArray('text', items.map(({ turn }) => turn?.messages)),
        pgArray('timestamptz', items.map(() => now)), pgArray('timestamptz', items.map(({ turn }) => turn === undefined ? null : now + turn.ttlMs)))
    }
    const ended = await this.sql<Ended & { turned?: boolean }>(statement, values)
    const byRun = new Map(ended.map((row) => [row.run_id, row]))
    return items.map(({ runId, turn, end }) => {
      const row = byRun.get(runId)
      if (row === undefined) return null
      if (turn !== undefined) turn.recorded = row.turned
      const record = toRecord(row)
      if (end.result !== undefined) record.result = end.result
      if (end.error !== undefined) record.error = end.error
      return { record, freed: row.freed, queueWaits: row.queue_waits }
    })
  }

  async start (runId: string, startedAt: string, lease: RunLease): Promise<Taken | null> {
    const startedMs = toMs('startedAt', startedAt)
    return this.#transaction(async (client): Promise<Taken | null> => {
      const { rows: [run] } = await client.query<{ session_id: string | null, status: RunStatus }>(this.#sql.lockRun, [runId, new Date()])
      if (run === undefined || run.status !== 'queued') return null
      if (run.session_id !== null) {
        const holder = await this.#takeSession(client, run.session_id, runId)
        if (holder !== null) return { holder }
      }
      const { rows: [started] } = await client.query<RunRow>(this.#sql.start, [[runId], new Date(startedMs), ...leaseValues(lease)])
      return { record: toRecord(started!) }
    })
  }

  async requeue (runId: string, condition: RunCondition, event: StoredEvent): Promise<RunRecord | null> {
    const [row] = await this.sql<RunRow>(this.#sql.requeue, [runId, event.seq, event.type, event.data, ...conditionValues(condition)])
    return row === undefined ? null : toRecord(row)
  }

  async reopen (runId: string, condition: RunCondition, event: StoredEvent, run: NewRun, takeSession: boolean): Promise<Taken | null> {
    const { record } = run
    const startedAt = new Date(toMs('startedAt', record.startedAt!))
    return this.#transaction(async (client): Promise<Taken | null> => {
      const { rows: [row] } = await client.query<LeasedRow>(this.#sql.lockLeased, [runId, new Date(), ...conditionValues(condition)])
      if (row === undefined) return null
      if (takeSession && row.session_id !== null) {
        const holder = await this.#takeSession(client, row.session_id, runId)
        if (holder !== null) return { holder }
      }
      const { rows: [reopened] } = await client.query<RunRow>(this.#sql.reopen, [
        runId, startedAt, record.requestId, record.traceId, JSON.stringify(run.spec), run.detachable, ...leaseValues(run.lease),
        event.seq, event.type, event.data
      ])
      return { record: toRecord(reopened!) }
    })
  }

  async requestCancel (runId: string): Promise<RunRecord | null> {
    const [row] = await this.sql<RunRow>(this.#sql.requestCancel, [runId])
    return row === undefined ? null : toRecord(row)
  }

  async claim (lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]> {
    const startedMs = toMs('startedAt', startedAt)
    return this.#transaction(async (client): Promise<RunRecord[]> => {
      // locked rows are another claimer's: skipped, never waited for, so that claimers at once share the queue
      const { rows: candidates } = await client.query<{ run_id: string, session_id: string | null }>(this.#sql.claimable, [new Date(), limit])
      const taken: string[] = []
      for (const { run_id: runId, session_id: sessionId } of candidates) {
        // a session another claimer (or an earlier candidate) took meanwhile: the run waits for its next turn
        if (sessionId === null || await this.#takeSession(client, sessionId, runId) === null) taken.push(runId)
      }
      if (taken.length === 0) return []
      const { rows } = await client.query<RunRow & { created_seq: string }>(this.#sql.start, [taken, new Date(startedMs), ...leaseValues(lease)])
      return rows.sort((a, b) => Number(a.created_seq) - Number(b.created_seq)).map(toRecord)
    })
  }

  async renew (owner: string, runIds: readonly string[], until: number): Promise<string[]> {
    const rows = await this.sql<{ run_id: string }>(this.#sql.renew, [owner, runIds, new Date(until)])
    return rows.map((row) => row.run_id)
  }

  async lapsed (now: number, limit: number): Promise<StoredRun[]> {
    const rows = await this.sql<LeasedRow>(this.#sql.lapsed, [new Date(now), limit])
    return rows.map(toState)
  }

  async page (filters: RunFilters, before: string | null, limit: number): Promise<Array<{ record: RunRecord, place: string }>> {
    const values: unknown[] = [new Date(), limit]
    let where = ''
    const columns = { sessionId: 'session_id', agent: 'agent', status: 'status', principal: 'principal' } as const
    for (const [name, value] of Object.entries(filters) as Array<[keyof RunFilters, string | undefined]>) {
      if (value === undefined) continue
      values.push(value)
      where += ` AND ${columns[name]} = $${values.length}`
    }
    if (before !== null) {
      values.push(before)
      where += ` AND created_seq < $${values.length}`
    }
    const rows = await this.sql<RunRow & { created_seq: string }>(`
      SELECT ${COLUMNS}, created_seq FROM ${this.#runs} WHERE (expires_at IS NULL OR expires_at > $1)${where}
      ORDER BY created_seq DESC LIMIT $2`, values)
    return rows.map((row) => ({ record: toRecord(row), place: row.created_seq }))
  }

  async remove (runId: string): Promise<boolean> {
    const [row] = await this.sql<{ deleted: number }>(this.#sql.deleteEnded, [runId, new Date()])
    return row!.deleted === 1
  }

  async purge (now: number, batch: number): Promise<number> {
    const [row] = await this.sql<{ purged: number }>(this.#sql.purge, [new Date(now), batch])
    return row!.purged
  }

  protected override async stop (): Promise<void> {
    this.signals.close()
    await this.#listener.stop()
  }

  async #pollRuns (runIds: string[]): Promise<RunState[]> {
    this.#listener.listen().catch(noop)
    const rows = await this.sql<{ run_id: string, last_seq: number, cancel_requested: boolean }>(
      this.#sql.poll, [runIds.filter((id) => storable(id, this.text))])
    return rows.map((row) => ({ runId: row.run_id, lastSeq: row.last_seq, cancelRequested: row.cancel_requested }))
  }

  async #pollSessions (sessionIds: string[]): Promise<string[]> {
    const rows = await this.sql<{ id: string }>(this.#sql.freeSessions, [sessionIds.filter((id) => storable(id, this.text))])
    return rows.map((row) => row.id)
  }
}

export class PostgresRunStore extends BackedRunStore {
  readonly #pg: PostgresRunBackend
  /** the session store of the same database (postgresStores): a run's fresh session goes in with the run */
  #sessionStore: FreshSessions | null = null

  constructor (source: PostgresSource, options: PostgresRunStoreOptions = {}) {
    const backend = new PostgresRunBackend(source, options)
    super(backend)
    this.#pg = backend
  }

  /** Pairs this store with the session store of the same database (postgresStores does): see createWithSession. */
  withSessions (sessions: FreshSessions): this {
    this.#sessionStore = sessions
    this.#pg.sessions = sessions
    return this
  }

  /**
   * A session's turn to write with its run's end, in one statement: one round trip fewer for every run that keeps
   * a session (docs/stores.md, "Round trips"). Undefined when `sessions` is not the session store of this one's
   * database, or jsonb would refuse the messages: the caller appends the turn first.
   */
  turnWithEnd (sessions: SessionStore, sessionId: string, messages: readonly Message[], ttlMs: number): EndTurn | undefined {
    const paired = this.#sessionStore
    if (paired === null || (sessions as { [UNWRAPPED]?: unknown })[UNWRAPPED] !== paired) return undefined
    checkTtl('ttlMs', ttlMs)
    const json = JSON.stringify(messages)
    return jsonbRefuses(json) ? undefined : { sessionId, messages: json, ttlMs }
  }

  /**
   * A run and its fresh session (no run holds it yet) in one statement, its session taken: one round trip fewer
   * for every run that starts a session (docs/stores.md, "Round trips"). Undefined, with nothing written, when
   * `sessions` is not the session store of this one's database: the caller creates the session first.
   */
  async createWithSession (run: NewRun, session: NewSession, ttlMs: number, sessions: SessionStore): Promise<CreateRunResult | undefined> {
    const paired = this.#sessionStore
    if (paired === null || (sessions as { [UNWRAPPED]?: unknown })[UNWRAPPED] !== paired || session.id !== run.record.sessionId) return undefined
    const backend = this.#pg
    backend.check()
    checkNewRun(backend.name, backend.text, run)
    await backend.creates.add({ run, session, ttlMs, sessions: paired })
    if (run.record.status === 'queued' && run.detachable) backend.signals.queue()
    return { outcome: 'created' }
  }

  /** NOTIFY channel shared by every instance using this schema and prefix. */
  get channel (): string {
    return this.#pg.channel
  }

  get schema (): string {
    return this.#pg.schema
  }

  /** Groups of appends written so far (each one statement): what the tests and the bench count. */
  get groupWrites (): number {
    return this.#pg.appends.writes
  }

  get ownsConnection (): boolean {
    return this.#pg.ownsConnection
  }

  async probe (): Promise<void> {
    await this.#pg.probe()
  }
}

/**
 * Every statement of the store, made once per store from its table names, its NOTIFY channel and its queue
 * notification's payload (literals).
 */
function statements (runs: string, events: string, sessions: string, channel: string, queued: string) {
  const insert = `
    INSERT INTO ${runs} (run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at,
      request_id, trace_id, spec, ephemeral, detachable, owner, lease_until, schedule_id, scheduled_for)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::boolean, $7::integer, $8::integer, $9::timestamptz,
      $10::timestamptz, $11::text, $12::text, $13::text, $14::boolean, $15::boolean, $16::text, $17::timestamptz, $18::text,
      $19::timestamptz`
  // a page of a run's log, none once the run is past its retention ($4: now)
  const eventsPage = `
    SELECT seq, type, data FROM ${events}
    WHERE run_id = $1 AND seq > $2 AND EXISTS (SELECT 1 FROM ${runs} WHERE run_id = $1 AND (expires_at IS NULL OR expires_at > $4))
    ORDER BY seq LIMIT $3`
  // a run created under the id of one past its retention (not purged yet) starts afresh: new record, empty log
  const replace = `
    ON CONFLICT (run_id) DO UPDATE SET created_seq = EXCLUDED.created_seq, agent = EXCLUDED.agent, session_id = EXCLUDED.session_id, principal = EXCLUDED.principal,
      status = EXCLUDED.status, background = EXCLUDED.background, attempt = EXCLUDED.attempt, last_seq = EXCLUDED.last_seq,
      created_at = EXCLUDED.created_at, started_at = EXCLUDED.started_at, ended_at = NULL, result = NULL, error = NULL,
      request_id = EXCLUDED.request_id, trace_id = EXCLUDED.trace_id, spec = EXCLUDED.spec, ephemeral = EXCLUDED.ephemeral,
      cancel_requested = false, expires_at = NULL, detachable = EXCLUDED.detachable, owner = EXCLUDED.owner,
      lease_until = EXCLUDED.lease_until, schedule_id = EXCLUDED.schedule_id, scheduled_for = EXCLUDED.scheduled_for
    RETURNING run_id`
  // a queued detachable run is news for every instance's claimer
  const created = `
    SELECT run_id, CASE WHEN $5::text = 'queued' AND $15::boolean THEN pg_notify(${channel}, ${queued}) END AS notified FROM created`
  // Takes a session's lock: free, already the run's (a requeued run keeps it), or held by a run that has ended (a
  // compare-and-set on the lock's row, which concurrent takers queue on). A holder this statement cannot see yet
  // (committed after it began) counts as running: the caller reads the lock again in a new statement to tell which.
  const take = `
    INSERT INTO ${sessions} AS h (session_id, run_id) VALUES ($1, $2)
    ON CONFLICT (session_id) DO UPDATE SET run_id = EXCLUDED.run_id
    WHERE h.run_id = EXCLUDED.run_id
      OR EXISTS (SELECT 1 FROM ${runs} r WHERE r.run_id = h.run_id AND r.status IN ('completed', 'failed', 'cancelled'))
    RETURNING session_id`
  const live = '(expires_at IS NULL OR expires_at > $2)'
  // a write's condition (see RunCondition) from parameter $n on: status, lastSeq, owner, lapsed before, cancel asked
  const condition = (n: number): string => `status = $${n}::text AND ($${n + 1}::integer IS NULL OR last_seq = $${n + 1})
    AND ($${n + 2}::text IS NULL OR owner = $${n + 2}) AND ($${n + 3}::timestamptz IS NULL OR lease_until < $${n + 3})
    AND ($${n + 4}::boolean IS NULL OR cancel_requested = $${n + 4})`
  const leased = `${COLUMNS}, owner, lease_until, detachable, cancel_requested`
  // the ends' statement (see endGroup below), with the turns' UPDATE (`turns`, from the session store) or without
  const endGroup = (turns: string | null): string => `
      WITH batch AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::timestamptz[], $7::integer[],
          $8::text[], $9::integer[], $10::text[], $11::timestamptz[], $12::boolean[]${turns === null ? '' : ', $17::text[], $18::text[], $19::timestamptz[], $20::timestamptz[]'})
        AS b (id, to_status, at, res, err, expires, n, c_status, c_seq, c_owner, c_lapsed, c_cancel${turns === null ? '' : ', t_session, t_messages, t_at, t_expires'})),
      ended AS (
        UPDATE ${runs} r SET status = b.to_status, ended_at = b.at, result = b.res, error = b.err, expires_at = b.expires,
          last_seq = r.last_seq + b.n, owner = NULL, lease_until = NULL
        FROM batch b
        WHERE r.run_id = b.id AND r.status = b.c_status AND (b.c_seq IS NULL OR r.last_seq = b.c_seq)
          AND (b.c_owner IS NULL OR r.owner = b.c_owner) AND (b.c_lapsed IS NULL OR r.lease_until < b.c_lapsed)
          AND (b.c_cancel IS NULL OR r.cancel_requested = b.c_cancel)
        RETURNING ${ENDED_COLUMNS}),
      added AS (
        INSERT INTO ${events} (run_id, seq, type, data)
        SELECT e.run_id, e.seq, e.type, e.data FROM unnest($13::text[], $14::integer[], $15::text[], $16::text[]) AS e (run_id, seq, type, data)
        WHERE e.run_id IN (SELECT run_id FROM ended)),
      freed AS (
        DELETE FROM ${sessions} h USING ended WHERE h.session_id = ended.session_id AND h.run_id = ended.run_id
        RETURNING h.session_id, h.run_id),
      waits AS (
        SELECT freed.run_id, EXISTS (SELECT 1 FROM ${runs} q WHERE q.session_id = freed.session_id AND q.status = 'queued' AND q.detachable)
          AS queue_waits
        FROM freed)${turns === null ? '' : `,
      turned AS (${turns})`}
      SELECT ended.*,${turns === null ? '' : ' turned.id IS NOT NULL AS turned,'} freed.session_id AS freed, coalesce(waits.queue_waits, false) AS queue_waits,
        pg_notify(${channel}, 'e:' || ended.run_id || ':' || ended.last_seq) AS notified,
        CASE WHEN freed.session_id IS NOT NULL THEN pg_notify(${channel}, 's:' || freed.session_id) END AS notified_session,
        CASE WHEN waits.queue_waits THEN pg_notify(${channel}, ${queued}) END AS notified_queue
      FROM ended LEFT JOIN freed ON freed.run_id = ended.run_id LEFT JOIN waits ON waits.run_id = ended.run_id${turns === null ? '' : `
        LEFT JOIN batch tb ON tb.id = ended.run_id LEFT JOIN turned ON turned.id = tb.t_session`}`
  return {
    // the statements of every run (its create, its log's groups, its end) are named: prepared once per connection
    create: named(`WITH cleared AS (DELETE FROM ${events} WHERE run_id = $1), created AS (${insert} ${replace}) ${created}`),
    createExclusive: named(`
      WITH taken AS (${take.replace('($1, $2)', '($3, $1)')}),
      cleared AS (DELETE FROM ${events} WHERE run_id = $1 AND EXISTS (SELECT 1 FROM taken)),
      created AS (${insert} WHERE EXISTS (SELECT 1 FROM taken) ${replace})
      ${created}`),
    take,
    // runs with their fresh sessions (`session`: the session store's INSERT, its parameters from $20), their locks
    // taken: every parameter of a run an array
    createGroup: (session: string): string => `
      WITH batch AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::boolean[], $7::integer[],
          $8::integer[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::text[], $13::text[], $14::boolean[],
          $15::boolean[], $16::text[], $17::timestamptz[], $18::text[], $19::timestamptz[]) WITH ORDINALITY
        AS b (run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at, request_id,
          trace_id, spec, ephemeral, detachable, owner, lease_until, schedule_id, scheduled_for, n)),
      session AS (${session}),
      taken AS (${take.replace('VALUES ($1, $2)', 'SELECT session_id, run_id FROM batch WHERE true')}),
      cleared AS (DELETE FROM ${events} WHERE run_id IN (SELECT run_id FROM batch)),
      created AS (
        INSERT INTO ${runs} (run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at,
          request_id, trace_id, spec, ephemeral, detachable, owner, lease_until, schedule_id, scheduled_for)
        SELECT run_id, agent, session_id, principal, status, background, attempt, last_seq, created_at, started_at, request_id,
          trace_id, spec, ephemeral, detachable, owner, lease_until, schedule_id, scheduled_for FROM batch ORDER BY n
        ${replace.replace('RETURNING run_id', 'RETURNING run_id, status, detachable')})
      SELECT run_id, (SELECT pg_notify(${channel}, ${queued}) FROM created WHERE status = 'queued' AND detachable LIMIT 1) AS notified
      FROM created`,
    holder: `SELECT h.run_id, r.status FROM ${sessions} h LEFT JOIN ${runs} r ON r.run_id = h.run_id WHERE h.session_id = $1`,
    // a lock whose run is gone (nothing ends a run without giving its lock back; this is the safety net)
    dropOrphan: `DELETE FROM ${sessions} h WHERE session_id = $1 AND run_id = $2 AND NOT EXISTS (SELECT 1 FROM ${runs} r WHERE r.run_id = h.run_id)`,
    read: `SELECT ${leased} FROM ${runs} WHERE run_id = $1 AND ${live}`,
    spec: `SELECT spec FROM ${runs} WHERE run_id = $1 AND ${live}`,
    lockRun: `SELECT ${COLUMNS} FROM ${runs} WHERE run_id = $1 AND ${live} FOR UPDATE`,
    lockLeased: `SELECT ${leased} FROM ${runs} WHERE run_id = $1 AND ${live} AND ${condition(3)} FOR UPDATE`,
    start: `
      UPDATE ${runs} SET status = 'running', started_at = $2, owner = $3, lease_until = $4 WHERE run_id = ANY($1::text[])
      RETURNING ${COLUMNS}, created_seq`,
    // The oldest queued detachable runs whose session is free (no lock, or one held by a run that ended, has
    // gone, or is theirs). Locked rows are skipped: another claimer has them.
    claimable: `
      SELECT q.run_id, q.session_id FROM ${runs} q
      WHERE q.status = 'queued' AND q.detachable AND (q.expires_at IS NULL OR q.expires_at > $1)
        AND NOT EXISTS (
          SELECT 1 FROM ${sessions} h JOIN ${runs} r ON r.run_id = h.run_id
          WHERE h.session_id = q.session_id AND h.run_id <> q.run_id AND r.status IN ('queued', 'running'))
      ORDER BY q.created_seq LIMIT $2 FOR UPDATE OF q SKIP LOCKED`,
    renew: `
      UPDATE ${runs} SET lease_until = $3 WHERE run_id = ANY($2::text[]) AND status = 'running' AND owner = $1 RETURNING run_id`,
    lapsed: `
      SELECT ${leased} FROM ${runs} WHERE status = 'running' AND lease_until < $1
      ORDER BY lease_until LIMIT $2`,
    // back to the queue for its next attempt, with the event saying so, if the run is as read
    requeue: `
      WITH requeued AS (
        UPDATE ${runs} SET status = 'queued', attempt = attempt + 1, last_seq = $2, started_at = NULL, owner = NULL,
          lease_until = NULL, detachable = true, cancel_requested = false
        WHERE run_id = $1 AND ${condition(5)} RETURNING ${COLUMNS}),
      added AS (INSERT INTO ${events} (run_id, seq, type, data) SELECT $1, $2, $3, $4 FROM requeued)
      SELECT requeued.*, pg_notify(${channel}, 'e:' || run_id || ':' || last_seq) AS notified,
        pg_notify(${channel}, ${queued}) AS notified_queue
      FROM requeued`,
    // a resumed run: its next attempt, its log going on, its end forgotten
    reopen: `
      WITH reopened AS (
        UPDATE ${runs} SET status = 'running', attempt = attempt + 1, last_seq = $9, started_at = $2, request_id = $3, trace_id = $4,
          spec = $5, ended_at = NULL, result = NULL, error = NULL, cancel_requested = false, expires_at = NULL, detachable = $6,
          owner = $7, lease_until = $8
        WHERE run_id = $1 RETURNING ${COLUMNS}),
      added AS (INSERT INTO ${events} (run_id, seq, type, data) SELECT $1, $9, $10, $11 FROM reopened)
      SELECT reopened.*, pg_notify(${channel}, 'e:' || run_id || ':' || last_seq) AS notified FROM reopened`,
    // every run's batch of a group, as \`append\`: each goes in only if it follows its log and is its run owner's; one
    // NOTIFY names them all
    appendGroup: named(`
      WITH batch AS (
        SELECT * FROM unnest($1::text[], $2::integer[], $3::integer[], $4::text[]) AS b (run_id, n, after, owner)),
      run AS (
        UPDATE ${runs} r SET last_seq = r.last_seq + b.n FROM batch b
        WHERE r.run_id = b.run_id AND r.last_seq = b.after AND r.status = 'running' AND r.owner = b.owner
        RETURNING r.run_id, r.last_seq),
      added AS (
        INSERT INTO ${events} (run_id, seq, type, data)
        SELECT e.run_id, e.seq, e.type, e.data FROM unnest($5::text[], $6::integer[], $7::text[], $8::text[]) AS e (run_id, seq, type, data)
        WHERE e.run_id IN (SELECT run_id FROM run))
      SELECT run_id, last_seq,
        (SELECT pg_notify(${channel}, 'g:' || json_agg(json_build_array(run_id, last_seq))::text) FROM run) AS notified
      FROM run`),
    // The last events, the end and the session given back of each run of a group, in one statement, if the run is as its
    // condition says: a queued detachable run waiting for that session is news for the claimers. Each column of the
    // ends an array ($1 to $12: run, status, end, result, error, expiry, its events' count, its condition), and of
    // their events ($13 to $16).
    endGroup: named(endGroup(null)),
    // the same with each run's session turn ($17 to $20), `turns` the session store's UPDATE from the ended runs' turns
    endGroupWithTurns: (turns: string): string => endGroup(turns),
    requestCancel: `
      WITH requested AS (UPDATE ${runs} SET cancel_requested = true WHERE run_id = $1 AND status = 'running' RETURNING ${COLUMNS})
      SELECT requested.*, pg_notify(${channel}, 'c:' || run_id) AS notified FROM requested`,
    events: eventsPage,
    // withinBudget (run-policy.ts) on the server, over the page alone (a window beside its LIMIT would sum the whole
    // rest of the log): an event goes while the data of those before it are under $5 characters
    eventsWithin: `
      SELECT seq, type, data FROM (
        SELECT seq, type, data, coalesce(sum(length(data)) OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS taken
        FROM (${eventsPage}) page
      ) counted WHERE taken < $5::float8 ORDER BY seq`,
    poll: `SELECT run_id, last_seq, cancel_requested FROM ${runs} WHERE run_id = ANY($1::text[])`,
    freeSessions: `
      SELECT s.id FROM unnest($1::text[]) AS s (id)
      WHERE NOT EXISTS (
        SELECT 1 FROM ${sessions} h JOIN ${runs} r ON r.run_id = h.run_id WHERE h.session_id = s.id AND r.status IN ('queued', 'running'))`,
    deleteEnded: `
      WITH gone AS (DELETE FROM ${runs} WHERE run_id = $1 AND status NOT IN ('queued', 'running') AND expires_at > $2 RETURNING run_id),
      logs AS (DELETE FROM ${events} WHERE run_id IN (SELECT run_id FROM gone))
      SELECT count(*)::integer AS deleted FROM gone`,
    purge: `
      WITH doomed AS (
        SELECT run_id FROM ${runs} WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED),
      gone AS (DELETE FROM ${runs} WHERE run_id IN (SELECT run_id FROM doomed) RETURNING run_id),
      logs AS (DELETE FROM ${events} WHERE run_id IN (SELECT run_id FROM gone))
      SELECT count(*)::integer AS purged FROM gone`
  }
}
