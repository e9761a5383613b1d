// SQLite stores (better-sqlite3): durable on one machine, several processes may share the file.
import type Database from 'better-sqlite3'
import {
  ApprovalWaiters, MAX_AUDIT_LIMIT, approvalExistsError, checkLimit, checkTtl,
  decodeKeyCursor, decodeSeqCursor, encodeKeyCursor, encodeSeqCursor, iso,
  storeClosedError, toJson, toMs, unrefInterval
} from './common.js'
import { decidedStatus, failedDecision } from './rules.js'
import { SqliteConnection, SqliteStore } from './sqlite-connection.js'
import type { SqliteDatabase, SqliteStoreOptions } from './sqlite-connection.js'
import { randomId } from '../core/ids.js'
import { SqliteRunStore } from './sqlite-runs.js'
import { SqliteWebhookStore } from './sqlite-webhooks.js'
import { SqliteQuotaStore } from './sqlite-quotas.js'
import { SqliteScheduleStore } from './sqlite-schedules.js'
import type {
  ApprovalDecision, ApprovalRecord, ApprovalStatus, ApprovalStore, AuditEntry, AuditPage, AuditQuery, AuditStore,
  CheckpointRecord, CheckpointStore, CheckpointSummary, DecideResult, IdempotencyRecord, IdempotencyResponse,
  IdempotencyStore, Message, NewSession, PrincipalSessionQuery, ReserveResult, SessionListQuery, SessionRecord, SessionStore,
  SessionWithMessages, StoreSet
} from './types.js'

export { SqliteConnection } from './sqlite-connection.js'
export type { SqliteDatabase, SqliteSource, SqliteStoreOptions } from './sqlite-connection.js'

type Db = Database.Database

/** How often a waiter looks for a decision written by another process. */
const POLL_MS = 250
/** How often expired sessions and idempotency records are deleted (on a write, never on a timer). */
const PURGE_MS = 60_000

interface AuditRow { seq: number, entry: string }

const AUDIT_INSERT_ROWS = 32

function auditStatements (db: Db, table: string) {
  db.exec(`
    CREATE TABLE IF NOT EXISTS "${table}" (seq INTEGER PRIMARY KEY, agent TEXT, status INTEGER NOT NULL, entry TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS "${table}_agent" ON "${table}" (agent, seq);
  `)
  // Multi-row INSERTs of 32, 16, ... 1 rows: a batch of n entries is about log2(n) + n/32 trips into the
  // native binding rather than n (bench/README.md, "Why the code looks like this").
  const inserts = new Map<number, Database.Statement<unknown[]>>()
  for (let rows = AUDIT_INSERT_ROWS; rows >= 1; rows /= 2) {
    inserts.set(rows, db.prepare(`INSERT INTO "${table}" (agent, status, entry) VALUES ${Array(rows).fill('(?, ?, ?)').join(', ')}`))
  }
  // Two statements rather than `(? IS NULL OR agent = ?)`, which keeps SQLite off the agent index.
  const where = 'seq < ? AND status BETWEEN ? AND ?'
  return {
    append: db.transaction((entries: readonly AuditEntry[]) => {
      let next = 0
      for (let rows = AUDIT_INSERT_ROWS; rows >= 1; rows /= 2) {
        // rows in VALUES order get increasing seq: the entries keep their order
        while (entries.length - next >= rows) {
          const values: unknown[] = []
          for (const entry of entries.slice(next, next + rows)) values.push(entry.agent ?? null, entry.status, JSON.stringify(entry))
          inserts.get(rows)!.run(values)
          next += rows
        }
      }
    }),
    page: db.prepare<[number, number, number, number], AuditRow>(`SELECT seq, entry FROM "${table}" WHERE ${where} ORDER BY seq DESC LIMIT ?`),
    pageByAgent: db.prepare<[number, number, number, string, number], AuditRow>(`SELECT seq, entry FROM "${table}" WHERE ${where} AND agent = ? ORDER BY seq DESC LIMIT ?`),
    count: db.prepare<[], number>(`SELECT count(*) FROM "${table}"`).pluck(),
    // only the oldest `batch` rows are looked at: a table with nothing to purge costs one short index walk
    purge: db.prepare<[number, string]>(`DELETE FROM "${table}" WHERE seq IN (
      SELECT seq FROM (SELECT seq, entry FROM "${table}" ORDER BY seq LIMIT ?) WHERE json_extract(entry, '$.at') < ?)`)
  }
}

export class SqliteAuditStore extends SqliteStore implements AuditStore {
  #prepared: ReturnType<typeof auditStatements> | null = null
  #statements () {
    const db = this.database() as Db
    return (this.#prepared ??= auditStatements(db, `${this.prefix}audit`))
  }

  async append (entries: readonly AuditEntry[]): Promise<void> {
    const statements = this.#statements()
    if (entries.length > 0) statements.append(entries)
  }

  async query (query: AuditQuery): Promise<AuditPage> {
    const limit = checkLimit(query.limit, MAX_AUDIT_LIMIT)
    const before = query.cursor === undefined ? Number.MAX_SAFE_INTEGER : Number(decodeSeqCursor(query.cursor))
    const from = query.statusFrom ?? Number.MIN_SAFE_INTEGER
    const to = query.statusTo ?? Number.MAX_SAFE_INTEGER
    const statements = this.#statements()
    const rows = query.agent === undefined
      ? statements.page.all(before, from, to, limit + 1)
      : statements.pageByAgent.all(before, from, to, query.agent, limit + 1)
    const page = rows.slice(0, limit)
    return {
      entries: page.map((row) => JSON.parse(row.entry) as AuditEntry),
      nextCursor: rows.length > limit ? encodeSeqCursor(page[page.length - 1].seq) : null
    }
  }

  async count (): Promise<number> {
    return this.#statements().count.get() as number
  }

  async purge (before: number, batch: number): Promise<number> {
    return this.#statements().purge.run(batch, new Date(before).toISOString()).changes
  }
}

interface SessionRow {
  id: string
  agent: string | null
  principal: string
  created_at: number
  last_active_at: number
  turns: number
  metadata: string
  messages: string
}

function toSession (row: SessionRow): SessionRecord {
  return {
    id: row.id,
    agent: row.agent,
    principal: row.principal,
    createdAt: iso(row.created_at),
    lastActiveAt: iso(row.last_active_at),
    turns: row.turns,
    metadata: JSON.parse(row.metadata) as Record<string, unknown>
  }
}

function sessionStatements (db: Db, table: string) {
  db.exec(`
    CREATE TABLE IF NOT EXISTS "${table}" (
      id TEXT PRIMARY KEY, agent TEXT, principal TEXT NOT NULL, created_at INTEGER NOT NULL,
      last_active_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, turns INTEGER NOT NULL,
      metadata TEXT NOT NULL, messages TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS "${table}_active" ON "${table}" (last_active_at, id);
    CREATE INDEX IF NOT EXISTS "${table}_expires" ON "${table}" (expires_at);
    CREATE INDEX IF NOT EXISTS "${table}_principal" ON "${table}" (principal, last_active_at, id);
    CREATE INDEX IF NOT EXISTS "${table}_principal_agent" ON "${table}" (principal, agent, last_active_at, id);
  `)
  const columns = 'id, agent, principal, created_at, last_active_at, turns, metadata'
  return {
    create: db.prepare<{ id: string, agent: string | null, principal: string, now: number, expires: number, metadata: string }>(`
      INSERT OR REPLACE INTO "${table}" (id, agent, principal, created_at, last_active_at, expires_at, turns, metadata, messages)
      VALUES (@id, @agent, @principal, @now, @now, @expires, 0, @metadata, '[]')`),
    get: db.prepare<[string, number], SessionRow>(`SELECT ${columns}, messages FROM "${table}" WHERE id = ? AND expires_at > ?`),
    // Appends one JSON array to another by splicing the text: one statement, so concurrent turns from
    // several processes cannot overwrite each other. Both sides are JSON.stringify output ('[...]').
    appendTurn: db.prepare<{ id: string, now: number, expires: number, messages: string }>(`
      UPDATE "${table}" SET
        messages = CASE WHEN messages = '[]' THEN @messages WHEN @messages = '[]' THEN messages
          ELSE substr(messages, 1, length(messages) - 1) || ',' || substr(@messages, 2) END,
        turns = turns + 1, last_active_at = @now, expires_at = @expires
      WHERE id = @id AND expires_at > @now`),
    delete: db.prepare<[string], number>(`DELETE FROM "${table}" WHERE id = ? RETURNING expires_at`).pluck(),
    list: db.prepare<[number, number, string, number], SessionRow>(`
      SELECT ${columns} FROM "${table}" WHERE expires_at > ? AND (last_active_at, id) < (?, ?)
      ORDER BY last_active_at DESC, id DESC LIMIT ?`),
    listByPrincipal: db.prepare<[string, number, number, string, number], SessionRow>(`
      SELECT ${columns} FROM "${table}" WHERE principal = ? AND expires_at > ? AND (last_active_at, id) < (?, ?)
      ORDER BY last_active_at DESC, id DESC LIMIT ?`),
    listByAgent: db.prepare<[string, string, number, number, string, number], SessionRow>(`
      SELECT ${columns} FROM "${table}" WHERE principal = ? AND agent = ? AND expires_at > ? AND (last_active_at, id) < (?, ?)
      ORDER BY last_active_at DESC, id DESC LIMIT ?`),
    purge: db.prepare<[number]>(`DELETE FROM "${table}" WHERE expires_at <= ?`)
  }
}

export class SqliteSessionStore extends SqliteStore implements SessionStore {
  #prepared: ReturnType<typeof sessionStatements> | null = null
  #purgedAt = 0

  #statements () {
    const db = this.database() as Db
    return (this.#prepared ??= sessionStatements(db, `${this.prefix}sessions`))
  }

  async create (session: NewSession, ttlMs: number): Promise<SessionRecord> {
    checkTtl('ttlMs', ttlMs)
    const statements = this.#statements()
    const now = Date.now()
    if (now - this.#purgedAt >= PURGE_MS) {
      this.#purgedAt = now
      statements.purge.run(now)
    }
    const metadata = toJson(session.metadata)
    statements.create.run({ id: session.id, agent: session.agent, principal: session.principal, now, expires: now + ttlMs, metadata })
    return toSession({ ...session, created_at: now, last_active_at: now, turns: 0, metadata, messages: '[]' })
  }

  async get (id: string): Promise<SessionWithMessages | null> {
    const row = this.#statements().get.get(id, Date.now())
    return row === undefined ? null : { ...toSession(row), messages: JSON.parse(row.messages) as Message[] }
  }

  async appendTurn (id: string, messages: readonly Message[], ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    return this.#statements().appendTurn.run({ id, now, expires: now + ttlMs, messages: JSON.stringify(messages) }).changes === 1
  }

  async delete (id: string): Promise<boolean> {
    const expiresAt = this.#statements().delete.get(id)
    return expiresAt !== undefined && expiresAt > Date.now()
  }

  async list (query: SessionListQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    return this.#page(query, (now, after, rows) => this.#statements().list.all(now, after.ms, after.id, rows))
  }

  async listByPrincipal (principal: string, query: PrincipalSessionQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    const { agent } = query
    return this.#page(query, agent === undefined
      ? (now, after, rows) => this.#statements().listByPrincipal.all(principal, now, after.ms, after.id, rows)
      : (now, after, rows) => this.#statements().listByAgent.all(principal, agent, now, after.ms, after.id, rows))
  }

  #page (query: SessionListQuery, select: (now: number, after: { ms: number, id: string }, rows: number) => SessionRow[]): { sessions: SessionRecord[], nextCursor: string | null } {
    const limit = checkLimit(query.limit, Number.MAX_SAFE_INTEGER)
    const after = query.cursor === undefined ? { ms: Number.MAX_SAFE_INTEGER, id: '' } : decodeKeyCursor(query.cursor)
    const rows = select(Date.now(), after, limit + 1)
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return {
      sessions: page.map(toSession),
      nextCursor: rows.length > limit ? encodeKeyCursor(last.last_active_at, last.id) : null
    }
  }
}

interface ApprovalRow {
  id: string
  run_id: string
  agent: string
  session_id: string
  principal: string
  action: string
  payload: string
  reason: string | null
  status: ApprovalStatus
  requested_at: number
  expires_at: number
  decision: string | null
  schema: string | null
}

function toApproval (row: ApprovalRow): ApprovalRecord {
  const record: ApprovalRecord = {
    id: row.id,
    runId: row.run_id,
    agent: row.agent,
    sessionId: row.session_id,
    principal: row.principal,
    action: row.action,
    payload: JSON.parse(row.payload),
    reason: row.reason,
    status: row.status,
    requestedAt: iso(row.requested_at),
    expiresAt: iso(row.expires_at)
  }
  if (row.decision !== null) record.decision = JSON.parse(row.decision) as ApprovalDecision
  if (row.schema !== null) record.schema = JSON.parse(row.schema) as Record<string, unknown>
  return record
}

function approvalStatements (db: Db, table: string) {
  db.exec(`
    CREATE TABLE IF NOT EXISTS "${table}" (
      id TEXT PRIMARY KEY, run_id TEXT NOT NULL, agent TEXT NOT NULL, session_id TEXT NOT NULL,
      principal TEXT NOT NULL, action TEXT NOT NULL, payload TEXT NOT NULL, reason TEXT,
      status TEXT NOT NULL, requested_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, decision TEXT, schema TEXT);
    CREATE INDEX IF NOT EXISTS "${table}_status" ON "${table}" (status, requested_at);
  `)
  // a table made before approvals carried the schema of an edited payload
  const columns = db.prepare<[], { name: string }>(`SELECT name FROM pragma_table_info('${table}')`).all()
  if (!columns.some((column) => column.name === 'schema')) db.exec(`ALTER TABLE "${table}" ADD COLUMN schema TEXT`)
  return {
    create: db.prepare<[string, string, string, string, string, string, string, string | null, ApprovalStatus, number, number, string | null, string | null]>(`
      INSERT INTO "${table}" (id, run_id, agent, session_id, principal, action, payload, reason, status, requested_at, expires_at, decision, schema)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    get: db.prepare<[string], ApprovalRow>(`SELECT * FROM "${table}" WHERE id = ?`),
    pending: db.prepare<{ now: number, agent: string | null, runId: string | null }, ApprovalRow>(`
      SELECT * FROM "${table}" WHERE status = 'pending' AND expires_at > @now
        AND (@agent IS NULL OR agent = @agent) AND (@runId IS NULL OR run_id = @runId)
      ORDER BY requested_at, rowid`),
    decide: db.prepare<{ id: string, status: ApprovalStatus, decision: string, now: number }, ApprovalRow>(`
      UPDATE "${table}" SET status = @status, decision = @decision
      WHERE id = @id AND status = 'pending' AND expires_at > @now RETURNING *`),
    expireDue: db.prepare<[string, number], ApprovalRow>(`
      UPDATE "${table}" SET status = 'expired' WHERE id = ? AND status = 'pending' AND expires_at <= ? RETURNING *`),
    transition: db.prepare<[ApprovalStatus, string], ApprovalRow>(`
      UPDATE "${table}" SET status = ? WHERE id = ? AND status = 'pending' RETURNING *`),
    purge: db.prepare<{ before: number, batch: number }>(`
      DELETE FROM "${table}" WHERE id IN (SELECT id FROM "${table}" WHERE
        (status IN ('approved', 'rejected', 'expired', 'cancelled') AND requested_at < @before)
        OR (status = 'pending' AND expires_at < @before) LIMIT @batch)`)
  }
}

export class SqliteApprovalStore extends SqliteStore implements ApprovalStore {
  #prepared: ReturnType<typeof approvalStatements> | null = null
  readonly #waiters = new ApprovalWaiters({
    onActive: () => { this.#poller = unrefInterval(() => this.#poll(), POLL_MS) },
    onIdle: () => { clearInterval(this.#poller) }
  })

  #poller: NodeJS.Timeout | undefined

  #statements () {
    const db = this.database() as Db
    return (this.#prepared ??= approvalStatements(db, `${this.prefix}approvals`))
  }

  async create (approval: ApprovalRecord): Promise<void> {
    const statements = this.#statements()
    try {
      statements.create.run(
        approval.id, approval.runId, approval.agent, approval.sessionId, approval.principal, approval.action,
        toJson(approval.payload), approval.reason, approval.status, toMs('requestedAt', approval.requestedAt),
        toMs('expiresAt', approval.expiresAt), approval.decision === undefined ? null : JSON.stringify(approval.decision),
        approval.schema === undefined ? null : JSON.stringify(approval.schema))
    } catch (error) {
      if ((error as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw approvalExistsError(approval.id)
      throw error
    }
  }

  async get (id: string): Promise<ApprovalRecord | null> {
    const statements = this.#statements()
    const expired = statements.expireDue.get(id, Date.now())
    if (expired !== undefined) return this.#changed(expired)
    const row = statements.get.get(id)
    return row === undefined ? null : toApproval(row)
  }

  async listPending (filter: { agent?: string, runId?: string } = {}): Promise<ApprovalRecord[]> {
    return this.#statements().pending.all({ now: Date.now(), agent: filter.agent ?? null, runId: filter.runId ?? null }).map(toApproval)
  }

  async decide (id: string, decision: ApprovalDecision): Promise<DecideResult> {
    const row = this.#statements().decide.get({
      id, status: decidedStatus(decision.approved), decision: JSON.stringify(decision), now: Date.now()
    })
    if (row !== undefined) return { outcome: 'decided', approval: this.#changed(row) }
    const current = await this.get(id)
    return current === null ? { outcome: 'not_found' } : failedDecision(current)
  }

  async expire (id: string): Promise<ApprovalRecord | null> {
    return this.#transition(id, 'expired')
  }

  async cancel (id: string): Promise<ApprovalRecord | null> {
    return this.#transition(id, 'cancelled')
  }

  async purge (before: number, batch: number): Promise<number> {
    return this.#statements().purge.run({ before, batch }).changes
  }

  waitForDecision (id: string, signal: AbortSignal): Promise<ApprovalRecord> {
    return this.#waiters.wait(id, signal, async () => {
      const row = this.#statements().get.get(id)
      return row === undefined ? null : toApproval(row)
    })
  }

  async close (): Promise<void> {
    if (!this.closed) this.#waiters.rejectAll(storeClosedError())
    await super.close()
  }

  #transition (id: string, status: ApprovalStatus): ApprovalRecord | null {
    const statements = this.#statements()
    const row = statements.transition.get(status, id)
    if (row !== undefined) return this.#changed(row)
    const current = statements.get.get(id)
    return current === undefined ? null : toApproval(current)
  }

  #changed (row: ApprovalRow): ApprovalRecord {
    const record = toApproval(row)
    this.#waiters.settle(record)
    return record
  }

  /** Sees decisions written by other processes. */
  #poll (): void {
    try {
      const statements = this.#statements()
      for (const id of this.#waiters.ids) {
        const row = statements.get.get(id)
        if (row !== undefined) this.#waiters.settle(toApproval(row))
      }
    } catch {
      // A busy or closed database: the waiters stay, the next tick tries again (they end by their signal).
    }
  }
}

interface CheckpointRow {
  run_id: string
  agent: string
  session_id: string
  step: number
  state: string
  bytes: number
  created_at: number
  updated_at: number
}

function toSummary (row: Omit<CheckpointRow, 'state'>): CheckpointSummary {
  return {
    runId: row.run_id,
    agent: row.agent,
    sessionId: row.session_id,
    step: row.step,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
    bytes: row.bytes
  }
}

function toCheckpoint (row: CheckpointRow): CheckpointRecord {
  const { bytes: _bytes, ...summary } = toSummary(row)
  return { ...summary, state: JSON.parse(row.state) }
}

function checkpointStatements (db: Db, table: string) {
  db.exec(`
    CREATE TABLE IF NOT EXISTS "${table}" (
      run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, session_id TEXT NOT NULL, step INTEGER NOT NULL,
      state TEXT NOT NULL, bytes INTEGER NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
  `)
  return {
    // the step is incremented by the upsert itself so that two saves racing cannot both write step 2
    save: db.prepare<{ runId: string, agent: string, sessionId: string, state: string, bytes: number, now: number }, CheckpointRow>(`
      INSERT INTO "${table}" (run_id, agent, session_id, step, state, bytes, created_at, updated_at)
      VALUES (@runId, @agent, @sessionId, 1, @state, @bytes, @now, @now)
      ON CONFLICT (run_id) DO UPDATE SET agent = excluded.agent, session_id = excluded.session_id,
        step = step + 1, state = excluded.state, bytes = excluded.bytes, updated_at = excluded.updated_at
      RETURNING *`),
    load: db.prepare<[string], CheckpointRow>(`SELECT * FROM "${table}" WHERE run_id = ?`),
    delete: db.prepare<[string]>(`DELETE FROM "${table}" WHERE run_id = ?`),
    list: db.prepare<[], Omit<CheckpointRow, 'state'>>(`
      SELECT run_id, agent, session_id, step, bytes, created_at, updated_at FROM "${table}"
      ORDER BY updated_at DESC, run_id DESC`)
  }
}

export class SqliteCheckpointStore extends SqliteStore implements CheckpointStore {
  #prepared: ReturnType<typeof checkpointStatements> | null = null
  #statements () {
    const db = this.database() as Db
    return (this.#prepared ??= checkpointStatements(db, `${this.prefix}checkpoints`))
  }

  async save (checkpoint: { runId: string, agent: string, sessionId: string, state: unknown }): Promise<CheckpointRecord> {
    const state = toJson(checkpoint.state)
    const row = this.#statements().save.get({
      runId: checkpoint.runId, agent: checkpoint.agent, sessionId: checkpoint.sessionId, state, bytes: Buffer.byteLength(state), now: Date.now()
    }) as CheckpointRow
    return toCheckpoint(row)
  }

  async load (runId: string): Promise<CheckpointRecord | null> {
    const row = this.#statements().load.get(runId)
    return row === undefined ? null : toCheckpoint(row)
  }

  async delete (runId: string): Promise<void> {
    this.#statements().delete.run(runId)
  }

  async list (): Promise<CheckpointSummary[]> {
    return this.#statements().list.all().map(toSummary)
  }
}

interface IdempotencyRow {
  key: string
  fingerprint: string
  state: 'in_progress' | 'completed'
  response: string | null
  created_at: number
  expires_at: number
  locked_until: number
}

function toIdempotency (row: IdempotencyRow): IdempotencyRecord {
  const record: IdempotencyRecord = {
    key: row.key,
    fingerprint: row.fingerprint,
    state: row.state,
    createdAt: iso(row.created_at),
    expiresAt: iso(row.expires_at),
    lockedUntil: iso(row.locked_until)
  }
  if (row.response !== null) record.response = JSON.parse(row.response) as IdempotencyResponse
  return record
}

function idempotencyStatements (db: Db, table: string) {
  db.exec(`
    CREATE TABLE IF NOT EXISTS "${table}" (
      key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL, response TEXT,
      created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, locked_until INTEGER NOT NULL, token TEXT);
    CREATE INDEX IF NOT EXISTS "${table}_expires" ON "${table}" (expires_at);
  `)
  // the reservation's token (docs/auth-and-traffic.md), added to a table made before it: a record without one is held by nobody
  const columns = db.prepare<[], { name: string }>(`SELECT name FROM pragma_table_info('${table}')`).all()
  if (!columns.some((column) => column.name === 'token')) db.exec(`ALTER TABLE "${table}" ADD COLUMN token TEXT`)
  // Takes the key over only when the holder is dead (lease passed) or its record expired: idempotencyLive in rules.ts,
  // as renew, complete and release below hold to idempotencyHeld and renewedLease, each in one statement.
  const take = db.prepare<{ key: string, fingerprint: string, token: string, now: number, expires: number, locked: number }>(`
    INSERT INTO "${table}" (key, fingerprint, state, response, created_at, expires_at, locked_until, token)
    VALUES (@key, @fingerprint, 'in_progress', NULL, @now, @expires, @locked, @token)
    ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'in_progress', response = NULL,
      created_at = excluded.created_at, expires_at = excluded.expires_at, locked_until = excluded.locked_until,
      token = excluded.token
    WHERE "${table}".expires_at <= @now OR ("${table}".state = 'in_progress' AND "${table}".locked_until <= @now)`)
  const get = db.prepare<[string, number], IdempotencyRow>(`SELECT * FROM "${table}" WHERE key = ? AND expires_at > ?`)
  return {
    // IMMEDIATE takes the write lock first, so no other process changes the row between the two statements
    reserve: db.transaction((key: string, fingerprint: string, token: string, now: number, ttlMs: number, leaseMs: number) =>
      take.run({ key, fingerprint, token, now, expires: now + ttlMs, locked: now + leaseMs }).changes === 1
        ? null
        : get.get(key, now) as IdempotencyRow),
    // Each one statement, a compare-and-set on the token: the check and the write cannot be split by another
    // process's takeover.
    renew: db.prepare<{ key: string, token: string, now: number, locked: number }>(`
      UPDATE "${table}" SET locked_until = @locked, expires_at = MAX(expires_at, @locked)
      WHERE key = @key AND token = @token AND state = 'in_progress' AND expires_at > @now`),
    complete: db.prepare<{ key: string, token: string, now: number, response: string, expires: number }>(`
      UPDATE "${table}" SET state = 'completed', response = @response, expires_at = @expires
      WHERE key = @key AND token = @token AND state = 'in_progress' AND expires_at > @now`),
    release: db.prepare<{ key: string, token: string, now: number }>(`
      DELETE FROM "${table}" WHERE key = @key AND token = @token AND state = 'in_progress' AND expires_at > @now`),
    get,
    purge: db.prepare<[number]>(`DELETE FROM "${table}" WHERE expires_at <= ?`)
  }
}

export class SqliteIdempotencyStore extends SqliteStore implements IdempotencyStore {
  #prepared: ReturnType<typeof idempotencyStatements> | null = null
  #purgedAt = 0

  #statements () {
    const db = this.database() as Db
    return (this.#prepared ??= idempotencyStatements(db, `${this.prefix}idempotency`))
  }

  async reserve (key: string, fingerprint: string, options: { ttlMs: number, leaseMs: number }): Promise<ReserveResult> {
    checkTtl('ttlMs', options.ttlMs)
    checkTtl('leaseMs', options.leaseMs)
    const statements = this.#statements()
    const now = Date.now()
    if (now - this.#purgedAt >= PURGE_MS) {
      this.#purgedAt = now
      statements.purge.run(now)
    }
    const token = randomId()
    const existing = statements.reserve.immediate(key, fingerprint, token, now, options.ttlMs, options.leaseMs)
    return existing === null ? { outcome: 'reserved', token } : { outcome: 'existing', record: toIdempotency(existing) }
  }

  async renew (key: string, token: string, leaseMs: number): Promise<boolean> {
    checkTtl('leaseMs', leaseMs)
    const now = Date.now()
    return this.#statements().renew.run({ key, token, now, locked: now + leaseMs }).changes === 1
  }

  async complete (key: string, token: string, response: IdempotencyResponse, ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    return this.#statements().complete.run({ key, token, now, response: JSON.stringify(response), expires: now + ttlMs }).changes === 1
  }

  async release (key: string, token: string): Promise<boolean> {
    return this.#statements().release.run({ key, token, now: Date.now() }).changes === 1
  }

  async get (key: string): Promise<IdempotencyRecord | null> {
    const row = this.#statements().get.get(key, Date.now())
    return row === undefined ? null : toIdempotency(row)
  }
}

/** Every store on one Database (opened from a filename, or yours). */
export function sqliteStores (source: string | SqliteDatabase, options: SqliteStoreOptions = {}): Required<StoreSet> {
  const connection = new SqliteConnection(source)
  return {
    auditStore: new SqliteAuditStore(connection, options),
    sessionStore: new SqliteSessionStore(connection, options),
    approvalStore: new SqliteApprovalStore(connection, options),
    checkpointStore: new SqliteCheckpointStore(connection, options),
    idempotency: { store: new SqliteIdempotencyStore(connection, options) },
    runStore: new SqliteRunStore(connection, options),
    webhookStore: new SqliteWebhookStore(connection, options),
    quotaStore: new SqliteQuotaStore(connection, options),
    scheduleStore: new SqliteScheduleStore(connection, options)
  }
}
