// Schedules fired by instances sharing one PostgreSQL schema (docs/schedules.md): three over several due times, and
// one catch-up after every instance was down. The store's conformance: schedules-postgres.test.ts.
import pg from 'pg'
import t from 'tap'
import { postgresStores } from '../../lib/stores/postgres.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { catchUpAfterDowntime, threeInstances } from './schedule-instances.js'

if (await requirePg(t)) {
  const admin = new pg.Pool({ connectionString: pgUrl(), max: 2 })
  t.teardown(() => admin.end())

  t.test('three instances on one schema: each due time one run, none twice', async (t) => {
    const schema = withPgSchema(t, admin)
    await threeInstances(t, () => postgresStores(pgUrl(), { schema }))
  })

  t.test('every instance down over several due times: one catch-up run when they come back', async (t) => {
    const schema = withPgSchema(t, admin)
    await catchUpAfterDowntime(t, () => postgresStores(pgUrl(), { schema }))
  })
}
