import { existsSync } from 'node:fs'
import { join, relative } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import Database from 'better-sqlite3'
import t from 'tap'
import {
  SqliteApprovalStore, SqliteAuditStore, SqliteConnection, SqliteIdempotencyStore, SqliteSessionStore, sqliteStores
} from '../../lib/stores/sqlite.js'
import type { NewRun, RunEnd, RunRecord, StoreSet } from '../../lib/stores/types.js'
import { auditCount, build, eventually, idempotencyRecord, tapTest } from '../helper.js'
import { SqliteRunStore } from '../../lib/stores/sqlite-runs.js'
import { approval, auditEntry, factoriesOf, storeConformance } from '../../lib/testing/conformance.js'
import { OTHER, OWNER, event, lease, newRun, runStoreConformance } from '../../lib/testing/runs.js'

function closeAll (stores: Required<StoreSet>): Promise<unknown> {
  return Promise.all([
    stores.auditStore.close?.(), stores.sessionStore.close?.(), stores.approvalStore.close?.(),
    stores.checkpointStore.close?.(), stores.idempotency.store.close?.(), stores.runStore.close?.()
  ])
}

storeConformance(tapTest(t), factoriesOf((t) => sqliteStores(join(t.testdir(), 'stores.db'))))

// the twin opens the same file through a connection of its own, as another process would
const files = new WeakMap<object, string>()
runStoreConformance(tapTest(t), {
  store: async (t) => {
    const file = join(t.testdir(), 'runs.db')
    const store = sqliteStores(file).runStore
    files.set(store, file)
    // opened (WAL set, tables made) before a test takes a lease of a few ms: on a busy disk that alone takes longer
    await store.get('warm-up')
    return store
  },
  twin: (_t, first) => new SqliteRunStore(files.get(first)!)
})

t.test('data survives closing and opening the file again', async (t) => {
  const file = join(t.testdir(), 'stores.db')
  const first = sqliteStores(file)
  await first.auditStore.append([auditEntry(0, { agent: 'echo' }), auditEntry(1)])
  await first.sessionStore.create({ id: 's1', agent: 'echo', principal: 'p', metadata: { a: 1 } }, 60_000)
  await first.sessionStore.appendTurn('s1', [{ role: 'user', content: 'hi', runId: 'r1', at: new Date().toISOString() }], 60_000)
  await first.approvalStore.create(approval('a1'))
  await first.approvalStore.decide('a1', { approved: true, comment: null, decidedBy: 'bob', decidedAt: new Date().toISOString() })
  await first.checkpointStore.save({ runId: 'r1', agent: 'echo', sessionId: 's1', state: { step: 'one' } })
  const reservation = await first.idempotency.store.reserve('k1', 'fp', { ttlMs: 60_000, leaseMs: 60_000 }) as { token: string }
  await first.idempotency.store.complete('k1', reservation.token, { status: 200, body: '{}', contentType: 'application/json' }, 60_000)
  await closeAll(first)
  t.notOk(existsSync(`${file}-wal`), 'the last close checkpoints the WAL: the file was really closed')

  const again = sqliteStores(`file:${relative(process.cwd(), file)}`)
  t.teardown(() => closeAll(again))
  t.equal(await auditCount(again.auditStore), 2)
  t.same((await again.auditStore.query({ limit: 10, agent: 'echo' })).entries.map((e) => e.id), ['entry-0'])
  t.match(await again.sessionStore.get('s1'), { turns: 1, metadata: { a: 1 }, messages: [{ content: 'hi' }] })
  t.match(await again.approvalStore.get('a1'), { status: 'approved', decision: { decidedBy: 'bob' } })
  t.match(await again.checkpointStore.load('r1'), { step: 1, state: { step: 'one' } })
  t.match(await idempotencyRecord(again.idempotency.store, 'k1'), { state: 'completed', response: { status: 200 } })
})

t.test('a Database you pass is used as is and never closed', async (t) => {
  const db = new Database(join(t.testdir(), 'mine.db'))
  t.teardown(() => db.close())
  const stores = sqliteStores(db, { tablePrefix: 'app_' })
  await stores.auditStore.append([auditEntry(0)])
  await stores.sessionStore.list({ limit: 1 })
  await closeAll(stores)
  await closeAll(stores)
  t.equal(db.open, true)
  t.equal(db.pragma('journal_mode', { simple: true }), 'delete', 'its pragmas are left alone')
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all()
  t.same(tables, ['app_audit', 'app_sessions'], 'tables are created on first use, with the prefix')
  await t.rejects(auditCount(stores.auditStore), { code: 'FA_STORE_CLOSED' })
})

t.test('an opened file is in WAL mode and closed with the last store using it', async (t) => {
  const file = join(t.testdir(), 'owned.db')
  const connection = new SqliteConnection(pathToFileURL(file).href)
  const audit = new SqliteAuditStore(connection)
  const sessions = new SqliteSessionStore(connection)
  const unused = new SqliteApprovalStore(connection)
  await audit.append([auditEntry(0)])
  await sessions.create({ id: 's1', agent: null, principal: 'p', metadata: {} }, 60_000)
  const probe = {}
  const db = connection.acquire(probe) as Database.Database
  await connection.release(probe)
  t.equal(db.pragma('journal_mode', { simple: true }), 'wal')
  t.equal(db.pragma('synchronous', { simple: true }), 1, 'NORMAL')
  await audit.close()
  t.equal(db.open, true, 'still used by the session store')
  t.equal(await auditCount(audit).catch((error: { code: string }) => error.code), 'FA_STORE_CLOSED')
  t.match(await sessions.get('s1'), { id: 's1' })
  await sessions.close()
  t.equal(db.open, false)
  await unused.close()
})

t.test('stores on one file in two connections see each other, waiters too', async (t) => {
  const file = join(t.testdir(), 'shared.db')
  const a = new SqliteApprovalStore(file)
  const b = new SqliteApprovalStore(file)
  t.teardown(async () => { await a.close(); await b.close() })
  await a.create(approval('a1'))
  // the poller is unref()ed (it must not hold a process open): something else has to, as a server would
  const keepAlive = setInterval(() => {}, 1000)
  t.teardown(() => clearInterval(keepAlive))
  const waiting = a.waitForDecision('a1', new AbortController().signal)
  await sleep(20)
  const started = Date.now()
  t.match(await b.decide('a1', { approved: false, comment: 'no', decidedBy: 'carol', decidedAt: new Date().toISOString() }), { outcome: 'decided' })
  t.match(await waiting, { status: 'rejected', decision: { decidedBy: 'carol' } })
  t.ok(Date.now() - started < 1000, 'within a second (polling)')
})

t.test('a poll that fails leaves the waiter waiting', async (t) => {
  const db = new Database(':memory:')
  const store = new SqliteApprovalStore(db)
  t.teardown(() => store.close())
  await store.create(approval('a1'))
  const controller = new AbortController()
  const waiting = store.waitForDecision('a1', controller.signal)
  await sleep(10)
  db.close()
  waiting.catch(() => {}) // settled below, after polls have failed
  await sleep(300)
  const reason = new Error('gave up')
  controller.abort(reason)
  await t.rejects(waiting, reason)
})

t.test('an unopenable file rejects with the underlying error', async (t) => {
  const store = new SqliteAuditStore(join(t.testdir(), 'missing', 'dir', 'x.db'))
  await t.rejects(store.count(), { message: /directory does not exist/ })
  await store.close()
})

t.test('bad arguments throw a TypeError naming the problem', async (t) => {
  t.throws(() => sqliteStores(42 as unknown as string), { name: 'TypeError', message: /filename, a file: URL or a better-sqlite3 Database/ })
  t.throws(() => sqliteStores(''), TypeError)
  t.throws(() => sqliteStores({} as unknown as string), TypeError)
  t.throws(() => new SqliteAuditStore(':memory:', { tablePrefix: 'bad-prefix' }), { name: 'TypeError', message: /tablePrefix/ })
  const stores = sqliteStores('file::memory:?cache=private')
  t.equal(await auditCount(stores.auditStore), 0)
  await closeAll(stores)
})

const HOUR = 3_600_000
const cancelledEnd = (): RunEnd => ({ status: 'cancelled', endedAt: new Date().toISOString(), error: { code: 'CANCELLED', message: 'The run was cancelled' } })

t.test('runs: the tables, and the indexes their queries use, are made on first use', async (t) => {
  const db = new Database(join(t.testdir(), 'indexes.db'))
  t.teardown(() => db.close())
  const store = new SqliteRunStore(db, { tablePrefix: 'app_' })
  t.teardown(() => store.close())
  t.equal(await store.get('warm-up'), null)
  const indexes = db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'app_runs' AND sql IS NOT NULL ORDER BY name").pluck().all()
  t.same(indexes, ['app_runs_agent', 'app_runs_expires', 'app_runs_lease', 'app_runs_live', 'app_runs_principal', 'app_runs_session', 'app_runs_status', 'app_runs_waiting'])
  t.same(db.prepare("PRAGMA index_list('app_runs')").all().map((row) => (row as { origin: string }).origin).sort(), ['c', 'c', 'c', 'c', 'c', 'c', 'c', 'c', 'u'], 'and run_id is unique')
  t.same(db.prepare("PRAGMA index_list('app_run_events')").all().map((row) => (row as { origin: string }).origin), ['pk'], 'events by (run_id, seq)')
  t.same(db.prepare("PRAGMA index_list('app_run_sessions')").all().map((row) => (row as { origin: string }).origin), ['pk'])
  const plan = (sql: string): string => db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all().map((row) => (row as { detail: string }).detail).join('; ')
  t.match(plan('SELECT run_id FROM app_runs WHERE expires_at <= 1 ORDER BY expires_at LIMIT 5'), /USING (COVERING )?INDEX app_runs_expires/)
  t.match(plan("SELECT * FROM app_runs WHERE run_id = 'x'"), /USING INDEX sqlite_autoindex_app_runs_1/)
  for (const [column, index] of [['session_id', 'session'], ['agent', 'agent'], ['status', 'status'], ['principal', 'principal']]) {
    t.match(plan(`SELECT * FROM app_runs WHERE ${column} = 'x' AND created_seq < 9 ORDER BY created_seq DESC LIMIT 5`),
      new RegExp(`USING INDEX app_runs_${index}`), `lists by ${column} use their index`)
  }
  t.notMatch(plan('SELECT * FROM app_runs WHERE created_seq < 9 ORDER BY created_seq DESC LIMIT 5'), /SCAN app_runs$|TEMP B-TREE/, 'the whole list walks the table backwards')
  // the queries of leases and the queue, as the store words them
  t.match(plan("SELECT * FROM app_runs WHERE status = 'running' AND lease_until < 9 ORDER BY lease_until LIMIT 5"),
    /^SEARCH app_runs USING INDEX app_runs_lease \(status=\? AND lease_until<\?\)$/, 'lapsed leases: the running runs\' index, in order')
  t.match(plan("SELECT 1 FROM app_runs WHERE session_id = 'x' AND status = 'queued' AND detachable = 1 LIMIT 1"),
    /USING COVERING INDEX app_runs_waiting/, 'a queued run waiting for a session')
  t.match(plan("SELECT * FROM app_runs WHERE status = 'queued' AND detachable = 1 AND created_seq > 0 ORDER BY created_seq LIMIT 5"),
    /^SEARCH app_runs USING INDEX app_runs_status \(status=\? AND created_seq>\?\)$/, 'the queue, oldest first')
  // a page of a run's events asks whether the run is there: from the index, not the row (past its result)
  t.match(plan('SELECT 1 FROM app_runs INDEXED BY "app_runs_live" WHERE run_id = \'x\' AND (expires_at IS NULL OR expires_at > 1)'),
    /^SEARCH app_runs USING COVERING INDEX app_runs_live \(run_id=\?\)$/, 'whether a run is there')
})

t.test('runs: closing the file and opening it again keeps the runs and their logs', async (t) => {
  const file = join(t.testdir(), 'runs.db')
  const first = new SqliteRunStore(file)
  const run = newRun({ sessionId: 'kept' })
  const id = run.record.runId
  await first.create(run, { exclusive: true })
  await first.append(id, [event(1, 'run.started'), event(2)], OWNER)
  const ended = await first.finish(id, [event(3, 'run.failed')], cancelledEnd(), HOUR, OWNER)
  const queued = newRun({ sessionId: 'kept', status: 'queued' })
  await first.create(queued, { exclusive: false })
  await first.close()
  t.notOk(existsSync(`${file}-wal`), 'the file was really closed')

  const again = new SqliteRunStore(`file:${relative(process.cwd(), file)}`)
  t.teardown(() => again.close())
  t.same(await again.get(id), ended)
  t.same(await again.events(id, 0, 10), [event(1, 'run.started'), event(2), event(3, 'run.failed')])
  t.same(await again.spec(id), run.spec)
  t.same((await again.listBySession('kept', { limit: 10 })).runs.map((r) => r.runId), [queued.record.runId, id])
  t.match(await again.start(queued.record.runId, new Date().toISOString(), lease()), { outcome: 'started' }, 'the session was given back before the restart')
})

t.test('runs: purge deletes at most a batch of expired runs, their logs with them', async (t) => {
  const file = join(t.testdir(), 'purge.db')
  const store = new SqliteRunStore(file)
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
  const db = new Database(file, { readonly: true })
  t.teardown(() => db.close())
  t.equal(db.prepare('SELECT count(*) FROM fa_run_events').pluck().get(), 0, 'no event left of a purged run')
  t.same(db.prepare('SELECT run_id FROM fa_runs').pluck().all(), [kept.record.runId])
})

t.test('runs: a lock whose run ended without giving it back, or whose run is gone, is free', async (t) => {
  const db = new Database(join(t.testdir(), 'locks.db'))
  t.teardown(() => db.close())
  const store = new SqliteRunStore(db, { pollIntervalMs: 20 })
  t.teardown(() => store.close())
  const first = newRun({ sessionId: 'locked' })
  await store.create(first, { exclusive: true })
  let freed = 0
  const stop = store.watchSession('locked', () => { freed++ })
  t.teardown(stop)
  // ended behind the store's back (as an instance that died mid-write would leave it): the poll finds it free
  db.prepare("UPDATE fa_runs SET status = 'failed' WHERE run_id = ?").run(first.record.runId)
  await eventually(() => freed > 0, 10_000)
  const second = newRun({ sessionId: 'locked' })
  t.same(await store.create(second, { exclusive: true }), { outcome: 'created' }, 'taken over')
  db.prepare('DELETE FROM fa_runs WHERE run_id = ?').run(second.record.runId)
  freed = 0
  await eventually(() => freed > 0, 10_000)
  t.same(await store.create(newRun({ sessionId: 'locked' }), { exclusive: true }), { outcome: 'created' }, 'a lock without its run is taken over')
})

t.test('runs: a poll that fails leaves the watchers watching', async (t) => {
  const db = new Database(':memory:')
  const store = new SqliteRunStore(db, { pollIntervalMs: 10 })
  const run = newRun()
  await store.create(run, { exclusive: false })
  const stop = store.watch(run.record.runId, () => {})
  db.close()
  await sleep(50)
  stop()
  await store.close()
  t.pass('no poll failure escaped')
})

t.test('runs: a closed store refuses every call; bad options are named', async (t) => {
  const store = new SqliteRunStore(':memory:')
  const run = newRun()
  await store.create(run, { exclusive: false })
  await store.close()
  await store.close()
  const closed = { code: 'FA_STORE_CLOSED' }
  await t.rejects(store.create(newRun(), { exclusive: false }), closed)
  await t.rejects(store.get(run.record.runId), closed)
  await t.rejects(store.spec(run.record.runId), closed)
  await t.rejects(store.events(run.record.runId, 0, 1), closed)
  await t.rejects(store.append(run.record.runId, [event(1)], OWNER), closed)
  await t.rejects(store.finish(run.record.runId, [], cancelledEnd(), HOUR, OWNER), closed)
  await t.rejects(store.start(run.record.runId, new Date().toISOString(), lease()), closed)
  await t.rejects(store.cancel(run.record.runId, cancelledEnd(), HOUR), closed)
  await t.rejects(store.list({ limit: 1 }), closed)
  await t.rejects(store.purge(Date.now(), 1), closed)
  await t.rejects(store.claim(lease(), new Date().toISOString(), 1), closed)
  await t.rejects(store.renew(OWNER, [run.record.runId], Date.now()), closed)
  await t.rejects(store.lapsed(Date.now(), 1), closed)
  await t.rejects(store.requeue(run.record.runId, { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), closed)
  await t.rejects(store.abandon(run.record.runId, Date.now(), cancelledEnd(), HOUR), closed)
  let heard = 0
  store.watchQueue(() => { heard++ })()
  t.equal(heard, 0, 'a closed store has no queue to watch')
  t.throws(() => new SqliteRunStore(':memory:', { pollIntervalMs: 0 }), { name: 'RangeError', message: /pollIntervalMs/ })
  t.throws(() => new SqliteRunStore(':memory:', { tablePrefix: 'bad-prefix' }), { name: 'TypeError', message: /tablePrefix/ })
})

/** A queued detachable run (a background run), as the service stores one. */
function queuedRun (extra: Partial<RunRecord> = {}): NewRun {
  const run = newRun({ status: 'queued', background: true, ...extra })
  delete run.record.startedAt
  run.detachable = true
  return run
}

t.test('runs: another process hears of claimable runs by polling one counter, only while it watches', async (t) => {
  const file = join(t.testdir(), 'queue.db')
  const a = new SqliteRunStore(file, { pollIntervalMs: 10 })
  const b = new SqliteRunStore(file, { pollIntervalMs: 10 })
  t.teardown(async () => { await a.close(); await b.close() })
  let onA = 0
  let onB = 0
  const stopA = a.watchQueue(() => { onA++ })
  const stopB = b.watchQueue(() => { onB++ })
  t.teardown(() => { stopA(); stopB() })
  const quiet = async (what: string): Promise<void> => {
    const before = [onA, onB]
    await sleep(60)
    t.same([onA, onB], before, what)
  }

  await a.create(queuedRun(), { exclusive: false })
  t.equal(onA, 1, 'this store\'s own write is heard at once')
  await eventually(() => onB > 0, 10_000)
  await quiet('heard once each')

  const waiting = newRun({ status: 'queued' })
  delete waiting.record.startedAt
  await a.create(waiting, { exclusive: false })
  const holder = newRun({ sessionId: 'queue-session' })
  await a.create(holder, { exclusive: true })
  await a.finish(holder.record.runId, [event(1, 'run.completed')], cancelledEnd(), HOUR, OWNER)
  await quiet('a run not detachable, and a session nobody queued for, wake no claimer')

  const second = newRun({ sessionId: 'queue-session' })
  await a.create(second, { exclusive: true })
  await b.create(queuedRun({ sessionId: 'queue-session' }), { exclusive: false })
  await eventually(() => onA === 2 && onB === 2, 10_000)
  await a.finish(second.record.runId, [event(1, 'run.completed')], cancelledEnd(), HOUR, OWNER)
  t.equal(onA, 3, 'a session a queued run waits for, given back')
  await eventually(() => onB === 3, 10_000)

  const claimed = await b.claim(lease(OTHER), new Date().toISOString(), 10)
  t.equal(claimed.length, 2)
  t.match(await a.requeue(claimed[0]!.runId, { owner: OTHER }, 'SHUTDOWN', cancelledEnd(), HOUR), { status: 'queued', attempt: 2 })
  t.equal(onA, 4, 'a requeue')
  await eventually(() => onB === 4, 10_000)
  await quiet('nothing more')

  stopB()
  await a.create(queuedRun(), { exclusive: false })
  await sleep(60)
  t.equal(onB, 4, 'no longer watching: not told')
  // a second watcher, then the first one stops: the second still hears; close stops both
  let other = 0
  const stopOther = b.watchQueue(() => { other++ })
  const stopAgain = b.watchQueue(() => {})
  stopAgain()
  await a.create(queuedRun(), { exclusive: false })
  await eventually(() => other === 1, 10_000)
  await b.close()
  await a.create(queuedRun(), { exclusive: false })
  await sleep(60)
  t.equal(other, 1, 'a closed store tells nothing')
  stopOther()
})

t.test('runs: a queue counter that cannot be read is read again at the next tick', async (t) => {
  const db = new Database(':memory:')
  const store = new SqliteRunStore(db, { pollIntervalMs: 10 })
  await store.create(queuedRun(), { exclusive: false })
  db.close()
  let heard = 0
  const stop = store.watchQueue(() => { heard++ })
  await sleep(50)
  stop()
  await store.close()
  t.equal(heard, 0, 'no poll failure escaped, nothing was told')
})

t.test('runs: claim steps over queued runs whose session is busy, page after page', async (t) => {
  const store = new SqliteRunStore(join(t.testdir(), 'pages.db'))
  t.teardown(() => store.close())
  const busy = newRun({ sessionId: 'busy' })
  await store.create(busy, { exclusive: true })
  for (let i = 0; i < 40; i++) await store.create(queuedRun({ sessionId: 'busy' }), { exclusive: false })
  const free = queuedRun({ sessionId: null })
  await store.create(free, { exclusive: false })
  t.same((await store.claim(lease(), new Date().toISOString(), 1)).map((r) => r.runId), [free.record.runId])
  t.same(await store.claim(lease(), new Date().toISOString(), 5), [])
})

t.test('runs: a run without a lease is never lapsed; ids a store cannot keep are held by nobody', async (t) => {
  const store = new SqliteRunStore(join(t.testdir(), 'leases.db'))
  t.teardown(() => store.close())
  const run = newRun()
  await store.create(run, { exclusive: false })
  const id = run.record.runId
  await store.finish(id, [event(1, 'run.failed')], cancelledEnd(), HOUR, OWNER)
  const again = newRun({ runId: id })
  again.lease = null
  again.detachable = true
  t.match(await store.reopen(again, { exclusive: false }), { outcome: 'reopened', record: { status: 'running', attempt: 2 } })
  t.same(await store.lapsed(Date.now() + HOUR, 10), [])
  t.equal(await store.requeue(id, { lapsedBefore: Date.now() + HOUR }, 'INSTANCE_LOST', cancelledEnd(), HOUR), null)
  t.equal(await store.abandon(id, Date.now() + HOUR, cancelledEnd(), HOUR), null)
  await t.rejects(store.append(id, [], OWNER), { code: 'FA_RUN_LEASE_LOST' }, 'nobody holds it')
  const lone = 'lone \ud800'
  t.same(await store.renew(OWNER, [lone], Date.now()), [])
  t.equal(await store.requeue(lone, { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), null)
  t.equal(await store.abandon(lone, Date.now(), cancelledEnd(), HOUR), null)
})

t.test('runs: the lapsed runs of one process are found, requeued and claimed by another', async (t) => {
  const file = join(t.testdir(), 'lapse.db')
  const a = new SqliteRunStore(file)
  const b = new SqliteRunStore(file)
  t.teardown(async () => { await a.close(); await b.close() })
  const run = newRun({ sessionId: 'lapse' })
  run.lease = lease(OWNER, 20)
  run.detachable = true
  await a.create(run, { exclusive: true })
  const id = run.record.runId
  await a.append(id, [event(1, 'run.started')], OWNER)
  const cancelling = newRun()
  cancelling.lease = lease(OWNER, 20)
  cancelling.detachable = true
  await a.create(cancelling, { exclusive: false })
  await a.cancel(cancelling.record.runId, cancelledEnd(), HOUR)
  await sleep(40)
  const found = await b.lapsed(Date.now(), 10)
  t.match(found.find((lapsed) => lapsed.record.runId === id), { record: { runId: id, lastSeq: 1 }, detachable: true, cancelRequested: false })
  t.match(found.find((lapsed) => lapsed.record.runId === cancelling.record.runId), { detachable: true, cancelRequested: true }, 'a cancel asked for in the other process')
  t.match(await b.requeue(cancelling.record.runId, { lapsedBefore: Date.now() }, 'INSTANCE_LOST', cancelledEnd(), HOUR), { status: 'cancelled', attempt: 1 },
    'and so ended cancelled rather than requeued')
  t.same(await a.renew(OWNER, [id], Date.now() + HOUR), [id], 'a lapsed lease nobody took over is still its owner\'s')
  t.same(await b.lapsed(Date.now(), 10), [])
  await sleep(1)
  t.equal(await b.requeue(id, { lapsedBefore: Date.now() }, 'INSTANCE_LOST', cancelledEnd(), HOUR), null, 'renewed meanwhile')
  t.match(await b.requeue(id, { owner: OWNER }, 'SHUTDOWN', cancelledEnd(), HOUR), { status: 'queued', attempt: 2, lastSeq: 2 })
  t.same(await a.lapsed(Date.now() + HOUR, 10), [], 'a queued run has no lease')
  t.same((await b.claim(lease(OTHER), new Date().toISOString(), 10)).map((r) => r.runId), [id])
  await t.rejects(a.append(id, [event(3)], OWNER), { code: 'FA_RUN_LEASE_LOST' })
  await t.rejects(a.finish(id, [event(3, 'run.completed')], cancelledEnd(), HOUR, OWNER), { code: 'FA_RUN_LEASE_LOST' })
  t.match(await b.finish(id, [event(3, 'run.started'), event(4, 'run.failed')], cancelledEnd(), HOUR, OTHER), { status: 'cancelled', lastSeq: 4 })
  t.same((await a.events(id, 0, 10)).map((e) => e.type), ['run.started', 'run.requeued', 'run.started', 'run.failed'])
})

t.test('runs: a health probe opens the file; a store knows whether it owns its connection', async (t) => {
  const owned = new SqliteRunStore(join(t.testdir(), 'probe.db'))
  await owned.probe()
  t.equal(owned.ownsConnection, true)
  await owned.close()
  const db = new Database(':memory:')
  const lent = new SqliteRunStore(db)
  t.equal(lent.ownsConnection, false)
  await lent.close()
  db.close()
})

t.test('runs: a background run queued by one process\'s service is claimed by another\'s, woken by the queue poll', async (t) => {
  const file = join(t.testdir(), 'services.db')
  let ranOn: string | null = null
  const agents = { where: { async run (_input: unknown, ctx: { requestId: string }) { ranOn = ctx.requestId; return { output: 'done' } } } }
  // each its own connection to the file, as two processes would have
  const a = build(t, { ...sqliteStores(file), agents })
  // B's queue watcher, counted: the claim that takes the run comes after the queue poll woke it (rather than with
  // the worker's own claim poll, every 5 s), whatever the machine's load
  const storesB = sqliteStores(file)
  const runStoreB = storesB.runStore
  let woken = 0
  let wokenAtClaim = -1
  const watchQueue = runStoreB.watchQueue.bind(runStoreB)
  runStoreB.watchQueue = (listener) => watchQueue(() => { woken++; listener() })
  const claim = runStoreB.claim.bind(runStoreB)
  runStoreB.claim = async (...args) => {
    const claimed = await claim(...args)
    if (claimed.length > 0 && wokenAtClaim < 0) wokenAtClaim = woken
    return claimed
  }
  const b = build(t, { ...storesB, agents })
  await a.app.ready()
  await b.app.ready()
  a.app.agentService.worker.stopClaiming()
  const wokenBefore = woken
  const started = Date.now()
  const queued = (await a.app.inject({ method: 'POST', url: '/v1/agents/where/runs', payload: { input: null, background: true } })).json()
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${queued.runId as string}` })).json().status === 'completed', 10_000)
  t.ok(wokenAtClaim > wokenBefore, 'B claimed it once the queue poll had woken it')
  t.comment(`claimed and run on B ${Date.now() - started} ms after it was queued on A`)
  t.equal(ranOn, queued.requestId)
  t.equal(a.app.agentService.runs.size, 0, 'not on A')
})

t.test('idempotency: a table made before reservation tokens gets its token column; its records are held by nobody', async (t) => {
  const file = join(t.testdir(), 'old.db')
  const db = new Database(file)
  db.exec(`CREATE TABLE "fa_idempotency" (
    key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL, response TEXT,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, locked_until INTEGER NOT NULL)`)
  const now = Date.now()
  db.prepare(`INSERT INTO "fa_idempotency" VALUES ('old', 'fp', 'in_progress', NULL, ?, ?, ?)`).run(now, now + 60_000, now + 60_000)
  db.close()
  const store = new SqliteIdempotencyStore(file)
  t.teardown(() => store.close())
  t.equal(await store.renew('old', '', 60_000), false, 'an old record has no holder that could renew it')
  t.match(await store.reserve('old', 'fp', { ttlMs: 60_000, leaseMs: 60_000 }), { outcome: 'existing', record: { state: 'in_progress' } })
  const { token } = await store.reserve('new', 'fp', { ttlMs: 60_000, leaseMs: 60_000 }) as { token: string }
  t.equal(await store.complete('new', token, { status: 200, body: '{}', contentType: 'application/json' }, 60_000), true)
})

t.test('a runs table made before schedules gets schedule_id and scheduled_for on open; its runs have neither', async (t) => {
  const file = join(t.testdir(), 'old.db')
  const first = sqliteStores(file)
  const old = newRun()
  await first.runStore.create(old, { exclusive: false })
  await closeAll(first)
  const db = new Database(file)
  db.exec('ALTER TABLE "fa_runs" DROP COLUMN schedule_id; ALTER TABLE "fa_runs" DROP COLUMN scheduled_for')
  db.close()
  const again = sqliteStores(file)
  t.teardown(() => closeAll(again))
  t.same(await again.runStore.get(old.record.runId), old.record, 'a run stored before reads as it was')
  const fire = newRun({ scheduleId: 'sch-1', scheduledFor: '2026-11-27T04:00:00.000Z' })
  await again.runStore.create(fire, { exclusive: false })
  t.same(await again.runStore.get(fire.record.runId), fire.record, 'a fire keeps them in the added columns')
})

t.test('an approvals table made before approvals kept a schema gets its column on open', async (t) => {
  const file = join(t.testdir(), 'old.db')
  const first = sqliteStores(file)
  await first.approvalStore.create(approval('a1'))
  await closeAll(first)
  const db = new Database(file)
  db.exec('ALTER TABLE "fa_approvals" DROP COLUMN schema')
  db.close()
  const again = sqliteStores(file)
  t.teardown(() => closeAll(again))
  t.match(await again.approvalStore.get('a1'), { id: 'a1', status: 'pending' })
  const schema = { type: 'object', properties: { amount: { type: 'number' } } }
  await again.approvalStore.create(approval('a2', { schema }))
  t.same((await again.approvalStore.get('a2'))?.schema, schema, 'the schema kept in the added column')
})
