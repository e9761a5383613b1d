// The PostgreSQL schedules (docs/schedules.md): the conformance suite in a schema of its own, with a twin on its own pool.
import pg from 'pg'
import t from 'tap'
import { PostgresScheduleStore } from '../../lib/stores/postgres-schedules.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { tapTest } from '../helper.js'
import { scheduleStoreConformance } from '../../lib/testing/schedules.js'

if (await requirePg(t)) {
  const shared = new pg.Pool({ connectionString: pgUrl(), max: 10 })
  t.teardown(() => shared.end())

  scheduleStoreConformance(tapTest(t), {
    store: (t) => postgresStores(shared, { schema: withPgSchema(t, shared) }).scheduleStore,
    twin: (_t, first) => new PostgresScheduleStore({ connectionString: pgUrl(), max: 5 }, { schema: (first as PostgresScheduleStore).schema })
  })

  t.test('a URL makes a pool of its own, closed with the store; the schedules survive it', async (t) => {
    const schema = withPgSchema(t, shared)
    const first = new PostgresScheduleStore(pgUrl(), { schema, tablePrefix: 'app_' })
    t.equal(first.ownsConnection, true)
    await first.probe()
    first.watch(() => {})
    const inserted = await first.insert({ id: 's1', principal: 'p', createdAt: 1, wakeAt: 5, state: { schedule: {} as never, fire: null, waiting: null, runs: [] } })
    await first.close()
    await t.rejects(first.get('s1'), { code: 'FA_STORE_CLOSED' })
    const again = new PostgresScheduleStore(shared, { schema, tablePrefix: 'app_' })
    t.teardown(() => again.close())
    t.same(await again.get('s1'), inserted)
  })
}
