// The counts of the `quotas` option (docs/auth-and-traffic.md) in memory and in SQLite; PostgreSQL and Redis: quotas-postgres.test.ts,
// quotas-redis.test.ts.
import { join } from 'node:path'
import Database from 'better-sqlite3'
import t from 'tap'
import { tapTest } from '../helper.js'
import { MemoryQuotaStore } from '../../lib/stores/memory-quotas.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { SqliteQuotaStore } from '../../lib/stores/sqlite-quotas.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { quotaStoreConformance } from '../../lib/testing/quotas.js'

quotaStoreConformance(tapTest(t), { store: () => new MemoryQuotaStore() })

// the twin opens the same file through a connection of its own, as another process would
const files = new WeakMap<object, string>()
quotaStoreConformance(tapTest(t), {
  store: (t) => {
    const file = join(t.testdir(), 'quotas.db')
    const store = sqliteStores(file).quotaStore
    files.set(store, file)
    return store
  },
  twin: (_t, first) => new SqliteQuotaStore(files.get(first)!)
})

t.test('SQLite: the counts survive closing and opening the file again; a closed store refuses', async (t) => {
  const file = join(t.testdir(), 'counts.db')
  const first = new SqliteQuotaStore(file)
  t.equal(first.ownsConnection, true)
  await first.probe()
  const now = Date.now()
  t.equal(await first.acquire({ principal: 'p', slotId: 'r1' }, 1, now, now + 60_000), true)
  await first.addTokens('p', { start: 0, end: now + 60_000 }, 9)
  await first.close()
  await first.close()
  await t.rejects(first.tokens('p', 0), { code: 'FA_STORE_CLOSED' })
  const again = new SqliteQuotaStore(`file:${file}`)
  t.teardown(() => again.close())
  t.equal(await again.acquire({ principal: 'p', slotId: 'r2' }, 1, now, now + 60_000), false)
  t.equal(await again.tokens('p', 0), 9)
})

t.test('SQLite: on a Database of yours, under a table prefix; left open', async (t) => {
  const db = new Database(join(t.testdir(), 'mine.db'))
  t.teardown(() => db.close())
  const store = new SqliteQuotaStore(db, { tablePrefix: 'app_' })
  t.equal(store.ownsConnection, false)
  await store.addTokens('p', { start: 0, end: 1 }, 1)
  t.ok(db.prepare('SELECT count(*) AS n FROM app_quota_tokens').get())
  await store.close()
  t.equal(db.open, true)
  t.throws(() => new SqliteQuotaStore(db, { tablePrefix: 'bad-prefix' }), { name: 'TypeError', message: /tablePrefix/ })
})

t.test('memory: memoryStores() gives a quota store', async (t) => {
  t.ok(memoryStores().quotaStore instanceof MemoryQuotaStore)
})
