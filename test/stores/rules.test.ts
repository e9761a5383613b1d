// The idempotency and approval rules and the session listings' pages (lib/stores/rules.ts), as plain functions: no store needed. The conformance
// suites (lib/testing) hold every backend to the same rules.
import t from 'tap'
import { decodeKeyCursor } from '../../lib/core/cursors.js'
import {
  approvalStatusAt, beforeKeyCursor, decide, decidedStatus, failedDecision, idempotencyHeld, idempotencyLive, keyPage,
  nextCheckpoint, renewedLease, settledStatus
} from '../../lib/stores/rules.js'
import type { IdempotencyHold } from '../../lib/stores/rules.js'
import type { ApprovalRecord } from '../../lib/stores/types.js'

const NOW = 1_700_000_000_000
const hold = (extra: Partial<IdempotencyHold> = {}): IdempotencyHold => ({ state: 'in_progress', token: 'tok', expiresMs: NOW + 1000, lockedMs: NOW + 100, ...extra })

t.test('idempotency: a record is live while unexpired and completed or locked; else it is taken over', async (t) => {
  t.equal(idempotencyLive(hold(), NOW), true, 'in progress, locked')
  t.equal(idempotencyLive(hold({ lockedMs: NOW }), NOW), false, 'its lease ran out: its holder is presumed dead')
  t.equal(idempotencyLive(hold({ state: 'completed', lockedMs: NOW - 1 }), NOW), true, 'completed: replayed whatever the lease')
  t.equal(idempotencyLive(hold({ state: 'completed', expiresMs: NOW }), NOW), false, 'expired')
  t.equal(idempotencyLive(hold({ expiresMs: NOW - 1 }), NOW), false)
})

t.test('idempotency: only the token holds, while unexpired and in progress, lease or not', async (t) => {
  t.equal(idempotencyHeld(hold(), 'tok', NOW), true)
  t.equal(idempotencyHeld(hold({ lockedMs: NOW - 50 }), 'tok', NOW), true, 'a lease that ran out, not taken over, is still held')
  t.equal(idempotencyHeld(hold(), 'other', NOW), false)
  t.equal(idempotencyHeld(hold(), '', NOW), false)
  t.equal(idempotencyHeld(hold({ state: 'completed' }), 'tok', NOW), false, 'completed once')
  t.equal(idempotencyHeld(hold({ expiresMs: NOW }), 'tok', NOW), false, 'expired')
})

t.test('idempotency: a renewal locks until now + lease, moving the expiry only forward', async (t) => {
  t.same(renewedLease(hold(), NOW, 500), { lockedMs: NOW + 500, expiresMs: NOW + 1000 })
  t.same(renewedLease(hold(), NOW, 5000), { lockedMs: NOW + 5000, expiresMs: NOW + 5000 }, 'the expiry follows a longer lease')
})

const approval = (extra: Partial<ApprovalRecord> = {}): ApprovalRecord => ({
  id: 'a1', runId: 'r1', agent: 'echo', sessionId: 's1', principal: 'alice', action: 'transfer', payload: null, reason: null,
  status: 'pending', requestedAt: new Date(NOW - 1000).toISOString(), expiresAt: new Date(NOW + 1000).toISOString(), ...extra
})
const decision = { approved: true, comment: null, decidedBy: 'bob', decidedAt: new Date(NOW).toISOString() }

t.test('approvals: a pending approval past its expiry is expired; other statuses stay', async (t) => {
  t.equal(approvalStatusAt(approval(), NOW), 'pending')
  t.equal(approvalStatusAt(approval(), NOW + 1000), 'expired', 'at its expiry')
  t.equal(approvalStatusAt(approval({ status: 'approved' }), NOW + 5000), 'approved')
})

t.test('approvals: decide is a compare-and-set on pending', async (t) => {
  const { decided, result } = decide(approval(), decision)
  t.same(decided, { ...approval(), status: 'approved', decision })
  t.same(result, { outcome: 'decided', approval: decided })
  t.equal(decide(approval(), { ...decision, approved: false }).decided?.status, 'rejected')
  t.same(decide(null, decision), { decided: null, result: { outcome: 'not_found' } })
  const rejected = approval({ status: 'rejected', decision: { ...decision, approved: false } })
  t.same(decide(rejected, decision), { decided: null, result: { outcome: 'already_decided', approval: rejected } })
  const expired = approval({ status: 'expired' })
  t.same(decide(expired, decision), { decided: null, result: { outcome: 'expired', approval: expired } })
  t.same(failedDecision(approval({ status: 'cancelled' })).outcome, 'already_decided', 'a cancel counts as decided')
  t.equal(decidedStatus(true), 'approved')
})

t.test('approvals: expire and cancel move pending only', async (t) => {
  t.equal(settledStatus('pending', 'expired'), 'expired')
  t.equal(settledStatus('pending', 'cancelled'), 'cancelled')
  t.equal(settledStatus('approved', 'cancelled'), 'approved')
  t.equal(settledStatus('expired', 'cancelled'), 'expired')
})

t.test('session pages: most recently active first, ties by id descending; the cursor names the last of a page', async (t) => {
  const cursor = { ms: 100, id: 'm' }
  t.equal(beforeKeyCursor(5, 'z', null), true, 'no cursor: everything')
  t.equal(beforeKeyCursor(99, 'z', cursor), true, 'less recently active')
  t.equal(beforeKeyCursor(100, 'a', cursor), true, 'as recent, a lower id')
  t.equal(beforeKeyCursor(100, 'm', cursor), false, 'the cursor\'s own')
  t.equal(beforeKeyCursor(100, 'z', cursor), false)
  t.equal(beforeKeyCursor(101, 'a', cursor), false, 'more recently active')
  const found = [{ ms: 3, id: 'c' }, { ms: 2, id: 'b' }, { ms: 1, id: 'a' }]
  t.same(keyPage(found, 3, (x) => x), { items: found, nextCursor: null }, 'all of it: no next page')
  const page = keyPage(found, 2, (x) => x)
  t.same(page.items, found.slice(0, 2))
  t.same(decodeKeyCursor(page.nextCursor!), { ms: 2, id: 'b' }, 'the next page starts after the last item')
})

t.test('checkpoints: steps count from 1 per run, created when the first was', async (t) => {
  t.same(nextCheckpoint(undefined, 'now'), { step: 1, createdAt: 'now' })
  t.same(nextCheckpoint({ step: 2, createdAt: 'then' }, 'now'), { step: 3, createdAt: 'then' })
})
