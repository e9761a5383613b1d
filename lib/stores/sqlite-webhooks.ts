// The SQLite outbox of webhook deliveries (docs/webhooks.md): deliveries and their attempts in two tables of the file.
// A claim is one IMMEDIATE transaction (the write lock first), so that processes sharing the file never claim the
// same delivery; a delivery's `due_at` is when it is next due, or, while claimed, when its lease runs out.
import type Database from 'better-sqlite3'
import { checkLimit, decodeSeqCursor, encodeSeqCursor, iso, toMs } from './common.js'
import { MAX_WEBHOOK_ATTEMPT_LIMIT } from './memory-webhooks.js'
import { SqliteStore } from './sqlite-connection.js'
import { immediateWrites } from './sqlite-writes.js'
import type { SqliteWrites } from './sqlite-writes.js'
import type {
  NewWebhookDelivery, RunLease, WebhookAttempt, WebhookAttemptPage, WebhookAttemptQuery, WebhookDelivery, WebhookOutcome, WebhookStore
} from './types.js'

type Db = Database.Database

interface DeliveryRow { id: string, type: string, run_id: string, payload: string, created_at: number, give_up_at: number, attempt: number }
interface StateRow { status: string, owner: string | null, attempt: number }
interface AttemptRow {
  seq: number
  webhook_id: string
  event: string
  run_id: string
  attempt: number
  at: number
  status: number | null
  error: string | null
  duration_ms: number
  outcome: WebhookOutcome
}

function toDelivery (row: DeliveryRow): WebhookDelivery {
  return { id: row.id, type: row.type, runId: row.run_id, payload: row.payload, createdAt: row.created_at, giveUpAt: row.give_up_at, attempt: row.attempt }
}

function toAttempt (row: AttemptRow): WebhookAttempt {
  return {
    webhookId: row.webhook_id,
    event: row.event,
    runId: row.run_id,
    attempt: row.attempt,
    at: iso(row.at),
    status: row.status,
    error: row.error,
    durationMs: row.duration_ms,
    outcome: row.outcome
  }
}

function statements (db: Db, prefix: string) {
  const deliveries = `"${prefix}webhook_deliveries"`
  const attempts = `"${prefix}webhook_attempts"`
  // AUTOINCREMENT: an attempt's seq is never reused after a purge, so a cursor never points at someone else's
  db.exec(`
    CREATE TABLE IF NOT EXISTS ${deliveries} (
      id TEXT PRIMARY KEY, type TEXT NOT NULL, run_id TEXT NOT NULL, payload TEXT NOT NULL, created_at INTEGER NOT NULL,
      give_up_at INTEGER NOT NULL, status TEXT NOT NULL, attempt INTEGER NOT NULL, owner TEXT, due_at INTEGER NOT NULL, expires_at INTEGER);
    CREATE INDEX IF NOT EXISTS "${prefix}webhook_deliveries_due" ON ${deliveries} (due_at) WHERE status = 'pending';
    CREATE INDEX IF NOT EXISTS "${prefix}webhook_deliveries_expires" ON ${deliveries} (expires_at) WHERE expires_at IS NOT NULL;
    CREATE TABLE IF NOT EXISTS ${attempts} (
      seq INTEGER PRIMARY KEY AUTOINCREMENT, webhook_id TEXT NOT NULL, event TEXT NOT NULL, run_id TEXT NOT NULL,
      attempt INTEGER NOT NULL, at INTEGER NOT NULL, status INTEGER, error TEXT, duration_ms REAL NOT NULL, outcome TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS "${prefix}webhook_attempts_webhook" ON ${attempts} (webhook_id);
    CREATE INDEX IF NOT EXISTS "${prefix}webhook_attempts_run" ON ${attempts} (run_id, seq);
    CREATE INDEX IF NOT EXISTS "${prefix}webhook_attempts_event" ON ${attempts} (event, seq);
    CREATE INDEX IF NOT EXISTS "${prefix}webhook_attempts_outcome" ON ${attempts} (outcome, seq);
  `)
  const lists = new Map<string, Database.Statement<[Record<string, unknown>], AttemptRow>>()
  return {
    enqueue: db.prepare<[Record<string, unknown>]>(`
      INSERT OR IGNORE INTO ${deliveries} (id, type, run_id, payload, created_at, give_up_at, status, attempt, due_at)
      VALUES (@id, @type, @runId, @payload, @createdAt, @giveUpAt, 'pending', 0, @dueAt)`),
    due: db.prepare<[number, number], string>(`SELECT id FROM ${deliveries} WHERE status = 'pending' AND due_at <= ? ORDER BY due_at LIMIT ?`).pluck(),
    take: db.prepare<[string, number, string], DeliveryRow>(`
      UPDATE ${deliveries} SET attempt = attempt + 1, owner = ?, due_at = ? WHERE id = ?
      RETURNING id, type, run_id, payload, created_at, give_up_at, attempt`),
    state: db.prepare<[string], StateRow>(`SELECT status, owner, attempt FROM ${deliveries} WHERE id = ?`),
    listAttempt: db.prepare<[Record<string, unknown>]>(`
      INSERT INTO ${attempts} (webhook_id, event, run_id, attempt, at, status, error, duration_ms, outcome)
      VALUES (@webhookId, @event, @runId, @attempt, @at, @status, @error, @durationMs, @outcome)`),
    retry: db.prepare<[number, string]>(`UPDATE ${deliveries} SET owner = NULL, due_at = ? WHERE id = ?`),
    end: db.prepare<[string, number, string]>(`UPDATE ${deliveries} SET status = ?, owner = NULL, expires_at = ? WHERE id = ?`),
    expired: db.prepare<[number, number], string>(`SELECT id FROM ${deliveries} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`).pluck(),
    dropAttempts: db.prepare<[string]>(`DELETE FROM ${attempts} WHERE webhook_id = ?`),
    drop: db.prepare<[string]>(`DELETE FROM ${deliveries} WHERE id = ?`),
    list (query: WebhookAttemptQuery): Database.Statement<[Record<string, unknown>], AttemptRow> {
      const key = `${query.outcome !== undefined}${query.event !== undefined}${query.runId !== undefined}`
      let statement = lists.get(key)
      if (statement === undefined) {
        // one statement per combination of filters: `(@x IS NULL OR x = @x)` would keep SQLite off the indexes
        statement = db.prepare(`
          SELECT * FROM ${attempts} WHERE seq < @before
            ${query.outcome === undefined ? '' : 'AND outcome = @outcome'}
            ${query.event === undefined ? '' : 'AND event = @event'}
            ${query.runId === undefined ? '' : 'AND run_id = @runId'}
          ORDER BY seq DESC LIMIT @limit`)
        lists.set(key, statement)
      }
      return statement
    }
  }
}

type Statements = ReturnType<typeof statements>

export class SqliteWebhookStore extends SqliteStore implements WebhookStore {
  #prepared: SqliteWrites<Statements> | null = null

  #use (): SqliteWrites<Statements> {
    const db = this.database() as Db
    return (this.#prepared ??= immediateWrites(db, statements(db, this.prefix)))
  }

  async enqueue (deliveries: readonly NewWebhookDelivery[]): Promise<void> {
    this.#use().write((s) => {
      for (const delivery of deliveries) s.enqueue.run({ ...delivery })
    })
  }

  async claim (lease: RunLease, now: number, limit: number): Promise<WebhookDelivery[]> {
    return this.#use().write((s) => s.due.all(now, limit).map((id) => toDelivery(s.take.get(lease.owner, lease.until, id)!)))
  }

  async record (attempt: WebhookAttempt, owner: string, next: { dueAt: number, retentionMs: number }): Promise<boolean> {
    const at = toMs('at', attempt.at)
    return this.#use().write((s) => {
      const state = s.state.get(attempt.webhookId)
      if (state === undefined) return false
      s.listAttempt.run({ ...attempt, at })
      if (state.status !== 'pending' || state.owner !== owner || state.attempt !== attempt.attempt) return false
      if (attempt.outcome === 'retried') s.retry.run(next.dueAt, attempt.webhookId)
      else s.end.run(attempt.outcome, Date.now() + next.retentionMs, attempt.webhookId)
      return true
    })
  }

  async attempts (query: WebhookAttemptQuery): Promise<WebhookAttemptPage> {
    const limit = checkLimit(query.limit, MAX_WEBHOOK_ATTEMPT_LIMIT)
    const before = query.cursor === undefined ? Number.MAX_SAFE_INTEGER : Number(decodeSeqCursor(query.cursor))
    const { statements } = this.#use()
    const rows = statements.list(query).all({ before, limit: limit + 1, outcome: query.outcome, event: query.event, runId: query.runId })
    const page = rows.slice(0, limit)
    return { attempts: page.map(toAttempt), nextCursor: rows.length > limit ? encodeSeqCursor(page[limit - 1]!.seq) : null }
  }

  async purge (now: number, batch: number): Promise<number> {
    return this.#use().write((s) => {
      const ids = s.expired.all(now, batch)
      for (const id of ids) {
        s.dropAttempts.run(id)
        s.drop.run(id)
      }
      return ids.length
    })
  }

  /** For health checks: creates the tables and statements if they are not yet, then `SELECT 1`. */
  override async probe (): Promise<void> {
    this.#use()
    await super.probe()
  }
}
