// The Redis schedules (docs/schedules.md): the conformance suite under a prefix of its own, with a twin on its own client.
import { Redis } from 'ioredis'
import t from 'tap'
import { RedisScheduleStore } from '../../lib/stores/redis-schedules.js'
import { redisStores } from '../../lib/stores/redis.js'
import { redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'
import { tapTest } from '../helper.js'
import { scheduleStoreConformance } from '../../lib/testing/schedules.js'

if (await requireRedis(t)) {
  const shared = new Redis(redisUrl())
  t.teardown(() => shared.quit())

  scheduleStoreConformance(tapTest(t), {
    store: (t) => redisStores(shared, { prefix: withRedisPrefix(t, shared) }).scheduleStore,
    twin: (t, first) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisScheduleStore(client, { prefix: (first as RedisScheduleStore).prefix })
    }
  })

  t.test('a URL makes a client of its own, quit with the store; every key under the prefix', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisScheduleStore(redisUrl(), { prefix })
    t.equal(store.ownsConnection, true)
    await store.probe()
    store.watch(() => {})
    await store.insert({ id: 's1', principal: 'p', createdAt: 1, wakeAt: 5, state: { schedule: {} as never, fire: null, waiting: null, runs: [] } })
    const keys = await shared.keys('*')
    t.ok(keys.filter((key) => key.includes('schedule')).every((key) => key.startsWith(prefix)))
    await store.close()
    await t.rejects(store.get('s1'), { code: 'FA_STORE_CLOSED' })
  })
}
