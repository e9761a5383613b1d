// The outbox of webhook deliveries (docs/webhooks.md) in memory and in SQLite; PostgreSQL and Redis have files of their own.
import { join } from 'node:path'
import Database from 'better-sqlite3'
import t from 'tap'
import { tapTest } from '../helper.js'
import { DEFAULT_MAX_RETAINED_DELIVERIES, MemoryWebhookStore } from '../../lib/stores/memory-webhooks.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { SqliteWebhookStore } from '../../lib/stores/sqlite-webhooks.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { attemptOf, delivery, webhookStoreConformance } from '../../lib/testing/webhooks.js'

webhookStoreConformance(tapTest(t), { store: () => new MemoryWebhookStore() })

// the twin opens the same file through a connection of its own, as another process would
const files = new WeakMap<object, string>()
webhookStoreConformance(tapTest(t), {
  store: (t) => {
    const file = join(t.testdir(), 'webhooks.db')
    const store = sqliteStores(file).webhookStore
    files.set(store, file)
    return store
  },
  twin: (_t, first) => new SqliteWebhookStore(files.get(first)!)
})

t.test('SQLite: the outbox survives closing and opening the file again', async (t) => {
  const file = join(t.testdir(), 'outbox.db')
  const first = new SqliteWebhookStore(file)
  t.equal(first.ownsConnection, true)
  await first.probe()
  const pending = delivery()
  const done = delivery()
  await first.enqueue([pending, done])
  const claimed = await first.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now(), 10)
  for (const one of claimed) {
    await first.record(attemptOf(one, one.id === done.id ? 'delivered' : 'retried'), 'a', { dueAt: 0, retentionMs: 3_600_000 })
  }
  await first.close()
  await first.close()
  await t.rejects(first.attempts({ limit: 1 }), { code: 'FA_STORE_CLOSED' })

  const again = new SqliteWebhookStore(`file:${file}`)
  t.teardown(() => again.close())
  t.equal((await again.attempts({ limit: 10 })).attempts.length, 2)
  const [due] = await again.claim({ owner: 'b', until: Date.now() + 60_000 }, Date.now(), 10)
  t.same(due, { ...claimed.find((d) => d.id === pending.id)!, attempt: 2 }, 'the pending one, as it was')
})

t.test('SQLite: on a Database of yours, under a table prefix; left open', async (t) => {
  const db = new Database(join(t.testdir(), 'mine.db'))
  t.teardown(() => db.close())
  const store = new SqliteWebhookStore(db, { tablePrefix: 'app_' })
  t.equal(store.ownsConnection, false)
  await store.enqueue([delivery()])
  t.ok(db.prepare("SELECT count(*) AS n FROM app_webhook_deliveries").get())
  await store.close()
  t.equal(db.open, true)
  t.throws(() => new SqliteWebhookStore(db, { tablePrefix: 'bad-prefix' }), { name: 'TypeError', message: /tablePrefix/ })
})

t.test('memory: memoryStores() gives an outbox, bounded in what it keeps once ended', async (t) => {
  t.ok(memoryStores().webhookStore instanceof MemoryWebhookStore)
  t.equal((memoryStores().webhookStore as MemoryWebhookStore).maxRetainedDeliveries, DEFAULT_MAX_RETAINED_DELIVERIES)
  t.equal((memoryStores({ maxRetainedDeliveries: 3 }).webhookStore as MemoryWebhookStore).maxRetainedDeliveries, 3)
  t.throws(() => new MemoryWebhookStore({ maxRetainedDeliveries: 0 }), /maxRetainedDeliveries must be a positive integer/)

  const store = new MemoryWebhookStore({ maxRetainedDeliveries: 2 })
  const all = [delivery({ runId: 'r1', dueAt: 1 }), delivery({ runId: 'r2', dueAt: 2 }), delivery({ runId: 'r3', dueAt: 3 })]
  await store.enqueue(all)
  for (const claimed of await store.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now(), 10)) {
    await store.record(attemptOf(claimed, 'delivered'), 'a', { dueAt: 0, retentionMs: 3_600_000 })
  }
  t.same((await store.attempts({ limit: 10 })).attempts.map((a) => a.runId), ['r3', 'r2'], 'the longest-ended went first')
  await store.enqueue([all[0]!])
  t.equal((await store.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now(), 10)).length, 1, 'gone: its id is free again')
})

t.test('memory: the attempts of deliveries gone are compacted away in bulk', async (t) => {
  const store = new MemoryWebhookStore({ maxRetainedDeliveries: 1 })
  const all = Array.from({ length: 1_100 }, (_, i) => delivery({ runId: `r${i}` }))
  await store.enqueue(all)
  const claimed = await store.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now(), 2_000)
  t.equal(claimed.length, 1_100)
  for (const one of claimed) await store.record(attemptOf(one, 'delivered'), 'a', { dueAt: 0, retentionMs: 3_600_000 })
  const page = await store.attempts({ limit: 5 })
  t.same(page, { attempts: [attemptOf(claimed.at(-1)!, 'delivered')], nextCursor: null })
})
