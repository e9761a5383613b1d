// Group commit of the run log (docs/stores.md, "Group commit"): the appends that come while a write is in flight (on
// SQLite: in one turn of the event loop) go in one write — one transaction, one statement, one script call — each
// run's refusals its own, a retry idempotent by seq, and followers on another instance told of every run.
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import Database from 'better-sqlite3'
import { Redis } from 'ioredis'
import pg from 'pg'
import t from 'tap'
import type { Test } from 'tap'
import { GroupCommit } from '../../lib/stores/group-commit.js'
import { storeDeadlines } from '../../lib/stores/deadline.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { SqliteRunStore } from '../../lib/stores/sqlite-runs.js'
import type { RunStore, StoredEvent } from '../../lib/stores/types.js'
import { eventually } from '../helper.js'
import { pgUrl, pgReachable, redisReachable, redisUrl } from '../helpers/services.js'
import { OTHER, OWNER, event, lease, newRun } from '../../lib/testing/runs.js'

/** A store, a second one on the same data (another instance), and what its driver was asked. */
interface Opened {
  store: RunStore & { groupWrites: number }
  twin: RunStore
  /** the log writes the driver was sent so far (statements, script calls); null where the store's count is all */
  sent: () => number | null
  /** holds the next log write on its way to the server until the promise given resolves (not on SQLite) */
  hold?: (until: Promise<void>) => void
}

interface Backend {
  name: string
  /** the store writes synchronously: a group is what one turn of the event loop brings */
  tick: boolean
  open: (t: Test) => Promise<Opened>
}

const unique = (): string => randomBytes(5).toString('hex')

const sqlite: Backend = {
  name: 'SQLite',
  tick: true,
  async open (t) {
    const file = join(t.testdir(), 'runs.db')
    const store = new SqliteRunStore(file, { pollIntervalMs: 20 })
    const twin = new SqliteRunStore(file, { pollIntervalMs: 20 })
    t.teardown(async () => { await store.close(); await twin.close() })
    return { store, twin, sent: () => null }
  }
}

const GROUP_STATEMENT = 'unnest($1::text[], $2::integer[], $3::integer[], $4::text[])'

const postgres: Backend = {
  name: 'PostgreSQL',
  tick: false,
  async open (t) {
    const schema = `fa_groupcommit_${unique()}`
    const pool = new pg.Pool({ connectionString: pgUrl(), max: 4 })
    const other = new pg.Pool({ connectionString: pgUrl(), max: 2 })
    let sent = 0
    let held: Promise<void> | null = null
    const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>
    ;(pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = async (...args: unknown[]) => {
      // the group's statement is named: sent as a config holding its text
      const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string } | undefined)?.text
      if (text?.includes(GROUP_STATEMENT) === true) {
        sent++
        const wait = held
        held = null
        // sent, and its answer held: as a write past its deadline that the server applied all the same
        if (wait !== null) {
          const answer = query(...args)
          await wait
          return answer
        }
      }
      return query(...args)
    }
    const store = new PostgresRunStore(pool as unknown as pg.Pool, { schema, pollIntervalMs: 50 })
    const twin = new PostgresRunStore(other as unknown as pg.Pool, { schema, pollIntervalMs: 50 })
    t.teardown(async () => {
      await store.close()
      await twin.close()
      await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
      await pool.end()
      await other.end()
    })
    return { store, twin, sent: () => sent, hold: (until) => { held = until } }
  }
}

const redis: Backend = {
  name: 'Redis',
  tick: false,
  async open (t) {
    const prefix = `fa-groupcommit-${unique()}:`
    const client = new Redis(redisUrl())
    const other = new Redis(redisUrl())
    let sent = 0
    let held: Promise<void> | null = null
    const evalsha = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>
    ;(client as unknown as { evalsha: (...args: unknown[]) => Promise<unknown> }).evalsha = async (...args: unknown[]) => {
      // the group's script: ARGV prefix, channel, then the runs
      if (args[3] === `${prefix}runs` && args[2] === prefix) {
        sent++
        const wait = held
        held = null
        if (wait !== null) {
          const answer = evalsha(...args)
          await wait
          return answer
        }
      }
      return evalsha(...args)
    }
    const store = new RedisRunStore(client, { prefix, pollIntervalMs: 50 })
    const twin = new RedisRunStore(other, { prefix, pollIntervalMs: 50 })
    t.teardown(async () => {
      await store.close()
      await twin.close()
      const keys = await client.keys(`${prefix}*`)
      if (keys.length > 0) await client.del(...keys)
      await client.quit()
      await other.quit()
    })
    return { store, twin, sent: () => sent, hold: (until) => { held = until } }
  }
}

async function running (store: RunStore, count: number, owner = OWNER): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < count; i++) {
    const run = newRun()
    run.lease = lease(owner)
    await store.create(run, { exclusive: false })
    ids.push(run.record.runId)
  }
  return ids
}

const events = (from: number, to: number): StoredEvent[] => Array.from({ length: to - from + 1 }, (_v, i) => event(from + i))

async function seqs (store: RunStore, runId: string): Promise<number[]> {
  return (await store.events(runId, 0, 100)).map((e) => e.seq)
}

const backends: Backend[] = [sqlite]
if (await pgReachable()) backends.push(postgres)
if (await redisReachable()) backends.push(redis)

for (const backend of backends) {
  t.test(`${backend.name}: the appends that come while a write is in flight go in one write`, async (t) => {
    const { store, twin, sent, hold } = await backend.open(t)
    const ids = await running(store, 8)
    // followers on another instance hear every run of the group
    const heard = new Map<string, number>()
    for (const id of ids) twin.watch(id, (change) => { if (change.kind === 'events') heard.set(id, change.lastSeq) })
    await sleep(100)
    const writes = store.groupWrites
    const sentBefore = sent()
    let release = (): void => {}
    hold?.(new Promise<void>((resolve) => { release = resolve }))
    const first = store.append(ids[0]!, [event(1)], OWNER)
    // the first is on its way, its answer held (on SQLite nothing is in flight: the rest join it in its window)
    if (hold !== undefined) await eventually(() => sent()! > sentBefore!, 5_000, 'the first write sent')
    const rest = ids.slice(1).map((id) => store.append(id, events(1, 2), OWNER))
    release()
    await Promise.all([first, ...rest])
    const groups = backend.tick ? 1 : 2
    t.equal(store.groupWrites - writes, groups, `${groups} write(s) for 8 runs' appends`)
    if (sent() !== null) t.equal(sent()! - sentBefore!, groups, 'as many sent to the server')
    t.same(await seqs(store, ids[0]!), [1])
    for (const id of ids.slice(1)) t.same(await seqs(store, id), [1, 2])
    await eventually(() => ids.every((id, i) => heard.get(id) === (i === 0 ? 1 : 2)), 5_000, 'the twin heard every run')
    t.pass('the twin heard every run of the group')
  })

  t.test(`${backend.name}: a refusal in a group is its run's alone`, async (t) => {
    const { store } = await backend.open(t)
    const [mine, gap] = await running(store, 2)
    const [theirs] = await running(store, 1, OTHER)
    const writes = store.groupWrites
    const results = await Promise.allSettled([
      store.append(mine!, events(1, 3), OWNER),
      store.append(theirs!, events(1, 1), OWNER),
      store.append(gap!, events(2, 3), OWNER)
    ])
    t.equal(results[0]!.status, 'fulfilled')
    t.match(results[1], { status: 'rejected', reason: { code: 'FA_RUN_LEASE_LOST' } })
    t.match(results[2], { status: 'rejected', reason: { code: 'FA_RUN_LOG_GAP' } })
    t.equal(store.groupWrites - writes, 1, 'one group')
    t.same(await seqs(store, mine!), [1, 2, 3])
    t.same(await seqs(store, theirs!), [])
    t.same(await seqs(store, gap!), [])
  })

  t.test(`${backend.name}: a group tried again is idempotent by seq, run by run`, async (t) => {
    const { store } = await backend.open(t)
    const [a, b, c] = await running(store, 3)
    await Promise.all([store.append(a!, events(1, 2), OWNER), store.append(b!, events(1, 2), OWNER)])
    // again, with more: what is held is acknowledged, the rest stored; a held seq with another event is refused alone
    const results = await Promise.allSettled([
      store.append(a!, events(1, 4), OWNER),
      store.append(b!, [event(1), event(2, 'message.delta', { text: 'other' }), event(3)], OWNER),
      store.append(c!, events(1, 1), OWNER)
    ])
    t.equal(results[0]!.status, 'fulfilled')
    t.match(results[1], { status: 'rejected', reason: { code: 'FA_RUN_LOG_CONFLICT' } })
    t.equal(results[2]!.status, 'fulfilled')
    t.same(await seqs(store, a!), [1, 2, 3, 4])
    t.same(await seqs(store, b!), [1, 2])
    t.same(await seqs(store, c!), [1])
    // all of it held: acknowledged again, nothing new
    await store.append(a!, events(3, 4), OWNER)
    t.same(await seqs(store, a!), [1, 2, 3, 4])
  })

  t.test(`${backend.name}: finish after a group: the terminal event follows the log`, async (t) => {
    const { store } = await backend.open(t)
    const [a, b] = await running(store, 2)
    await Promise.all([store.append(a!, events(1, 2), OWNER), store.append(b!, events(1, 2), OWNER)])
    const end = { status: 'failed' as const, endedAt: new Date().toISOString(), error: { code: 'AGENT_ERROR', message: 'x' } }
    const [ra, rb] = await Promise.all([
      store.finish(a!, [event(3, 'run.failed', { error: end.error })], end, 60_000, OWNER),
      store.finish(b!, [event(3, 'run.failed', { error: end.error })], end, 60_000, OTHER).catch((err: unknown) => err)
    ])
    t.match(ra, { status: 'failed', lastSeq: 3 })
    t.match(rb, { code: 'FA_RUN_LEASE_LOST' }, 'another owner\'s finish is refused alone')
    t.same(await seqs(store, a!), [1, 2, 3])
    t.equal(await store.finish(a!, [event(4)], end, 60_000, OWNER), null, 'once')
  })

  if (backend.name !== 'SQLite') {
    t.test(`${backend.name}: a group applied past its deadline: the retry is acknowledged, nothing stored twice`, async (t) => {
      const { store, hold } = await backend.open(t)
      const [a, b] = await running(store, 2)
      const wrapped = storeDeadlines(100)(store, ['append'], 'runStore')
      let release!: () => void
      hold!(new Promise<void>((resolve) => { release = resolve }))
      const late = await Promise.allSettled([wrapped.append(a!, events(1, 2), OWNER), wrapped.append(b!, events(1, 1), OWNER)])
      t.match(late, [{ status: 'rejected', reason: { code: 'STORE_UNAVAILABLE' } }, { status: 'rejected', reason: { code: 'STORE_UNAVAILABLE' } }])
      release()
      await eventually(async () => (await seqs(store, a!)).length === 2, 5_000, 'the late group applied')
      // the log's writer tries again with what it had and what came since (the store itself: no deadline to miss on a busy machine)
      await Promise.all([store.append(a!, events(1, 3), OWNER), store.append(b!, events(1, 2), OWNER)])
      t.same(await seqs(store, a!), [1, 2, 3])
      t.same(await seqs(store, b!), [1, 2])
    })
  }
}

if (backends.includes(postgres)) {
  t.test('PostgreSQL: a group holds the runs whose ids fit in one NOTIFY; the rest go in the next', async (t) => {
    const { store, twin, sent } = await postgres.open(t)
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      const run = newRun({ runId: `${'r'.repeat(3000)}-${i}-${unique()}` })
      await store.create(run, { exclusive: false })
      ids.push(run.record.runId)
    }
    const heard = new Set<string>()
    for (const id of ids) twin.watch(id, (change) => { if (change.kind === 'events') heard.add(id) })
    await sleep(100)
    const before = sent()!
    await Promise.all(ids.map((id) => store.append(id, events(1, 1), OWNER)))
    t.equal(sent()! - before, 3, 'two runs of 3 KB ids per group of 7 KB')
    for (const id of ids) t.same(await seqs(store, id), [1])
    await eventually(() => heard.size === 5, 5_000, 'the twin heard every run')
    t.pass('the twin heard every run')
  })
}

t.test('GroupCommit: a group that fails fails every call in it; the next one goes on', async (t) => {
  const written: string[][] = []
  let fail = true
  const group = new GroupCommit<{ key: string, n: number }, number>({
    write: async (items) => {
      written.push(items.map((item) => `${item.key}${item.n}`))
      await sleep(5)
      if (fail) {
        fail = false
        throw new Error('down')
      }
      return items.map((item) => item.n === 0 ? new Error(`refused ${item.key}`) : item.n * 10)
    },
    key: (item) => item.key
  })
  const first = group.add({ key: 'a', n: 1 })
  await Promise.resolve()
  const queued = [group.add({ key: 'a', n: 2 }), group.add({ key: 'b', n: 0 }), group.add({ key: 'a', n: 3 }), group.add({ key: 'c', n: 4 })]
  await t.rejects(first, { message: 'down' })
  const results = await Promise.allSettled(queued)
  t.match(results, [
    { status: 'fulfilled', value: 20 }, { status: 'rejected', reason: { message: 'refused b' } },
    { status: 'fulfilled', value: 30 }, { status: 'fulfilled', value: 40 }
  ])
  t.same(written, [['a1'], ['a2', 'b0', 'c4'], ['a3']], 'one call per key and group, in order')
  t.equal(group.writes, 3)
})

t.test('GroupCommit: by weight, and at the end of the turn', async (t) => {
  const written: number[][] = []
  const group = new GroupCommit<{ key: string, w: number }, null>({
    write: (items) => {
      written.push(items.map((item) => item.w))
      return items.map(() => null)
    },
    key: (item) => item.key,
    weigh: (item) => item.w,
    maxWeight: 10,
    start: 'tick'
  })
  const calls = [group.add({ key: 'a', w: 12 }), group.add({ key: 'b', w: 4 }), group.add({ key: 'c', w: 5 }), group.add({ key: 'd', w: 6 })]
  let settled = false
  void Promise.all(calls).then(() => { settled = true })
  await Promise.resolve()
  t.same(written, [], 'nothing before the turn ends')
  await Promise.all(calls)
  t.ok(settled)
  t.same(written, [[12], [4, 5], [6]], 'one heavy call alone; the rest up to the weight')
})

t.test('GroupCommit: a window gathers more; an urgent call ends it at once', async (t) => {
  const written: string[][] = []
  const group = new GroupCommit<{ key: string }, null>({
    write: (items) => {
      written.push(items.map((item) => item.key))
      return items.map(() => null)
    },
    key: (item) => item.key,
    start: 'tick',
    windowMs: 60_000
  })
  const first = group.add({ key: 'a' })
  await sleep(20)
  t.same(written, [], 'the window gathers')
  const b = group.add({ key: 'b' })
  const end = group.add({ key: 'c' }, true)
  await Promise.all([first, b, end])
  t.same(written, [['a', 'b', 'c']], 'an urgent call ends the window: everything gathered goes with it')
  // urgent before the first write began: no window at all
  await Promise.all([group.add({ key: 'd' }, true), group.add({ key: 'e' })])
  t.same(written.at(-1), ['d', 'e'])
})

t.test('GroupCommit: an urgent call on a group that starts at once goes at the end of the turn, with what the turn adds', async (t) => {
  const written: string[][] = []
  let answer = (): void => {}
  const group = new GroupCommit<{ key: string }, null>({
    write: async (items) => {
      written.push(items.map((item) => item.key))
      // the first write is held in flight until told
      if (written.length === 1) await new Promise<void>((resolve) => { answer = resolve })
      return items.map(() => null)
    },
    key: (item) => item.key,
    windowMs: 60_000
  })
  const started = Date.now()
  // the first call of an idle group: urgent, it does not wait for the window, and what the turn adds joins it
  const a = group.add({ key: 'a' }, true)
  await Promise.resolve()
  const b = group.add({ key: 'b' })
  await sleep(10)
  t.same(written, [['a', 'b']], 'one write at the end of the turn, not after the window')
  // while it is in flight an urgent call waits for it, then goes with the calls its answer brings (durable steps)
  const c = group.add({ key: 'c' }, true)
  const later = Promise.all([a, b]).then(() => group.add({ key: 'd' }))
  answer()
  await Promise.all([a, b, c, later.then(async (d) => await d)])
  t.same(written, [['a', 'b'], ['c', 'd']], 'the calls that the answer woke went with the urgent one')
  t.ok(Date.now() - started < 30_000, 'no window waited for')
  t.equal(group.writes, 2)
})

t.test('SQLite: a group whose transaction fails (not one of its runs) fails every append in it, tried once', async (t) => {
  const db = new Database(join(t.testdir(), 'runs.db'))
  t.teardown(() => { if (db.open) db.close() })
  const store = new SqliteRunStore(db)
  const [a, b] = await running(store, 2)
  // (the creates were groups of their own)
  const writes = store.groupWrites
  const results = Promise.allSettled([store.append(a!, events(1, 2), OWNER), store.append(b!, events(1, 1), OWNER)])
  // gone under the store before its group's transaction begins
  db.close()
  t.match(await results, [{ status: 'rejected', reason: { message: /database connection is not open/ } }, { status: 'rejected', reason: { message: /database connection is not open/ } }])
  t.equal(store.groupWrites - writes, 1)
})
