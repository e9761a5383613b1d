// The behaviour every quota store (docs/auth-and-traffic.md) must have, run by each backend's test file against a factory that
// makes a fresh, empty store for a subtest (closed in teardown). `twin` (shared backends) makes a second store on the
// same data, as another instance would have.
import type { QuotaStore } from '../stores/types.js'
import { type Check, type Registrar, type StoreFactory, checked } from './check.js'

export interface QuotaStoreFactories<C = unknown> {
  store: StoreFactory<QuotaStore, C>
  /** a second store on the same data (another instance); absent for an in-process store */
  twin?: (context: C, first: QuotaStore) => QuotaStore | Promise<QuotaStore>
}

const T0 = 1_700_000_000_000
const MINUTE = 60_000

async function open<C> (t: Check<C>, factory: StoreFactory<QuotaStore, C>): Promise<QuotaStore> {
  const store = await factory(t.context)
  t.teardown(async () => { await store.close?.() })
  return store
}

const slot = (slotId: string, principal = 'alice'): { principal: string, slotId: string } => ({ principal, slotId })

export function quotaStoreConformance<C> (registrar: Registrar<C>, factories: QuotaStoreFactories<C>): void {
  const test = checked(registrar)
  const { store: factory, twin } = factories

  test('quotas: slots up to max; a slot held is extended whatever the count; principals apart; a release frees', async (t) => {
    const store = await open(t, factory)
    t.equal(await store.acquire(slot('r1'), 2, T0, T0 + MINUTE), true)
    t.equal(await store.acquire(slot('r2'), 2, T0, T0 + MINUTE), true)
    t.equal(await store.acquire(slot('r3'), 2, T0, T0 + MINUTE), false, 'the third is refused')
    t.equal(await store.acquire(slot('r1'), 2, T0, T0 + 2 * MINUTE), true, 'a slot held again: extended')
    t.equal(await store.acquire(slot('r1', 'bob'), 2, T0, T0 + MINUTE), true, 'another principal counts apart')
    t.equal(await store.acquire(slot('r3'), Number.MAX_SAFE_INTEGER, T0, T0 + MINUTE), true, 'a slot kept whatever the count')
    await store.release(slot('r3'))
    await store.release(slot('r2'))
    await store.release(slot('r2'))
    await store.release(slot('nobody', 'nobody'))
    await store.release(slot('r1', 'bob'))
    t.equal(await store.acquire(slot('r2', 'bob'), 1, T0, T0 + MINUTE), true, 'bob\'s only slot given back')
    t.equal(await store.acquire(slot('r4'), 2, T0, T0 + MINUTE), true, 'released: room again')
    t.equal(await store.acquire(slot('r5'), 2, T0, T0 + MINUTE), false)
    t.equal(await store.acquire(slot('r1'), 2, T0 + MINUTE + 1, T0 + 3 * MINUTE), true, 'r1 extended past its first expiry')
    t.equal(await store.acquire(slot('r6'), 2, T0 + MINUTE + 1, T0 + 3 * MINUTE), true, 'r4 expired meanwhile: not counted')
  })

  test('quotas: expired slots are not counted; renew extends the slots still held and names them', async (t) => {
    const store = await open(t, factory)
    for (const id of ['a', 'b', 'c']) t.equal(await store.acquire(slot(id), 3, T0, T0 + 1_000), true)
    t.equal(await store.acquire(slot('d'), 3, T0 + 999, T0 + 2_000), false)
    t.same((await store.renew([slot('a'), slot('b'), slot('gone'), slot('a', 'bob')], T0 + 5_000)).sort(), ['a', 'b'])
    t.same(await store.renew([], T0 + 5_000), [])
    t.equal(await store.acquire(slot('d'), 3, T0 + 1_000, T0 + 2_000), true, 'c expired at its until')
    t.equal(await store.acquire(slot('e'), 3, T0 + 1_000, T0 + 2_000), false, 'a and b were renewed')
    t.same(await store.renew([slot('c')], T0 + 9_000), [], 'an expired slot, forgotten, is not renewed')
    t.equal(await store.acquire(slot('e'), 3, T0 + 5_000, T0 + 9_000), true, 'a and b expire at their renewed until')
  })

  test('quotas: 20 acquires at once with max 3 admit exactly 3', async (t) => {
    const store = await open(t, factory)
    const other = twin === undefined ? store : await twin(t.context, store)
    if (other !== store) t.teardown(async () => { await other.close?.() })
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? store : other).acquire(slot(`r${i}`), 3, T0, T0 + MINUTE)))
    t.equal(results.filter(Boolean).length, 3)
    const held = Array.from({ length: 20 }, (_, i) => `r${i}`).filter((_, i) => results[i])
    t.same((await other.renew(Array.from({ length: 20 }, (_, i) => slot(`r${i}`)), T0 + MINUTE)).sort(), held.sort(), 'exactly those are held')
  })

  test('quotas: tokens per principal per window, added up; other windows and principals apart', async (t) => {
    const store = await open(t, factory)
    const window = { start: T0, end: T0 + MINUTE }
    t.equal(await store.tokens('alice', T0), 0)
    await store.addTokens('alice', window, 30)
    await store.addTokens('alice', window, 12)
    await Promise.all(Array.from({ length: 10 }, () => store.addTokens('alice', window, 1)))
    t.equal(await store.tokens('alice', T0), 52)
    t.equal(await store.tokens('alice', T0 + MINUTE), 0, 'the next window starts from nothing')
    t.equal(await store.tokens('bob', T0), 0)
    await store.addTokens('bob', { start: T0 + MINUTE, end: T0 + 2 * MINUTE }, 5)
    t.equal(await store.tokens('bob', T0 + MINUTE), 5)
  })

  test('quotas: purge deletes expired slots and ended windows, at most a batch at a time', async (t) => {
    const store = await open(t, factory)
    for (const id of ['a', 'b', 'c']) await store.acquire(slot(id, `p-${id}`), 1, T0, T0 + 1_000)
    await store.acquire(slot('live', 'p-live'), 1, T0, T0 + MINUTE)
    await store.addTokens('alice', { start: T0 - MINUTE, end: T0 }, 3)
    await store.addTokens('bob', { start: T0 - MINUTE, end: T0 }, 3)
    await store.addTokens('alice', { start: T0, end: T0 + MINUTE }, 4)
    t.equal(await store.purge(T0 + 1_000, 2), 2)
    t.equal(await store.purge(T0 + 1_000, 2), 2)
    t.equal(await store.purge(T0 + 1_000, 2), 1)
    t.equal(await store.purge(T0 + 1_000, 2), 0)
    t.equal(await store.tokens('alice', T0), 4, 'the current window is kept')
    t.equal(await store.tokens('alice', T0 - MINUTE), 0)
    t.equal(await store.acquire(slot('other', 'p-live'), 1, T0 + 1_000, T0 + MINUTE), false, 'the live slot is kept')
  })

  if (twin !== undefined) {
    test('quotas: twin stores (two instances on the same data) share the counts', async (t) => {
      const store = await open(t, factory)
      const other = await twin(t.context, store)
      t.teardown(async () => { await other.close?.() })
      t.equal(await store.acquire(slot('r1'), 1, T0, T0 + MINUTE), true)
      t.equal(await other.acquire(slot('r2'), 1, T0, T0 + MINUTE), false)
      t.same(await other.renew([slot('r1')], T0 + 2 * MINUTE), ['r1'])
      await other.release(slot('r1'))
      t.equal(await store.acquire(slot('r2'), 1, T0, T0 + MINUTE), true)
      await other.addTokens('alice', { start: T0, end: T0 + MINUTE }, 7)
      await store.addTokens('alice', { start: T0, end: T0 + MINUTE }, 1)
      t.equal(await store.tokens('alice', T0), 8)
      t.equal(await other.tokens('alice', T0), 8)
    })
  }
}
