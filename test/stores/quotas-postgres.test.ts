// The PostgreSQL counts of the `quotas` option (docs/auth-and-traffic.md): the conformance suite in a schema of its own with a twin
// on its own pool, and two instances of the service on one schema enforcing one principal's quota between them.
import pg from 'pg'
import t from 'tap'
import { tapTest } from '../helper.js'
import { PostgresQuotaStore } from '../../lib/stores/postgres-quotas.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { quotaStoreConformance } from '../../lib/testing/quotas.js'
import { quotasAcrossInstances } from './quota-instances.js'

if (await requirePg(t)) {
  const shared = new pg.Pool({ connectionString: pgUrl(), max: 10 })
  t.teardown(() => shared.end())

  // the twin is another instance: a pool of its own on the same schema
  quotaStoreConformance(tapTest(t), {
    store: (t) => postgresStores(shared, { schema: withPgSchema(t, shared) }).quotaStore,
    twin: (_t, first) => new PostgresQuotaStore({ connectionString: pgUrl(), max: 5 }, { schema: (first as PostgresQuotaStore).schema })
  })

  t.test('two services on one schema: one principal\'s runs in progress counted across both', async (t) => {
    const schema = withPgSchema(t, shared)
    const other = new pg.Pool({ connectionString: pgUrl(), max: 4 })
    t.teardown(() => other.end())
    // runs and sessions in memory, shared in-process; the quota counts in PostgreSQL, each instance on its own pool
    const stores = memoryStores()
    await quotasAcrossInstances(t, [
      { ...stores, quotaStore: new PostgresQuotaStore(shared, { schema }) },
      { ...stores, quotaStore: new PostgresQuotaStore(other, { schema }) }
    ])
  })

  t.test('a URL makes a pool of its own, closed with the store; under a table prefix; the counts survive it', async (t) => {
    const schema = withPgSchema(t, shared)
    const first = new PostgresQuotaStore(pgUrl(), { schema, tablePrefix: 'app_' })
    t.equal(first.ownsConnection, true)
    await first.probe()
    await first.addTokens('p', { start: 0, end: 1 }, 5)
    await first.close()
    await first.close()
    await t.rejects(first.tokens('p', 0), { code: 'FA_STORE_CLOSED' })
    const again = new PostgresQuotaStore(shared, { schema, tablePrefix: 'app_' })
    t.equal(again.ownsConnection, false)
    t.equal(await again.tokens('p', 0), 5)
    await again.close()
    t.throws(() => new PostgresQuotaStore(shared, { schema: 'bad"schema' }), { name: 'TypeError', message: /schema/ })
  })

  t.test('a server that cannot be reached: the call fails (an acquire too), and the next one tries again', async (t) => {
    const store = new PostgresQuotaStore('postgres://postgres@127.0.0.1:1/test')
    t.teardown(() => store.close())
    await t.rejects(store.tokens('p', 0))
    await t.rejects(store.probe())
  })

  t.test('an acquire whose transaction fails gives its connection back broken, and rolls back', async (t) => {
    const schema = withPgSchema(t, shared)
    const store = new PostgresQuotaStore(shared, { schema })
    t.teardown(() => store.close())
    await t.rejects(store.acquire({ principal: 'p', slotId: 'r' }, 1, Date.now(), Number.NaN))
    t.equal(await store.acquire({ principal: 'p', slotId: 'r' }, 1, Date.now(), Date.now() + 1_000), true)
  })
}
