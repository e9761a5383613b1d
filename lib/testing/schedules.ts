// The behaviour every schedule store (docs/schedules.md) must have, run by each backend's test file against a factory
// that makes a fresh, empty store for a subtest (closed in teardown). `twin` (shared backends) makes a second store on
// the same data, as another instance would have: a claim raced from both is won once, and each hears the other's writes.
import type { ScheduleRow, ScheduleState, ScheduleStore } from '../stores/types.js'
import { type Check, type Registrar, type StoreFactory, checked } from './check.js'

export interface ScheduleStoreFactories<C = unknown> {
  store: StoreFactory<ScheduleStore, C>
  /** a second store on the same data (another instance); absent for an in-process store */
  twin?: (context: C, first: ScheduleStore) => ScheduleStore | Promise<ScheduleStore>
}

const T0 = 1_700_000_000_000

async function open<C> (t: Check<C>, factory: StoreFactory<ScheduleStore, C>): Promise<ScheduleStore> {
  const store = await factory(t.context)
  t.teardown(async () => { await store.close?.() })
  return store
}

function state (id: string, principal: string, extra: Partial<ScheduleState['schedule']> = {}): ScheduleState {
  const at = new Date(T0).toISOString()
  return {
    schedule: {
      id, agent: 'echo', principal, input: { n: 1, text: 'é ✓' }, cron: '*/5 * * * *', everyMs: null, at: null, timezone: 'UTC',
      sessionId: null, overlap: 'skip', enabled: true, nextRunAt: at, lastRunAt: null, lastRunId: null, lastSkippedAt: null,
      metadata: { team: 'ops' }, createdAt: at, updatedAt: at, ...extra
    },
    fire: null,
    waiting: null,
    runs: []
  }
}

function row (id: string, options: { principal?: string, createdAt?: number, wakeAt?: number | null } = {}): Omit<ScheduleRow, 'revision'> {
  const principal = options.principal ?? 'alice'
  return { id, principal, createdAt: options.createdAt ?? T0, wakeAt: options.wakeAt === undefined ? T0 + 60_000 : options.wakeAt, state: state(id, principal) }
}

/** Resolves once `listener` was called, or rejects after `ms`. */
function heard (store: ScheduleStore, ms = 5_000): { promise: Promise<void>, stop: () => void } {
  let stop = (): void => {}
  const promise = new Promise<void>((resolve, reject) => {
    /* c8 ignore next: only a store that never tells its watcher gets here */
    const timer = setTimeout(() => { stop(); reject(new Error(`not told within ${ms} ms`)) }, ms)
    const unwatch = store.watch(() => { clearTimeout(timer); stop(); resolve() })
    stop = () => { clearTimeout(timer); unwatch() }
  })
  return { promise, stop }
}

export function scheduleStoreConformance<C> (registrar: Registrar<C>, factories: ScheduleStoreFactories<C>): void {
  const test = checked(registrar)
  const { store: factory, twin } = factories

  test('schedules: a row inserted is read back as stored, at revision 1; an id taken is refused; an unknown one is null', async (t) => {
    const store = await open(t, factory)
    const inserted = await store.insert(row('s1'))
    t.equal(inserted.revision, 1)
    t.same(await store.get('s1'), { ...row('s1'), revision: 1 })
    await t.rejects(store.insert(row('s1')), Error, 'the id is taken')
    t.same(await store.get('s1'), { ...row('s1'), revision: 1 }, 'the refused insert changed nothing')
    t.equal(await store.get('nope'), null)
    await store.insert(row('s2', { wakeAt: null }))
    t.equal((await store.get('s2'))!.wakeAt, null, 'a row with nothing to wake for')
  })

  test('schedules: a write is compared on the revision: the right one wins once, a stale or unknown one changes nothing', async (t) => {
    const store = await open(t, factory)
    await store.insert(row('s1'))
    const next = state('s1', 'alice', { nextRunAt: new Date(T0 + 120_000).toISOString(), lastRunId: 'r1' })
    next.fire = { scheduledFor: new Date(T0 + 60_000).toISOString(), runId: 'r1', owner: 'i1', until: T0 + 70_000 }
    next.runs = ['r1']
    const written = await store.write('s1', 1, { wakeAt: T0 + 70_000, state: next })
    t.same(written, { ...row('s1'), wakeAt: T0 + 70_000, state: next, revision: 2 })
    t.same(await store.get('s1'), written)
    t.equal(await store.write('s1', 1, { wakeAt: T0, state: state('s1', 'alice') }), null, 'revision 1 is stale')
    t.equal(await store.write('s1', 3, { wakeAt: T0, state: state('s1', 'alice') }), null, 'revision 3 is not yet')
    t.equal(await store.write('nope', 1, { wakeAt: T0, state: state('nope', 'alice') }), null, 'an unknown row')
    t.same(await store.get('s1'), written, 'unchanged by the refused writes')
    const cleared = await store.write('s1', 2, { wakeAt: null, state: next })
    t.equal(cleared!.wakeAt, null)
    t.equal(cleared!.revision, 3)
    t.same(await store.take(T0 + 10 * 60_000, 10, T0 + 20 * 60_000), [], 'a row whose wakeAt was cleared is never due')
  })

  test('schedules: 20 writers racing from one revision: exactly one wins', async (t) => {
    const store = await open(t, factory)
    const other = twin === undefined ? store : await twin(t.context, store)
    if (other !== store) t.teardown(async () => { await other.close?.() })
    await store.insert(row('s1'))
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? store : other).write('s1', 1, {
      wakeAt: T0 + i, state: state('s1', 'alice', { lastRunId: `r${i}` })
    })))
    const winners = results.filter((result) => result !== null)
    t.equal(winners.length, 1, 'one writer won')
    const stored = await other.get('s1')
    t.equal(stored!.revision, 2)
    t.equal(stored!.state.schedule.lastRunId, winners[0]!.state.schedule.lastRunId, 'the winner\'s state is the one stored')
  })

  test('schedules: a delete removes the row from every listing and from the due ones', async (t) => {
    const store = await open(t, factory)
    await store.insert(row('s1', { wakeAt: T0 }))
    t.equal(await store.delete('s1'), true)
    t.equal(await store.delete('s1'), false)
    t.equal(await store.get('s1'), null)
    t.same(await store.take(T0, 10, T0 + 1_000), [])
    t.equal(await store.nextWake(), null)
    t.same(await store.list({ limit: 10 }), { rows: [], nextCursor: null })
    t.same(await store.list({ limit: 10, principal: 'alice' }), { rows: [], nextCursor: null })
  })

  test('schedules: listed newest first (ties by id), of one principal when asked, paged without gaps or duplicates', async (t) => {
    const store = await open(t, factory)
    const ids: string[] = []
    for (let i = 0; i < 7; i++) {
      const id = `s${i}`
      ids.push(id)
      // two by two in one millisecond: the id breaks the tie
      await store.insert(row(id, { principal: i % 3 === 0 ? 'bob' : 'alice', createdAt: T0 + Math.floor(i / 2) }))
    }
    const expected = ['s6', 's5', 's4', 's3', 's2', 's1', 's0']
    const seen: string[] = []
    let cursor: string | undefined
    do {
      const page = await store.list(cursor === undefined ? { limit: 2 } : { limit: 2, cursor })
      t.ok(page.rows.length <= 2)
      seen.push(...page.rows.map((r) => r.id))
      cursor = page.nextCursor ?? undefined
      // inserted meanwhile, newer than every page: never seen in this walk
      if (seen.length === 2) await store.insert(row('late', { createdAt: T0 + 100 }))
    } while (cursor !== undefined)
    t.same(seen, expected)
    const bob = await store.list({ limit: 10, principal: 'bob' })
    t.same(bob.rows.map((r) => r.id), ['s6', 's3', 's0'])
    t.equal(bob.nextCursor, null)
    const first = await store.list({ limit: 2, principal: 'alice' })
    t.same(first.rows.map((r) => r.id), ['late', 's5'])
    const rest = await store.list({ limit: 10, principal: 'alice', cursor: first.nextCursor! })
    t.same(rest.rows.map((r) => r.id), ['s4', 's2', 's1'])
    t.same(rest.rows[0], { ...row('s4', { createdAt: T0 + 2 }), revision: 1 }, 'a listed row is the whole row')
    t.same((await store.list({ limit: 10, principal: 'nobody' })).rows, [])
    await t.rejects(store.list({ limit: 0 }), RangeError)
    await t.rejects(store.list({ limit: 10, cursor: 'not a cursor' }), { code: 'FA_INVALID_CURSOR' })
  })

  test('schedules: take moves the due rows (wakeAt come), soonest first, at most limit, to a later wakeAt; nextWake is the earliest', async (t) => {
    const store = await open(t, factory)
    t.equal(await store.nextWake(), null)
    await store.insert(row('late', { wakeAt: T0 + 3_000 }))
    await store.insert(row('soon', { wakeAt: T0 + 1_000 }))
    await store.insert(row('mid', { wakeAt: T0 + 2_000 }))
    await store.insert(row('twin', { wakeAt: T0 + 2_000 }))
    await store.insert(row('never', { wakeAt: null }))
    t.equal(await store.nextWake(), T0 + 1_000)
    t.same(await store.take(T0 + 999, 10, T0 + 60_000), [], 'none due yet')
    const [soon] = await store.take(T0 + 1_000, 1, T0 + 60_000)
    t.same(soon, { ...row('soon', { wakeAt: T0 + 60_000 }), revision: 2 }, 'at its wakeAt a row is due: taken, the whole row, its state as it was')
    t.same(await store.get('soon'), soon)
    t.equal(await store.nextWake(), T0 + 2_000, 'a row taken no longer comes first')
    t.same((await store.take(T0 + 10_000, 2, T0 + 30_000)).map((r) => r.id), ['mid', 'twin'], 'soonest first (ties by id), at most limit')
    t.same((await store.take(T0 + 10_000, 10, T0 + 30_000)).map((r) => r.id), ['late'], 'a row taken is not taken again before its new wakeAt')
    t.same((await store.take(T0 + 30_000, 10, T0 + 90_000)).map((r) => r.id), ['late', 'mid', 'twin'], 'then due again, should its taker not write it')
    t.equal(await store.write('soon', 1, { wakeAt: T0, state: soon!.state }), null, 'a write compared on the revision before the take fails')
    t.not(await store.write('soon', 2, { wakeAt: T0 + 5_000, state: soon!.state }), null, 'one on the taken revision is written')
    t.equal(await store.nextWake(), T0 + 5_000)
  })

  test('schedules: writeAll is a compare-and-set per row, in the order given: some win while others fail', async (t) => {
    const store = await open(t, factory)
    t.same(await store.writeAll([]), [])
    await store.insert(row('a'))
    await store.insert(row('b'))
    await store.insert(row('c'))
    await store.write('b', 1, { wakeAt: T0, state: state('b', 'alice') })
    const told = heard(store)
    const next = (id: string): ScheduleState => state(id, 'alice', { lastRunId: `${id}-run` })
    const results = await store.writeAll([
      { id: 'c', revision: 1, wakeAt: null, state: next('c') },
      { id: 'b', revision: 1, wakeAt: T0 + 1, state: next('b') },
      { id: 'gone', revision: 1, wakeAt: T0, state: next('gone') },
      { id: 'a', revision: 1, wakeAt: T0 + 2, state: next('a') }
    ])
    await told.promise
    t.same(results, [
      { ...row('c'), wakeAt: null, state: next('c'), revision: 2 },
      null,
      null,
      { ...row('a'), wakeAt: T0 + 2, state: next('a'), revision: 2 }
    ])
    t.same(await store.get('a'), results[3])
    t.same(await store.get('c'), results[0])
    t.match(await store.get('b'), { revision: 2, wakeAt: T0 }, 'the stale one changed nothing')
    t.same(await store.writeAll([{ id: 'a', revision: 1, wakeAt: T0, state: next('a') }]), [null], 'none won: nothing changes')
  })

  test('schedules: a watcher is told of every insert, write and delete; one that stopped is not', async (t) => {
    const store = await open(t, factory)
    let told = 0
    const stop = store.watch(() => { told++ })
    const insert = heard(store)
    await store.insert(row('s1'))
    await insert.promise
    const write = heard(store)
    await store.write('s1', 1, { wakeAt: null, state: state('s1', 'alice') })
    await write.promise
    const del = heard(store)
    await store.delete('s1')
    await del.promise
    t.ok(told >= 3, `told ${told} times`)
    stop()
    const after = told
    await store.insert(row('s2'))
    await new Promise((resolve) => setTimeout(resolve, 50))
    t.equal(told, after, 'not told once stopped')
  })

  test('schedules: instances taking at once share the due rows: each row goes to one', async (t) => {
    const store = await open(t, factory)
    const other = twin === undefined ? store : await twin(t.context, store)
    if (other !== store) t.teardown(async () => { await other.close?.() })
    const ids = Array.from({ length: 60 }, (_, i) => `s${String(i).padStart(2, '0')}`)
    for (const id of ids) await store.insert(row(id, { wakeAt: T0 }))
    const takes = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? store : other).take(T0, 15, T0 + 60_000)))
    const taken = takes.flat().map((r) => r.id)
    t.equal(taken.length, new Set(taken).size, 'none taken twice')
    t.same([...taken].sort(), ids, 'every due row taken once')
  })

  if (twin !== undefined) {
    test('schedules: an instance is told of the writes of another sharing the store, and reads them', async (t) => {
      const store = await open(t, factory)
      const other = await twin(t.context, store)
      t.teardown(async () => { await other.close?.() })
      const insert = heard(other)
      // the twin's watch may take a moment to start listening: the insert is retried until it is heard
      await new Promise((resolve) => setTimeout(resolve, 200))
      await store.insert(row('s1', { wakeAt: T0 }))
      await insert.promise
      t.same(await other.get('s1'), { ...row('s1', { wakeAt: T0 }), revision: 1 })
      t.equal(await other.nextWake(), T0)
      const write = heard(store)
      await new Promise((resolve) => setTimeout(resolve, 200))
      t.not(await other.write('s1', 1, { wakeAt: null, state: state('s1', 'alice') }), null)
      await write.promise
      t.equal((await store.get('s1'))!.revision, 2)
    })
  }
}
