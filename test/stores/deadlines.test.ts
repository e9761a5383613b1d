// Store deadlines (docs/stores.md) with stores of the test's own making: hangs, outages and mistakes.
// test/stores/outage.test.ts does the same against a real Redis and PostgreSQL that stop answering.
import t from 'tap'
import type { Agent } from '../../lib/core/types.js'
import { MemoryApprovalStore, MemoryAuditStore, MemorySessionStore, memoryStores } from '../../lib/stores/memory.js'
import { isUnavailable, storeDeadlines } from '../../lib/stores/deadline.js'
import type { SessionStore } from '../../lib/stores/types.js'
import { build, echo } from '../helper.js'

const never = (): Promise<never> => new Promise(() => {})

/** A memory session store whose `create` (or any method named) does what `behaviour` says instead. */
function sessionStore (overrides: Partial<Record<keyof SessionStore, (...args: never[]) => unknown>>): SessionStore {
  const real = new MemorySessionStore()
  const store: Record<string, unknown> = {}
  for (const method of ['create', 'get', 'appendTurn', 'delete', 'list', 'listByPrincipal'] as const) {
    store[method] = overrides[method] ?? ((...args: unknown[]) => (real[method] as (...a: unknown[]) => unknown)(...args))
  }
  return store as unknown as SessionStore
}

const runRequest = { method: 'POST' as const, url: '/v1/agents/echo/runs', payload: { input: 'hi' } }

t.test('a store that hangs: 503 STORE_UNAVAILABLE at the deadline, before the agent runs', async (t) => {
  let ran = 0
  const counting = { async run (input: unknown) { ran++; return { output: input } } }
  const { app } = build(t, { agents: { echo: counting }, sessionStore: sessionStore({ create: never }), storeTimeoutMs: 150 })
  await app.ready()
  const started = Date.now()
  const res = await app.inject(runRequest)
  const elapsed = Date.now() - started
  t.equal(res.statusCode, 503)
  t.match(res.json(), { code: 'STORE_UNAVAILABLE', message: 'sessionStore.create() did not answer within 150 ms', requestId: String })
  t.ok(elapsed >= 140 && elapsed < 1_500, `answered at the deadline (${elapsed} ms)`)
  t.equal(ran, 0, 'the agent never ran')
})

t.test('an unreachable backend is 503 at once; a mistake keeps its own status', async (t) => {
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })
  const down = build(t, { sessionStore: sessionStore({ create: () => Promise.reject(refused) }) }).app
  const res = await down.inject(runRequest)
  t.equal(res.statusCode, 503)
  t.match(res.json(), { code: 'STORE_UNAVAILABLE', message: 'sessionStore.create() failed: connect ECONNREFUSED 127.0.0.1:5432' })

  const thrown = build(t, { sessionStore: sessionStore({ create: () => { throw refused } }) }).app
  t.equal((await thrown.inject(runRequest)).json().code, 'STORE_UNAVAILABLE', 'a store that throws instead of rejecting')

  const bug = build(t, { sessionStore: sessionStore({ create: () => Promise.reject(new Error('column "x" does not exist')) }) }).app
  t.equal((await bug.inject(runRequest)).statusCode, 500, 'a store failing for another reason is an internal error')

  const coded = Object.assign(new Error('invalid cursor'), { statusCode: 400, code: 'FA_INVALID_CURSOR' })
  const cursor = build(t, { adminApi: { enabled: true }, sessionStore: sessionStore({ list: () => Promise.reject(coded) }) }).app
  t.equal((await cursor.inject({ method: 'GET', url: '/admin/sessions?cursor=x' })).statusCode, 400, 'a 400 stays a 400')
})

t.test('a store call that fails inside the run answers 503 too', async (t) => {
  const checkpointStore = { save: never, load: async () => null, delete: async () => {}, list: async () => [] }
  const saver: Agent = { async run (_input, ctx) { await ctx.checkpoint({ step: 1 }); return { output: 'saved' } } }
  const { app } = build(t, { agents: { saver }, checkpointStore, storeTimeoutMs: 100 })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/saver/runs', payload: { input: 1 } })
  t.equal(res.statusCode, 503)
  t.match(res.json(), { code: 'STORE_UNAVAILABLE', message: 'checkpointStore.save() did not answer within 100 ms' })
})

t.test('the wrapper: memory stores as they are, one wrapper per store, waitForDecision and the rest untouched', async (t) => {
  const withDeadline = storeDeadlines(50)
  const memory = memoryStores()
  t.equal(withDeadline(memory.auditStore, ['append'], 'auditStore'), memory.auditStore)
  t.equal(withDeadline(memory.sessionStore, ['get'], 'sessionStore'), memory.sessionStore)

  class Backend {
    readonly #secret = 'mine'
    calls = 0
    async get (): Promise<string> { this.calls++; return this.#secret }
    waitForDecision (): Promise<never> { return never() }
    get label (): string { return this.#secret }
    async close (): Promise<string> { return this.#secret }
  }
  const backend = new Backend()
  const wrapped = withDeadline(backend, ['get'], 'approvalStore')
  t.not(wrapped, backend)
  t.equal(withDeadline(backend, ['get'], 'adminApi.approvalStore'), wrapped, 'the same store: the same wrapper')
  t.equal(await wrapped.get(), 'mine', 'methods run on the store itself (its private fields answer)')
  t.equal(wrapped.label, 'mine', 'getters too')
  t.equal(await wrapped.close(), 'mine', 'other methods are bound to it')
  t.equal(wrapped.calls, 1)
  let settled = false
  void wrapped.waitForDecision().finally(() => { settled = true })
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(settled, false, 'waitForDecision has no deadline')
  t.ok(new MemoryApprovalStore() instanceof MemoryApprovalStore && new MemoryAuditStore() instanceof MemoryAuditStore)
})

t.test('isUnavailable: outages, not mistakes', async (t) => {
  for (const error of [
    { code: 'ECONNREFUSED' }, { code: 'ETIMEDOUT' }, { code: '08006' }, { code: '57P01' }, { code: '53300' },
    { code: 'SQLITE_BUSY' }, { code: 'SQLITE_IOERR_WRITE' }, { code: 'SQLITE_READONLY' }, { code: 'FA_STORE_CLOSED' },
    { name: 'MaxRetriesPerRequestError' }, new Error('Connection terminated unexpectedly'), new Error('Connection is closed.')
  ]) t.equal(isUnavailable(error), true, JSON.stringify(error) + String((error as Error).message ?? ''))
  for (const error of [new Error('syntax error'), { code: '23505' }, { code: 'SQLITE_CONSTRAINT' }, new TypeError('x'), null, undefined, 'text']) {
    t.equal(isUnavailable(error), false, String(error))
  }
})

t.test('health probes every store that can be probed, by option name', async (t) => {
  let healthy = true
  const probed = (store: object): object => Object.assign(store, { probe: async () => { if (!healthy) throw new Error('down') } })
  const auditStore = probed(new MemoryAuditStore()) as MemoryAuditStore
  const sessions = probed(sessionStore({})) as SessionStore
  const { app } = build(t, {
    auditStore, sessionStore: sessions, adminApi: { enabled: true, auditStore }, db: { health: async () => true },
    rateLimit: { maxRequests: 100, intervalMs: 1000, redis: { eval: async () => [1, 1000, false], defineCommand: () => {}, ping: async () => 'PONG' } }
  })
  const ok = await app.inject({ method: 'GET', url: '/health' })
  t.equal(ok.statusCode, 200)
  t.same(Object.keys(ok.json().checks), ['db', 'auditStore', 'sessionStore', 'rateLimit'], 'each store once, the memory defaults not at all')
  healthy = false
  for (const url of ['/health', '/v1/health', '/admin/health']) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 503, url)
    t.match(res.json(), { status: 'degraded', checks: { db: { status: 'ok' }, auditStore: { status: 'error', error: 'down' }, sessionStore: { status: 'error' }, rateLimit: { status: 'ok' } } }, url)
  }
  t.ok(echo)
})
