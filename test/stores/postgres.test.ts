import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import type { PoolClient } from 'pg'
import t from 'tap'
import type { Test } from 'tap'
import {
  PostgresApprovalStore, PostgresAuditStore, PostgresConnection, PostgresSessionStore, postgresStores
} from '../../lib/stores/postgres.js'
import type { ApprovalDecision, Message, NewRun, NewSession, RunEnd, StoreSet } from '../../lib/stores/types.js'
import { auditCount, build, eventually, gate, idempotencyRecord, percentile, tapTest } from '../helper.js'
import { pgReachable, pgUrl, requirePg, requireService, withPgSchema } from '../helpers/services.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { MemorySessionStore } from '../../lib/stores/memory.js'
import { approval, auditEntry, factoriesOf, storeConformance } from '../../lib/testing/conformance.js'
import { OTHER, OWNER, event, lease, newRun, runStoreConformance } from '../../lib/testing/runs.js'

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

  storeConformance(tapTest(t), factoriesOf((t) => postgresStores(shared, { schema: withPgSchema(t, shared) })))

  // the twin is another instance: a pool of its own on the same schema. The tables are made before a test
  // starts: a lease of a few ms would lapse while they are.
  runStoreConformance(tapTest(t), {
    store: async (t) => {
      const store = postgresStores(shared, { schema: withPgSchema(t, shared) }).runStore!
      await store.get('warm-up')
      return store
    },
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
    const reservation = await first.idempotency.store.reserve('k1', 'fp', { ttlMs: 60_000, leaseMs: 60_000 }) as { token: string }
    await first.idempotency.store.complete('k1', reservation.token, { status: 200, body: '{}', contentType: 'application/json' }, 60_000)
    await closeAll(first)

    const again = postgresStores({ connectionString: pgUrl(), max: 2, schema })
    t.teardown(() => closeAll(again))
    t.equal(await auditCount(again.auditStore), 2)
    t.same((await again.auditStore.query({ limit: 10, agent: 'echo' })).entries.map((e) => e.id), ['entry-0'])
    t.match(await again.sessionStore.get('s1'), { turns: 1, metadata: { a: 1 }, messages: [{ content: { text: 'hi' } }] })
    t.match(await again.approvalStore.get('a1'), { status: 'approved', decision: { decidedBy: 'bob' } })
    t.match(await again.checkpointStore.load('r1'), { step: 1, state: { step: 'one' } })
    t.match(await idempotencyRecord(again.idempotency.store, 'k1'), { state: 'completed', response: { status: 200 } })
  })

  t.test('a runs table made before schedules gets schedule_id and scheduled_for on open; its runs have neither', async (t) => {
    const schema = withPgSchema(t, shared)
    const first = postgresStores(shared, { schema })
    const old = newRun()
    await first.runStore.create(old, { exclusive: false })
    await closeAll(first)
    await shared.query(`ALTER TABLE ${pg.escapeIdentifier(schema)}.fa_runs DROP COLUMN schedule_id, DROP COLUMN scheduled_for`)
    const again = postgresStores(shared, { schema })
    t.teardown(() => closeAll(again))
    t.same(await again.runStore.get(old.record.runId), old.record, 'a run stored before reads as it was')
    const fire = newRun({ scheduleId: 'sch-1', scheduledFor: '2026-11-27T04:00:00.000Z' })
    await again.runStore.create(fire, { exclusive: false })
    t.same(await again.runStore.get(fire.record.runId), fire.record, 'a fire keeps them in the added columns')
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
    await t.rejects(auditCount(stores.auditStore), { code: 'FA_STORE_CLOSED' })
  })

  t.test('a pool made from a URL is ended with the last store using it', async (t) => {
    const schema = withPgSchema(t, shared)
    const connection = new PostgresConnection(pgUrl())
    const probe = {}
    const pool = connection.acquire(probe) as pg.Pool
    const audit = new PostgresAuditStore(connection, { schema })
    const sessions = new PostgresSessionStore(connection, { schema })
    const unused = new PostgresApprovalStore(connection, { schema })
    await audit.append([auditEntry(0)])
    await sessions.create({ id: 's1', agent: null, principal: 'p', metadata: {} }, 60_000)
    await audit.close()
    t.equal(await sessions.appendTurn('s1', [], 60_000), true, 'still usable after another store closed')
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

const HOUR = 3_600_000
const cancelledEnd = (): RunEnd => ({ status: 'cancelled', endedAt: new Date().toISOString(), error: { code: 'CANCELLED', message: 'The run was cancelled' } })

/** A pool whose queries can be counted, or preceded by something of the test's (a race made to happen). */
function spiedPool (t: Test, before: (text: string) => Promise<void> | void = () => {}): { pool: pg.Pool, queries: string[] } {
  const pool = newPool(t)
  const queries: string[] = []
  const spied = new Proxy(pool, {
    get (target, property) {
      if (property === 'query') {
        // a named statement is sent as a config: its text is what is counted
        return async (query: string | { text: string }, values?: unknown[]) => {
          const text = typeof query === 'string' ? query : query.text
          queries.push(text)
          await before(text)
          return target.query(query as string, values)
        }
      }
      const value = Reflect.get(target, property) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
  return { pool: spied, queries }
}

if (await pgReachable()) {
  const admin = new pg.Pool({ connectionString: pgUrl(), max: 2 })
  t.teardown(() => admin.end())

  t.test('runs: the tables and their indexes are made on first use', async (t) => {
    const schema = withPgSchema(t, admin)
    const store = new PostgresRunStore(admin, { schema, tablePrefix: 'app_' })
    t.teardown(() => store.close())
    t.equal(await store.get('warm-up'), null)
    const { rows } = await admin.query('SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname', [schema])
    const defs = Object.fromEntries(rows.map((row) => [row.indexname, String(row.indexdef).replace(/^.* USING btree /, '')]))
    t.same(defs, {
      app_run_events_pkey: '(run_id, seq)',
      app_run_sessions_pkey: '(session_id)',
      app_runs_agent: '(agent, created_seq)',
      app_runs_created: '(created_seq)',
      app_runs_expires: '(expires_at) WHERE (expires_at IS NOT NULL)',
      app_runs_lease: '(lease_until) WHERE (status = \'running\'::text)',
      app_runs_pkey: '(run_id)',
      app_runs_principal: '(principal, created_seq)',
      app_runs_session: '(session_id, created_seq)',
      app_runs_status: '(status, created_seq)'
    })
    const columns = await admin.query('SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2', [schema, 'app_runs'])
    t.ok(columns.rows.some((row) => row.column_name === 'owner') && columns.rows.some((row) => row.column_name === 'lease_until'), 'room for leases (docs/runs.md)')
  })

  t.test('runs: a new pool on the schema finds the runs and their logs', async (t) => {
    const schema = withPgSchema(t, admin)
    const first = new PostgresRunStore(pgUrl(), { schema })
    const run = newRun({ sessionId: 'kept' })
    const id = run.record.runId
    await first.create(run, { exclusive: true })
    await first.append(id, [event(1, 'run.started'), event(2)], OWNER)
    const ended = await first.finish(id, [event(3, 'run.failed')], cancelledEnd(), HOUR, OWNER)
    await first.close()
    const again = new PostgresRunStore({ connectionString: pgUrl(), max: 2 }, { schema })
    t.teardown(() => again.close())
    t.same(await again.get(id), ended)
    t.same(await again.events(id, 0, 10), [event(1, 'run.started'), event(2), event(3, 'run.failed')])
    t.same(await again.spec(id), run.spec)
    t.same(await again.create(newRun({ sessionId: 'kept' }), { exclusive: true }), { outcome: 'created' })
  })

  t.test('runs: append and finish are one round trip whatever the number of events', async (t) => {
    const { pool, queries } = spiedPool(t)
    const store = new PostgresRunStore(pool, { schema: withPgSchema(t, admin) })
    t.teardown(() => store.close())
    const timings: number[] = []
    for (let i = 0; i < 10; i++) {
      const run = newRun()
      await store.create(run, { exclusive: false })
      queries.length = 0
      const started = performance.now()
      await store.append(run.record.runId, Array.from({ length: 100 }, (_, n) => event(n + 1)), OWNER)
      timings.push(performance.now() - started)
      t.equal(queries.length, 1, 'append of 100 events: one query')
      queries.length = 0
      await store.finish(run.record.runId, [event(101), event(102, 'run.completed')], cancelledEnd(), HOUR, OWNER)
      t.equal(queries.length, 1, 'finish: one query')
    }
    t.comment(`append of 100 events in one call: median ${percentile(timings, 0.5).toFixed(1)} ms`)
  })

  /**
   * Stores on a spied pool, their tables made and one session created (the expired sessions purged, once a minute,
   * first: only what the test does is counted); `control.held` holds every statement (the first of a kind, while the
   * next calls gather behind it), `control.fails` fails those it picks, as a connection lost during them would.
   */
  async function spiedStores (t: Test) {
    const control: { held: Promise<void> | null, fails: (text: string) => boolean } = { held: null, fails: () => false }
    const { pool, queries } = spiedPool(t, async (text) => {
      if (control.held !== null && !text.includes('LISTEN')) await control.held
      if (control.fails(text)) throw new Error('Connection terminated unexpectedly')
    })
    const schema = withPgSchema(t, admin)
    const stores = postgresStores(pool, { schema })
    t.teardown(() => closeAll(stores))
    const { runStore, sessionStore } = stores
    await runStore.get('none')
    await sessionStore.create({ id: 'before', agent: null, principal: 'alice', metadata: {} }, HOUR)
    return { control, queries, runStore, sessionStore, pool, schema }
  }

  t.test('sessions: a turn jsonb refuses is appended on its own: the turns grouped with it are recorded', async (t) => {
    const { sessionStore } = await spiedStores(t)
    await sessionStore.create({ id: 'other', agent: null, principal: 'alice', metadata: {} }, HOUR)
    const at = new Date().toISOString()
    const turn = (content: string): Message[] => [{ role: 'user', content, runId: 'r', at }]
    // added in one turn of the event loop: the first two would share a statement (the third is the first's session again)
    const outcomes = await Promise.allSettled([
      sessionStore.appendTurn('before', turn('fine'), HOUR),
      sessionStore.appendTurn('other', turn('a NUL \u0000'), HOUR),
      sessionStore.appendTurn('before', turn('fine again'), HOUR)
    ])
    t.match(outcomes, [{ status: 'fulfilled', value: true }, { status: 'rejected', reason: { message: /unsupported Unicode escape sequence/ } }, { status: 'fulfilled', value: true }])
    t.match(await sessionStore.get('before'), { turns: 2 })
    t.match(await sessionStore.get('other'), { turns: 0 }, 'nothing of the refused turn written')
    // text that only looks like one (a backslash, then u0000) goes on its own too, and is taken
    t.equal(await sessionStore.appendTurn('other', turn('a backslash \\u0000'), HOUR), true)
    t.match(await sessionStore.get('other'), { turns: 1, messages: [{ content: 'a backslash \\u0000' }] })
  })

  t.test('runs: a run and its fresh session are one round trip, with the session store of its database only', async (t) => {
    const { pool, schema, queries, runStore, sessionStore } = await spiedStores(t)
    // the service puts a deadline wrapper (a Proxy) around each store: it is still the store of its database
    const wrapped = new Proxy(sessionStore, {})
    const run = newRun()
    const session = { id: run.record.sessionId!, agent: 'echo', principal: 'alice', metadata: { k: 1 } }
    queries.length = 0
    t.same(await runStore.createWithSession!(run, session, HOUR, wrapped), { outcome: 'created' })
    t.equal(queries.length, 1, 'one statement')
    t.match(await sessionStore.get(session.id), { id: session.id, agent: 'echo', principal: 'alice', turns: 0, metadata: { k: 1 }, messages: [] })
    t.match(await runStore.get(run.record.runId), { runId: run.record.runId, sessionId: session.id, status: 'running' })
    // the session is the run's: another run is refused it until the first ends
    t.match(await runStore.create(newRun({ sessionId: session.id }), { exclusive: true }), { outcome: 'session_busy', holder: run.record.runId })

    // anything else: nothing written, the caller makes the session first
    const other = postgresStores(pool, { schema: withPgSchema(t, admin) })
    t.teardown(() => closeAll(other))
    const alone = new PostgresRunStore(pool, { schema })
    t.teardown(() => alone.close())
    const second = newRun()
    const itsSession = { ...session, id: second.record.sessionId! }
    queries.length = 0
    t.equal(await runStore.createWithSession!(second, itsSession, HOUR, other.sessionStore), undefined, 'another database\'s session store')
    t.equal(await runStore.createWithSession!(second, itsSession, HOUR, new MemorySessionStore()), undefined, 'a memory store')
    t.equal(await runStore.createWithSession!(second, session, HOUR, sessionStore), undefined, 'a session that is not the run\'s')
    t.equal(await alone.createWithSession(second, itsSession, HOUR, sessionStore), undefined, 'a run store made alone')
    t.same(queries, [])
    t.equal(await runStore.get(second.record.runId), null)
  })

  t.test('runs: concurrent runs\' creates, turns and ends go in one statement a group, each with its own outcome', async (t) => {
    const { control, queries, runStore, sessionStore } = await spiedStores(t)
    // the first call's statement held until the others wait behind it
    const holding = async <T>(calls: Array<() => Promise<T>>): Promise<T[]> => {
      const { promise, release } = gate()
      control.held = promise
      queries.length = 0
      const first = calls[0]!()
      await eventually(() => queries.length === 1)
      const results = [first, ...calls.slice(1).map((call) => call())]
      await sleep(50)
      control.held = null
      release()
      return Promise.all(results)
    }
    const fresh = (run: NewRun): NewSession =>
      ({ id: run.record.sessionId!, agent: 'echo', principal: 'alice', metadata: {} })

    const runs = Array.from({ length: 5 }, () => newRun())
    // two runs making one session (ids a caller chose) share no statement: the second is written after, and its
    // statement failing fails it alone
    const twins = [newRun({ sessionId: 'shared' }), newRun({ sessionId: 'shared' })]
    let creates = 0
    control.fails = (text) => text.includes('session AS (') && ++creates === 3
    const created = await holding([...runs, ...twins].map((run) => async () =>
      runStore.createWithSession!(run, fresh(run), HOUR, sessionStore).catch((error: Error) => error.message)))
    t.same(created, [...Array(6).fill({ outcome: 'created' }), 'Connection terminated unexpectedly'])
    t.equal(queries.length, 3, 'the first alone, then the others in one statement but for the second twin')
    for (const run of [...runs, twins[0]!]) t.match(await runStore.get(run.record.runId), { status: 'running', sessionId: run.record.sessionId })
    t.equal(await runStore.get(twins[1]!.record.runId), null)
    t.match(await sessionStore.get('shared'), { id: 'shared', turns: 0 })

    const turn = (runId: string): Message[] => [{ role: 'user', content: { text: runId }, runId, at: new Date().toISOString() }]
    const turns = await holding([
      async () => sessionStore.appendTurn('before', turn('first'), HOUR),
      ...runs.map((run) => async () => sessionStore.appendTurn(run.record.sessionId!, turn(run.record.runId), HOUR)),
      async () => sessionStore.appendTurn('missing', turn('x'), HOUR),
      // a session's second turn waits for the next group, in order
      async () => sessionStore.appendTurn(runs[0]!.record.sessionId!, turn('again'), HOUR)
    ])
    t.same(turns, [true, true, true, true, true, true, false, true])
    t.equal(queries.length, 3, 'the first alone, the others but one together, then the second turn')
    t.match(await sessionStore.get(runs[0]!.record.sessionId!), { turns: 2, messages: [{ content: { text: runs[0]!.record.runId } }, { content: { text: 'again' } }] })

    // one end whose condition fails (its log moved: a retry bringing an event it holds) is decided again, alone
    await runStore.append(runs[4]!.record.runId, [event(1)], OWNER)
    const ended = await holding(runs.map((run) => async () =>
      runStore.finish(run.record.runId, [event(1), event(2, 'run.failed')], cancelledEnd(), HOUR, OWNER)))
    t.match(ended, runs.map((run) => ({ runId: run.record.runId, status: 'cancelled', lastSeq: 2 })))
    t.equal(queries.filter((text) => text.includes('UPDATE')).length, 3, 'the first alone, the others in one statement, the moved one again')
    for (const run of runs) t.same((await runStore.events(run.record.runId, 0, 10)).map((e) => e.seq), [1, 2])
    // each ended run gave its session back
    t.match(await runStore.create(newRun({ sessionId: runs[0]!.record.sessionId }), { exclusive: true }), { outcome: 'created' })

    // a statement that fails fails each of its callers, as it would have failed each alone
    const lost = Array.from({ length: 3 }, () => newRun())
    await Promise.all(lost.map((run) => runStore.create(run, { exclusive: false })))
    control.fails = (text) => text.includes('UPDATE')
    const outcomes = await holding(lost.map((run) => async () =>
      runStore.finish(run.record.runId, [], cancelledEnd(), HOUR, OWNER).then(() => 'ended', (error: Error) => error.message)))
    control.fails = () => false
    t.same(outcomes, Array(3).fill('Connection terminated unexpectedly'))
    t.equal(queries.length, 2, 'two statements, the first alone')
    for (const run of lost) t.match(await runStore.get(run.record.runId), { status: 'running' })
  })

  t.test('runs: a run\'s end and its session\'s turn are one statement, with the session store of its database only', async (t) => {
    const { control, queries, runStore, sessionStore, pool, schema } = await spiedStores(t)
    const completed = (): RunEnd => ({ status: 'completed', endedAt: new Date().toISOString(), result: { output: 'ok' } as never })
    const messages = (text: string): Message[] => [{ role: 'user', content: text, runId: 'r', at: new Date().toISOString() }]
    const started = async (): Promise<NewRun> => {
      const run = newRun()
      t.same(await runStore.createWithSession!(run, { id: run.record.sessionId!, agent: 'echo', principal: 'alice', metadata: {} }, HOUR, sessionStore), { outcome: 'created' })
      return run
    }

    // not this database's session store, or messages jsonb would refuse: no turn to write with the end
    const other = postgresStores(pool, { schema: withPgSchema(t, admin) })
    t.teardown(() => closeAll(other))
    const alone = new PostgresRunStore(pool, { schema })
    t.teardown(() => alone.close())
    t.equal(runStore.turnWithEnd!(other.sessionStore, 's', messages('a'), HOUR), undefined, 'another database\'s session store')
    t.equal(runStore.turnWithEnd!(new MemorySessionStore(), 's', messages('a'), HOUR), undefined, 'a memory store')
    t.equal(alone.turnWithEnd(sessionStore, 's', messages('a'), HOUR), undefined, 'a run store made alone')
    t.equal(runStore.turnWithEnd!(sessionStore, 's', messages('a\u0000'), HOUR), undefined, 'a NUL')
    t.equal(runStore.turnWithEnd!(sessionStore, 's', messages('\ud800'), HOUR), undefined, 'a lone surrogate')
    t.throws(() => runStore.turnWithEnd!(sessionStore, 's', messages('a'), -1))

    // the end and the turn: one statement (through the service's deadline wrapper, a Proxy, too)
    const run = await started()
    const sessionId = run.record.sessionId!
    const turn = runStore.turnWithEnd!(new Proxy(sessionStore, {}), sessionId, messages('one'), HOUR)!
    t.match(turn, { sessionId, ttlMs: HOUR })
    queries.length = 0
    t.match(await runStore.finish(run.record.runId, [event(1, 'run.completed')], completed(), HOUR, OWNER, turn), { status: 'completed' })
    t.equal(queries.length, 1, 'one statement')
    t.equal(turn.recorded, true)
    t.match(await sessionStore.get(sessionId), { turns: 1, messages: [{ content: 'one' }] })
    // a run that does not end there (ended already: a retry whose first answer was lost) writes no turn
    const again = runStore.turnWithEnd!(sessionStore, sessionId, messages('two'), HOUR)!
    t.equal(await runStore.finish(run.record.runId, [event(1, 'run.completed')], completed(), HOUR, OWNER, again), null)
    t.equal(again.recorded, undefined)
    t.match(await sessionStore.get(sessionId), { turns: 1 })

    // a cancel asked for first: the run ends cancelled, its turn recorded all the same
    const cancelled = await started()
    t.match(await runStore.cancel(cancelled.record.runId, cancelledEnd(), HOUR), { outcome: 'requested' })
    const itsTurn = runStore.turnWithEnd!(sessionStore, cancelled.record.sessionId!, messages('kept'), HOUR)!
    t.match(await runStore.finish(cancelled.record.runId, [event(1, 'run.completed')], completed(), HOUR, OWNER, itsTurn), { status: 'cancelled' })
    t.equal(itsTurn.recorded, true)
    t.match(await sessionStore.get(cancelled.record.sessionId!), { turns: 1, messages: [{ content: 'kept' }] })

    // a session gone meanwhile: the run ends, its turn has nowhere to go
    const orphan = await started()
    await sessionStore.delete(orphan.record.sessionId!)
    const nowhere = runStore.turnWithEnd!(sessionStore, orphan.record.sessionId!, messages('lost'), HOUR)!
    t.match(await runStore.finish(orphan.record.runId, [], completed(), HOUR, OWNER, nowhere), { status: 'completed' })
    t.equal(nowhere.recorded, false)

    // concurrent ends, with and without turns, in one statement; two turns of one session cannot share one (an
    // UPDATE takes a row once): the later goes after, on its own
    const runs = await Promise.all(Array.from({ length: 3 }, async () => started()))
    const plain = await started()
    const shared = [newRun({ sessionId: runs[0]!.record.sessionId }), newRun({ sessionId: runs[0]!.record.sessionId }), newRun({ sessionId: runs[0]!.record.sessionId })]
    for (const r of shared) await runStore.create(r, { exclusive: false })
    const turns = [...runs, ...shared].map((r, i) => runStore.turnWithEnd!(sessionStore, r.record.sessionId!, messages(`t${i}`), HOUR)!)
    const { promise, release } = gate()
    control.held = promise
    queries.length = 0
    const first = runStore.finish(runs[0]!.record.runId, [], completed(), HOUR, OWNER, turns[0])
    await eventually(() => queries.length === 1)
    const rest = [...runs.slice(1), ...shared].map(async (r, i) =>
      runStore.finish(r.record.runId, [], completed(), HOUR, OWNER, turns[i + 1]).catch((error: Error) => error.message))
    const last = runStore.finish(plain.record.runId, [], completed(), HOUR, OWNER)
    await sleep(50)
    control.held = null
    // the third of one session's turns: its statement fails, and fails it alone
    let turnsWritten = 0
    control.fails = (text) => text.includes('turned AS') && ++turnsWritten === 4
    release()
    const ended = await Promise.all([first, ...rest, last])
    control.fails = () => false
    t.match(ended, [...Array(5).fill({ status: 'completed' }), 'Connection terminated unexpectedly', { status: 'completed' }])
    t.same(turns.map((turn) => turn.recorded), [...Array(5).fill(true), undefined])
    t.equal(queries.length, 4, 'the first alone, then the others in one statement but for the second and third of a session\'s turns')
    t.match(await runStore.get(shared[2]!.record.runId), { status: 'running' })
    t.match(await sessionStore.get(runs[0]!.record.sessionId!), { turns: 3, messages: [{ content: 't0' }, { content: 't3' }, { content: 't4' }] })
    t.match(await sessionStore.get(runs[1]!.record.sessionId!), { turns: 1, messages: [{ content: 't1' }] })
    t.match(await sessionStore.get(plain.record.sessionId!), { turns: 0 })
  })

  t.test('service: a run\'s session turn goes with its end; a session deleted meanwhile is warned of', async (t) => {
    const stores = postgresStores(pgUrl(), { schema: withPgSchema(t, admin) })
    // every statement this process sends, counted by its text
    const queries: string[] = []
    const query = pg.Client.prototype.query
    t.teardown(() => { pg.Client.prototype.query = query })
    pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
      queries.push(typeof config === 'string' ? config : (config as { text?: string } | null)?.text ?? '')
      return (query as (...args: unknown[]) => unknown).call(this, config, ...rest)
    } as typeof query
    const lines: string[] = []
    const stream = { write: (line: string) => { lines.push(line) } }
    const { promise, release } = gate()
    let started = false
    const waiter = { async run (input: unknown) { started = true; await promise; return { output: input } } }
    const { app } = build(t, { ...stores, agents: { echo: { run: async (input: unknown) => ({ output: input }) }, waiter }, logger: { level: 'warn', stream } as never })
    await app.ready()
    queries.length = 0
    const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'hi' } })
    t.equal(res.statusCode, 200)
    const sessionId = res.json().sessionId as string
    t.match(await stores.sessionStore.get(sessionId), { turns: 1, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hi' }] })
    t.same(queries.filter((text) => text.includes('messages = s.messages')).map((text) => text.includes('ended AS')), [true], 'the turn in the end\'s statement')

    const running = app.inject({ method: 'POST', url: '/v1/agents/waiter/runs', payload: { input: 'x', sessionId } })
    await eventually(() => started)
    t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${sessionId}` })).statusCode, 204)
    release()
    t.equal((await running).statusCode, 200)
    t.ok(lines.some((l) => l.includes('the session was gone when the run completed') && l.includes(sessionId)))
  })

  t.test('runs: another instance hears each event within 250 ms (p99 on loopback)', async (t) => {
    const schema = withPgSchema(t, admin)
    const a = new PostgresRunStore(pgUrl(), { schema })
    const b = new PostgresRunStore({ connectionString: pgUrl(), max: 2 }, { schema, pollIntervalMs: 60_000 })
    t.teardown(async () => { await a.close(); await b.close() })
    const run = newRun()
    await a.create(run, { exclusive: false })
    const heard = new Map<number, number>()
    const stop = b.watch(run.record.runId, (change) => { if (change.kind === 'events') heard.set(change.lastSeq, performance.now()) })
    t.teardown(stop)
    // once B listens (its first watch starts it), every event is timed
    let seq = 0
    await eventually(async () => { await a.append(run.record.runId, [event(++seq)], OWNER); await sleep(10); return heard.has(seq) }, 2_000)
    const delays: number[] = []
    while (delays.length < 100) {
      seq++
      const sent = performance.now()
      await a.append(run.record.runId, [event(seq)], OWNER)
      await eventually(() => heard.has(seq), 1_000)
      delays.push(heard.get(seq)! - sent)
    }
    t.ok(percentile(delays, 0.99) < 250, `p50 ${percentile(delays, 0.5).toFixed(1)} ms, p99 ${percentile(delays, 0.99).toFixed(1)} ms`)
    t.comment(`PostgreSQL cross-instance event notification: p50 ${percentile(delays, 0.5).toFixed(2)} ms, p99 ${percentile(delays, 0.99).toFixed(2)} ms`)
  })

  t.test('runs: a change nobody was told of is found by the poll; a lost listener is replaced', async (t) => {
    const schema = withPgSchema(t, admin)
    // the store's polls: held (not sent) while `pollsHeld` is set, counted while on their way
    let polling = 0
    let pollsHeld: Promise<void> | null = null
    const pool = new Proxy(newPool(t), {
      get (target, property) {
        if (property === 'query') {
          return async (query: string | { text: string }, values?: unknown[]) => {
            const text = typeof query === 'string' ? query : query.text
            const poll = text.includes('cancel_requested FROM') && text.includes('ANY(')
            if (!poll) return target.query(query as string, values)
            await pollsHeld
            polling++
            try { return await target.query(text, values) } finally { polling-- }
          }
        }
        const value = Reflect.get(target, property) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
    })
    const checkedOut: PoolClient[] = []
    pool.on('acquire', (client) => checkedOut.push(client))
    const store = new PostgresRunStore(pool, { schema, pollIntervalMs: 100 })
    const other = new PostgresRunStore(admin, { schema })
    t.teardown(async () => { await store.close(); await other.close() })
    const run = newRun()
    await store.create(run, { exclusive: false })
    const changes: number[] = []
    let cancels = 0
    const stop = store.watch(run.record.runId, (change) => { if (change.kind === 'events') changes.push(change.lastSeq); else cancels++ })
    t.teardown(stop)
    const listener = await eventually(() => checkedOut.find((client) => client.listenerCount('notification') > 0), 10_000)
    // written behind the store's back: no NOTIFY
    await admin.query(`UPDATE ${pg.escapeIdentifier(schema)}.fa_runs SET last_seq = 7, cancel_requested = true WHERE run_id = $1`, [run.record.runId])
    await eventually(() => changes.includes(7) && cancels === 1, 10_000)

    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1 AND pid <> pg_backend_pid()', [`LISTEN "${store.channel}"`])
    const listening = async (): Promise<number> => (await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1', [`LISTEN "${store.channel}"`])).rows[0].n
    await eventually(async () => await listening() === 0, 10_000)
    const watched = newRun()
    await other.create(watched, { exclusive: false })
    const heard: number[] = []
    const stopToo = store.watch(watched.record.runId, (change) => { if (change.kind === 'events') heard.push(change.lastSeq) })
    t.teardown(stopToo)
    await other.append(watched.record.runId, [event(1)], OWNER)
    await eventually(() => heard.includes(1), 10_000)
    await eventually(async () => await listening() === 1, 10_000)
    listener.emit('error', new Error('a late error from the dropped connection'))
    // no poll on its way nor any to come until it is heard: what is heard was notified (whatever the machine's load)
    let release!: () => void
    pollsHeld = new Promise((resolve) => { release = resolve })
    t.teardown(() => release())
    await new Promise((resolve) => setImmediate(resolve))
    await eventually(() => polling === 0, 10_000, 'no poll on its way')
    await other.append(watched.record.runId, [event(2)], OWNER)
    await eventually(() => heard.includes(2), 10_000, 'heard while the polls are held')
    release()
    t.pass('listening again: heard by notification')
    t.equal(await listening(), 1)
  })

  t.test('runs: instances hear of runs to claim by NOTIFY, and claiming at once never share a run', async (t) => {
    const schema = withPgSchema(t, admin)
    const pool = newPool(t)
    const checkedOut: PoolClient[] = []
    pool.on('acquire', (client) => checkedOut.push(client))
    // polls a minute apart: what is heard within the test was notified
    const a = new PostgresRunStore(pgUrl(), { schema, pollIntervalMs: 60_000 })
    const b = new PostgresRunStore(pool, { schema, pollIntervalMs: 60_000 })
    t.teardown(async () => { await a.close(); await b.close() })
    let heardA = 0
    let heardB = 0
    const stopA = a.watchQueue(() => { heardA++ })
    const stopB = b.watchQueue(() => { heardB++ })
    t.teardown(() => { stopA(); stopB() })
    const listening = async (): Promise<number> => (await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1', [`LISTEN "${a.channel}"`])).rows[0].n
    await eventually(async () => await listening() === 2, 10_000)
    const queued = (sessionId: string | null = null): NewRun => {
      const run = newRun({ status: 'queued', background: true, sessionId })
      delete run.record.startedAt
      run.detachable = true
      return run
    }
    const told = async (write: () => Promise<unknown>, what: string): Promise<void> => {
      const [beforeA, beforeB] = [heardA, heardB]
      await write()
      t.equal(heardA, beforeA + 1, `${what}: its own store's watchers at once`)
      await eventually(() => heardB > beforeB, 10_000)
      await sleep(30)
      t.equal(heardA, beforeA + 1, `${what}: not its echo`)
    }
    await told(() => a.create(queued(), { exclusive: false }), 'a queued background run')
    const holder = newRun({ sessionId: 'busy' })
    await a.create(holder, { exclusive: true })
    await told(() => a.create(queued('busy'), { exclusive: false }), 'a queued run whose session is busy')
    heardA = heardB = 0
    await a.create(newRun({ status: 'queued', sessionId: null }), { exclusive: false })
    const unrelated = newRun({ sessionId: 'idle' })
    await a.create(unrelated, { exclusive: true })
    await a.finish(unrelated.record.runId, [event(1, 'run.completed')], cancelledEnd(), HOUR, OWNER)
    await sleep(50)
    t.same([heardA, heardB], [0, 0], 'a run that is not detachable, a freed session nothing waits for: nothing to claim')
    await told(() => a.finish(holder.record.runId, [event(1, 'run.completed')], cancelledEnd(), HOUR, OWNER), 'a session a queued run waits for is freed')
    const [claimed] = await b.claim(lease(OTHER, 60_000), new Date().toISOString(), 1)
    await told(() => a.requeue(claimed!.runId, { owner: OTHER }, 'SHUTDOWN', cancelledEnd(), HOUR), 'a requeued run')

    // fifty runs, two instances claiming five at a time at once: each run goes to one
    for (let i = 0; i < 50; i++) await a.create(queued(i % 5 === 0 ? `s-${i}` : null), { exclusive: false })
    const owners = new Map<string, string>()
    const claimAll = async (store: PostgresRunStore, owner: string): Promise<void> => {
      for (;;) {
        const runs = await store.claim(lease(owner, 60_000), new Date().toISOString(), 5)
        if (runs.length === 0) return
        for (const run of runs) {
          t.notOk(owners.has(run.runId), `${run.runId} claimed once`)
          owners.set(run.runId, owner)
        }
      }
    }
    await Promise.all([claimAll(a, OWNER), claimAll(b, OTHER), claimAll(a, 'instance-c')])
    t.equal(owners.size, 52, 'every queued detachable run, claimed once')

    // B's listening connection is lost: its next claim listens again (the worker claims on a timer too)
    const listener = checkedOut.find((client) => client.listenerCount('notification') > 0) as PoolClient & { processID: number }
    // the server drops it before pg's client hears so: the claim is made once B's client has seen its end
    const ended = new Promise((resolve) => listener.once('end', resolve))
    await admin.query('SELECT pg_terminate_backend($1)', [listener.processID])
    await eventually(async () => await listening() < 2, 10_000)
    await ended
    t.same(await b.claim(lease(OTHER), new Date().toISOString(), 1), [])
    await eventually(async () => await listening() === 2, 10_000)
    await told(() => a.create(queued(), { exclusive: false }), 'after listening again')
  })

  t.test('runs: purge deletes at most a batch of expired runs, their logs with them', async (t) => {
    const schema = withPgSchema(t, admin)
    const store = new PostgresRunStore(admin, { schema })
    t.teardown(() => store.close())
    const kept = newRun()
    await store.create(kept, { exclusive: false })
    for (let i = 0; i < 7; i++) {
      const run = newRun()
      await store.create(run, { exclusive: false })
      await store.append(run.record.runId, [event(1), event(2)], OWNER)
      await store.finish(run.record.runId, [event(3, 'run.failed')], cancelledEnd(), 1, OWNER)
    }
    const later = Date.now() + 1_000
    t.same([await store.purge(later, 3), await store.purge(later, 3), await store.purge(later, 3), await store.purge(later, 3)], [3, 3, 1, 0])
    const table = (name: string): string => `${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(name)}`
    t.equal((await admin.query(`SELECT count(*)::int AS n FROM ${table('fa_run_events')}`)).rows[0].n, 0)
    t.same((await admin.query(`SELECT run_id FROM ${table('fa_runs')}`)).rows, [{ run_id: kept.record.runId }])
  })

  t.test('runs: a session lock is taken over from a run that ended, or that is gone, even when that happens mid-take', async (t) => {
    const schema = withPgSchema(t, admin)
    const table = (name: string): string => `${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(name)}`
    let race: (() => Promise<unknown>) | null = null
    // runs the race once, just before the store reads who holds the lock it could not take
    const { pool } = spiedPool(t, async (text) => {
      if (race !== null && text.includes('LEFT JOIN')) {
        const go = race
        race = null
        await go()
      }
    })
    const store = new PostgresRunStore(pool, { schema })
    t.teardown(() => store.close())
    const holder = newRun({ sessionId: 's1' })
    await store.create(holder, { exclusive: true })

    // its holder ends (without giving the lock back) after the take was refused: tried again, taken over
    race = () => admin.query(`UPDATE ${table('fa_runs')} SET status = 'failed' WHERE run_id = $1`, [holder.record.runId])
    const second = newRun({ sessionId: 's1' })
    t.same(await store.create(second, { exclusive: true }), { outcome: 'created' })
    t.equal(race, null, 'the race ran')

    // the lock is given back after the take was refused: tried again, taken
    race = () => admin.query(`DELETE FROM ${table('fa_run_sessions')} WHERE session_id = 's1'`)
    const third = newRun({ sessionId: 's1' })
    t.same(await store.create(third, { exclusive: true }), { outcome: 'created' })

    // a lock whose run is gone is removed and taken
    await admin.query(`DELETE FROM ${table('fa_runs')} WHERE run_id = $1`, [third.record.runId])
    t.same(await store.create(newRun({ sessionId: 's1' }), { exclusive: true }), { outcome: 'created' })
    await admin.query(`UPDATE ${table('fa_run_sessions')} SET run_id = 'gone' WHERE session_id = 's1'`)
    const queued = newRun({ sessionId: 's1', status: 'queued' })
    await store.create(queued, { exclusive: false })
    t.match(await store.start(queued.record.runId, new Date().toISOString(), lease()), { outcome: 'started' }, 'start takes it over too')
  })

  t.test('runs: lease calls with nothing to renew, or an id PostgreSQL cannot hold, ask nothing and change nothing', async (t) => {
    const { pool, queries } = spiedPool(t)
    const store = new PostgresRunStore(pool, { schema: withPgSchema(t, admin) })
    t.teardown(() => store.close())
    const end: RunEnd = { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'INSTANCE_LOST', message: 'lost' } }
    t.same(await store.renew(OWNER, [], Date.now() + HOUR), [])
    t.same(await store.renew(OWNER, ['nul\u0000id'], Date.now() + HOUR), [])
    t.equal(await store.requeue('nul\u0000id', { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), null)
    t.equal(await store.abandon('nul\u0000id', Date.now(), end, HOUR), null)
    t.same(queries, [], 'no round trip')
  })

  t.test('runs: a statement failing in a transaction rolls it back and gives up its connection', async (t) => {
    const schema = withPgSchema(t, admin)
    const pool = newPool(t)
    const store = new PostgresRunStore(pool, { schema })
    t.teardown(() => store.close())
    const run = newRun({ status: 'queued' })
    await store.create(run, { exclusive: false })
    await admin.query(`ALTER TABLE ${pg.escapeIdentifier(schema)}.fa_runs RENAME TO fa_runs_elsewhere`)
    await t.rejects(store.cancel(run.record.runId, cancelledEnd(), HOUR), { code: '42P01' })
    await t.rejects(store.start(run.record.runId, new Date().toISOString(), lease()), { code: '42P01' })
    t.equal(pool.totalCount - pool.idleCount, 0, 'no connection left checked out')
  })

  t.test('runs: an unreachable server rejects calls, watching waits for it, and closing is clean', async (t) => {
    const store = new PostgresRunStore(UNREACHABLE, { pollIntervalMs: 20 })
    await t.rejects(store.get('r1'), { code: 'ECONNREFUSED' })
    const stop = store.watch('r1', () => {})
    const stopSession = store.watchSession('s1', () => {})
    await sleep(80)
    stop()
    stopSession()
    await store.close()
  })

  t.test('runs: the store takes one listening connection of a pool you pass, and gives it back on close', async (t) => {
    const pool = newPool(t)
    const store = new PostgresRunStore(pool, { schema: withPgSchema(t, admin) })
    await store.probe()
    t.equal(store.ownsConnection, false, 'a pool you pass is yours to end')
    const stop = store.watch('r1', () => {})
    await eventually(() => pool.totalCount - pool.idleCount === 1, 10_000)
    stop()
    await store.close()
    await store.close()
    t.equal(pool.totalCount - pool.idleCount, 0)
    t.equal(pool.ended, false)
    const closed = { code: 'FA_STORE_CLOSED' }
    await t.rejects(store.create(newRun(), { exclusive: false }), closed)
    await t.rejects(store.get('r1'), closed)
    await t.rejects(store.spec('r1'), closed)
    await t.rejects(store.events('r1', 0, 1), closed)
    await t.rejects(store.append('r1', [event(1)], OWNER), closed)
    await t.rejects(store.finish('r1', [], cancelledEnd(), HOUR, OWNER), closed)
    await t.rejects(store.start('r1', new Date().toISOString(), lease()), closed)
    await t.rejects(store.cancel('r1', cancelledEnd(), HOUR), closed)
    await t.rejects(store.list({ limit: 1 }), closed)
    await t.rejects(store.purge(Date.now(), 1), closed)
    t.throws(() => new PostgresRunStore(pool, { pollIntervalMs: -1 }), { name: 'RangeError', message: /pollIntervalMs/ })
    t.throws(() => new PostgresRunStore(pool, { schema: 'bad"schema' }), { name: 'TypeError', message: /schema/ })
    t.equal(new PostgresRunStore(pool).channel.length, 24)
  })
}
