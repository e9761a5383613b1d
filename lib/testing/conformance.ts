// The behaviour every store backend must have, one function per interface, run by each backend's test file
// against a factory that makes a fresh, empty store for a subtest (and cleans up after it in teardown).
import { setTimeout as sleep } from 'node:timers/promises'
import type {
  ApprovalDecision, ApprovalRecord, ApprovalStore, AuditEntry, AuditStore, CheckpointStore, IdempotencyRecord, IdempotencyStore,
  Message, SessionRecord, SessionStore, StoreSet
} from '../stores/types.js'
import { type Check, type Registrar, type StoreFactory, checked } from './check.js'

export interface ConformanceFactories<C = unknown> {
  audit?: StoreFactory<AuditStore, C>
  session?: StoreFactory<SessionStore, C>
  approval?: StoreFactory<ApprovalStore, C>
  checkpoint?: StoreFactory<CheckpointStore, C>
  idempotency?: StoreFactory<IdempotencyStore, C>
}

/** Runs the suite of every interface a factory is given for. */
export function storeConformance<C> (registrar: Registrar<C>, factories: ConformanceFactories<C>): void {
  if (factories.audit !== undefined) auditStoreConformance(registrar, factories.audit)
  if (factories.session !== undefined) sessionStoreConformance(registrar, factories.session)
  if (factories.approval !== undefined) approvalStoreConformance(registrar, factories.approval)
  if (factories.checkpoint !== undefined) checkpointStoreConformance(registrar, factories.checkpoint)
  if (factories.idempotency !== undefined) idempotencyStoreConformance(registrar, factories.idempotency)
}

/** Factories from a store set factory such as `memoryStores` (a new set per subtest). */
export function factoriesOf<C> (make: (context: C) => StoreSet | Promise<StoreSet>): ConformanceFactories<C> {
  const pick = <S>(choose: (set: StoreSet) => S | undefined): StoreFactory<S, C> => async (context) => {
    const store = choose(await make(context))
    if (store === undefined) throw new Error('the store set lacks this store')
    return store
  }
  return {
    audit: pick((set) => set.auditStore),
    session: pick((set) => set.sessionStore),
    approval: pick((set) => set.approvalStore),
    checkpoint: pick((set) => set.checkpointStore),
    idempotency: pick((set) => set.idempotency?.store)
  }
}

/** For tests about timing: the first call may create tables, which must not eat into a 50 ms ttl. */
async function warm<S extends { close?: () => Promise<void>, get?: (id: string) => Promise<unknown> }, C> (t: Check<C>, factory: StoreFactory<S, C>): Promise<S> {
  const store = await open(t, factory)
  await store.get?.('warm-up')
  return store
}

async function open<S extends { close?: () => Promise<void> }, C> (t: Check<C>, factory: StoreFactory<S, C>): Promise<S> {
  const store = await factory(t.context)
  t.teardown(async () => { await store.close?.() })
  return store
}

// ---------------------------------------------------------------------------------------------------------
// audit

export function auditEntry (i: number, extra: Partial<AuditEntry> = {}): AuditEntry {
  return {
    id: `entry-${i}`,
    at: new Date(1_700_000_000_000 + i).toISOString(),
    requestId: `req-${i}`,
    method: 'POST',
    route: '/v1/agents/:name/runs',
    url: `/v1/agents/echo/runs?i=${i}`,
    status: 200,
    durationMs: i,
    principal: 'anonymous',
    ip: '127.0.0.1',
    ...extra
  }
}

/** How many entries the store holds (at most a page's 500 in these tests), read as a page: the interface has no count. */
async function countEntries (store: AuditStore): Promise<number> {
  return (await store.query({ limit: 500 })).entries.length
}

function ids (entries: Array<{ id: string }>): string[] {
  return entries.map((entry) => entry.id)
}

function range (from: number, to: number): number[] {
  const out: number[] = []
  for (let i = from; i <= to; i++) out.push(i)
  return out
}

export function auditStoreConformance<C> (registrar: Registrar<C>, factory: StoreFactory<AuditStore, C>): void {
  const test = checked(registrar)
  test('audit: an empty store', async (t) => {
    const store = await open(t, factory)
    t.same(await store.query({ limit: 10 }), { entries: [], nextCursor: null })
    await store.append([])
    t.equal(await countEntries(store), 0)
  })

  test('audit: entries come back whole, most recent first', async (t) => {
    const store = await open(t, factory)
    const full = auditEntry(2, {
      agent: 'echo', runId: 'run-1', sessionId: 'ses-1', traceId: 'a'.repeat(32), idempotencyKey: 'key-1',
      replayed: true, admin: false, status: 201, url: '/v1/agents/echo/runs?q=é'
    })
    await store.append([auditEntry(0), auditEntry(1)])
    await store.append([full])
    await store.append([auditEntry(3, { admin: true, route: '/admin/audit', method: 'GET' })])
    const page = await store.query({ limit: 10 })
    t.same(ids(page.entries), ['entry-3', 'entry-2', 'entry-1', 'entry-0'])
    t.strictSame(page.entries[1], full)
    t.strictSame(page.entries[3], auditEntry(0))
    t.equal(page.nextCursor, null)
    t.equal(await countEntries(store), 4)
  })

  test('audit: cursor pages have no duplicates and no gaps while entries are appended', async (t) => {
    const store = await open(t, factory)
    await store.append(range(0, 24).map((i) => auditEntry(i)))
    const seen: string[] = []
    let cursor: string | undefined
    let pages = 0
    let next = 25
    do {
      const page = await store.query({ limit: 10, cursor })
      seen.push(...ids(page.entries))
      cursor = page.nextCursor ?? undefined
      pages++
      // newer entries arriving between pages must not shift the older ones
      await store.append([auditEntry(next++), auditEntry(next++)])
    } while (cursor !== undefined)
    t.equal(pages, 3)
    t.same(seen, range(0, 24).reverse().map((i) => `entry-${i}`))
    t.equal(await countEntries(store), 31)

    // a page that ends exactly at the oldest entry says there is nothing more
    const first = await store.query({ limit: 30 })
    t.type(first.nextCursor, 'string')
    const last = await store.query({ limit: 1, cursor: first.nextCursor as string })
    t.same(ids(last.entries), ['entry-0'])
    t.equal(last.nextCursor, null)
  })

  test('audit: filters by agent and status range, also across pages', async (t) => {
    const store = await open(t, factory)
    const statuses = [200, 404, 500, 429, 201, 404, 400, 499, 503, 404]
    await store.append(statuses.map((status, i) => auditEntry(i, { status, agent: i % 2 === 0 ? 'alpha' : 'beta' })))
    await store.append([auditEntry(10, { status: 404 })]) // no agent

    t.same(ids((await store.query({ limit: 50, agent: 'alpha' })).entries), ['entry-8', 'entry-6', 'entry-4', 'entry-2', 'entry-0'])
    t.same(ids((await store.query({ limit: 50, statusFrom: 404, statusTo: 404 })).entries), ['entry-10', 'entry-9', 'entry-5', 'entry-1'])
    t.same(ids((await store.query({ limit: 50, statusFrom: 400, statusTo: 499 })).entries),
      ['entry-10', 'entry-9', 'entry-7', 'entry-6', 'entry-5', 'entry-3', 'entry-1'])
    t.same(ids((await store.query({ limit: 50, statusFrom: 500 })).entries), ['entry-8', 'entry-2'])
    t.same(ids((await store.query({ limit: 50, statusTo: 201 })).entries), ['entry-4', 'entry-0'])
    t.same((await store.query({ limit: 50, agent: 'gamma' })).entries, [])

    const seen: string[] = []
    let cursor: string | undefined
    do {
      const page = await store.query({ limit: 2, agent: 'beta', statusFrom: 400, statusTo: 499, cursor })
      t.ok(page.entries.length <= 2)
      seen.push(...ids(page.entries))
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
    t.same(seen, ['entry-9', 'entry-7', 'entry-5', 'entry-3', 'entry-1'])
  })

  test('audit: a large batch keeps its order', async (t) => {
    const store = await open(t, factory)
    await store.append(range(0, 299).map((i) => auditEntry(i, { agent: `agent-${i % 3}` })))
    t.equal(await countEntries(store), 300)
    const page = await store.query({ limit: 500 })
    t.same(ids(page.entries), range(0, 299).reverse().map((i) => `entry-${i}`))
  })

  test('audit: rejects a malformed cursor and a limit out of 1..500', async (t) => {
    const store = await open(t, factory)
    await store.append([auditEntry(0)])
    await t.rejects(store.query({ limit: 10, cursor: 'not a cursor!' }), { code: 'FA_INVALID_CURSOR', statusCode: 400 })
    await t.rejects(store.query({ limit: 10, cursor: Buffer.from('-1').toString('base64url') }), { code: 'FA_INVALID_CURSOR' })
    for (const limit of [0, 501, 1.5, Number.NaN]) {
      await t.rejects(store.query({ limit }), RangeError, `limit ${limit}`)
    }
    t.equal((await store.query({ limit: 500 })).entries.length, 1)
  })
}

// ---------------------------------------------------------------------------------------------------------
// sessions

const LONG = 60_000

function message (role: Message['role'], content: unknown, runId = 'run-1'): Message {
  return { role, content, runId, at: new Date().toISOString() }
}

function newSession (id: string, extra: Partial<{ agent: string | null, principal: string, metadata: Record<string, unknown> }> = {}) {
  return { id, agent: 'echo', principal: 'key_abc', metadata: {}, ...extra }
}

export function sessionStoreConformance<C> (registrar: Registrar<C>, factory: StoreFactory<SessionStore, C>): void {
  const test = checked(registrar)
  test('sessions: create and get', async (t) => {
    const store = await open(t, factory)
    const before = Date.now()
    const created = await store.create(newSession('s1', { metadata: { tier: 'gold', nested: { n: 1 } } }), LONG)
    t.match(created, { id: 's1', agent: 'echo', principal: 'key_abc', turns: 0, metadata: { tier: 'gold', nested: { n: 1 } } })
    t.equal(created.createdAt, created.lastActiveAt)
    t.ok(Date.parse(created.createdAt) >= before - 1 && Date.parse(created.createdAt) <= Date.now() + 1)
    t.strictSame(await store.get('s1'), { ...created, messages: [] })

    const anonymous = await store.create(newSession('s2', { agent: null }), LONG)
    t.equal(anonymous.agent, null)
    t.equal((await store.get('s2'))?.agent, null)
    t.equal(await store.get('nope'), null)
  })

  test('sessions: appendTurn adds messages in order, counts turns and touches', async (t) => {
    const store = await open(t, factory)
    const created = await store.create(newSession('s1'), LONG)
    await sleep(5)
    const first = [message('user', 'hi'), message('assistant', { text: 'hello', n: [1, 2] })]
    t.equal(await store.appendTurn('s1', first, LONG), true)
    const second = [message('user', 'again', 'run-2'), message('assistant', 'ok', 'run-2')]
    t.equal(await store.appendTurn('s1', second, LONG), true)
    t.equal(await store.appendTurn('s1', [], LONG), true)
    const session = await store.get('s1')
    t.equal(session?.turns, 3)
    t.strictSame(session?.messages, [...first, ...second])
    t.equal(session?.createdAt, created.createdAt)
    t.ok(Date.parse(session?.lastActiveAt as string) > Date.parse(created.lastActiveAt))
    t.equal(await store.appendTurn('nope', first, LONG), false)
    t.equal(await store.get('nope'), null)
  })

  test('sessions: a turn of no messages marks activity; delete', async (t) => {
    const store = await open(t, factory)
    const created = await store.create(newSession('s1'), LONG)
    await sleep(5)
    t.equal(await store.appendTurn('s1', [], LONG), true)
    t.ok(Date.parse((await store.get('s1'))?.lastActiveAt as string) > Date.parse(created.lastActiveAt))
    t.equal(await store.delete('s1'), true)
    t.equal(await store.get('s1'), null)
    t.equal(await store.delete('s1'), false)
    t.equal(await store.appendTurn('s1', [], LONG), false)
    t.same((await store.list({ limit: 10 })).sessions, [])
  })

  test('sessions: creating an existing id starts it afresh', async (t) => {
    const store = await open(t, factory)
    await store.create(newSession('s1'), LONG)
    await store.appendTurn('s1', [message('user', 'hi')], LONG)
    await store.create(newSession('s1', { principal: 'other', metadata: { v: 2 } }), LONG)
    t.match(await store.get('s1'), { principal: 'other', turns: 0, messages: [], metadata: { v: 2 } })
  })

  test('sessions: expire after ttl of inactivity', async (t) => {
    const store = await warm(t, factory)
    await store.create(newSession('short'), 50)
    await store.create(newSession('unread'), 50)
    await store.create(newSession('long'), LONG)
    await sleep(70)
    t.equal(await store.get('short'), null, 'expired')
    t.equal(await store.appendTurn('short', [message('user', 'x')], LONG), false)
    t.equal(await store.delete('short'), false, 'an expired session counts as absent')
    t.same((await store.list({ limit: 10 })).sessions.map((s) => s.id), ['long'], 'list() leaves out those never read again')
  })

  test('sessions: every write sets a new ttl', async (t) => {
    const store = await warm(t, factory)
    // Shortened by a write: expiry is what can be asserted however slow the machine is.
    for (const id of ['touched', 'appended', 'kept']) await store.create(newSession(id), LONG)
    t.equal(await store.appendTurn('touched', [], 50), true)
    t.equal(await store.appendTurn('appended', [message('user', 'x')], 50), true)
    // Lengthened by a write, when the write came in time (a loaded machine may be too slow: then say so).
    const created = Date.now()
    await store.create(newSession('extended'), 150)
    const extended = await store.appendTurn('extended', [], LONG)
    if (!extended) t.ok(Date.now() - created >= 150, 'the turn came after the session had expired')
    await sleep(Math.max(70, 170 - (Date.now() - created)))
    t.equal(await store.get('touched'), null, 'a turn of no messages set the shorter ttl')
    t.equal(await store.get('appended'), null, 'appendTurn set the shorter ttl')
    t.not(await store.get('kept'), null)
    if (extended) t.not(await store.get('extended'), null, 'a turn set the longer ttl')
    t.same((await store.list({ limit: 10 })).sessions.map((s) => s.id).sort(), extended ? ['extended', 'kept'] : ['kept'])
  })

  test('sessions: list is most recently active first and pages by cursor', async (t) => {
    const store = await open(t, factory)
    for (const id of ['s1', 's2', 's3', 's4', 's5']) {
      await store.create(newSession(id), LONG)
      await sleep(3)
    }
    await store.appendTurn('s2', [], LONG)
    await sleep(3)
    await store.appendTurn('s4', [message('user', 'x')], LONG)
    const all = await store.list({ limit: 10 })
    t.same(all.sessions.map((s) => s.id), ['s4', 's2', 's5', 's3', 's1'])
    t.equal(all.nextCursor, null)
    t.equal(all.sessions[0].turns, 1)
    t.notOk('messages' in all.sessions[0], 'list() leaves the messages out')

    const pages: string[][] = []
    let cursor: string | undefined
    do {
      const page = await store.list({ limit: 2, cursor })
      pages.push(page.sessions.map((s) => s.id))
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
    t.same(pages, [['s4', 's2'], ['s5', 's3'], ['s1']])
  })

  test('sessions: paging is complete when several sessions share a lastActiveAt', async (t) => {
    const store = await open(t, factory)
    const created = await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map((id) => store.create(newSession(id), LONG)))
    const seen: SessionRecord[] = []
    let cursor: string | undefined
    do {
      const page = await store.list({ limit: 1, cursor })
      seen.push(...page.sessions)
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
    t.same(seen.map((s) => s.id).sort(), created.map((s) => s.id).sort())
    for (let i = 1; i < seen.length; i++) t.ok(seen[i - 1].lastActiveAt >= seen[i].lastActiveAt)
  })

  test('sessions: listByPrincipal lists one principal\'s own, of one agent when asked, and pages by cursor', async (t) => {
    const store = await open(t, factory)
    const mine = ['m1', 'm2', 'm3', 'm4']
    for (const id of mine) {
      await store.create(newSession(id, { agent: id === 'm3' ? 'other' : 'echo' }), LONG)
      await store.create(newSession(`x-${id}`, { principal: 'someone-else' }), LONG)
      await sleep(3)
    }
    await store.create(newSession('m5', { agent: null }), LONG)
    await sleep(3)
    await store.appendTurn('m1', [], LONG)
    const all = await store.listByPrincipal('key_abc', { limit: 10 })
    t.same(all.sessions.map((s) => s.id), ['m1', 'm5', 'm4', 'm3', 'm2'], 'most recently active first, only the principal\'s')
    t.equal(all.nextCursor, null)
    t.notOk('messages' in all.sessions[0], 'listByPrincipal() leaves the messages out')
    t.same((await store.listByPrincipal('key_abc', { limit: 10, agent: 'echo' })).sessions.map((s) => s.id), ['m1', 'm4', 'm2'])
    t.same((await store.listByPrincipal('key_abc', { limit: 10, agent: 'other' })).sessions.map((s) => s.id), ['m3'])
    t.same((await store.listByPrincipal('nobody', { limit: 10 })).sessions, [])
    t.same((await store.listByPrincipal('someone-else', { limit: 10, agent: 'other' })).sessions, [])

    const pages: string[][] = []
    let cursor: string | undefined
    do {
      const page = await store.listByPrincipal('key_abc', { limit: 2, cursor, agent: 'echo' })
      pages.push(page.sessions.map((s) => s.id))
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
    t.same(pages, [['m1', 'm4'], ['m2']])
  })

  test('sessions: listByPrincipal forgets deleted, expired and re-created sessions', async (t) => {
    const store = await warm(t, factory)
    await store.create(newSession('gone'), LONG)
    await store.create(newSession('short'), 50)
    await store.create(newSession('moved'), LONG)
    await store.create(newSession('kept'), LONG)
    t.equal(await store.delete('gone'), true)
    // the same id afresh, for another principal and agent: it is theirs now
    await store.create(newSession('moved', { principal: 'someone-else', agent: 'other' }), LONG)
    await sleep(70)
    t.same((await store.listByPrincipal('key_abc', { limit: 10 })).sessions.map((s) => s.id), ['kept'])
    t.same((await store.listByPrincipal('key_abc', { limit: 10, agent: 'echo' })).sessions.map((s) => s.id), ['kept'])
    t.same((await store.listByPrincipal('someone-else', { limit: 10, agent: 'other' })).sessions.map((s) => s.id), ['moved'])
    t.same((await store.listByPrincipal('someone-else', { limit: 10, agent: 'echo' })).sessions, [])
  })

  test('sessions: listByPrincipal pages completely when several sessions share a lastActiveAt', async (t) => {
    const store = await open(t, factory)
    const created = await Promise.all(['a', 'b', 'c', 'd', 'e'].map((id) => store.create(newSession(id), LONG)))
    const seen: SessionRecord[] = []
    let cursor: string | undefined
    do {
      const page = await store.listByPrincipal('key_abc', { limit: 1, cursor })
      seen.push(...page.sessions)
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
    t.same(seen.map((s) => s.id).sort(), created.map((s) => s.id).sort())
    for (let i = 1; i < seen.length; i++) t.ok(seen[i - 1].lastActiveAt >= seen[i].lastActiveAt)
  })

  test('sessions: reject bad input', async (t) => {
    const store = await open(t, factory)
    await t.rejects(store.list({ limit: 10, cursor: 'garbage' }), { code: 'FA_INVALID_CURSOR' })
    await t.rejects(store.list({ limit: 10, cursor: Buffer.from('[1]').toString('base64url') }), { code: 'FA_INVALID_CURSOR' })
    await t.rejects(store.list({ limit: 0 }), RangeError)
    await t.rejects(store.listByPrincipal('key_abc', { limit: 10, cursor: 'garbage' }), { code: 'FA_INVALID_CURSOR' })
    await t.rejects(store.listByPrincipal('key_abc', { limit: 0 }), RangeError)
    await t.rejects(store.create(newSession('s1'), 0), RangeError)
    await t.rejects(store.appendTurn('s1', [], -1), RangeError)
    await t.rejects(store.appendTurn('s1', [], Number.NaN), RangeError)
  })
}

// ---------------------------------------------------------------------------------------------------------
// approvals

export function approval (id: string, extra: Partial<ApprovalRecord> = {}): ApprovalRecord {
  const now = Date.now()
  return {
    id,
    runId: 'run-1',
    agent: 'echo',
    sessionId: 'ses-1',
    principal: 'key_abc',
    action: 'transfer',
    payload: { amount: 10, to: ['acct', 1] },
    reason: null,
    status: 'pending',
    requestedAt: new Date(now).toISOString(),
    expiresAt: new Date(now + LONG).toISOString(),
    ...extra
  }
}

function decision (approved: boolean, decidedBy = 'alice'): ApprovalDecision {
  return { approved, comment: approved ? 'fine' : null, decidedBy, decidedAt: new Date().toISOString() }
}

export function approvalStoreConformance<C> (registrar: Registrar<C>, factory: StoreFactory<ApprovalStore, C>): void {
  const test = checked(registrar)
  test('approvals: create and get', async (t) => {
    const store = await open(t, factory)
    const record = approval('a1', { reason: 'large amount' })
    await store.create(record)
    t.strictSame(await store.get('a1'), record)
    await store.create(approval('a2', { payload: undefined }))
    t.equal((await store.get('a2'))?.payload, null, 'an undefined payload is stored as null')
    t.equal(await store.get('nope'), null)
    await t.rejects(store.create(approval('a1')), { code: 'FA_APPROVAL_EXISTS' })
    await t.rejects(store.create(approval('a3', { expiresAt: 'soon' })), TypeError)
    const decided = approval('a4', { status: 'approved', decision: decision(true) })
    await store.create(decided)
    t.strictSame(await store.get('a4'), decided)
    // the schema an edited payload must match, and a decision that edited it and answered, are kept as given
    const schema = { type: 'object', properties: { amount: { type: 'integer', maximum: 100 } }, required: ['amount'] }
    await store.create(approval('a5', { schema }))
    const edited = { ...decision(true), payload: { amount: 20 }, edited: true, response: 'twenty is enough' }
    t.match(await store.decide('a5', edited), { outcome: 'decided', approval: { schema, decision: edited } })
    t.strictSame((await store.get('a5'))?.decision, edited)
    t.strictSame((await store.get('a5'))?.schema, schema)
  })

  test('approvals: decide is a compare-and-set, 20 concurrent callers, one winner', async (t) => {
    const store = await open(t, factory)
    await store.create(approval('a1'))
    const decisions = range(0, 19).map((i) => decision(i % 2 === 0, `user-${i}`))
    const results = await Promise.all(decisions.map((d) => store.decide('a1', d)))
    const winners = results.filter((r) => r.outcome === 'decided')
    t.equal(winners.length, 1)
    t.equal(results.filter((r) => r.outcome === 'already_decided').length, 19)
    const winner = winners[0] as { approval: ApprovalRecord }
    const stored = await store.get('a1')
    t.strictSame(stored, winner.approval)
    t.equal(stored?.status, stored?.decision?.approved === true ? 'approved' : 'rejected')
    t.ok(decisions.some((d) => d.decidedBy === stored?.decision?.decidedBy))
    for (const result of results) {
      if (result.outcome === 'already_decided') t.strictSame(result.approval, stored)
    }
  })

  test('approvals: rejected, not found, already decided', async (t) => {
    const store = await open(t, factory)
    await store.create(approval('a1'))
    const rejected = decision(false)
    const result = await store.decide('a1', rejected)
    t.match(result, { outcome: 'decided', approval: { id: 'a1', action: 'transfer', status: 'rejected' } })
    t.strictSame((result as { approval: ApprovalRecord }).approval.decision, rejected)
    t.strictSame((result as { approval: ApprovalRecord }).approval, await store.get('a1'))
    t.match(await store.decide('a1', decision(true)), { outcome: 'already_decided', approval: { status: 'rejected', decision: rejected } })
    t.strictSame(await store.decide('nope', decision(true)), { outcome: 'not_found' })
  })

  test('approvals: past expiresAt a pending approval is expired', async (t) => {
    const store = await warm(t, factory)
    await store.create(approval('soon', { expiresAt: new Date(Date.now() + 50).toISOString() }))
    await store.create(approval('past', { expiresAt: new Date(Date.now() - 1000).toISOString() }))
    await store.create(approval('gone', { expiresAt: new Date(Date.now() - 1000).toISOString() }))
    t.notOk((await store.listPending()).some((a) => a.id !== 'soon'))
    t.match(await store.get('past'), { status: 'expired' })
    t.match(await store.expire('past'), { status: 'expired' }, 'get() stored it as expired')
    t.match(await store.decide('gone', decision(true)), { outcome: 'expired', approval: { status: 'expired' } })
    await sleep(70)
    const result = await store.decide('soon', decision(true))
    t.match(result, { outcome: 'expired', approval: { id: 'soon', status: 'expired' } })
    t.notOk('decision' in (result as { approval: ApprovalRecord }).approval)
    t.match(await store.get('soon'), { status: 'expired' })
    t.same(await store.listPending(), [])
  })

  test('approvals: expire and cancel only change a pending approval', async (t) => {
    const store = await open(t, factory)
    for (const id of ['a1', 'a2', 'a3']) await store.create(approval(id))
    t.match(await store.expire('a1'), { id: 'a1', status: 'expired' })
    t.match(await store.expire('a1'), { status: 'expired' })
    t.match(await store.cancel('a1'), { status: 'expired' })
    t.match(await store.decide('a1', decision(true)), { outcome: 'expired' })

    t.match(await store.cancel('a2'), { id: 'a2', status: 'cancelled' })
    t.match(await store.decide('a2', decision(true)), { outcome: 'already_decided', approval: { status: 'cancelled' } })
    t.match(await store.expire('a2'), { status: 'cancelled' })

    await store.decide('a3', decision(true))
    t.match(await store.cancel('a3'), { status: 'approved', decision: { approved: true } })
    t.match(await store.expire('a3'), { status: 'approved' })

    t.equal(await store.expire('nope'), null)
    t.equal(await store.cancel('nope'), null)
  })

  test('approvals: listPending is oldest first and filters by agent and run', async (t) => {
    const store = await open(t, factory)
    const at = (ms: number): string => new Date(Date.now() - ms).toISOString()
    // created out of order: the list is ordered by requestedAt, not by insertion
    await store.create(approval('newest', { requestedAt: at(1000), agent: 'alpha', runId: 'r1' }))
    await store.create(approval('oldest', { requestedAt: at(3000), agent: 'alpha', runId: 'r2' }))
    await store.create(approval('middle', { requestedAt: at(2000), agent: 'beta', runId: 'r1' }))
    await store.create(approval('decided', { requestedAt: at(2500), agent: 'alpha', runId: 'r1' }))
    await store.create(approval('expired', { requestedAt: at(2600), agent: 'alpha', runId: 'r1', expiresAt: at(1) }))
    await store.decide('decided', decision(true))
    t.same(ids(await store.listPending()), ['oldest', 'middle', 'newest'])
    t.same(ids(await store.listPending({})), ['oldest', 'middle', 'newest'])
    t.same(ids(await store.listPending({ agent: 'alpha' })), ['oldest', 'newest'])
    t.same(ids(await store.listPending({ runId: 'r1' })), ['middle', 'newest'])
    t.same(ids(await store.listPending({ agent: 'alpha', runId: 'r1' })), ['newest'])
    t.same(await store.listPending({ agent: 'nobody' }), [])
    const [middle] = await store.listPending({ agent: 'beta' })
    t.strictSame(middle, await store.get('middle'))
  })

  test('approvals: waitForDecision is woken by decide, cancel and expire', async (t) => {
    const store = await open(t, factory)
    for (const id of ['a1', 'a2', 'a3']) await store.create(approval(id))
    const signal = new AbortController().signal
    const first = store.waitForDecision('a1', signal)
    const second = store.waitForDecision('a1', signal)
    const cancelled = store.waitForDecision('a2', signal)
    const expired = store.waitForDecision('a3', signal)
    await sleep(20)
    const started = Date.now()
    const d = decision(true)
    await store.decide('a1', d)
    t.match(await first, { id: 'a1', status: 'approved', decision: d })
    t.match(await second, { id: 'a1', status: 'approved' })
    t.ok(Date.now() - started < 1000, 'within a second')
    await store.cancel('a2')
    t.match(await cancelled, { status: 'cancelled' })
    await store.expire('a3')
    t.match(await expired, { status: 'expired' })
    // already decided: resolves at once
    t.match(await store.waitForDecision('a1', signal), { status: 'approved' })
  })

  test('approvals: waitForDecision does not expire by itself', async (t) => {
    const store = await warm(t, factory)
    await store.create(approval('a1', { expiresAt: new Date(Date.now() + 30).toISOString() }))
    const controller = new AbortController()
    const waiting = store.waitForDecision('a1', controller.signal)
    let settled = false
    waiting.then(() => { settled = true }, () => { settled = true })
    await sleep(60)
    t.equal(settled, false, 'still waiting past expiresAt')
    await store.expire('a1')
    t.match(await waiting, { status: 'expired' })
  })

  test('approvals: waitForDecision rejects on abort and for an unknown id', async (t) => {
    const store = await open(t, factory)
    await store.create(approval('a1'))
    const controller = new AbortController()
    const waiting = store.waitForDecision('a1', controller.signal)
    await sleep(10)
    const reason = new Error('run aborted')
    controller.abort(reason)
    await t.rejects(waiting, reason)
    await t.rejects(store.waitForDecision('a1', AbortSignal.abort(reason)), reason, 'an aborted signal rejects at once')
    await t.rejects(store.waitForDecision('nope', new AbortController().signal), { code: 'FA_APPROVAL_NOT_FOUND' })
    // the aborted waiter is gone: deciding now wakes nobody and breaks nothing
    t.match(await store.decide('a1', decision(true)), { outcome: 'decided' })
  })

  test('approvals: close rejects the waiters left', async (t) => {
    const store = await factory(t.context)
    await store.create(approval('a1'))
    const waiting = store.waitForDecision('a1', new AbortController().signal)
    await sleep(10)
    // the handler is attached before close: the rejection may come while close() still awaits the backend
    const rejected = t.rejects(waiting, { code: 'FA_STORE_CLOSED' })
    await store.close?.()
    await rejected
    await store.close?.()
  })
}

// ---------------------------------------------------------------------------------------------------------
// checkpoints

export function checkpointStoreConformance<C> (registrar: Registrar<C>, factory: StoreFactory<CheckpointStore, C>): void {
  const test = checked(registrar)
  test('checkpoints: steps count from 1, load returns the latest state', async (t) => {
    const store = await open(t, factory)
    const first = await store.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state: { n: 1 } })
    t.match(first, { runId: 'r1', agent: 'echo', sessionId: 's1', step: 1, state: { n: 1 } })
    t.equal(first.createdAt, first.updatedAt)
    await sleep(5)
    const state = { n: 2, list: ['a', { b: null }], text: 'é' }
    await store.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state: { n: 'ignored' } })
    const third = await store.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state })
    t.equal(third.step, 3)
    t.equal(third.createdAt, first.createdAt)
    t.ok(third.updatedAt > first.updatedAt)
    t.strictSame(third.state, state)
    t.strictSame(await store.load('r1'), third)
    t.equal(await store.load('nope'), null)
  })

  test('checkpoints: the state is a snapshot, undefined is null', async (t) => {
    const store = await open(t, factory)
    const state = { items: [1] }
    await store.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state })
    state.items.push(2)
    t.strictSame((await store.load('r1'))?.state, { items: [1] })
    const saved = await store.save({ runId: 'r2', agent: 'echo', sessionId: 's1', state: undefined })
    t.equal(saved.state, null)
    t.equal((await store.load('r2'))?.state, null)
    await store.save({ runId: 'r3', agent: 'echo', sessionId: 's1', state: 'just text' })
    t.equal((await store.load('r3'))?.state, 'just text')
  })

  test('checkpoints: delete', async (t) => {
    const store = await open(t, factory)
    await store.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state: 1 })
    await store.delete('r1')
    await store.delete('r1')
    await store.delete('nope')
    t.equal(await store.load('r1'), null)
    const again = await store.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state: 2 })
    t.equal(again.step, 1, 'a deleted run starts over')
  })

  test('checkpoints: list is most recently updated first, with bytes and without state', async (t) => {
    const store = await open(t, factory)
    t.same(await store.list(), [])
    const states: Record<string, unknown> = { r1: { text: 'héllo 👋' }, r2: [1, 2, 3], r3: 'x' }
    for (const runId of ['r1', 'r2', 'r3']) {
      await store.save({ runId, agent: 'echo', sessionId: `s-${runId}`, state: states[runId] })
      await sleep(3)
    }
    const updated = await store.save({ runId: 'r1', agent: 'other', sessionId: 's-r1', state: states.r1 })
    const list = await store.list()
    t.same(list.map((c) => c.runId), ['r1', 'r3', 'r2'])
    t.strictSame(list[0], {
      runId: 'r1',
      agent: 'other',
      sessionId: 's-r1',
      step: 2,
      createdAt: updated.createdAt,
      updatedAt: updated.updatedAt,
      bytes: Buffer.byteLength(JSON.stringify(states.r1))
    })
    t.ok(list[0].bytes > JSON.stringify(states.r1).length, 'bytes, not characters')
    for (const summary of list) t.notOk('state' in summary)
  })
}

// ---------------------------------------------------------------------------------------------------------
// idempotency

const OPTIONS = { ttlMs: LONG, leaseMs: LONG }
const RESPONSE = { status: 201, body: '{"ok":true,"text":"é"}', contentType: 'application/json; charset=utf-8', location: '/v1/runs/r-1' }

/**
 * What a retry would be told of `key`, read through reserve (the interface has no get): the record that holds it,
 * or null (then the probe's own reservation is released at once). Like a retry, it takes over a reservation whose
 * lease ran out, so it is read only where the holder's lease still runs.
 */
async function peek (store: IdempotencyStore, key: string): Promise<IdempotencyRecord | null> {
  const result = await store.reserve(key, 'fp-peek', OPTIONS)
  if (result.outcome === 'existing') return result.record
  await store.release(key, result.token)
  return null
}

/** Reserves a key that must be free, and resolves with the reservation's token. */
async function reserved<C> (t: Check<C>, store: IdempotencyStore, key: string, fingerprint: string, options = OPTIONS): Promise<string> {
  const result = await store.reserve(key, fingerprint, options)
  t.equal(result.outcome, 'reserved', `${key} reserved`)
  return (result as { token: string }).token
}

export function idempotencyStoreConformance<C> (registrar: Registrar<C>, factory: StoreFactory<IdempotencyStore, C>): void {
  const test = checked(registrar)
  test('idempotency: reserve, then the holder is reported', async (t) => {
    const store = await open(t, factory)
    const before = Date.now()
    const result = await store.reserve('k1', 'fp-1', { ttlMs: LONG, leaseMs: 5000 })
    t.match(result, { outcome: 'reserved', token: /^\S{16,}$/ })
    t.same(Object.keys(result).sort(), ['outcome', 'token'])
    const again = await store.reserve('k1', 'fp-2', OPTIONS)
    t.match(again, { outcome: 'existing', record: { key: 'k1', fingerprint: 'fp-1', state: 'in_progress' } })
    const record = (again as { record: { createdAt: string, expiresAt: string, lockedUntil: string } }).record
    t.notOk('response' in record)
    t.notOk('token' in record, 'the holder\'s token is its own')
    const created = Date.parse(record.createdAt)
    t.ok(created >= before - 1 && created <= Date.now() + 1)
    t.equal(Date.parse(record.expiresAt) - created, LONG)
    t.equal(Date.parse(record.lockedUntil) - created, 5000)
    t.strictSame(await peek(store, 'k1'), record)
    t.equal(await peek(store, 'nope'), null)
  })

  test('idempotency: 20 concurrent reservers, exactly one wins', async (t) => {
    const store = await open(t, factory)
    const results = await Promise.all(range(0, 19).map((i) => store.reserve('k1', `fp-${i}`, OPTIONS)))
    t.equal(results.filter((r) => r.outcome === 'reserved').length, 1)
    const winner = results.findIndex((r) => r.outcome === 'reserved')
    for (const result of results) {
      if (result.outcome === 'existing') t.equal(result.record.fingerprint, `fp-${winner}`)
    }
  })

  test('idempotency: a completed record is replayed', async (t) => {
    const store = await open(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1')
    t.equal(await store.complete('k1', token, RESPONSE, LONG), true)
    const result = await store.reserve('k1', 'fp-1', OPTIONS)
    t.match(result, { outcome: 'existing', record: { key: 'k1', fingerprint: 'fp-1', state: 'completed' } })
    t.strictSame((result as { record: { response: unknown } }).record.response, RESPONSE)
    t.match(await peek(store, 'k1'), { state: 'completed', response: RESPONSE })
    t.equal(await store.complete('k1', token, { ...RESPONSE, status: 500 }, LONG), false, 'completed once')
    t.equal(await store.release('k1', token), false, 'a completed record is not released')
    t.match(await peek(store, 'k1'), { state: 'completed', response: RESPONSE })
  })

  test('idempotency: release makes the key reservable again', async (t) => {
    const store = await open(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1')
    t.equal(await store.release('k1', token), true)
    t.equal(await peek(store, 'k1'), null)
    t.equal(await store.release('k1', token), false, 'released once')
    await reserved(t, store, 'k1', 'fp-2')
    t.match(await peek(store, 'k1'), { fingerprint: 'fp-2' })
    t.equal(await store.release('nope', token), false)
  })

  test('idempotency: complete of an unknown key stores nothing', async (t) => {
    const store = await open(t, factory)
    t.equal(await store.complete('nope', 'token', RESPONSE, LONG), false)
    t.equal(await peek(store, 'nope'), null)
  })

  test('idempotency: only the holder of the token completes, renews or releases', async (t) => {
    const store = await open(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1', { ttlMs: LONG, leaseMs: 5000 })
    const held = await peek(store, 'k1')
    for (const other of ['', 'other', `${token}x`]) {
      t.equal(await store.complete('k1', other, RESPONSE, LONG), false, `complete with "${other}"`)
      t.equal(await store.renew('k1', other, LONG), false, `renew with "${other}"`)
      t.equal(await store.release('k1', other), false, `release with "${other}"`)
    }
    t.strictSame(await peek(store, 'k1'), held, 'nothing changed')
    const second = await reserved(t, store, 'k2', 'fp-1')
    t.not(second, token, 'each reservation its own token')
    t.equal(await store.complete('k1', second, RESPONSE, LONG), false, 'another key\'s token')
    t.equal(await store.complete('k1', token, RESPONSE, LONG), true)
  })

  test('idempotency: a lease that ran out is taken over (under a new token); a completed record is not', async (t) => {
    const store = await warm(t, factory)
    const dead = await reserved(t, store, 'dead', 'fp-1', { ttlMs: LONG, leaseMs: 50 })
    const done = await reserved(t, store, 'done', 'fp-1', { ttlMs: LONG, leaseMs: 50 })
    t.equal(await store.complete('done', done, RESPONSE, LONG), true)
    await sleep(70)
    const taker = await reserved(t, store, 'dead', 'fp-1')
    t.not(taker, dead)
    t.match(await peek(store, 'dead'), { state: 'in_progress', fingerprint: 'fp-1' })
    const taken = await peek(store, 'dead')
    // the first holder, back after its lease (a store outage, a pause): its late completion changes nothing
    t.equal(await store.complete('dead', dead, RESPONSE, LONG), false, 'the first holder cannot complete a record taken over')
    t.equal(await store.release('dead', dead), false, 'nor release it')
    t.equal(await store.renew('dead', dead, LONG), false, 'nor renew it')
    t.strictSame(await peek(store, 'dead'), taken)
    t.equal(await store.complete('dead', taker, RESPONSE, LONG), true)
    t.match(await store.reserve('done', 'fp-2', OPTIONS), { outcome: 'existing', record: { state: 'completed' } })
  })

  test('idempotency: the holder completes past its lease while nobody took the key over', async (t) => {
    const store = await warm(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1', { ttlMs: LONG, leaseMs: 30 })
    await sleep(50)
    t.equal(await store.complete('k1', token, RESPONSE, LONG), true)
    t.match(await store.reserve('k1', 'fp-1', OPTIONS), { outcome: 'existing', record: { state: 'completed', response: RESPONSE } })
    const released = await reserved(t, store, 'k2', 'fp-1', { ttlMs: LONG, leaseMs: 30 })
    await sleep(50)
    t.equal(await store.release('k2', released), true)
    t.equal(await peek(store, 'k2'), null)
  })

  test('idempotency: an expired record is absent', async (t) => {
    const store = await warm(t, factory)
    const k1 = await reserved(t, store, 'k1', 'fp-1')
    await store.complete('k1', k1, RESPONSE, 50)
    const k2 = await reserved(t, store, 'k2', 'fp-1', { ttlMs: 50, leaseMs: LONG })
    await sleep(70)
    t.equal(await peek(store, 'k1'), null)
    t.equal(await peek(store, 'k2'), null)
    t.equal(await store.complete('k2', k2, RESPONSE, LONG), false, 'an expired reservation is not completed')
    t.equal(await store.release('k2', k2), false)
    t.equal(await peek(store, 'k2'), null)
    await reserved(t, store, 'k1', 'fp-2')
    await reserved(t, store, 'k2', 'fp-2')
    t.match(await peek(store, 'k1'), { state: 'in_progress', fingerprint: 'fp-2' })
  })

  test('idempotency: renew keeps an in_progress record from being taken over past its original lease', async (t) => {
    const store = await warm(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1', { ttlMs: LONG, leaseMs: 100 })
    await sleep(40)
    const before = Date.now()
    t.equal(await store.renew('k1', token, 400), true)
    const after = Date.now()
    const renewed = await peek(store, 'k1')
    const lockedUntil = Date.parse(renewed!.lockedUntil)
    t.ok(lockedUntil >= before + 400 && lockedUntil <= after + 400, 'lockedUntil is now + leaseMs')
    t.match(renewed, { state: 'in_progress', fingerprint: 'fp-1' })
    t.notOk('response' in renewed!)
    await sleep(Math.max(0, Date.parse(renewed!.createdAt) + 150 - Date.now()))
    t.match(await store.reserve('k1', 'fp-1', OPTIONS), { outcome: 'existing', record: { state: 'in_progress', fingerprint: 'fp-1' } },
      'past the original lease, a retry of the same body is still told the key is in progress')
    t.match(await store.reserve('k1', 'fp-2', OPTIONS), { outcome: 'existing', record: { fingerprint: 'fp-1' } })
    t.strictSame(await peek(store, 'k1'), renewed, 'and nothing changed')
    // without further renewals the new lease runs out like the first one
    await sleep(Math.max(0, lockedUntil + 20 - Date.now()))
    await reserved(t, store, 'k1', 'fp-2')
  })

  test('idempotency: renew of a lease that ran out but was not taken over keeps it', async (t) => {
    const store = await warm(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1', { ttlMs: LONG, leaseMs: 30 })
    await sleep(50)
    t.equal(await store.renew('k1', token, LONG), true)
    t.match(await store.reserve('k1', 'fp-2', OPTIONS), { outcome: 'existing', record: { fingerprint: 'fp-1', state: 'in_progress' } })
  })

  test('idempotency: renew moves the expiry of a record that would expire before its new lease', async (t) => {
    const store = await warm(t, factory)
    const token = await reserved(t, store, 'k1', 'fp-1', { ttlMs: 200, leaseMs: 200 })
    t.equal(await store.renew('k1', token, 800), true)
    const record = await peek(store, 'k1')
    t.equal(record!.expiresAt, record!.lockedUntil)
    await sleep(Math.max(0, Date.parse(record!.createdAt) + 300 - Date.now()))
    t.match(await peek(store, 'k1'), { state: 'in_progress', fingerprint: 'fp-1' }, 'still there past the ttl it was reserved with')
    t.match(await store.reserve('k1', 'fp-2', OPTIONS), { outcome: 'existing' })
    // a renewal never shortens the expiry
    const k2 = await reserved(t, store, 'k2', 'fp-1')
    const long = await peek(store, 'k2')
    t.equal(await store.renew('k2', k2, 100), true)
    t.equal((await peek(store, 'k2'))!.expiresAt, long!.expiresAt)
  })

  test('idempotency: renew of a completed, released, absent, expired or taken-over record is false and changes nothing', async (t) => {
    const store = await warm(t, factory)
    t.equal(await store.renew('absent', 'token', LONG), false)
    t.equal(await peek(store, 'absent'), null, 'an absent record is not created')

    const done = await reserved(t, store, 'done', 'fp-1')
    await store.complete('done', done, RESPONSE, LONG)
    const completed = await peek(store, 'done')
    t.equal(await store.renew('done', done, LONG * 2), false)
    t.strictSame(await peek(store, 'done'), completed)

    const released = await reserved(t, store, 'released', 'fp-1')
    await store.release('released', released)
    t.equal(await store.renew('released', released, LONG), false)
    t.equal(await peek(store, 'released'), null)

    const taken = await reserved(t, store, 'taken', 'fp-1', { ttlMs: LONG, leaseMs: 30 })
    const expired = await reserved(t, store, 'expired', 'fp-1', { ttlMs: 30, leaseMs: 30 })
    await sleep(50)
    // taken over by a retry of the same body: the fingerprint is the same, the holder is not
    await reserved(t, store, 'taken', 'fp-1', { ttlMs: LONG, leaseMs: 5000 })
    const takenOver = await peek(store, 'taken')
    t.equal(await store.renew('taken', taken, LONG), false, 'a key taken over is no longer ours')
    t.strictSame(await peek(store, 'taken'), takenOver)
    t.equal(await store.renew('expired', expired, LONG), false)
    t.equal(await peek(store, 'expired'), null)
    await reserved(t, store, 'expired', 'fp-2')
  })

  test('idempotency: renew and a takeover racing: exactly one of them wins', async (t) => {
    const store = await warm(t, factory)
    const keys = range(0, 9).map((i) => `race-${i}`)
    const tokens: string[] = []
    for (const key of keys) tokens.push(await reserved(t, store, key, 'fp-1', { ttlMs: LONG, leaseMs: 30 }))
    await sleep(50)
    const results = await Promise.all(keys.map((key, i) => Promise.all([store.renew(key, tokens[i]!, LONG), store.reserve(key, 'fp-2', OPTIONS)])))
    for (const [i, [renewed, reserve]] of results.entries()) {
      t.not(renewed, reserve.outcome === 'reserved', keys[i])
      t.match(await peek(store, keys[i]!), { state: 'in_progress', fingerprint: renewed ? 'fp-1' : 'fp-2' })
    }
  })

  test('idempotency: complete and a takeover racing: the late holder never overwrites the new one', async (t) => {
    const store = await warm(t, factory)
    const keys = range(0, 9).map((i) => `late-${i}`)
    const tokens: string[] = []
    for (const key of keys) tokens.push(await reserved(t, store, key, 'fp-1', { ttlMs: LONG, leaseMs: 30 }))
    await sleep(50)
    const results = await Promise.all(keys.map((key, i) => Promise.all([store.complete(key, tokens[i]!, RESPONSE, LONG), store.reserve(key, 'fp-1', OPTIONS)])))
    for (const [i, [completed, reserve]] of results.entries()) {
      t.not(completed, reserve.outcome === 'reserved', keys[i])
      t.match(await peek(store, keys[i]!), { state: completed ? 'completed' : 'in_progress' })
    }
  })

  test('idempotency: rejects bad durations', async (t) => {
    const store = await open(t, factory)
    await t.rejects(store.reserve('k1', 'fp', { ttlMs: 0, leaseMs: 10 }), RangeError)
    await t.rejects(store.reserve('k1', 'fp', { ttlMs: 10, leaseMs: -1 }), RangeError)
    await t.rejects(store.complete('k1', 'token', RESPONSE, Number.POSITIVE_INFINITY), RangeError)
    await t.rejects(store.renew('k1', 'token', 0), RangeError)
    await t.rejects(store.renew('k1', 'token', Number.NaN), RangeError)
  })
}
