import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import type { PoolClient } from 'pg'
import t from 'tap'
import type { Test } from 'tap'
import {
  PostgresApprovalStore, PostgresAuditStore, PostgresConnection, PostgresSessionStore, postgresStores
} from '../../lib/stores/postgres.js'
import type { ApprovalDecision, StoreSet } from '../../lib/stores/types.js'
import { pgReachable, pgUrl, requirePg, requireService, withPgSchema } from '../helpers/services.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { approval, auditEntry, factoriesOf, storeConformance } from './conformance.js'
import { runStoreConformance } from './run-conformance.js'

const UNREACHABLE = 'postgres://postgres@127.0.0.1:1/test'

function closeAll (stores: Required<StoreSet>): Promise<unknown> {
  return Promise.all([
    stores.auditStore.close?.(), stores.sessionStore.close?.(), stores.approvalStore.close?.(),
    stores.checkpointStore.close?.(), stores.idempotency.store.close?.(), stores.runStore.close?.()
  ])
}

function decision (approved: boolean): ApprovalDecision {
  return { approved, comment: null, decidedBy: 'bob', decidedAt: new Date().toISOString() }
}

function newPool (t: Test, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: pgUrl(), max })
  pool.on('error', () => {}) // as any application must: pg re-emits errors of dropped clients here
  t.teardown(() => pool.end())
  return pool
}

t.test('requireService skips a file when the server is down, and fails it under CI', async (t) => {
  t.equal(await pgReachable(UNREACHABLE), false)
  const calls: string[] = []
  const stub = { plan: (n: number, why?: string) => { calls.push(`plan ${n}: ${why}`) }, fail: (why: string) => { calls.push(`fail: ${why}`) } }
  const ci = process.env.CI
  t.teardown(() => { if (ci === undefined) delete process.env.CI; else process.env.CI = ci })
  delete process.env.CI
  t.equal(requireService(stub, true, 'how'), true)
  t.equal(requireService(stub, false, 'start it'), false)
  process.env.CI = 'false'
  requireService(stub, false, 'start it')
  process.env.CI = 'true'
  requireService(stub, false, 'start it')
  t.same(calls, ['plan 0: skipped, not reachable: start it', 'plan 0: skipped, not reachable: start it', 'fail: not reachable and CI is set: start it'])
})

if (await requirePg(t)) {
  const shared = new pg.Pool({ connectionString: pgUrl(), max: 10 })
  t.teardown(() => shared.end())

  storeConformance(t, factoriesOf((t) => postgresStores(shared, { schema: withPgSchema(t, shared) })))

  // the twin is another instance: a pool of its own on the same schema
  runStoreConformance(t, {
    store: (t) => postgresStores(shared, { schema: withPgSchema(t, shared) }).runStore,
    twin: (_t, first) => new PostgresRunStore({ connectionString: pgUrl(), max: 3 }, { schema: (first as PostgresRunStore).schema })
  })

  t.test('data survives closing the stores and opening them again on the schema', async (t) => {
    const schema = withPgSchema(t, shared)
    const first = postgresStores(pgUrl(), { schema })
    await first.auditStore.append([auditEntry(0, { agent: 'echo' }), auditEntry(1)])
    await first.sessionStore.create({ id: 's1', agent: 'echo', principal: 'p', metadata: { a: 1 } }, 60_000)
    await first.sessionStore.appendTurn('s1', [{ role: 'user', content: { text: 'hi' }, runId: 'r1', at: new Date().toISOString() }], 60_000)
    await first.approvalStore.create(approval('a1'))
    await first.approvalStore.decide('a1', decision(true))
    await first.checkpointStore.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state: { step: 'one' } })
    await first.idempotency.store.reserve('k1', 'fp', { ttlMs: 60_000, leaseMs: 60_000 })
    await first.idempotency.store.complete('k1', { status: 200, body: '{}', contentType: 'application/json' }, 60_000)
    await closeAll(first)

    const again = postgresStores({ connectionString: pgUrl(), max: 2, schema })
    t.teardown(() => closeAll(again))
    t.equal(await again.auditStore.count(), 2)
    t.same((await again.auditStore.query({ limit: 10, agent: 'echo' })).entries.map((e) => e.id), ['entry-0'])
    t.match(await again.sessionStore.get('s1'), { turns: 1, metadata: { a: 1 }, messages: [{ content: { text: 'hi' } }] })
    t.match(await again.approvalStore.get('a1'), { status: 'approved', decision: { decidedBy: 'bob' } })
    t.match(await again.checkpointStore.load('r1'), { step: 1, state: { step: 'one' } })
    t.match(await again.idempotency.store.get('k1'), { state: 'completed', response: { status: 200 } })
  })

  t.test('a pool you pass is never ended; tables live in the schema, with the prefix', async (t) => {
    const pool = newPool(t)
    const schema = withPgSchema(t, pool)
    const stores = postgresStores({ pool, schema, tablePrefix: 'app_' })
    await stores.auditStore.append([auditEntry(0)])
    await stores.checkpointStore.list()
    await closeAll(stores)
    await closeAll(stores)
    t.equal(pool.ended, false)
    const { rows } = await pool.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1', [schema])
    t.same(rows.map((row) => row.table_name), ['app_audit', 'app_checkpoints'])
    await t.rejects(stores.auditStore.count(), { code: 'FA_STORE_CLOSED' })
  })

  t.test('a pool made from a URL is ended with the last store using it', async (t) => {
    const schema = withPgSchema(t, shared)
    const connection = new PostgresConnection(pgUrl())
    const probe = {}
    const pool = connection.acquire(probe)
    const audit = new PostgresAuditStore(connection, { schema })
    const sessions = new PostgresSessionStore(connection, { schema })
    const unused = new PostgresApprovalStore(connection, { schema })
    await audit.append([auditEntry(0)])
    await sessions.create({ id: 's1', agent: null, principal: 'p', metadata: {} }, 60_000)
    await audit.close()
    t.equal(await sessions.touch('s1', 60_000), true, 'still usable after another store closed')
    await sessions.close()
    await unused.close()
    t.equal(pool.ended, false, 'the probe still holds it')
    await connection.release(probe)
    t.equal(pool.ended, true)
  })

  t.test('two instances, two pools, one schema: a decision on B wakes a waiter on A within a second', async (t) => {
    const schema = withPgSchema(t, shared)
    const a = new PostgresApprovalStore(pgUrl(), { schema })
    const b = new PostgresApprovalStore({ connectionString: pgUrl(), max: 2 }, { schema })
    t.teardown(async () => { await a.close(); await b.close() })
    t.equal(a.channel, b.channel)
    await a.create(approval('a1'))
    await b.create(approval('other'))
    const waiting = a.waitForDecision('a1', new AbortController().signal)
    await sleep(100)
    await b.decide('other', decision(true)) // a notification nobody on A waits for
    const started = Date.now()
    t.match(await b.decide('a1', decision(false)), { outcome: 'decided' })
    t.match(await waiting, { id: 'a1', status: 'rejected', decision: { decidedBy: 'bob' } })
    t.ok(Date.now() - started < 1000, `woken in ${Date.now() - started} ms`)
  })

  t.test('a change that was not notified is found by polling', async (t) => {
    const schema = withPgSchema(t, shared)
    const store = new PostgresApprovalStore(shared, { schema })
    t.teardown(() => store.close())
    await store.create(approval('a1'))
    const waiting = store.waitForDecision('a1', new AbortController().signal)
    await sleep(50)
    const started = Date.now()
    await shared.query(`UPDATE ${pg.escapeIdentifier(schema)}.fa_approvals SET status = 'cancelled' WHERE id = 'a1'`)
    t.match(await waiting, { status: 'cancelled' })
    t.ok(Date.now() - started < 1000, `found in ${Date.now() - started} ms`)
  })

  t.test('a lost listener connection is replaced, and a late error from it is ignored', async (t) => {
    const schema = withPgSchema(t, shared)
    const pool = newPool(t)
    const checkedOut: PoolClient[] = []
    pool.on('acquire', (client) => checkedOut.push(client))
    const a = new PostgresApprovalStore(pool, { schema })
    const b = new PostgresApprovalStore(shared, { schema })
    t.teardown(async () => { await a.close(); await b.close() })
    await a.create(approval('a1'))
    await a.create(approval('a2'))
    await a.create(approval('a3'))

    const listeners = async (): Promise<number> => (await shared.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1', [`LISTEN "${a.channel}"`])).rows[0].n
    const first = a.waitForDecision('a1', new AbortController().signal)
    await sleep(50)
    const listener = checkedOut.find((client) => client.listenerCount('notification') > 0) as PoolClient
    t.ok(listener !== undefined)
    t.equal(await listeners(), 1)
    await shared.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1', [`LISTEN "${a.channel}"`])
    await sleep(50)
    await b.decide('a1', decision(true))
    t.match(await first, { status: 'approved' }, 'found by polling')
    await sleep(50)
    t.equal(await listeners(), 1, 'listening again on a new connection')

    listener.emit('error', new Error('late error from the dropped connection'))
    const second = a.waitForDecision('a2', new AbortController().signal)
    await sleep(50)
    const started = Date.now()
    await b.decide('a2', decision(true))
    t.match(await second, { status: 'approved' })
    t.ok(Date.now() - started < 1000)
    t.equal(await listeners(), 1)
  })

  t.test('closing while the listener connects releases its connection', async (t) => {
    const pool = newPool(t)
    const store = new PostgresApprovalStore(pool, { schema: withPgSchema(t, shared) })
    const rejected = t.rejects(store.waitForDecision('a1', new AbortController().signal), { code: 'FA_STORE_CLOSED' })
    await store.close()
    await rejected
    t.equal(pool.totalCount - pool.idleCount, 0, 'no client left checked out')
  })

  t.test('an unreachable server rejects with the underlying error, and is retried', async (t) => {
    const audit = new PostgresAuditStore(UNREACHABLE)
    await t.rejects(audit.count(), { code: 'ECONNREFUSED' })
    await t.rejects(audit.append([auditEntry(0)]), { code: 'ECONNREFUSED' })
    await audit.close()
    const approvals = new PostgresApprovalStore(UNREACHABLE)
    await t.rejects(approvals.create(approval('a1')), { code: 'ECONNREFUSED' })
    await t.rejects(approvals.waitForDecision('a1', new AbortController().signal), { code: 'ECONNREFUSED' })
    await approvals.close()
  })

  t.test('bad arguments throw a TypeError naming the problem', async (t) => {
    t.throws(() => postgresStores('mysql://localhost/db'), { name: 'TypeError', message: /postgres:\/\// })
    t.throws(() => postgresStores(42 as unknown as string), TypeError)
    t.throws(() => postgresStores(null as unknown as string), TypeError)
    t.throws(() => new PostgresAuditStore(pgUrl(), { schema: 'bad"schema' }), { name: 'TypeError', message: /schema/ })
    t.throws(() => new PostgresAuditStore(pgUrl(), { tablePrefix: 'x'.repeat(33) }), { name: 'TypeError', message: /tablePrefix/ })
    const stores = postgresStores(pgUrl())
    t.equal((stores.approvalStore as PostgresApprovalStore).channel.length, 29)
    await closeAll(stores)
  })
}
