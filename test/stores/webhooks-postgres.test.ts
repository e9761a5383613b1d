// The PostgreSQL outbox of webhook deliveries (docs/webhooks.md): the conformance suite with a twin on its own pool, and
// two instances of the service sharing it.
import pg from 'pg'
import t from 'tap'
import { tapTest } from '../helper.js'
import { PostgresWebhookStore } from '../../lib/stores/postgres-webhooks.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { attemptOf, delivery, webhookStoreConformance } from '../../lib/testing/webhooks.js'
import { deliveredOnceAcrossInstances } from './webhook-instances.js'

if (await requirePg(t)) {
  const shared = new pg.Pool({ connectionString: pgUrl(), max: 10 })
  t.teardown(() => shared.end())

  // the twin is another instance: a pool of its own on the same schema
  webhookStoreConformance(tapTest(t), {
    store: (t) => postgresStores(shared, { schema: withPgSchema(t, shared) }).webhookStore,
    twin: (_t, first) => new PostgresWebhookStore({ connectionString: pgUrl(), max: 3 }, { schema: (first as PostgresWebhookStore).schema })
  })

  t.test('two instances sharing the outbox: each event delivered once', async (t) => {
    const schema = withPgSchema(t, shared)
    const other = new pg.Pool({ connectionString: pgUrl(), max: 4 })
    t.teardown(() => other.end())
    await deliveredOnceAcrossInstances(t, [new PostgresWebhookStore(shared, { schema }), new PostgresWebhookStore(other, { schema })])
  })

  t.test('a URL makes a pool of its own, closed with the store; under a table prefix; the outbox survives it', async (t) => {
    const schema = withPgSchema(t, shared)
    const first = new PostgresWebhookStore(pgUrl(), { schema, tablePrefix: 'app_' })
    t.equal(first.ownsConnection, true)
    await first.probe()
    const one = delivery()
    await first.enqueue([one])
    await first.enqueue([])
    const [claimed] = await first.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now(), 10)
    await first.record(attemptOf(claimed!, 'retried'), 'a', { dueAt: 0, retentionMs: 1 })
    await first.close()
    await first.close()
    await t.rejects(first.attempts({ limit: 1 }), { code: 'FA_STORE_CLOSED' })
    const { rows } = await shared.query(`SELECT count(*)::integer AS n FROM ${schema}.app_webhook_deliveries`)
    t.equal(rows[0].n, 1)
    const again = new PostgresWebhookStore(shared, { schema, tablePrefix: 'app_' })
    t.equal(again.ownsConnection, false)
    t.equal((await again.claim({ owner: 'b', until: Date.now() + 60_000 }, Date.now(), 10))[0]!.attempt, 2)
    await again.close()
    t.throws(() => new PostgresWebhookStore(shared, { schema: 'bad"schema' }), { name: 'TypeError', message: /schema/ })
  })

  t.test('a server that cannot be reached: the call fails, and the next one tries again', async (t) => {
    const store = new PostgresWebhookStore('postgres://postgres@127.0.0.1:1/test')
    t.teardown(() => store.close())
    await t.rejects(store.attempts({ limit: 1 }))
    await t.rejects(store.probe())
  })
}
