// In-process stores: the defaults. Fast (they sit on every request) and lost on restart.
import {
  ApprovalWaiters, MAX_AUDIT_LIMIT, approvalExistsError, checkCount, checkLimit, checkTtl, decodeKeyCursor,
  decodeSeqCursor, encodeSeqCursor, iso, storeClosedError, toJson, toMs
} from './common.js'
import { approvalStatusAt, beforeKeyCursor, decide, idempotencyHeld, idempotencyLive, keyPage, nextCheckpoint, renewedLease, settledStatus } from './rules.js'
import type { IdempotencyHold } from './rules.js'
import { randomId } from '../core/ids.js'
import { MemoryRunStore } from './memory-runs.js'
import { MemoryWebhookStore } from './memory-webhooks.js'
import { MemoryQuotaStore } from './memory-quotas.js'
import type {
  ApprovalDecision, ApprovalRecord, ApprovalStore, AuditEntry, AuditPage, AuditQuery, AuditStore,
  CheckpointRecord, CheckpointStore, CheckpointSummary, DecideResult, IdempotencyRecord, IdempotencyResponse,
  IdempotencyStore, Message, NewSession, PrincipalSessionQuery, ReserveResult, SessionListQuery, SessionRecord, SessionStore,
  SessionWithMessages, StoreSet
} from './types.js'

export const DEFAULT_AUDIT_CAPACITY = 500

export interface MemoryAuditStoreOptions {
  /** how many entries are kept; the oldest is evicted first (default 500) */
  capacity?: number
}

/**
 * A ring buffer: entry number `seq` lives at `seq % capacity`, so appending is O(1) per entry and a cursor
 * (a seq) points straight at where the next page starts.
 */
export class MemoryAuditStore implements AuditStore {
  readonly capacity: number
  readonly #ring: AuditEntry[]
  #next = 0
  #size = 0

  constructor (options: MemoryAuditStoreOptions = {}) {
    this.capacity = checkCount('capacity', options.capacity ?? DEFAULT_AUDIT_CAPACITY)
    this.#ring = new Array<AuditEntry>(this.capacity)
  }

  async append (entries: readonly AuditEntry[]): Promise<void> {
    for (const entry of entries) {
      this.#ring[this.#next % this.capacity] = { ...entry }
      this.#next++
    }
    this.#size = Math.min(this.capacity, this.#size + entries.length)
  }

  async query (query: AuditQuery): Promise<AuditPage> {
    const limit = checkLimit(query.limit, MAX_AUDIT_LIMIT)
    const oldest = this.#next - this.#size
    let seq = this.#next - 1
    if (query.cursor !== undefined) seq = Math.min(seq, Number(decodeSeqCursor(query.cursor)) - 1)
    const from = query.statusFrom ?? -Infinity
    const to = query.statusTo ?? Infinity
    const entries: AuditEntry[] = []
    let last = -1
    for (; seq >= oldest; seq--) {
      const entry = this.#ring[seq % this.capacity]
      if (query.agent !== undefined && entry.agent !== query.agent) continue
      if (entry.status < from || entry.status > to) continue
      if (entries.length === limit) return { entries, nextCursor: encodeSeqCursor(last) }
      entries.push({ ...entry })
      last = seq
    }
    return { entries, nextCursor: null }
  }

  async count (): Promise<number> {
    return this.#size
  }

  async close (): Promise<void> {}
}

/** A session and its place in the store's list, least recently active first. One object per session. */
class StoredSession {
  readonly id: string
  readonly agent: string | null
  readonly principal: string
  readonly createdAt: string
  turns = 0
  /** null for none: most sessions (every run without a sessionId makes one) have none to keep */
  readonly metadata: Record<string, unknown> | null
  /** null until the first turn: a session whose run is still going (an open stream) holds no array */
  messages: Message[] | null = null
  lastActiveMs: number
  expiresMs: number
  older: StoredSession | null = null
  newer: StoredSession | null = null

  constructor (session: NewSession, now: number, ttlMs: number) {
    this.id = session.id
    this.agent = session.agent
    this.principal = session.principal
    this.createdAt = iso(now)
    this.metadata = isEmpty(session.metadata) ? null : session.metadata
    this.lastActiveMs = now
    this.expiresMs = now + ttlMs
  }
}

function isEmpty (object: Record<string, unknown>): boolean {
  for (const _key in object) return false
  return true
}

/** The default bound of the memory session store: beyond it the least recently active session goes first. */
export const DEFAULT_MAX_SESSIONS = 100_000

export interface MemorySessionStoreOptions {
  /**
   * How many sessions are kept (default 100,000). Every run without a `sessionId` creates one, and each keeps
   * its messages for `sessionTtlMs`: without a bound, memory would grow with the request rate.
   */
  maxSessions?: number
}

export class MemorySessionStore implements SessionStore {
  readonly maxSessions: number
  readonly #sessions = new Map<string, StoredSession>()
  /** each principal's sessions: listByPrincipal reads its own, not everyone's */
  readonly #byPrincipal = new Map<string, Set<StoredSession>>()
  // A list ordered by last write, least recent first: touching a session moves it to the newest end, the
  // purge and the bound take from the oldest end (re-inserting into the Map left holes every purge walked).
  #oldest: StoredSession | null = null
  #newest: StoredSession | null = null
  #evicted = 0

  constructor (options: MemorySessionStoreOptions = {}) {
    this.maxSessions = checkCount('maxSessions', options.maxSessions ?? DEFAULT_MAX_SESSIONS)
  }

  /** Sessions dropped, while still live, to stay within `maxSessions`. */
  get evicted (): number {
    return this.#evicted
  }

  async create (session: NewSession, ttlMs: number): Promise<SessionRecord> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    this.#purge(now)
    const stored = new StoredSession(session, now, ttlMs)
    const previous = this.#sessions.get(session.id)
    if (previous !== undefined) this.#remove(previous)
    else if (this.#sessions.size >= this.maxSessions) this.#evictOldest()
    this.#sessions.set(session.id, stored)
    this.#append(stored)
    const owned = this.#byPrincipal.get(stored.principal)
    if (owned === undefined) this.#byPrincipal.set(stored.principal, new Set([stored]))
    else owned.add(stored)
    return toSessionRecord(stored)
  }

  async get (id: string): Promise<SessionWithMessages | null> {
    const stored = this.#live(id, Date.now())
    if (stored === undefined) return null
    // not `{ ...record, messages }`: see toSessionRecord
    const session = toSessionRecord(stored) as SessionWithMessages
    session.messages = stored.messages === null ? [] : [...stored.messages]
    return session
  }

  async appendTurn (id: string, messages: readonly Message[], ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    const stored = this.#live(id, now)
    if (stored === undefined) return false
    // A first turn gets an array of its own length (pushing onto an empty one reserves room for 17): most
    // sessions (one per run without a sessionId) keep one turn for their whole life.
    if (stored.messages === null) stored.messages = messages.slice()
    else for (const message of messages) stored.messages.push(message)
    stored.turns++
    this.#touch(stored, now, ttlMs)
    return true
  }

  async delete (id: string): Promise<boolean> {
    const stored = this.#sessions.get(id)
    if (stored === undefined) return false
    this.#remove(stored)
    return stored.expiresMs > Date.now()
  }

  async list (query: SessionListQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    return this.#page(this.#sessions.values(), query)
  }

  async listByPrincipal (principal: string, query: PrincipalSessionQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    const owned = this.#byPrincipal.get(principal) ?? []
    const agent = query.agent
    return this.#page(owned, query, agent === undefined ? undefined : (stored) => stored.agent === agent)
  }

  #page (sessions: Iterable<StoredSession>, query: SessionListQuery, wanted?: (stored: StoredSession) => boolean): { sessions: SessionRecord[], nextCursor: string | null } {
    const limit = checkLimit(query.limit, Number.MAX_SAFE_INTEGER)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const now = Date.now()
    const candidates: StoredSession[] = []
    for (const stored of sessions) {
      if (stored.expiresMs <= now) this.#remove(stored)
      else if (wanted !== undefined && !wanted(stored)) continue
      else if (beforeKeyCursor(stored.lastActiveMs, stored.id, after)) candidates.push(stored)
    }
    candidates.sort((a, b) => b.lastActiveMs - a.lastActiveMs || (a.id < b.id ? 1 : -1))
    const { items, nextCursor } = keyPage(candidates, limit, (stored) => ({ ms: stored.lastActiveMs, id: stored.id }))
    return { sessions: items.map(toSessionRecord), nextCursor }
  }

  async close (): Promise<void> {}

  #live (id: string, now: number): StoredSession | undefined {
    const stored = this.#sessions.get(id)
    if (stored === undefined || stored.expiresMs > now) return stored
    this.#remove(stored)
    return undefined
  }

  #touch (stored: StoredSession, now: number, ttlMs: number): void {
    stored.lastActiveMs = now
    stored.expiresMs = now + ttlMs
    if (stored === this.#newest) return
    this.#unlink(stored)
    this.#append(stored)
  }

  // Ordered by last write, which is the order of expiry while every write uses one ttl (the service's
  // sessionTtlMs); with mixed ttls a few expired ones may stay until get() or list() meets them.
  #purge (now: number): void {
    while (this.#oldest !== null && this.#oldest.expiresMs <= now) this.#remove(this.#oldest)
  }

  #evictOldest (): void {
    const oldest = this.#oldest!
    this.#remove(oldest)
    if (this.#evicted++ === 0) {
      process.emitWarning(
        `the memory session store holds its maximum of ${this.maxSessions} sessions: the least recently active ones are dropped before they expire (raise maxSessions, or use a durable session store)`,
        { code: 'FASTIFY_AGENTS_WARN001' }
      )
    }
  }

  #append (stored: StoredSession): void {
    stored.older = this.#newest
    stored.newer = null
    if (this.#newest === null) this.#oldest = stored
    else this.#newest.newer = stored
    this.#newest = stored
  }

  #unlink (stored: StoredSession): void {
    if (stored.older === null) this.#oldest = stored.newer
    else stored.older.newer = stored.newer
    if (stored.newer === null) this.#newest = stored.older
    else stored.newer.older = stored.older
    stored.older = null
    stored.newer = null
  }

  #remove (stored: StoredSession): void {
    this.#sessions.delete(stored.id)
    this.#unlink(stored)
    const owned = this.#byPrincipal.get(stored.principal)!
    owned.delete(stored)
    if (owned.size === 0) this.#byPrincipal.delete(stored.principal)
  }
}

// Field by field: a spread followed by one more property (`{ ...record, lastActiveAt }`) takes a slow path
// in V8, and this runs for every session a run creates.
function toSessionRecord (stored: StoredSession): SessionRecord {
  return {
    id: stored.id,
    agent: stored.agent,
    principal: stored.principal,
    createdAt: stored.createdAt,
    lastActiveAt: iso(stored.lastActiveMs),
    turns: stored.turns,
    metadata: stored.metadata ?? {}
  }
}

export class MemoryApprovalStore implements ApprovalStore {
  readonly #approvals = new Map<string, ApprovalRecord>()
  readonly #waiters = new ApprovalWaiters()

  async create (approval: ApprovalRecord): Promise<void> {
    toMs('requestedAt', approval.requestedAt)
    toMs('expiresAt', approval.expiresAt)
    if (this.#approvals.has(approval.id)) throw approvalExistsError(approval.id)
    this.#approvals.set(approval.id, { ...approval, payload: approval.payload ?? null })
  }

  async get (id: string): Promise<ApprovalRecord | null> {
    const record = this.#current(id)
    return record === undefined ? null : copy(record)
  }

  async listPending (filter: { agent?: string, runId?: string } = {}): Promise<ApprovalRecord[]> {
    const now = Date.now()
    const pending: ApprovalRecord[] = []
    for (const record of this.#approvals.values()) {
      if (record.status !== 'pending' || Date.parse(record.expiresAt) <= now) continue
      if (filter.agent !== undefined && record.agent !== filter.agent) continue
      if (filter.runId !== undefined && record.runId !== filter.runId) continue
      pending.push(copy(record))
    }
    return pending.sort((a, b) => Date.parse(a.requestedAt) - Date.parse(b.requestedAt))
  }

  // No await between the read and the write: that is what makes it a compare-and-set.
  async decide (id: string, decision: ApprovalDecision): Promise<DecideResult> {
    const record = this.#current(id)
    const { decided, result } = decide(record === undefined ? null : copy(record), decision)
    if (decided !== null) this.#store(copy(decided))
    return result
  }

  async expire (id: string): Promise<ApprovalRecord | null> {
    return this.#transition(id, 'expired')
  }

  async cancel (id: string): Promise<ApprovalRecord | null> {
    return this.#transition(id, 'cancelled')
  }

  waitForDecision (id: string, signal: AbortSignal): Promise<ApprovalRecord> {
    return this.#waiters.wait(id, signal, async () => {
      const record = this.#approvals.get(id)
      return record === undefined ? null : copy(record)
    })
  }

  async close (): Promise<void> {
    this.#waiters.rejectAll(storeClosedError())
  }

  /** The stored record as it now is: stored expired first when it is pending past its expiry. */
  #current (id: string): ApprovalRecord | undefined {
    const record = this.#approvals.get(id)
    if (record === undefined) return undefined
    const status = approvalStatusAt(record, Date.now())
    return status === record.status ? record : this.#store({ ...record, status })
  }

  #transition (id: string, to: 'expired' | 'cancelled'): ApprovalRecord | null {
    const record = this.#approvals.get(id)
    if (record === undefined) return null
    const status = settledStatus(record.status, to)
    return copy(status === record.status ? record : this.#store({ ...record, status }))
  }

  /** Stores a record that left `pending`, and wakes its waiters. */
  #store (record: ApprovalRecord): ApprovalRecord {
    this.#approvals.set(record.id, record)
    this.#waiters.settle(copy(record))
    return record
  }
}

function copy (record: ApprovalRecord): ApprovalRecord {
  return record.decision === undefined ? { ...record } : { ...record, decision: { ...record.decision } }
}

interface StoredCheckpoint {
  summary: CheckpointSummary
  /** the state is kept serialized: the run goes on mutating the object it checkpointed */
  json: string
}

export class MemoryCheckpointStore implements CheckpointStore {
  // re-inserted on every save, so the Map is ordered by updatedAt
  readonly #checkpoints = new Map<string, StoredCheckpoint>()

  async save (checkpoint: { runId: string, agent: string, sessionId: string, state: unknown }): Promise<CheckpointRecord> {
    const json = toJson(checkpoint.state)
    const now = iso(Date.now())
    const { step, createdAt } = nextCheckpoint(this.#checkpoints.get(checkpoint.runId)?.summary, now)
    const summary: CheckpointSummary = {
      runId: checkpoint.runId,
      agent: checkpoint.agent,
      sessionId: checkpoint.sessionId,
      step,
      createdAt,
      updatedAt: now,
      bytes: Buffer.byteLength(json)
    }
    this.#checkpoints.delete(checkpoint.runId)
    this.#checkpoints.set(checkpoint.runId, { summary, json })
    return toCheckpointRecord(summary, json)
  }

  async load (runId: string): Promise<CheckpointRecord | null> {
    const stored = this.#checkpoints.get(runId)
    return stored === undefined ? null : toCheckpointRecord(stored.summary, stored.json)
  }

  async delete (runId: string): Promise<void> {
    this.#checkpoints.delete(runId)
  }

  async list (): Promise<CheckpointSummary[]> {
    return [...this.#checkpoints.values()].reverse().map((stored) => ({ ...stored.summary }))
  }

  async close (): Promise<void> {}
}

function toCheckpointRecord (summary: CheckpointSummary, json: string): CheckpointRecord {
  const { bytes: _bytes, ...rest } = summary
  return { ...rest, state: JSON.parse(json) }
}

interface StoredIdempotency extends IdempotencyHold {
  record: IdempotencyRecord
}

export class MemoryIdempotencyStore implements IdempotencyStore {
  // re-inserted on every reservation, so the Map is roughly ordered by expiry for the purge
  readonly #records = new Map<string, StoredIdempotency>()

  async reserve (key: string, fingerprint: string, options: { ttlMs: number, leaseMs: number }): Promise<ReserveResult> {
    checkTtl('ttlMs', options.ttlMs)
    checkTtl('leaseMs', options.leaseMs)
    const now = Date.now()
    this.#purge(now)
    const existing = this.#records.get(key)
    if (existing !== undefined && idempotencyLive(existing, now)) return { outcome: 'existing', record: copyRecord(existing.record) }
    const token = randomId()
    const stored: StoredIdempotency = {
      record: { key, fingerprint, state: 'in_progress', createdAt: iso(now), expiresAt: iso(now + options.ttlMs), lockedUntil: iso(now + options.leaseMs) },
      state: 'in_progress',
      token,
      expiresMs: now + options.ttlMs,
      lockedMs: now + options.leaseMs
    }
    this.#records.delete(key)
    this.#records.set(key, stored)
    return { outcome: 'reserved', token }
  }

  /** The record while `token` holds it: unexpired and in progress. */
  #held (key: string, token: string, now: number): StoredIdempotency | undefined {
    const stored = this.#records.get(key)
    return stored !== undefined && idempotencyHeld(stored, token, now) ? stored : undefined
  }

  async renew (key: string, token: string, leaseMs: number): Promise<boolean> {
    checkTtl('leaseMs', leaseMs)
    const now = Date.now()
    const stored = this.#held(key, token, now)
    if (stored === undefined) return false
    const lease = renewedLease(stored, now, leaseMs)
    stored.lockedMs = lease.lockedMs
    stored.expiresMs = lease.expiresMs
    stored.record = { ...stored.record, lockedUntil: iso(stored.lockedMs), expiresAt: iso(stored.expiresMs) }
    return true
  }

  async complete (key: string, token: string, response: IdempotencyResponse, ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    const stored = this.#held(key, token, now)
    if (stored === undefined) return false
    const expiresMs = now + ttlMs
    stored.expiresMs = expiresMs
    stored.state = 'completed'
    stored.record = { ...stored.record, state: 'completed', response: { ...response }, expiresAt: iso(expiresMs) }
    return true
  }

  async release (key: string, token: string): Promise<boolean> {
    if (this.#held(key, token, Date.now()) === undefined) return false
    this.#records.delete(key)
    return true
  }

  async get (key: string): Promise<IdempotencyRecord | null> {
    const stored = this.#records.get(key)
    if (stored === undefined || stored.expiresMs <= Date.now()) return null
    return copyRecord(stored.record)
  }

  async close (): Promise<void> {}

  #purge (now: number): void {
    for (const [key, stored] of this.#records) {
      if (stored.expiresMs > now) return
      this.#records.delete(key)
    }
  }
}

function copyRecord (record: IdempotencyRecord): IdempotencyRecord {
  return record.response === undefined ? { ...record } : { ...record, response: { ...record.response } }
}

export interface MemoryStoresOptions {
  /** ring buffer size of the audit store (default 500) */
  auditCapacity?: number
  /** the most sessions the session store keeps (default 100,000) */
  maxSessions?: number
  /** the most ended runs the run store keeps (default 10,000) */
  maxRetainedRuns?: number
  /** the most delivered or failed webhook deliveries the outbox keeps (default 10,000) */
  maxRetainedDeliveries?: number
}

export function memoryStores (options: MemoryStoresOptions = {}): Required<StoreSet> {
  return {
    auditStore: new MemoryAuditStore({ capacity: options.auditCapacity }),
    sessionStore: new MemorySessionStore({ maxSessions: options.maxSessions }),
    approvalStore: new MemoryApprovalStore(),
    checkpointStore: new MemoryCheckpointStore(),
    idempotency: { store: new MemoryIdempotencyStore() },
    runStore: new MemoryRunStore({ maxRetainedRuns: options.maxRetainedRuns }),
    webhookStore: new MemoryWebhookStore({ maxRetainedDeliveries: options.maxRetainedDeliveries }),
    quotaStore: new MemoryQuotaStore()
  }
}
