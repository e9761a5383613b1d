// Schedules fired by instances sharing one Redis prefix (docs/schedules.md): three over several due times, and one
// catch-up after every instance was down. The store's conformance: schedules-redis.test.ts.
import { Redis } from 'ioredis'
import t from 'tap'
import { redisStores } from '../../lib/stores/redis.js'
import { redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'
import { catchUpAfterDowntime, threeInstances } from './schedule-instances.js'

if (await requireRedis(t)) {
  const admin = new Redis(redisUrl())
  t.teardown(() => admin.quit())

  t.test('three instances on one prefix: each due time one run, none twice', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    await threeInstances(t, () => redisStores(redisUrl(), { prefix }))
  })

  t.test('every instance down over several due times: one catch-up run when they come back', async (t) => {
    const prefix = withRedisPrefix(t, admin)
    await catchUpAfterDowntime(t, () => redisStores(redisUrl(), { prefix }))
  })
}
