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
    // an id no other test uses: the shared server holds the keys of every test running beside this one
    const id = `s-${Math.random().toString(36).slice(2, 10)}`
    await store.insert({ id, principal: 'p', createdAt: 1, wakeAt: 5, state: { schedule: {} as never, fire: null, waiting: null, runs: [] } })
    const keys = await shared.keys(`*${id}*`)
    t.ok(keys.length > 0, 'the row is stored under its id')
    t.ok(keys.every((key) => key.startsWith(prefix)), 'under the prefix')
    t.ok((await shared.keys(`${prefix}*`)).length > 0)
    await store.close()
    await t.rejects(store.get(id), { code: 'FA_STORE_CLOSED' })
  })
}
