// The behaviour every webhook store (the outbox, docs/webhooks.md) must have, run by each backend's test file against a
// factory that makes a fresh, empty store for a subtest (closed in teardown). `twin` (shared backends) makes a second
// store on the same data, as another instance would have.
import type { NewWebhookDelivery, WebhookAttempt, WebhookOutcome, WebhookStore } from '../stores/types.js'
import { type Check, type Registrar, type StoreFactory, checked } from './check.js'

export interface WebhookStoreFactories<C = unknown> {
  store: StoreFactory<WebhookStore, C>
  /** a second store on the same data (another instance); absent for an in-process store */
  twin?: (context: C, first: WebhookStore) => WebhookStore | Promise<WebhookStore>
}

const T0 = 1_700_000_000_000
const HOUR = 3_600_000
let counter = 0

export function delivery (extra: Partial<NewWebhookDelivery> = {}): NewWebhookDelivery {
  counter++
  const runId = extra.runId ?? `run-${counter}`
  return {
    id: `msg_${counter}_${Math.random().toString(36).slice(2, 8)}`,
    type: 'run.completed',
    runId,
    payload: JSON.stringify({ type: 'run.completed', timestamp: new Date(T0).toISOString(), data: { runId, n: counter, text: 'é ✓ 𝄞' } }),
    createdAt: T0,
    dueAt: T0,
    giveUpAt: T0 + 24 * HOUR,
    ...extra
  }
}

export function attemptOf (claimed: { id: string, type: string, runId: string, attempt: number }, outcome: WebhookOutcome, extra: Partial<WebhookAttempt> = {}): WebhookAttempt {
  return {
    webhookId: claimed.id,
    event: claimed.type,
    runId: claimed.runId,
    attempt: claimed.attempt,
    at: new Date(T0 + claimed.attempt * 1000).toISOString(),
    status: outcome === 'delivered' ? 200 : 500,
    error: null,
    durationMs: 12,
    outcome,
    ...extra
  }
}

const lease = (owner: string, until = T0 + 100 * HOUR): { owner: string, until: number } => ({ owner, until })
const keep = { dueAt: T0, retentionMs: HOUR }

async function open<C> (t: Check<C>, factory: StoreFactory<WebhookStore, C>): Promise<WebhookStore> {
  const store = await factory(t.context)
  t.teardown(async () => { await store.close?.() })
  return store
}

export function webhookStoreConformance<C> (registrar: Registrar<C>, factories: WebhookStoreFactories<C>): void {
  const test = checked(registrar)
  const { store: factory, twin } = factories

  test('webhooks: claims what is due, soonest first, each field as enqueued', async (t) => {
    const store = await open(t, factory)
    const later = delivery({ dueAt: T0 + 500 })
    const first = delivery({ dueAt: T0 - 100 })
    const second = delivery({ type: 'approval.requested', dueAt: T0 })
    const future = delivery({ dueAt: T0 + HOUR })
    await store.enqueue([later, first, second, future])
    const claimed = await store.claim(lease('a'), T0 + 500, 10)
    t.same(claimed.map((d) => d.id), [first.id, second.id, later.id], 'due ones, soonest due first; not the future one')
    const { dueAt: _dueAt, ...fields } = second
    t.same(claimed[1], { ...fields, attempt: 1 }, 'byte for byte, attempt 1')
    t.same(await store.claim(lease('b'), T0 + 500, 10), [], 'leased: nobody claims them again')
    t.same((await store.claim(lease('a'), T0 + HOUR, 10)).map((d) => d.id), [future.id], 'the future one once due')
  })

  test('webhooks: at most `limit` per claim', async (t) => {
    const store = await open(t, factory)
    const all = Array.from({ length: 5 }, (_, i) => delivery({ dueAt: T0 + i }))
    await store.enqueue(all)
    t.same((await store.claim(lease('a'), T0 + 10, 2)).map((d) => d.id), [all[0]!.id, all[1]!.id])
    t.same((await store.claim(lease('a'), T0 + 10, 2)).map((d) => d.id), [all[2]!.id, all[3]!.id])
    t.same((await store.claim(lease('a'), T0 + 10, 2)).map((d) => d.id), [all[4]!.id])
    await store.enqueue([])
  })

  test('webhooks: enqueuing the same id again changes nothing', async (t) => {
    const store = await open(t, factory)
    const one = delivery()
    await store.enqueue([one, { ...one, payload: '{"changed":true}' }])
    await store.enqueue([one])
    const [claimed] = await store.claim(lease('a'), T0, 10)
    t.equal(claimed!.payload, one.payload)
    t.same(await store.claim(lease('a'), T0, 10), [], 'one delivery')
    await store.enqueue([one])
    t.same(await store.claim(lease('a'), T0, 10), [], 'not while it is claimed')
    t.equal(await store.record(attemptOf(claimed!, 'delivered'), 'a', keep), true)
    await store.enqueue([one])
    t.same(await store.claim(lease('a'), T0 + 2 * HOUR, 10), [], 'nor once delivered')
  })

  test('webhooks: a lease that runs out makes the delivery due again, for its next attempt', async (t) => {
    const store = await open(t, factory)
    const one = delivery()
    await store.enqueue([one])
    const [first] = await store.claim(lease('a', T0 + 1000), T0, 10)
    t.same(await store.claim(lease('b'), T0 + 999, 10), [])
    const [second] = await store.claim(lease('b', T0 + 5000), T0 + 1000, 10)
    t.equal(second!.attempt, 2)
    t.equal(await store.record(attemptOf(first!, 'delivered'), 'a', keep), false, 'the first claimer lost it')
    const [listed] = (await store.attempts({ limit: 10 })).attempts
    t.same(listed, attemptOf(first!, 'delivered'), 'its attempt is listed all the same')
    t.same(await store.claim(lease('c'), T0 + 1000, 10), [], 'still b\'s')
    t.equal(await store.record(attemptOf(second!, 'retried'), 'b', { dueAt: T0 + 3000, retentionMs: HOUR }), true)
    t.same(await store.claim(lease('c'), T0 + 2999, 10), [], 'not before its retry is due')
    const [third] = await store.claim(lease('c'), T0 + 3000, 10)
    t.equal(third!.attempt, 3)
    t.equal(await store.record(attemptOf(second!, 'delivered'), 'b', keep), false, 'a stale attempt number')
    t.equal(await store.record(attemptOf(third!, 'failed'), 'b', keep), false, 'another owner')
    t.equal(await store.record(attemptOf(third!, 'failed'), 'c', keep), true)
    t.same(await store.claim(lease('c'), T0 + 48 * HOUR, 10), [], 'failed: ended')
    t.equal(await store.record(attemptOf(third!, 'failed'), 'c', keep), false, 'ended')
    t.equal(await store.record(attemptOf({ ...third!, id: 'msg_unknown' }, 'failed'), 'c', keep), false, 'unknown')
    t.same((await store.attempts({ limit: 10 })).attempts.map((a) => [a.attempt, a.outcome]),
      [[3, 'failed'], [3, 'failed'], [3, 'failed'], [2, 'delivered'], [2, 'retried'], [1, 'delivered']], 'every attempt of a delivery there is, most recent first')
  })

  test('webhooks: attempts page by cursor, most recent first, with filters', async (t) => {
    const store = await open(t, factory)
    const a = delivery({ runId: 'run-a', type: 'run.completed' })
    const b = delivery({ runId: 'run-b', type: 'approval.requested' })
    await store.enqueue([a, b])
    const outcomes: WebhookOutcome[] = ['retried', 'retried', 'delivered']
    for (const [i, outcome] of outcomes.entries()) {
      const claimed = await store.claim(lease('a'), T0 + i * HOUR, 10)
      t.equal(claimed.length, 2)
      for (const one of claimed.sort((x, y) => x.runId.localeCompare(y.runId))) {
        t.ok(await store.record(attemptOf(one, outcome, one.id === b.id ? { status: null, error: 'no answer within 10000 ms' } : {}), 'a', { dueAt: T0 + (i + 1) * HOUR, retentionMs: HOUR }))
      }
    }
    const page1 = await store.attempts({ limit: 4 })
    t.equal(page1.attempts.length, 4)
    t.type(page1.nextCursor, 'string')
    t.same(page1.attempts.map((x) => x.attempt), [3, 3, 2, 2])
    // an attempt recorded meanwhile does not shift the next page
    const c = delivery({ runId: 'run-c' })
    await store.enqueue([c])
    const [claimedC] = await store.claim(lease('a'), T0 + 9 * HOUR, 10)
    await store.record(attemptOf(claimedC!, 'delivered'), 'a', keep)
    const page2 = await store.attempts({ limit: 4, cursor: page1.nextCursor! })
    t.same(page2.attempts.map((x) => x.attempt), [1, 1])
    t.equal(page2.nextCursor, null)
    t.equal((await store.attempts({ limit: 500 })).attempts.length, 7, 'a fresh first page has the new one')

    const onlyB = await store.attempts({ limit: 10, runId: 'run-b' })
    t.same(onlyB.attempts.map((x) => [x.runId, x.attempt, x.status, x.error]), [['run-b', 3, null, 'no answer within 10000 ms'], ['run-b', 2, null, 'no answer within 10000 ms'], ['run-b', 1, null, 'no answer within 10000 ms']])
    t.same((await store.attempts({ limit: 10, event: 'approval.requested' })).attempts.map((x) => x.webhookId), [b.id, b.id, b.id])
    t.same((await store.attempts({ limit: 10, outcome: 'delivered' })).attempts.map((x) => x.runId), ['run-c', 'run-b', 'run-a'])
    const combined = await store.attempts({ limit: 1, outcome: 'retried', event: 'run.completed', runId: 'run-a' })
    t.same(combined.attempts.map((x) => [x.runId, x.attempt]), [['run-a', 2]])
    const rest = await store.attempts({ limit: 1, outcome: 'retried', event: 'run.completed', runId: 'run-a', cursor: combined.nextCursor! })
    t.same(rest.attempts.map((x) => [x.runId, x.attempt]), [['run-a', 1]])
    t.equal(rest.nextCursor, null, 'the last page, exactly full')
    t.same(await store.attempts({ limit: 10, runId: 'nobody' }), { attempts: [], nextCursor: null })
    t.same(await store.attempts({ limit: 10, runId: 'run-a', event: 'approval.requested' }), { attempts: [], nextCursor: null })
    t.same((await store.attempts({ limit: 10, event: 'approval.requested', outcome: 'delivered' })).attempts.map((x) => [x.runId, x.attempt]), [['run-b', 3]])

    await t.rejects(store.attempts({ limit: 10, cursor: 'not a cursor' }), { code: 'FA_INVALID_CURSOR', statusCode: 400 })
    await t.rejects(async () => store.attempts({ limit: 0 }), RangeError)
    await t.rejects(async () => store.attempts({ limit: 501 }), RangeError)
  })

  test('webhooks: ended deliveries go after their retention, with their attempts, in bounded batches', async (t) => {
    const store = await open(t, factory)
    const ended = Array.from({ length: 3 }, () => delivery({ runId: 'run-ended' }))
    const pending = delivery({ runId: 'run-pending' })
    const kept = delivery({ runId: 'run-kept' })
    await store.enqueue([...ended, pending, kept])
    const claimed = await store.claim(lease('a'), T0, 10)
    const before = Date.now()
    for (const one of claimed) {
      if (one.runId === 'run-ended') await store.record(attemptOf(one, 'delivered'), 'a', { dueAt: T0, retentionMs: 1 })
      else if (one.runId === 'run-kept') await store.record(attemptOf(one, 'failed'), 'a', { dueAt: T0, retentionMs: HOUR })
      else await store.record(attemptOf(one, 'retried'), 'a', { dueAt: T0 + HOUR, retentionMs: 1 })
    }
    t.equal(await store.purge(before - 1000, 10), 0, 'nothing before its time')
    const later = Date.now() + 1000
    t.equal(await store.purge(later, 2), 2, 'a bounded batch')
    t.equal(await store.purge(later, 2), 1)
    t.equal(await store.purge(later, 2), 0)
    const left = (await store.attempts({ limit: 10 })).attempts.map((a) => a.runId).sort()
    t.same(left, ['run-kept', 'run-pending'], 'their attempts went with them; a pending delivery is never purged')
    t.equal((await store.claim(lease('a'), T0 + HOUR, 10))[0]!.runId, 'run-pending')
    t.equal(await store.purge(Date.now() + 2 * HOUR, 10), 1, 'the failed one after its own retention')
  })

  test('webhooks: claimers at once each get different deliveries', async (t) => {
    const store = await open(t, factory)
    const others = twin === undefined ? [store] : [store, await twin(t.context, store)]
    if (twin !== undefined) t.teardown(async () => { await others[1]!.close?.() })
    const all = Array.from({ length: 30 }, (_, i) => delivery({ dueAt: T0 + i }))
    await store.enqueue(all)
    const claims = await Promise.all(Array.from({ length: 12 }, (_, i) => others[i % others.length]!.claim(lease(`owner-${i}`), T0 + 100, 4)))
    const ids = claims.flat().map((d) => d.id)
    t.equal(ids.length, 30, 'every one claimed')
    t.equal(new Set(ids).size, 30, 'none twice')
    t.ok(claims.flat().every((d) => d.attempt === 1))
  })

  if (twin !== undefined) {
    test('webhooks: what one store enqueues and records, its twin sees', async (t) => {
      const store = await open(t, factory)
      const other = await twin(t.context, store)
      t.teardown(async () => { await other.close?.() })
      const one = delivery()
      await store.enqueue([one])
      await other.enqueue([one])
      const [claimed] = await other.claim(lease('b'), T0, 10)
      t.equal(claimed!.id, one.id)
      t.same(await store.claim(lease('a'), T0, 10), [])
      t.ok(await other.record(attemptOf(claimed!, 'delivered'), 'b', keep))
      t.same((await store.attempts({ limit: 10 })).attempts, [attemptOf(claimed!, 'delivered')])
    })
  }
}
