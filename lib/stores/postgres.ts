// PostgreSQL stores (pg): shared by many instances. Approval decisions wake waiters on every instance
// through LISTEN/NOTIFY, with polling as the safety net.
import { createHash } from 'node:crypto'
import {
  ApprovalWaiters, MAX_AUDIT_LIMIT, approvalExistsError, checkLimit, checkTtl,
  decodeKeyCursor, decodeSeqCursor, encodeKeyCursor, encodeSeqCursor, iso,
  storeClosedError, toJson, toMs, unrefInterval
} from './common.js'
import { decidedStatus, failedDecision } from './rules.js'
import { PostgresConnection, PostgresStore, isPool, jsonbRefuses, named } from './postgres-connection.js'
import type { NamedStatement, PgPool, PostgresPoolOptions, PostgresSource, PostgresStoreOptions } from './postgres-connection.js'
import { PgListener } from './postgres-clients.js'
import { GroupCommit } from './group-commit.js'
import { pgArray } from './postgres-arrays.js'
import { randomId } from '../core/ids.js'
import { PostgresRunStore } from './postgres-runs.js'
import { PostgresWebhookStore } from './postgres-webhooks.js'
import { PostgresQuotaStore } from './postgres-quotas.js'
import { PostgresScheduleStore } from './postgres-schedules.js'
import type {
  ApprovalDecision, ApprovalRecord, ApprovalStatus, ApprovalStore, AuditEntry, AuditPage, AuditQuery, AuditStore,
  CheckpointRecord, CheckpointStore, CheckpointSummary, DecideResult, IdempotencyRecord, IdempotencyResponse,
  IdempotencyStore, Message, NewSession, PrincipalSessionQuery, ReserveResult, SessionListQuery, SessionRecord, SessionStore,
  SessionWithMessages, StoreSet
} from './types.js'

export { PostgresConnection } from './postgres-connection.js'
export type { PgPool, PostgresPoolOptions, PostgresSource, PostgresStoreOptions } from './postgres-connection.js'

export interface PostgresStoresOptions extends PostgresPoolOptions, PostgresStoreOptions {
  /** your pool (never closed by the stores); without it a pool is made from the other options */
  pool?: PgPool
}

/** How often waiters poll, in case a notification was lost (a listener reconnecting, say). */
const POLL_MS = 500
const PURGE_MS = 60_000

export class PostgresAuditStore extends PostgresStore implements AuditStore {
  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.table('audit')} (
        seq bigserial PRIMARY KEY, agent text, status integer NOT NULL, entry jsonb NOT NULL);
      CREATE INDEX IF NOT EXISTS ${this.index('audit_agent')} ON ${this.table('audit')} (agent, seq);`
  }

  #append: NamedStatement | null = null

  async append (entries: readonly AuditEntry[]): Promise<void> {
    if (entries.length === 0) return
    // One statement whatever the batch size: arrays instead of N rows of parameters; named (prepared once per
    // connection), as every request that changes state waits for it (docs/stores.md, "Round trips").
    this.#append ??= named(`
      INSERT INTO ${this.table('audit')} (agent, status, entry)
      SELECT agent, status, entry::jsonb FROM unnest($1::text[], $2::integer[], $3::text[])
        WITH ORDINALITY AS batch (agent, status, entry, n)
      ORDER BY n`)
    await this.sql(this.#append, [
      pgArray('text', entries.map((entry) => entry.agent)),
      pgArray('int4', entries.map((entry) => entry.status)),
      pgArray('text', entries.map((entry) => JSON.stringify(entry)))
    ])
  }

  async query (query: AuditQuery): Promise<AuditPage> {
    const limit = checkLimit(query.limit, MAX_AUDIT_LIMIT)
    const values: unknown[] = [
      query.cursor === undefined ? '9223372036854775807' : decodeSeqCursor(query.cursor),
      query.statusFrom ?? -2147483648,
      query.statusTo ?? 2147483647,
      limit + 1
    ]
    if (query.agent !== undefined) values.push(query.agent)
    const rows = await this.sql<{ seq: string, entry: AuditEntry }>(`
      SELECT seq, entry FROM ${this.table('audit')}
      WHERE seq < $1 AND status BETWEEN $2 AND $3 ${query.agent === undefined ? '' : 'AND agent = $5'}
      ORDER BY seq DESC LIMIT $4`, values)
    const page = rows.slice(0, limit)
    return {
      entries: page.map((row) => row.entry),
      nextCursor: rows.length > limit ? encodeSeqCursor(page[page.length - 1].seq) : null
    }
  }

  async count (): Promise<number> {
    const [row] = await this.sql<{ n: string }>(`SELECT count(*) AS n FROM ${this.table('audit')}`)
    return Number(row.n)
  }

  async purge (before: number, batch: number): Promise<number> {
    // only the oldest `batch` rows are looked at: a table with nothing to purge costs one short index walk
    const rows = await this.sql(`
      DELETE FROM ${this.table('audit')} WHERE seq IN (
        SELECT seq FROM (SELECT seq, entry FROM ${this.table('audit')} ORDER BY seq LIMIT $2) AS oldest
        WHERE (entry->>'at')::timestamptz < $1)
      RETURNING seq`, [new Date(before), batch])
    return rows.length
  }
}

interface SessionRow {
  id: string
  agent: string | null
  principal: string
  created_at: Date
  last_active_at: Date
  turns: number
  metadata: Record<string, unknown>
}

function toSession (row: SessionRow): SessionRecord {
  return {
    id: row.id,
    agent: row.agent,
    principal: row.principal,
    createdAt: iso(row.created_at),
    lastActiveAt: iso(row.last_active_at),
    turns: row.turns,
    metadata: row.metadata
  }
}

const SESSION_COLUMNS = 'id, agent, principal, created_at, last_active_at, turns, metadata'

/** A session's turn waiting for its group's statement. */
interface Turn {
  id: string
  /** the messages, as JSON */
  messages: string
  at: Date
  expires: Date
}

export class PostgresSessionStore extends PostgresStore implements SessionStore {
  #purgedAt = 0
  #appendTurn: NamedStatement | null = null
  readonly #turns = new GroupCommit<Turn, boolean>({ write: async (turns) => this.#appendTurns(turns), key: (turn) => turn.id })

  protected ddl (): string {
    // COLLATE "C": list() pages by (last_active_at, id); a byte order keeps that independent of the locale
    return `
      CREATE TABLE IF NOT EXISTS ${this.table('sessions')} (
        id text COLLATE "C" PRIMARY KEY, agent text, principal text NOT NULL, created_at timestamptz NOT NULL,
        last_active_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, turns integer NOT NULL,
        metadata jsonb NOT NULL, messages jsonb NOT NULL);
      CREATE INDEX IF NOT EXISTS ${this.index('sessions_active')} ON ${this.table('sessions')} (last_active_at, id);
      CREATE INDEX IF NOT EXISTS ${this.index('sessions_expires')} ON ${this.table('sessions')} (expires_at);
      CREATE INDEX IF NOT EXISTS ${this.index('sessions_principal')} ON ${this.table('sessions')} (principal, last_active_at, id);
      CREATE INDEX IF NOT EXISTS ${this.index('sessions_principal_agent')} ON ${this.table('sessions')} (principal, agent, last_active_at, id);`
  }

  async create (session: NewSession, ttlMs: number): Promise<SessionRecord> {
    const { text, values } = await this.freshSession(session, ttlMs, 1)
    const [row] = await this.sql<SessionRow>(`${text} RETURNING ${SESSION_COLUMNS}`, values)
    return toSession(row)
  }

  /**
   * A new session's INSERT (its parameters numbered from `first`), its table made and the expired sessions purged
   * when due: `create`'s, and the run store's when it writes a run with its fresh session in one statement
   * (docs/stores.md, "Round trips").
   */
  async freshSession (session: NewSession, ttlMs: number, first: number): Promise<{ text: string, values: unknown[] }> {
    return this.freshSessions([{ session, ttlMs }], first)
  }

  /** New sessions' INSERT, one row each, from arrays (parameters numbered from `first`): see freshSession. */
  async freshSessions (sessions: ReadonlyArray<{ session: NewSession, ttlMs: number }>, first: number): Promise<{ text: string, values: unknown[] }> {
    for (const { ttlMs } of sessions) checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    if (now - this.#purgedAt >= PURGE_MS) {
      this.#purgedAt = now
      await this.sql(`DELETE FROM ${this.table('sessions')} WHERE expires_at <= $1`, [new Date(now)])
    } else {
      await this.pool()
    }
    const $ = (n: number): string => `$${first + n}`
    const text = `
      INSERT INTO ${this.table('sessions')} (id, agent, principal, created_at, last_active_at, expires_at, turns, metadata, messages)
      SELECT s.id, s.agent, s.principal, ${$(0)}::timestamptz, ${$(0)}::timestamptz, s.expires_at, 0, s.metadata::jsonb, '[]'
      FROM unnest(${$(1)}::text[], ${$(2)}::text[], ${$(3)}::text[], ${$(4)}::timestamptz[], ${$(5)}::text[]) WITH ORDINALITY
        AS s (id, agent, principal, expires_at, metadata, n)
      ORDER BY s.n
      ON CONFLICT (id) DO UPDATE SET agent = EXCLUDED.agent, principal = EXCLUDED.principal,
        created_at = EXCLUDED.created_at, last_active_at = EXCLUDED.last_active_at, expires_at = EXCLUDED.expires_at,
        turns = 0, metadata = EXCLUDED.metadata, messages = '[]'`
    return {
      text,
      values: [
        new Date(now), pgArray('text', sessions.map((s) => s.session.id)), pgArray('text', sessions.map((s) => s.session.agent)),
        pgArray('text', sessions.map((s) => s.session.principal)), pgArray('timestamptz', sessions.map((s) => now + s.ttlMs)),
        pgArray('text', sessions.map((s) => toJson(s.session.metadata)))
      ]
    }
  }

  async get (id: string): Promise<SessionWithMessages | null> {
    const [row] = await this.sql<SessionRow & { messages: Message[] }>(
      `SELECT ${SESSION_COLUMNS}, messages FROM ${this.table('sessions')} WHERE id = $1 AND expires_at > $2`,
      [id, new Date()])
    return row === undefined ? null : { ...toSession(row), messages: row.messages }
  }

  async appendTurn (id: string, messages: readonly Message[], ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    this.check()
    const now = Date.now()
    const turn = { id, messages: JSON.stringify(messages), at: new Date(now), expires: new Date(now + ttlMs) }
    // a turn jsonb refuses would fail its group's other turns: it goes alone
    if (jsonbRefuses(turn.messages)) return (await this.#appendTurns([turn]))[0]!
    return this.#turns.add(turn)
  }

  /**
   * The UPDATE appending turns to their sessions, from `rows` (a FROM item naming its columns: id, messages as JSON,
   * at, expires), returning the ids of the sessions that were there to take them: `appendTurn`'s, and the run store's
   * when it writes a run's turn with its end (docs/stores.md, "Round trips").
   */
  async turnsFrom (rows: string): Promise<string> {
    // its table made first
    await this.pool()
    return `
      UPDATE ${this.table('sessions')} s SET messages = s.messages || t.messages::jsonb, turns = s.turns + 1,
        last_active_at = t.at, expires_at = t.expires
      FROM ${rows}
      WHERE s.id = t.id AND s.expires_at > t.at RETURNING s.id`
  }

  /**
   * The turns of concurrent runs, each session's once per group, in one statement (docs/stores.md, "Round trips"):
   * whether each session was there to take it.
   */
  async #appendTurns (turns: readonly Turn[]): Promise<boolean[]> {
    // every run's (named: prepared once per connection)
    this.#appendTurn ??= named(await this.turnsFrom('unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS t (id, messages, at, expires)'))
    const rows = await this.sql<{ id: string }>(this.#appendTurn, [
      pgArray('text', turns.map((turn) => turn.id)), pgArray('text', turns.map((turn) => turn.messages)),
      pgArray('timestamptz', turns.map((turn) => turn.at)), pgArray('timestamptz', turns.map((turn) => turn.expires))
    ])
    const recorded = new Set(rows.map((row) => row.id))
    return turns.map((turn) => recorded.has(turn.id))
  }

  async delete (id: string): Promise<boolean> {
    const [row] = await this.sql<{ expires_at: Date }>(
      `DELETE FROM ${this.table('sessions')} WHERE id = $1 RETURNING expires_at`, [id])
    return row !== undefined && row.expires_at.getTime() > Date.now()
  }

  async list (query: SessionListQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    return this.#page(query, '', [])
  }

  async listByPrincipal (principal: string, query: PrincipalSessionQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    return query.agent === undefined
      ? this.#page(query, 'principal = $3 AND', [principal])
      : this.#page(query, 'principal = $3 AND agent = $4 AND', [principal, query.agent])
  }

  /** `filter`: conditions on parameters from $3, `values` theirs; the cursor's come after them. */
  async #page (query: SessionListQuery, filter: string, values: string[]): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    const limit = checkLimit(query.limit, Number.MAX_SAFE_INTEGER)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const n = values.length + 3
    const rows = await this.sql<SessionRow>(`
      SELECT ${SESSION_COLUMNS} FROM ${this.table('sessions')}
      WHERE ${filter} expires_at > $1 ${after === null ? '' : `AND (last_active_at, id) < ($${n}, $${n + 1})`}
      ORDER BY last_active_at DESC, id DESC LIMIT $2`,
    after === null ? [new Date(), limit + 1, ...values] : [new Date(), limit + 1, ...values, new Date(after.ms), after.id])
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return {
      sessions: page.map(toSession),
      nextCursor: rows.length > limit ? encodeKeyCursor(last.last_active_at.getTime(), last.id) : null
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
  payload: unknown
  reason: string | null
  status: ApprovalStatus
  requested_at: Date
  expires_at: Date
  decision: ApprovalDecision | null
  schema: Record<string, unknown> | null
}

function toApproval (row: ApprovalRow): ApprovalRecord {
  const record: ApprovalRecord = {
    id: row.id,
    runId: row.run_id,
    agent: row.agent,
    sessionId: row.session_id,
    principal: row.principal,
    action: row.action,
    payload: row.payload,
    reason: row.reason,
    status: row.status,
    requestedAt: iso(row.requested_at),
    expiresAt: iso(row.expires_at)
  }
  if (row.decision !== null) record.decision = row.decision
  if (row.schema !== null) record.schema = row.schema
  return record
}

function noop (): void {}

const APPROVAL_COLUMNS = 'id, run_id, agent, session_id, principal, action, payload, reason, status, requested_at, expires_at, decision, schema'

export class PostgresApprovalStore extends PostgresStore implements ApprovalStore {
  /** NOTIFY channel shared by every instance using this schema and prefix (a hash keeps it under 63 bytes; plain enough to quote as it is). */
  readonly channel: string
  readonly #waiters = new ApprovalWaiters({
    onActive: () => {
      this.#poller = unrefInterval(() => {
        if (!this.#listener.listening) this.#listener.listen().catch(noop)
        this.#refresh(this.#waiters.ids)
      }, POLL_MS)
    },
    onIdle: () => { clearInterval(this.#poller) }
  })

  #poller: NodeJS.Timeout | undefined
  readonly #listener: PgListener

  constructor (source: PostgresSource, options: PostgresStoreOptions = {}) {
    super(source, options)
    this.channel = `fa_approvals_${createHash('sha256').update(`${this.schema}.${this.tablePrefix}`).digest('hex').slice(0, 16)}`
    this.#listener = new PgListener(async () => this.pool(), this.channel, (id) => {
      if (this.#waiters.has(id)) this.#refresh([id])
    })
  }

  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.table('approvals')} (
        id text PRIMARY KEY, run_id text NOT NULL, agent text NOT NULL, session_id text NOT NULL,
        principal text NOT NULL, action text NOT NULL, payload jsonb NOT NULL, reason text, status text NOT NULL,
        requested_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, decision jsonb, schema jsonb);
      ALTER TABLE ${this.table('approvals')} ADD COLUMN IF NOT EXISTS schema jsonb;
      CREATE INDEX IF NOT EXISTS ${this.index('approvals_status')} ON ${this.table('approvals')} (status, requested_at);`
  }

  async create (approval: ApprovalRecord): Promise<void> {
    const values = [
      approval.id, approval.runId, approval.agent, approval.sessionId, approval.principal, approval.action,
      toJson(approval.payload), approval.reason, approval.status, new Date(toMs('requestedAt', approval.requestedAt)),
      new Date(toMs('expiresAt', approval.expiresAt)), approval.decision === undefined ? null : JSON.stringify(approval.decision),
      approval.schema === undefined ? null : JSON.stringify(approval.schema)
    ]
    try {
      await this.sql(`
        INSERT INTO ${this.table('approvals')}
          (id, run_id, agent, session_id, principal, action, payload, reason, status, requested_at, expires_at, decision, schema)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`, values)
    } catch (error) {
      if ((error as { code?: string }).code === '23505') throw approvalExistsError(approval.id)
      throw error
    }
  }

  async get (id: string): Promise<ApprovalRecord | null> {
    // One round trip: expire it if due (and notify), else read it. The second SELECT sees the table as it was
    // before the UPDATE (a statement's own changes are invisible to it), hence NOT EXISTS.
    const [row] = await this.sql<ApprovalRow>(`
      WITH changed AS (
        UPDATE ${this.table('approvals')} SET status = 'expired' WHERE id = $1 AND status = 'pending' AND expires_at <= $2
        RETURNING *, pg_notify('${this.channel}', id))
      SELECT ${APPROVAL_COLUMNS} FROM changed
      UNION ALL
      SELECT ${APPROVAL_COLUMNS} FROM ${this.table('approvals')} WHERE id = $1 AND NOT EXISTS (SELECT FROM changed)`,
    [id, new Date()])
    if (row === undefined) return null
    const record = toApproval(row)
    this.#waiters.settle(record)
    return record
  }

  async listPending (filter: { agent?: string, runId?: string } = {}): Promise<ApprovalRecord[]> {
    const rows = await this.sql<ApprovalRow>(`
      SELECT * FROM ${this.table('approvals')}
      WHERE status = 'pending' AND expires_at > $1 AND ($2::text IS NULL OR agent = $2) AND ($3::text IS NULL OR run_id = $3)
      ORDER BY requested_at, id`, [new Date(), filter.agent ?? null, filter.runId ?? null])
    return rows.map(toApproval)
  }

  async decide (id: string, decision: ApprovalDecision): Promise<DecideResult> {
    // The compare-and-set: concurrent UPDATEs of one row queue on its lock and re-check the WHERE, so
    // only the first sees 'pending'.
    const [decided] = await this.#change('status = $3, decision = $4',
      "status = 'pending' AND expires_at > $2", [id, new Date(), decidedStatus(decision.approved), JSON.stringify(decision)])
    if (decided !== undefined) return { outcome: 'decided', approval: decided }
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
    const rows = await this.sql(`
      DELETE FROM ${this.table('approvals')} WHERE id IN (SELECT id FROM ${this.table('approvals')} WHERE
        (status IN ('approved', 'rejected', 'expired', 'cancelled') AND requested_at < $1)
        OR (status = 'pending' AND expires_at < $1) LIMIT $2)
      RETURNING id`, [new Date(before), batch])
    return rows.length
  }

  waitForDecision (id: string, signal: AbortSignal): Promise<ApprovalRecord> {
    return this.#waiters.wait(id, signal, async () => {
      // Listening before reading: a decision committed after the read is then sure to be notified.
      // Should LISTEN fail, the read below fails too (same server) or polling covers.
      await this.#listener.listen().catch(noop)
      const row = await this.#row(id)
      return row === undefined ? null : toApproval(row)
    })
  }

  protected async stop (): Promise<void> {
    this.#waiters.rejectAll(storeClosedError())
    await this.#listener.stop()
  }

  async #row (id: string): Promise<ApprovalRow | undefined> {
    const [row] = await this.sql<ApprovalRow>(`SELECT * FROM ${this.table('approvals')} WHERE id = $1`, [id])
    return row
  }

  /** An UPDATE that notifies the other instances of the rows it changed, in the same statement. */
  async #change (set: string, where: string, values: unknown[]): Promise<ApprovalRecord[]> {
    const rows = await this.sql<ApprovalRow>(`
      WITH changed AS (UPDATE ${this.table('approvals')} SET ${set} WHERE id = $1 AND ${where} RETURNING *)
      SELECT changed.*, pg_notify('${this.channel}', changed.id) FROM changed`, values)
    const records = rows.map(toApproval)
    for (const record of records) this.#waiters.settle(record)
    return records
  }

  async #transition (id: string, status: 'expired' | 'cancelled'): Promise<ApprovalRecord | null> {
    const [changed] = await this.#change('status = $2', "status = 'pending'", [id, status])
    if (changed !== undefined) return changed
    const row = await this.#row(id)
    return row === undefined ? null : toApproval(row)
  }

  #refresh (ids: string[]): void {
    this.sql<ApprovalRow>(`SELECT * FROM ${this.table('approvals')} WHERE id = ANY($1) AND status <> 'pending'`, [ids])
      .then((rows) => { for (const row of rows) this.#waiters.settle(toApproval(row)) }, noop)
  }
}

interface CheckpointRow {
  run_id: string
  agent: string
  session_id: string
  step: number
  bytes: number
  created_at: Date
  updated_at: Date
}

function toSummary (row: CheckpointRow): CheckpointSummary {
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

function toCheckpoint (row: CheckpointRow, state: unknown): CheckpointRecord {
  const { bytes: _bytes, ...summary } = toSummary(row)
  return { ...summary, state }
}

const CHECKPOINT_COLUMNS = 'run_id, agent, session_id, step, bytes, created_at, updated_at'

export class PostgresCheckpointStore extends PostgresStore implements CheckpointStore {
  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.table('checkpoints')} (
        run_id text PRIMARY KEY, agent text NOT NULL, session_id text NOT NULL, step integer NOT NULL,
        state jsonb NOT NULL, bytes integer NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);`
  }

  async save (checkpoint: { runId: string, agent: string, sessionId: string, state: unknown }): Promise<CheckpointRecord> {
    const state = toJson(checkpoint.state)
    // the step is incremented by the upsert itself so that two saves racing cannot both write step 2
    const [row] = await this.sql<CheckpointRow>(`
      INSERT INTO ${this.table('checkpoints')} AS c (run_id, agent, session_id, step, state, bytes, created_at, updated_at)
      VALUES ($1, $2, $3, 1, $4, $5, $6, $6)
      ON CONFLICT (run_id) DO UPDATE SET agent = EXCLUDED.agent, session_id = EXCLUDED.session_id, step = c.step + 1,
        state = EXCLUDED.state, bytes = EXCLUDED.bytes, updated_at = EXCLUDED.updated_at
      RETURNING ${CHECKPOINT_COLUMNS}`,
    [checkpoint.runId, checkpoint.agent, checkpoint.sessionId, state, Buffer.byteLength(state), new Date()])
    return toCheckpoint(row, JSON.parse(state))
  }

  async load (runId: string): Promise<CheckpointRecord | null> {
    const [row] = await this.sql<CheckpointRow & { state: unknown }>(
      `SELECT ${CHECKPOINT_COLUMNS}, state FROM ${this.table('checkpoints')} WHERE run_id = $1`, [runId])
    return row === undefined ? null : toCheckpoint(row, row.state)
  }

  async delete (runId: string): Promise<void> {
    await this.sql(`DELETE FROM ${this.table('checkpoints')} WHERE run_id = $1`, [runId])
  }

  async list (): Promise<CheckpointSummary[]> {
    const rows = await this.sql<CheckpointRow>(
      `SELECT ${CHECKPOINT_COLUMNS} FROM ${this.table('checkpoints')} ORDER BY updated_at DESC, run_id DESC`)
    return rows.map(toSummary)
  }
}

interface IdempotencyRow {
  key: string
  fingerprint: string
  state: 'in_progress' | 'completed'
  response: IdempotencyResponse | null
  created_at: Date
  expires_at: Date
  locked_until: Date
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
  if (row.response !== null) record.response = row.response
  return record
}

export class PostgresIdempotencyStore extends PostgresStore implements IdempotencyStore {
  #purgedAt = 0

  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.table('idempotency')} (
        key text PRIMARY KEY, fingerprint text NOT NULL, state text NOT NULL, response jsonb,
        created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, locked_until timestamptz NOT NULL, token text);
      -- the reservation's token (docs/auth-and-traffic.md), added to a table made before it: a record without one is held by nobody
      ALTER TABLE ${this.table('idempotency')} ADD COLUMN IF NOT EXISTS token text;
      CREATE INDEX IF NOT EXISTS ${this.index('idempotency_expires')} ON ${this.table('idempotency')} (expires_at);`
  }

  async reserve (key: string, fingerprint: string, options: { ttlMs: number, leaseMs: number }): Promise<ReserveResult> {
    checkTtl('ttlMs', options.ttlMs)
    checkTtl('leaseMs', options.leaseMs)
    const now = Date.now()
    if (now - this.#purgedAt >= PURGE_MS) {
      this.#purgedAt = now
      await this.sql(`DELETE FROM ${this.table('idempotency')} WHERE expires_at <= $1`, [new Date(now)])
    }
    // Concurrent inserts of one key wait for the first to commit, then re-check the WHERE against it:
    // exactly one reserver gets a row back. The WHERE lets a dead holder's (or an expired) record be taken over:
    // the rules of rules.ts (idempotencyLive here, idempotencyHeld in renew, complete and release), in one statement each.
    const token = randomId()
    const taken = await this.sql(`
      INSERT INTO ${this.table('idempotency')} AS i (key, fingerprint, state, response, created_at, expires_at, locked_until, token)
      VALUES ($1, $2, 'in_progress', NULL, $3, $4, $5, $6)
      ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, state = 'in_progress', response = NULL,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, locked_until = EXCLUDED.locked_until,
        token = EXCLUDED.token
      WHERE i.expires_at <= $3 OR (i.state = 'in_progress' AND i.locked_until <= $3)
      RETURNING key`,
    [key, fingerprint, new Date(now), new Date(now + options.ttlMs), new Date(now + options.leaseMs), token])
    if (taken.length === 1) return { outcome: 'reserved', token }
    const record = await this.get(key)
    // The holder released the key (or it expired) between the INSERT and the SELECT: a race that tests
    // cannot provoke on purpose. Trying again is the right answer.
    /* c8 ignore next */
    if (record === null) return this.reserve(key, fingerprint, options)
    return { outcome: 'existing', record }
  }

  async renew (key: string, token: string, leaseMs: number): Promise<boolean> {
    checkTtl('leaseMs', leaseMs)
    const now = Date.now()
    // One conditional UPDATE, a compare-and-set on the token: it waits for a concurrent takeover's row lock,
    // then re-checks the WHERE against the row that takeover left: a record taken over, completed or released
    // in between is left alone. complete() and release() work the same way.
    const renewed = await this.sql(`
      UPDATE ${this.table('idempotency')} SET locked_until = $3, expires_at = GREATEST(expires_at, $3)
      WHERE key = $1 AND token = $2 AND state = 'in_progress' AND expires_at > $4
      RETURNING key`,
    [key, token, new Date(now + leaseMs), new Date(now)])
    return renewed.length === 1
  }

  async complete (key: string, token: string, response: IdempotencyResponse, ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    const completed = await this.sql(`
      UPDATE ${this.table('idempotency')} SET state = 'completed', response = $3, expires_at = $4
      WHERE key = $1 AND token = $2 AND state = 'in_progress' AND expires_at > $5
      RETURNING key`,
    [key, token, JSON.stringify(response), new Date(now + ttlMs), new Date(now)])
    return completed.length === 1
  }

  async release (key: string, token: string): Promise<boolean> {
    const released = await this.sql(`
      DELETE FROM ${this.table('idempotency')} WHERE key = $1 AND token = $2 AND state = 'in_progress' AND expires_at > $3
      RETURNING key`, [key, token, new Date()])
    return released.length === 1
  }

  async get (key: string): Promise<IdempotencyRecord | null> {
    const [row] = await this.sql<IdempotencyRow>(
      `SELECT * FROM ${this.table('idempotency')} WHERE key = $1 AND expires_at > $2`, [key, new Date()])
    return row === undefined ? null : toIdempotency(row)
  }
}

/**
 * Every store on one pool: `postgresStores(url)`, `postgresStores(pool, { schema })` or
 * `postgresStores({ connectionString, max, schema })`.
 */
export function postgresStores (source: string | PgPool | PostgresStoresOptions, options: PostgresStoreOptions = {}): Required<StoreSet> {
  let connection: PostgresConnection
  let storeOptions = options
  if (typeof source === 'object' && source !== null && !isPool(source)) {
    const { pool, schema, tablePrefix, ...config } = source
    connection = new PostgresConnection(pool ?? config)
    storeOptions = { schema: options.schema ?? schema, tablePrefix: options.tablePrefix ?? tablePrefix }
  } else {
    connection = new PostgresConnection(source)
  }
  // one database: a run's fresh session goes in with the run, in one statement
  const sessionStore = new PostgresSessionStore(connection, storeOptions)
  return {
    auditStore: new PostgresAuditStore(connection, storeOptions),
    sessionStore,
    approvalStore: new PostgresApprovalStore(connection, storeOptions),
    checkpointStore: new PostgresCheckpointStore(connection, storeOptions),
    idempotency: { store: new PostgresIdempotencyStore(connection, storeOptions) },
    runStore: new PostgresRunStore(connection, storeOptions).withSessions(sessionStore),
    webhookStore: new PostgresWebhookStore(connection, storeOptions),
    quotaStore: new PostgresQuotaStore(connection, storeOptions),
    scheduleStore: new PostgresScheduleStore(connection, storeOptions)
  }
}
