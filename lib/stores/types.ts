// The storage interfaces every backend (memory, SQLite, PostgreSQL, Redis) implements. The records are the
// JSON shapes of schemas/ (what the routes answer). Times are ISO-8601 strings in records and epoch milliseconds
// in arguments. A store never closes a client or pool it was handed; `close()` releases only what it opened.
import type { Static } from '@sinclair/typebox'
import type { AdminAuditEntry, AdminCheckpointList } from '../../schemas/admin.js'
import type { Approval, ApprovalDecision, ApprovalStatus } from '../../schemas/approvals.js'
import type { storeMethods } from '../../schemas/options.js'
import type { RunRecord, RunResult, RunStatus } from '../../schemas/runs.js'
import type { Session, SessionMessage, SessionWithMessages as SessionWithMessagesSchema } from '../../schemas/sessions.js'
import type { WebhookAttempt, WebhookOutcome } from '../../schemas/webhooks.js'
import type { ScheduleState } from '../../schemas/schedules.js'

export type AuditEntry = Static<typeof AdminAuditEntry>

export interface AuditQuery {
  /** 1..500 */
  limit: number
  /** opaque, from a previous page's `nextCursor` */
  cursor?: string
  agent?: string
  /** inclusive status range; `404` is { statusFrom: 404, statusTo: 404 }, `4xx` is 400..499 */
  statusFrom?: number
  statusTo?: number
}

export interface AuditPage {
  /** most recent first */
  entries: AuditEntry[]
  /** null when there is nothing older */
  nextCursor: string | null
}

export interface AuditStore {
  /** Appends in order; resolves once the entries are durable (for a durable backend). */
  append(entries: readonly AuditEntry[]): Promise<void>
  /** Pages are stable while entries are appended: no duplicates, no gaps. */
  query(query: AuditQuery): Promise<AuditPage>
  /**
   * Optional (durable backends): deletes entries older than `before` (epoch ms), at most `batch` of them, oldest
   * first; resolves with how many. The service calls it periodically with `auditRetentionMs`.
   */
  purge?(before: number, batch: number): Promise<number>
  close?(): Promise<void>
}

export type Message = Static<typeof SessionMessage>
export type SessionRecord = Static<typeof Session>
export type SessionWithMessages = Static<typeof SessionWithMessagesSchema>

export interface NewSession {
  id: string
  agent: string | null
  principal: string
  metadata: Record<string, unknown>
}

export interface SessionListQuery {
  limit: number
  cursor?: string
}

/** One principal's sessions (GET /v1/sessions), optionally only those of one agent. */
export interface PrincipalSessionQuery extends SessionListQuery {
  agent?: string
}

export interface SessionStore {
  /** `ttlMs`: idle time after which the session expires (every write below resets it). */
  create(session: NewSession, ttlMs: number): Promise<SessionRecord>
  /** null when absent or expired */
  get(id: string): Promise<SessionWithMessages | null>
  /** Appends a completed turn's messages, increments `turns`, marks activity (a new ttl). false when absent or expired. */
  appendTurn(id: string, messages: readonly Message[], ttlMs: number): Promise<boolean>
  /** true when something was deleted */
  delete(id: string): Promise<boolean>
  /** Unexpired sessions, most recently active first. */
  list(query: SessionListQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }>
  /**
   * `principal`'s unexpired sessions (of `query.agent` only, when given), most recently active first, paged as
   * `list` is: from an index by principal, never a walk through everyone's sessions.
   */
  listByPrincipal(principal: string, query: PrincipalSessionQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }>
  close?(): Promise<void>
}

export type { ApprovalDecision, ApprovalStatus }
export type ApprovalRecord = Static<typeof Approval>

export type DecideResult =
  | { outcome: 'decided', approval: ApprovalRecord }
  | { outcome: 'not_found' }
  | { outcome: 'already_decided', approval: ApprovalRecord }
  | { outcome: 'expired', approval: ApprovalRecord }

export interface ApprovalStore {
  create(approval: ApprovalRecord): Promise<void>
  /** A pending approval past `expiresAt` is returned (and stored) as `expired`. */
  get(id: string): Promise<ApprovalRecord | null>
  /** Pending and unexpired, oldest first. */
  listPending(filter?: { agent?: string, runId?: string }): Promise<ApprovalRecord[]>
  /** Compare-and-set on status = 'pending' (and not past expiresAt): exactly one concurrent caller wins. */
  decide(id: string, decision: ApprovalDecision): Promise<DecideResult>
  /** pending → expired; returns the record as it now is (null when absent). */
  expire(id: string): Promise<ApprovalRecord | null>
  /** pending → cancelled; returns the record as it now is (null when absent). */
  cancel(id: string): Promise<ApprovalRecord | null>
  /**
   * Resolves with the record once its status is no longer `pending` — decided on this instance or on
   * any other sharing the store. Rejects with `signal.reason` when the signal aborts. Does not expire.
   */
  waitForDecision(id: string, signal: AbortSignal): Promise<ApprovalRecord>
  /**
   * Optional (durable backends): deletes approvals requested before `before` (epoch ms) that are no longer pending,
   * or whose expiry passed before it, at most `batch`; resolves with how many (`approvalRetentionMs`).
   */
  purge?(before: number, batch: number): Promise<number>
  close?(): Promise<void>
}

export interface CheckpointRecord {
  runId: string
  agent: string
  sessionId: string
  /** 1 for the first save of a run, then +1 per save */
  step: number
  state: unknown
  createdAt: string
  updatedAt: string
}

export type CheckpointSummary = Static<typeof AdminCheckpointList>['checkpoints'][number]

export interface CheckpointStore {
  save(checkpoint: { runId: string, agent: string, sessionId: string, state: unknown }): Promise<CheckpointRecord>
  load(runId: string): Promise<CheckpointRecord | null>
  delete(runId: string): Promise<void>
  /** Every stored checkpoint (runs that have not completed), most recently updated first, without state. */
  list(): Promise<CheckpointSummary[]>
  close?(): Promise<void>
}

/** A response kept for replay: a store keeps it as given, every field (JSON round-trips it). */
export interface IdempotencyResponse {
  status: number
  /** the serialized body as sent */
  body: string
  contentType: string
  /** the `Location` header as sent (a background run's 202) */
  location?: string
}

export interface IdempotencyRecord {
  key: string
  fingerprint: string
  state: 'in_progress' | 'completed'
  response?: IdempotencyResponse
  createdAt: string
  /** when the completed record stops being replayed */
  expiresAt: string
  /** while in progress: when the reservation is considered abandoned */
  lockedUntil: string
}

export type ReserveResult =
  /** `token` names this reservation: only its holder (who knows it) renews, completes or releases the record */
  | { outcome: 'reserved', token: string }
  | { outcome: 'existing', record: IdempotencyRecord }

export interface IdempotencyStore {
  /**
   * Atomically reserves `key` unless a live record holds it. A record past `expiresAt`, or still
   * `in_progress` past `lockedUntil` (its process died), counts as absent and is taken over, under a new token.
   */
  reserve(key: string, fingerprint: string, options: { ttlMs: number, leaseMs: number }): Promise<ReserveResult>
  /**
   * Atomically extends the lease of the reservation `token` names: sets `lockedUntil` to now + leaseMs (and
   * `expiresAt` with it, should the record otherwise expire first) only while the record is unexpired,
   * `in_progress` and holds `token`. false, changing nothing, otherwise: it was taken over, completed or
   * released. Called periodically while the request runs, so that a run longer than the lease is not taken
   * over. A record whose lease ran out but that nobody took over yet still holds the token and is renewed.
   */
  renew(key: string, token: string, leaseMs: number): Promise<boolean>
  /**
   * Stores the response of the reservation `token` names (unexpired and `in_progress`); the record is replayed
   * until now + ttlMs. false, changing nothing, when the record no longer holds the token.
   */
  complete(key: string, token: string, response: IdempotencyResponse, ttlMs: number): Promise<boolean>
  /** Forgets the key (a 5xx: the retry runs again) while it holds `token`; false, changing nothing, otherwise. */
  release(key: string, token: string): Promise<boolean>
  close?(): Promise<void>
}

// ---------------------------------------------------------------------------------------------------------
// runs (docs/runs.md): a record and an event log per run

export type { RunRecord, RunStatus }

/** One event of a run's log, as first sent: `data` is its JSON text, so a replay is byte for byte the original. */
export interface StoredEvent {
  seq: number
  type: string
  data: string
}

/** What a run needs to be started again elsewhere (a background run, docs/runs.md): JSON. */
export interface RunSpec {
  input: unknown
  metadata?: Record<string, unknown>
  /** messages the request gave beside the session's own (a chat completion's earlier ones): after them in ctx.history */
  history?: Message[]
  /** what the front end that started the run keeps with it (an OpenAI response's previous_response_id): never the agent's */
  frontend?: Record<string, unknown>
  /** the schedule whose fire the run is (docs/schedules.md): `ctx.schedule` */
  schedule?: { id: string, scheduledFor: string }

  /** a replay (POST /v1/runs/:runId/replay): the run it replays, up to which seq, and the checkpoint it starts from */
  replay?: RunReplay
}

export interface RunReplay {
  runId: string
  lastSeq: number
  step: number
  state: unknown
}

/** Who runs a run (an instance's id), and until when (epoch ms) unless it renews the lease (docs/runs.md). */
export interface RunLease {
  owner: string
  until: number
}

export interface NewRun {
  /** status `running` (or `queued`), lastSeq 0 */
  record: RunRecord
  spec: RunSpec
  /** store: false — the record and its events go soon after the run ends */
  ephemeral: boolean
  /**
   * Any instance may run it: a background run, or a `continue` run (handed to another instance when its own goes).
   * A queued detachable run is claimed by whichever instance has room (`claim`).
   */
  detachable: boolean
  /** the instance running it; null for a queued run */
  lease: RunLease | null
}

/** A running run whose lease has lapsed: its instance is gone (or stopped renewing). */
export interface LapsedRun {
  record: RunRecord
  detachable: boolean
  /** a cancel was asked for while it ran */
  cancelRequested: boolean
}

export type CreateRunResult =
  | { outcome: 'created' }
  /** `exclusive` and another run holds the session */
  | { outcome: 'session_busy', holder: string }

export type ReopenRunResult =
  | { outcome: 'reopened', record: RunRecord }
  /** no such run (never stored, or past its retention): create it afresh */
  | { outcome: 'not_found' }
  /** queued or running: it is not its turn to be resumed */
  | { outcome: 'in_progress' }
  | { outcome: 'session_busy', holder: string }

export type StartRunResult =
  | { outcome: 'started', record: RunRecord }
  | { outcome: 'session_busy', holder: string }
  /** no longer queued (cancelled meanwhile), or unknown */
  | { outcome: 'gone' }

/** How a run ended: its last status and what it came to. */
export interface RunEnd {
  status: 'completed' | 'failed' | 'cancelled'
  endedAt: string
  result?: RunResult
  error?: { code: string, message: string }
}

/**
 * A session's turn written with its run's end, in one write (`RunStore.turnWithEnd`, docs/stores.md "Round trips"):
 * `recorded` is set once the end is stored (false: the session was gone, the turn has nowhere to go).
 */
export interface EndTurn {
  readonly sessionId: string
  /** the turn's messages, as JSON */
  readonly messages: string
  readonly ttlMs: number
  recorded?: boolean
}

export type CancelRunResult =
  | { outcome: 'not_found' }
  /** already ended: nothing changed */
  | { outcome: 'ended', record: RunRecord }
  /** was queued: it ended at once, its log the one `run.failed` event given */
  | { outcome: 'cancelled', record: RunRecord }
  /** running: whoever runs it was told (`watch` → 'cancel') */
  | { outcome: 'requested', record: RunRecord }

/** What a watcher of a run hears: new events (up to `lastSeq`), a cancel request, the end. */
export type RunChange =
  | { kind: 'events', lastSeq: number }
  | { kind: 'cancel' }

export interface RunListQuery {
  /** 1..500 */
  limit: number
  cursor?: string
  status?: RunStatus
  agent?: string
  sessionId?: string
  /** who started the run */
  principal?: string
}

export interface RunPage {
  /** most recent first */
  runs: RunRecord[]
  nextCursor: string | null
}

export interface RunStore {
  /**
   * Stores a new run. With `exclusive`, it also takes the run's session (held until the run ends): when another
   * run holds it — one not ended yet — nothing is stored and the holder is named.
   */
  create(run: NewRun, options: { exclusive: boolean }): Promise<CreateRunResult>
  /**
   * Optional: `create` with `exclusive` of a run whose session is new (`session`, its id the run's), the session
   * created as `sessions.create(session, ttlMs)` would, both in one write — for a backend that keeps both in one
   * database. Undefined, with nothing written, when `sessions` is not a store it writes with: the caller then
   * creates the session, then the run.
   */
  createWithSession?(run: NewRun, session: NewSession, ttlMs: number, sessions: SessionStore): Promise<CreateRunResult | undefined>
  /**
   * A run that ended is resumed under its id (`resumeRunId`): ended → running, its attempt the next one, its log
   * kept and `run.requeued { attempt, reason: 'RESUMED' }` appended to it (so that its one log reads on past its last
   * attempt's terminal event: the resumed run's events follow), `startedAt`, `requestId`, `traceId` and the spec
   * from `run`, its end cleared; with `exclusive`, taking its session. Compare-and-set: a run in progress is left alone.
   */
  reopen(run: NewRun, options: { exclusive: boolean }): Promise<ReopenRunResult>
  /**
   * A queued run starts: queued → running under `lease`, taking its session (if any) as `create` does with
   * `exclusive` (a session its own run holds counts as free).
   */
  start(runId: string, startedAt: string, lease: RunLease): Promise<StartRunResult>
  /**
   * Claims at most `limit` queued detachable runs, oldest first, whose session is free (or already theirs): each
   * becomes running under `lease`, its session taken. Atomic: of instances claiming at once, each run goes to one.
   */
  claim(lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]>
  /**
   * Appends events in order; their seqs follow `lastSeq` without a gap (else `FA_RUN_LOG_GAP`, changing nothing).
   * Idempotent by seq, so that a write whose answer was lost (past its deadline, though the store applied it) can be
   * tried again: events the log holds already, the same (type and data) at the same seqs, are acknowledged again and
   * not stored twice, and the rest are appended; a held seq with another event is `FA_RUN_LOG_CONFLICT`, changing
   * nothing. Only the lease's owner appends to a running run: anyone else gets `FA_RUN_LEASE_LOST`, changing nothing.
   * `urgent`: the caller waits for these events to be stored (a durable step's): a store that gathers appends for a
   * while before it writes them (group commit) writes them without waiting; a store may ignore it.
   */
  append(runId: string, events: readonly StoredEvent[], owner: string, urgent?: boolean): Promise<void>
  /**
   * `append` done before returning, for a store that keeps its log in the process: a run's log then costs no
   * promise per event. Throws where `append` would reject.
   */
  appendNow?(runId: string, events: readonly StoredEvent[], owner: string): void
  /**
   * Ends a run in one step: appends its last events (the terminal one last; idempotent by seq as `append` is), sets
   * the end and gives its session back. null (changing nothing) when the run is not running. The record and log are
   * kept `retentionMs` more. Cancel and finish are one compare-and-set: when a cancel was asked for first (`cancel`
   * answered `requested`), the run ends cancelled whatever `end` says (the returned record shows it), its terminal
   * event replaced, at the same seq, by `run.failed` with `{ error: { code: 'CANCELLED', message: 'The run was
   * cancelled' }, traceId }` (the record's trace id) — as `cancelledFinish` in stores/common.ts makes it.
   * With `turn` (made by `turnWithEnd`), the session's turn is appended in the same write as the end, whatever the
   * status the run ends with (a cancel asked for first too), and not when the run does not end there (null).
   */
  finish(runId: string, events: readonly StoredEvent[], end: RunEnd, retentionMs: number, owner: string, turn?: EndTurn): Promise<RunRecord | null>
  /**
   * Optional: a session's turn to write with its run's end (`finish`'s `turn`), for a backend that keeps `sessions`
   * in its own database; undefined when it does not (or cannot take these messages in that write): the caller then
   * appends the turn to the session first, as `sessions.appendTurn(sessionId, messages, ttlMs)`.
   */
  turnWithEnd?(sessions: SessionStore, sessionId: string, messages: readonly Message[], ttlMs: number): EndTurn | undefined
  /** Renews the leases `owner` still holds (running, owned) until `until`; resolves with the ids it renewed. */
  renew(owner: string, runIds: readonly string[], until: number): Promise<string[]>
  /** Running runs whose lease ended before `now`, at most `limit`. */
  lapsed(now: number, limit: number): Promise<LapsedRun[]>
  /**
   * A running run goes back to the queue for its next attempt (compare-and-set): by its owner handing it off
   * (`{ owner }`), or by anyone once its lease lapsed (`{ lapsedBefore }`). It becomes queued and detachable,
   * attempt + 1, without a lease, keeping its session; `run.requeued { attempt, reason }` is appended. A run whose
   * cancel was asked for first (`cancel` answered `requested`) is not requeued but ends cancelled, in the same
   * compare-and-set, as `abandon` would end it (`cancelled` gives its `endedAt`; kept `retentionMs` more): its last
   * event `run.failed` CANCELLED, its session given back (the returned record shows it) — as `cancelledRequeue` in
   * stores/common.ts makes it. null when the condition does not hold (someone else requeued or ended it first).
   */
  requeue(runId: string, condition: { owner: string } | { lapsedBefore: number }, reason: 'SHUTDOWN' | 'INSTANCE_LOST', cancelled: RunEnd, retentionMs: number): Promise<RunRecord | null>
  /**
   * Ends a run whose lease lapsed (compare-and-set on the lapse): `run.failed` with `end.error` is appended as its
   * last event, its session given back (a run whose cancel was asked for ends cancelled, as with `finish`). null
   * when the lease was renewed, or the run ended, meanwhile.
   */
  abandon(runId: string, lapsedBefore: number, end: RunEnd, retentionMs: number): Promise<RunRecord | null>
  /** Calls `listener` when a detachable run is queued (here or on any instance sharing the store). */
  watchQueue(listener: () => void): () => void
  /** null when absent or expired */
  get(runId: string): Promise<RunRecord | null>
  spec(runId: string): Promise<RunSpec | null>
  /**
   * Events with seq > afterSeq, in order, at most `limit`. `budget`: no more events once their data reach about
   * that many characters (the one that reaches it is the last; one at least), so that a reader holds about a
   * budget whatever the events' sizes (docs/stores.md, "Writing a store"). A store may ignore it.
   */
  events(runId: string, afterSeq: number, limit: number, budget?: number): Promise<StoredEvent[]>
  /**
   * See CancelRunResult: a queued run ends at once with `end`, its log one `run.failed` event; a running one is asked
   * to stop, and ends cancelled however it ends (see `finish`); an ended one is left as it is.
   */
  cancel(runId: string, end: RunEnd, retentionMs: number): Promise<CancelRunResult>
  /**
   * Calls `listener` when the run changes — on this instance or on any other sharing the store; a missed
   * notification is made up by a poll. Returns the function that stops watching.
   */
  watch(runId: string, listener: (change: RunChange) => void): () => void
  /** Calls `listener` when the session's run ends (its lock is given back). */
  watchSession(sessionId: string, listener: () => void): () => void
  /** The session's runs, most recent first. */
  listBySession(sessionId: string, query: { limit: number, cursor?: string }): Promise<RunPage>
  list(query: RunListQuery): Promise<RunPage>
  /** Deletes runs whose retention ran out, at most `batch`; resolves with how many. */
  purge(now: number, batch: number): Promise<number>
  /**
   * Deletes an ended run's record and log now, as its retention's end would (a deleted OpenAI response): true when
   * it did; false, changing nothing, for a run in progress, unknown or past its retention.
   */
  delete(runId: string): Promise<boolean>
  close?(): Promise<void>
}

// ---------------------------------------------------------------------------------------------------------
// webhooks (docs/webhooks.md): the outbox of deliveries and their attempts

export type { WebhookAttempt, WebhookOutcome }

/** One event for the endpoint, as enqueued. */
export interface NewWebhookDelivery {
  /** the `webhook-id`: the same event enqueued again is a no-op */
  id: string
  /** the event type */
  type: string
  runId: string
  /** the body, JSON text: the same bytes on every attempt */
  payload: string
  /** epoch ms: when the event was stored */
  createdAt: number
  /** epoch ms: when its first attempt is due */
  dueAt: number
  /** epoch ms: an attempt failing after this gives the delivery up */
  giveUpAt: number
}

/** A claimed delivery: attempt number `attempt` is its claimer's to make, while the lease lasts. */
export interface WebhookDelivery {
  id: string
  type: string
  runId: string
  payload: string
  createdAt: number
  giveUpAt: number
  /** from 1: the attempt this claim is for */
  attempt: number
}

export interface WebhookAttemptQuery {
  /** 1..500 */
  limit: number
  cursor?: string
  outcome?: WebhookOutcome
  event?: string
  runId?: string
}

export interface WebhookAttemptPage {
  /** most recent first */
  attempts: WebhookAttempt[]
  nextCursor: string | null
}

export interface WebhookStore {
  /** Adds pending deliveries; one whose id is in the outbox already is left as it is. Resolves once they are durable. */
  enqueue(deliveries: readonly NewWebhookDelivery[]): Promise<void>
  /**
   * Claims at most `limit` pending deliveries due by `now`, soonest due first: each one's attempt number goes up by
   * one, and it is leased to `lease.owner` until `lease.until` — when it is due again, should the attempt never be
   * recorded (its instance died). Atomic: of instances claiming at once, each delivery goes to one.
   */
  claim(lease: RunLease, now: number, limit: number): Promise<WebhookDelivery[]>
  /**
   * Lists the attempt, and when `owner` still holds the delivery for that attempt, sets what follows from its
   * outcome: `retried`, due again at `next.dueAt`; `delivered` or `failed`, ended and kept `next.retentionMs`.
   * Resolves false (the attempt listed all the same) when the delivery was no longer `owner`'s.
   */
  record(attempt: WebhookAttempt, owner: string, next: { dueAt: number, retentionMs: number }): Promise<boolean>
  /** Attempts, most recent first; pages are stable while attempts are recorded. */
  attempts(query: WebhookAttemptQuery): Promise<WebhookAttemptPage>
  /** Deletes ended deliveries past their retention, with their attempts, at most `batch`; resolves with how many. */
  purge(now: number, batch: number): Promise<number>
  close?(): Promise<void>
}

/** What a store factory returns: keys are option names, so the result spreads into the options. */
export interface StoreSet {
  auditStore?: AuditStore
  sessionStore?: SessionStore
  approvalStore?: ApprovalStore
  checkpointStore?: CheckpointStore
  idempotency?: { store: IdempotencyStore }
  runStore?: RunStore
  webhookStore?: WebhookStore
  quotaStore?: QuotaStore
  scheduleStore?: ScheduleStore
}

// The options check (schemas/options.ts) lists the methods each store must have: these fail to compile when a
// list and its interface part ways, in either direction.
type RequiredMethods<T> = { [K in keyof T]-?: undefined extends T[K] ? never : K }[keyof T]
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
type Check<T extends true> = T
export type StoreMethodsMatch = [
  Check<Same<RequiredMethods<AuditStore>, typeof storeMethods.auditStore[number]>>,
  Check<Same<RequiredMethods<SessionStore>, typeof storeMethods.sessionStore[number]>>,
  Check<Same<RequiredMethods<ApprovalStore>, typeof storeMethods.approvalStore[number]>>,
  Check<Same<RequiredMethods<CheckpointStore>, typeof storeMethods.checkpointStore[number]>>,
  Check<Same<RequiredMethods<IdempotencyStore>, typeof storeMethods.idempotencyStore[number]>>,
  Check<Same<RequiredMethods<RunStore>, typeof storeMethods.runStore[number]>>,
  Check<Same<RequiredMethods<WebhookStore>, typeof storeMethods.webhookStore[number]>>,
  Check<Same<RequiredMethods<QuotaStore>, typeof storeMethods.quotaStore[number]>>,
  Check<Same<RequiredMethods<ScheduleStore>, typeof storeMethods.scheduleStore[number]>>
]

// ---------------------------------------------------------------------------------------------------------
// quotas (docs/auth-and-traffic.md): runs in progress per principal as leased slots, tokens per principal per fixed window

/** A run's place in its principal's count of runs in progress: `slotId` is the run's id. */
export interface QuotaSlot {
  principal: string
  slotId: string
}

export interface QuotaStore {
  /**
   * Atomically: forgets the principal's slots expired by `now` (`until <= now`), then takes `slot` until `until` when
   * the principal holds fewer than `max` live slots. A live slot held already is extended, whatever the count.
   * Resolves whether the slot is held. Of callers acquiring at once, at most `max` are admitted.
   */
  acquire(slot: QuotaSlot, max: number, now: number, until: number): Promise<boolean>
  /** Extends the slots still held (not released, not forgotten) to `until`; resolves with the ids it extended. */
  renew(slots: readonly QuotaSlot[], until: number): Promise<string[]>
  /** Gives the slot back (nothing happens when it is not held). */
  release(slot: QuotaSlot): Promise<void>
  /** Adds `n` tokens to the principal's window starting at `window.start`; the window is kept until `window.end`. */
  addTokens(principal: string, window: { start: number, end: number }, n: number): Promise<void>
  /** The tokens the principal used in the window starting at `windowStart` (0 when none, or forgotten). */
  tokens(principal: string, windowStart: number): Promise<number>
  /** Deletes expired slots and windows ended by `now`, at most `batch`; resolves with how many. */
  purge(now: number, batch: number): Promise<number>
  close?(): Promise<void>
}

// ---------------------------------------------------------------------------------------------------------
// schedules (docs/schedules.md): one row per schedule. The store keeps the columns it sorts and finds by and the
// state as JSON it never reads; what a fire does (the due times, the claim, overlap, catch-up) is decided above it,
// in lib/schedules, once for every backend, and written back by compare-and-set on the row's revision.

export type { ScheduleState }

export interface ScheduleRow {
  id: string
  principal: string
  /** epoch ms: the listings' order (most recent first) */
  createdAt: number
  /** epoch ms: when the schedule must next be looked at (its due time, or its claim's end); null: never (disabled) */
  wakeAt: number | null
  state: ScheduleState
  /** from 1, one more per write: what a conditional write compares */
  revision: number
}

/** One compare-and-set of `writeAll`. */
export interface ScheduleWrite {
  id: string
  /** the revision the write is compared on */
  revision: number
  wakeAt: number | null
  state: ScheduleState
}

export interface ScheduleListQuery {
  /** 1..500 */
  limit: number
  cursor?: string
  principal?: string
}

export interface ScheduleRowPage {
  /** most recently created first */
  rows: ScheduleRow[]
  nextCursor: string | null
}

export interface ScheduleStore {
  /** Stores a new row at revision 1; resolves once it is durable. */
  insert(row: Omit<ScheduleRow, 'revision'>): Promise<ScheduleRow>
  /** null when absent */
  get(id: string): Promise<ScheduleRow | null>
  /**
   * Compare-and-set: replaces the row's wakeAt and state, its revision + 1, only while its revision is `revision`.
   * Resolves with the row written; null, changing nothing, when the revision moved (another write came first) or
   * the row is gone. Of writers racing from one revision, exactly one wins.
   */
  write(id: string, revision: number, change: { wakeAt: number | null, state: ScheduleState }): Promise<ScheduleRow | null>
  /**
   * Several compare-and-sets, each one as `write` (one may win while another fails), in one round trip and one
   * notification: what each one wrote, null where it changed nothing, in the order given.
   */
  writeAll(writes: readonly ScheduleWrite[]): Promise<Array<ScheduleRow | null>>
  /** true when something was deleted */
  delete(id: string): Promise<boolean>
  /** Rows (of one principal when given), most recently created first; pages are stable while rows are added. */
  list(query: ScheduleListQuery): Promise<ScheduleRowPage>
  /**
   * Takes at most `limit` of the rows whose wakeAt is at or before `now`, soonest first (from an index, never a scan),
   * for the caller: each one's wakeAt moved to `until` and its revision + 1, its state as it was, in one atomic step.
   * Of instances taking at once, each row goes to one; a row its taker never writes back is due again at `until`.
   * Resolves with the rows as taken (their new revision), soonest first.
   */
  take(now: number, limit: number, until: number): Promise<ScheduleRow[]>
  /** The earliest wakeAt of every row (from an index); null when none is set. */
  nextWake(): Promise<number | null>
  /** Calls `listener` after any row changes, here or on any instance sharing the store. Returns the function that stops watching. */
  watch(listener: () => void): () => void
  close?(): Promise<void>
}
