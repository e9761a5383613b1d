// The schedule stores (docs/schedules.md) in memory and in SQLite; PostgreSQL and Redis: schedules-postgres.test.ts,
// schedules-redis.test.ts.
import { join } from 'node:path'
import t from 'tap'
import { MemoryScheduleStore } from '../../lib/stores/memory-schedules.js'
import { SqliteScheduleStore } from '../../lib/stores/sqlite-schedules.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { tapTest } from '../helper.js'
import { scheduleStoreConformance } from '../../lib/testing/schedules.js'

scheduleStoreConformance(tapTest(t), { store: () => new MemoryScheduleStore() })

// the twin opens the same file through a connection of its own, as another process would
const files = new WeakMap<object, string>()
scheduleStoreConformance(tapTest(t), {
  store: (t) => {
    const file = join(t.testdir(), 'schedules.db')
    const store = sqliteStores(file).scheduleStore
    files.set(store, file)
    return store
  },
  twin: (_t, first) => new SqliteScheduleStore(files.get(first)!, { pollIntervalMs: 50 })
})

t.test('SQLite: the schedules survive closing and opening the file again; a closed store refuses', async (t) => {
  const file = join(t.testdir(), 'kept.db')
  const first = new SqliteScheduleStore(file)
  t.equal(first.ownsConnection, true)
  await first.probe()
  const stop = first.watch(() => {})
  const inserted = await first.insert({ id: 's1', principal: 'p', createdAt: 1, wakeAt: 5, state: { schedule: {} as never, fire: null, waiting: null, runs: [] } })
  stop()
  await first.close()
  await first.close()
  await t.rejects(first.get('s1'), { code: 'FA_STORE_CLOSED' })
  const again = new SqliteScheduleStore(`file:${file}`)
  t.teardown(() => again.close())
  t.same(await again.get('s1'), inserted)
  t.throws(() => new SqliteScheduleStore(file, { pollIntervalMs: 0 }), RangeError)
})

t.test('SQLite: a watcher reads the counter while it watches: told once at first, again only for another process\'s write; closed while watching', async (t) => {
  const file = join(t.testdir(), 'watched.db')
  const store = new SqliteScheduleStore(file, { pollIntervalMs: 20 })
  const other = new SqliteScheduleStore(file)
  let told = 0
  store.watch(() => { told++ })
  await new Promise((resolve) => setTimeout(resolve, 150))
  t.equal(told, 1, 'the first read, then nothing while nothing changes')
  await other.insert({ id: 's1', principal: 'p', createdAt: 1, wakeAt: null, state: { schedule: {} as never, fire: null, waiting: null, runs: [] } })
  await new Promise((resolve) => setTimeout(resolve, 150))
  t.equal(told, 2, 'another process\'s write heard')
  await other.close()
  await store.close()
})
