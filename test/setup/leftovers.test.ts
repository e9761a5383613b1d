// The guard against tests that leave data where a developer's own instance keeps its own (leftovers.ts, run by tap
// before and after the suite): what it reports as made by the suite.
import t from 'tap'
import { madeSince, snapshot } from './leftovers.js'
import { pgReachable, redisReachable } from '../helpers/services.js'

t.test('what is there after and was not before, for each server that answered both times', async (t) => {
  const before = { tables: ['fa_audit'], keys: ['fa:session:mine'] }
  t.same(madeSince(before, { tables: ['fa_audit'], keys: ['fa:session:mine'] }), [], 'a developer\'s own data is no leftover')
  t.same(madeSince(before, { tables: ['fa_audit', 'fa_runs'], keys: ['fa:idem:k', 'fa:session:mine'] }), [
    'PostgreSQL (PG_URL\'s database): table public.fa_runs',
    'Redis (REDIS_URL\'s database): key fa:idem:k'
  ])
  t.same(madeSince(before, { tables: [], keys: [] }), [], 'what the suite removed is not its business')
  t.same(madeSince({ tables: null, keys: null }, { tables: ['fa_runs'], keys: ['fa:x'] }), [], 'a server down before: nothing to compare')
  t.same(madeSince(before, { tables: null, keys: null }), [], 'a server down after: nothing to compare')
})

t.test('a snapshot reads both servers (null for one that does not answer)', async (t) => {
  const now = await snapshot()
  t.equal(Array.isArray(now.tables), await pgReachable())
  t.equal(Array.isArray(now.keys), await redisReachable())
  t.ok((now.tables ?? []).every((name) => name.startsWith('fa_')))
  t.ok((now.keys ?? []).every((key) => key.startsWith('fa:')))
})
