// The PostgreSQL outbox of webhook deliveries (docs/webhooks.md), shared by every instance on the database: deliveries
// and their attempts in two tables. A claim is one statement taking due rows `FOR UPDATE SKIP LOCKED`, so instances
// claiming at once never take the same delivery (nor wait on each other); a record is one statement too. A delivery's
// `due_at` is when it is next due, or, while claimed, when its lease runs out. Times are epoch milliseconds (bigint).
import { checkLimit, decodeSeqCursor, encodeSeqCursor, iso, toMs } from './common.js'
import { MAX_WEBHOOK_ATTEMPT_LIMIT } from './memory-webhooks.js'
import { PostgresStore } from './postgres-connection.js'
import type { PostgresSource, PostgresStoreOptions } from './postgres-connection.js'
import type {
  NewWebhookDelivery, RunLease, WebhookAttempt, WebhookAttemptPage, WebhookAttemptQuery, WebhookDelivery, WebhookOutcome, WebhookStore
} from './types.js'

// pg gives bigint columns as strings
interface DeliveryRow { id: string, type: string, run_id: string, payload: string, created_at: string, give_up_at: string, attempt: number, was_due: string }
interface AttemptRow {
  seq: string
  webhook_id: string
  event: string
  run_id: string
  attempt: number
  at: string
  status: number | null
  error: string | null
  duration_ms: number
  outcome: WebhookOutcome
}

function toAttempt (row: AttemptRow): WebhookAttempt {
  return {
    webhookId: row.webhook_id,
    event: row.event,
    runId: row.run_id,
    attempt: row.attempt,
    at: iso(Number(row.at)),
    status: row.status,
    error: row.error,
    durationMs: row.duration_ms,
    outcome: row.outcome
  }
}

export class PostgresWebhookStore extends PostgresStore implements WebhookStore {
  readonly #deliveries: string
  readonly #attempts: string

  constructor (source: PostgresSource, options: PostgresStoreOptions = {}) {
    super(source, options)
    this.#deliveries = this.table('webhook_deliveries')
    this.#attempts = this.table('webhook_attempts')
  }

  protected ddl (): string {
    return `
      CREATE TABLE IF NOT EXISTS ${this.#deliveries} (
        id text PRIMARY KEY, type text NOT NULL, run_id text NOT NULL, payload text NOT NULL, created_at bigint NOT NULL,
        give_up_at bigint NOT NULL, status text NOT NULL, attempt integer NOT NULL, owner text, due_at bigint NOT NULL, expires_at bigint);
      CREATE INDEX IF NOT EXISTS ${this.index('webhook_deliveries_due')} ON ${this.#deliveries} (due_at) WHERE status = 'pending';
      CREATE INDEX IF NOT EXISTS ${this.index('webhook_deliveries_expires')} ON ${this.#deliveries} (expires_at) WHERE expires_at IS NOT NULL;
      CREATE TABLE IF NOT EXISTS ${this.#attempts} (
        seq bigserial PRIMARY KEY, webhook_id text NOT NULL, event text NOT NULL, run_id text NOT NULL, attempt integer NOT NULL,
        at bigint NOT NULL, status integer, error text, duration_ms double precision NOT NULL, outcome text NOT NULL);
      CREATE INDEX IF NOT EXISTS ${this.index('webhook_attempts_webhook')} ON ${this.#attempts} (webhook_id);
      CREATE INDEX IF NOT EXISTS ${this.index('webhook_attempts_run')} ON ${this.#attempts} (run_id, seq);
      CREATE INDEX IF NOT EXISTS ${this.index('webhook_attempts_event')} ON ${this.#attempts} (event, seq);
      CREATE INDEX IF NOT EXISTS ${this.index('webhook_attempts_outcome')} ON ${this.#attempts} (outcome, seq);`
  }

  async enqueue (deliveries: readonly NewWebhookDelivery[]): Promise<void> {
    if (deliveries.length === 0) return
    // one statement whatever the batch: arrays rather than rows of parameters
    await this.sql(`
      INSERT INTO ${this.#deliveries} (id, type, run_id, payload, created_at, give_up_at, status, attempt, due_at)
      SELECT id, type, run_id, payload, created_at, give_up_at, 'pending', 0, due_at
      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[]) WITH ORDINALITY
        AS batch (id, type, run_id, payload, created_at, give_up_at, due_at, n)
      ORDER BY n
      ON CONFLICT (id) DO NOTHING`, [
      deliveries.map((d) => d.id), deliveries.map((d) => d.type), deliveries.map((d) => d.runId), deliveries.map((d) => d.payload),
      deliveries.map((d) => d.createdAt), deliveries.map((d) => d.giveUpAt), deliveries.map((d) => d.dueAt)
    ])
  }

  async claim (lease: RunLease, now: number, limit: number): Promise<WebhookDelivery[]> {
    const rows = await this.sql<DeliveryRow>(`
      WITH due AS (
        SELECT id, due_at FROM ${this.#deliveries} WHERE status = 'pending' AND due_at <= $3 ORDER BY due_at LIMIT $4
        FOR UPDATE SKIP LOCKED)
      UPDATE ${this.#deliveries} d SET attempt = d.attempt + 1, owner = $1, due_at = $2
      FROM due WHERE d.id = due.id
      RETURNING d.id, d.type, d.run_id, d.payload, d.created_at, d.give_up_at, d.attempt, due.due_at AS was_due`,
    [lease.owner, lease.until, now, limit])
    return rows.sort((a, b) => Number(a.was_due) - Number(b.was_due)).map((row) => ({
      id: row.id,
      type: row.type,
      runId: row.run_id,
      payload: row.payload,
      createdAt: Number(row.created_at),
      giveUpAt: Number(row.give_up_at),
      attempt: row.attempt
    }))
  }

  async record (attempt: WebhookAttempt, owner: string, next: { dueAt: number, retentionMs: number }): Promise<boolean> {
    const retried = attempt.outcome === 'retried'
    // one statement: the attempt listed (when its delivery is there), and what follows set while `owner` holds it
    const [row] = await this.sql<{ changed: number }>(`
      WITH current AS (SELECT id, status, owner, attempt FROM ${this.#deliveries} WHERE id = $1 FOR UPDATE),
      listed AS (
        INSERT INTO ${this.#attempts} (webhook_id, event, run_id, attempt, at, status, error, duration_ms, outcome)
        SELECT id, $2::text, $3::text, $4::integer, $5::bigint, $6::integer, $7::text, $8::double precision, $9::text FROM current),
      changed AS (
        UPDATE ${this.#deliveries} d
        SET owner = NULL, status = $10::text, due_at = CASE WHEN $11::boolean THEN $12::bigint ELSE d.due_at END, expires_at = $13::bigint
        FROM current c WHERE d.id = c.id AND c.status = 'pending' AND c.owner = $14::text AND c.attempt = $4::integer
        RETURNING d.id)
      SELECT count(*)::integer AS changed FROM changed`, [
      attempt.webhookId, attempt.event, attempt.runId, attempt.attempt, toMs('at', attempt.at), attempt.status, attempt.error,
      attempt.durationMs, attempt.outcome, retried ? 'pending' : attempt.outcome, retried, next.dueAt,
      retried ? null : Date.now() + next.retentionMs, owner
    ])
    return row!.changed === 1
  }

  async attempts (query: WebhookAttemptQuery): Promise<WebhookAttemptPage> {
    const limit = checkLimit(query.limit, MAX_WEBHOOK_ATTEMPT_LIMIT)
    const values: unknown[] = [limit + 1]
    let where = ''
    const filter = (column: string, value: unknown): void => {
      values.push(value)
      where += `${where === '' ? 'WHERE' : ' AND'} ${column} = $${values.length}`
    }
    if (query.cursor !== undefined) {
      values.push(decodeSeqCursor(query.cursor))
      where = `WHERE seq < $${values.length}`
    }
    if (query.outcome !== undefined) filter('outcome', query.outcome)
    if (query.event !== undefined) filter('event', query.event)
    if (query.runId !== undefined) filter('run_id', query.runId)
    const rows = await this.sql<AttemptRow>(`SELECT * FROM ${this.#attempts} ${where} ORDER BY seq DESC LIMIT $1`, values)
    const page = rows.slice(0, limit)
    return { attempts: page.map(toAttempt), nextCursor: rows.length > limit ? encodeSeqCursor(page[limit - 1]!.seq) : null }
  }

  async purge (now: number, batch: number): Promise<number> {
    const [row] = await this.sql<{ purged: number }>(`
      WITH doomed AS (
        SELECT id FROM ${this.#deliveries} WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED),
      attempts AS (DELETE FROM ${this.#attempts} WHERE webhook_id IN (SELECT id FROM doomed)),
      deliveries AS (DELETE FROM ${this.#deliveries} WHERE id IN (SELECT id FROM doomed) RETURNING id)
      SELECT count(*)::integer AS purged FROM deliveries`, [now, batch])
    return row!.purged
  }
}
