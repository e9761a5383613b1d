// The rules of the idempotency and approval records and of the session listings' pages, written once as plain functions (docs/stores.md, "Writing a
// store"). The memory stores apply them as they are; the SQL and Lua backends write the same conditions into their one
// atomic statement or script (a read and a write would be two round trips), and the conformance suites
// (lib/testing) hold every backend to them.
import { encodeKeyCursor } from '../core/cursors.js'
import type { ApprovalDecision, ApprovalRecord, ApprovalStatus, DecideResult } from './types.js'

/** What an idempotency rule reads of a record: its state, its holder's token and its two instants (epoch ms). */
export interface IdempotencyHold {
  state: 'in_progress' | 'completed'
  token: string
  expiresMs: number
  lockedMs: number
}

/**
 * A record a retry is told about (`existing`): unexpired, and completed or still locked by its holder. Anything else
 * counts as absent and is taken over by the next reservation, under a new token.
 */
export function idempotencyLive (record: IdempotencyHold, now: number): boolean {
  return record.expiresMs > now && (record.state === 'completed' || record.lockedMs > now)
}

/**
 * Whether `token` still holds the record: unexpired, in progress and reserved under that token. Only then may its
 * holder renew, complete or release it (a lease that ran out but that nobody took over is still held).
 */
export function idempotencyHeld (record: IdempotencyHold, token: string, now: number): boolean {
  return record.expiresMs > now && record.state === 'in_progress' && record.token === token
}

/** A renewal's lease: now + leaseMs, the expiry moved with it should the record otherwise expire first (never shortened). */
export function renewedLease (record: IdempotencyHold, now: number, leaseMs: number): { lockedMs: number, expiresMs: number } {
  const lockedMs = now + leaseMs
  return { lockedMs, expiresMs: Math.max(record.expiresMs, lockedMs) }
}

export function decidedStatus (approved: boolean): ApprovalStatus {
  return approved ? 'approved' : 'rejected'
}

/** An approval as it now is: a pending one past its expiry is expired (and is stored so by whoever reads it). */
export function approvalStatusAt (record: Pick<ApprovalRecord, 'status' | 'expiresAt'>, now: number): ApprovalStatus {
  return record.status === 'pending' && Date.parse(record.expiresAt) <= now ? 'expired' : record.status
}

/**
 * The compare-and-set of a decision: only a pending, unexpired approval is decided (of callers at once, exactly one
 * wins). `record` is the approval as it now is (approvalStatusAt applied), null when absent; `decided` is what to
 * store, null when nothing changes.
 */
export function decide (record: ApprovalRecord | null, decision: ApprovalDecision): { decided: ApprovalRecord | null, result: DecideResult } {
  if (record === null) return { decided: null, result: { outcome: 'not_found' } }
  if (record.status !== 'pending') return { decided: null, result: failedDecision(record) }
  const decided = { ...record, status: decidedStatus(decision.approved), decision: { ...decision } }
  return { decided, result: { outcome: 'decided', approval: decided } }
}

/** What a failed compare-and-set means, given the record as it now is (no longer pending). */
export function failedDecision (record: ApprovalRecord): DecideResult {
  return record.status === 'expired'
    ? { outcome: 'expired', approval: record }
    : { outcome: 'already_decided', approval: record }
}

/** pending → expired or cancelled; any other status stays (a decision, an expiry or a cancel is final). */
export function settledStatus (status: ApprovalStatus, to: 'expired' | 'cancelled'): ApprovalStatus {
  return status === 'pending' ? to : status
}

/**
 * The order of the session listings: most recently active first, ties by id descending. A key cursor names the last
 * session of a page; what follows it comes before it in that order (SQL compares `(last_active_at, id) < (ms, id)`).
 */
export function beforeKeyCursor (ms: number, id: string, cursor: { ms: number, id: string } | null): boolean {
  return cursor === null || ms < cursor.ms || (ms === cursor.ms && id < cursor.id)
}

/**
 * A page of a listing by key cursor: the first `limit` of what was found in order past the cursor (a store reads
 * `limit + 1`, the one more telling that a next page exists), and the cursor of its last item when one does.
 */
export function keyPage<T> (found: readonly T[], limit: number, key: (item: T) => { ms: number, id: string }): { items: T[], nextCursor: string | null } {
  const items = found.slice(0, limit)
  if (found.length <= limit) return { items, nextCursor: null }
  const last = key(items[items.length - 1]!)
  return { items, nextCursor: encodeKeyCursor(last.ms, last.id) }
}

/** A run's next checkpoint: step 1 for its first (or the first since a delete), then one more per save; created when its first was. */
export function nextCheckpoint (previous: { step: number, createdAt: string } | undefined, now: string): { step: number, createdAt: string } {
  return previous === undefined ? { step: 1, createdAt: now } : { step: previous.step + 1, createdAt: previous.createdAt }
}
