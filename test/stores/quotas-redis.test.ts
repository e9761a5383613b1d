// The Redis counts of the `quotas` option (docs/auth-and-traffic.md): the conformance suite under a prefix of its own with a twin on
// its own client, and two instances of the service sharing them.
import type { FastifyBaseLogger } from 'fastify'
import { Redis } from 'ioredis'
import t from 'tap'
import { tapTest } from '../helper.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { RedisQuotaStore } from '../../lib/stores/redis-quotas.js'
import { redisStores } from '../../lib/stores/redis.js'
import { redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'
import { quotaStoreConformance } from '../../lib/testing/quotas.js'
import { quotasAcrossInstances } from './quota-instances.js'

if (await requireRedis(t)) {
  const shared = new Redis(redisUrl())
  t.teardown(() => shared.quit())

  // the twin is another instance: a client of its own on the same prefix
  quotaStoreConformance(tapTest(t), {
    store: (t) => redisStores(shared, { prefix: withRedisPrefix(t, shared) }).quotaStore,
    twin: (t, first) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisQuotaStore(client, { prefix: (first as RedisQuotaStore).prefix })
    }
  })

  t.test('two services sharing the counts: one principal\'s runs in progress counted across both', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const other = new Redis(redisUrl())
    t.teardown(() => other.quit())
    const stores = memoryStores()
    await quotasAcrossInstances(t, [
      { ...stores, quotaStore: new RedisQuotaStore(shared, { prefix }) },
      { ...stores, quotaStore: new RedisQuotaStore(other, { prefix }) }
    ])
  })

  t.test('a URL makes a client of its own, quit with the store; every key under the prefix, a window\'s with a TTL; none left by a purge', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisQuotaStore(redisUrl(), { prefix })
    t.equal(store.ownsConnection, true)
    store.useLogger({ warn: () => {}, info: () => {} } as unknown as FastifyBaseLogger)
    await store.probe()
    const now = Date.now()
    await store.acquire({ principal: 'p:1', slotId: 'r' }, 1, now, now + 1_000)
    await store.addTokens('p:1', { start: now - 1_000, end: now + 1_000 }, 3)
    const ttl = await shared.pttl(`${prefix}quota:tokens:${now - 1_000}:p:1`)
    t.ok(ttl > 0 && ttl <= 4_000, `the window expires on its own (${ttl} ms)`)
    t.ok((await shared.keys('*')).filter((k) => k.includes('quota:')).every((k) => k.startsWith(prefix)))
    t.equal(await store.purge(now + 1_000, 100), 2)
    t.same((await shared.keys(`${prefix}*`)), [], 'nothing left')
    await store.close()
    await store.close()
    await t.rejects(store.tokens('p', 0), { code: 'FA_STORE_CLOSED' })
    t.throws(() => new RedisQuotaStore(shared, { prefix: 1 as unknown as string }), { name: 'TypeError', message: /prefix/ })
    t.equal(new RedisQuotaStore(shared).prefix, 'fa:', 'the default prefix')
  })

  t.test('the script is sent again when the server forgot it', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisQuotaStore(shared, { prefix })
    await shared.script('FLUSH')
    t.equal(await store.acquire({ principal: 'p', slotId: 'r' }, 1, Date.now(), Date.now() + 1_000), true)
    await t.rejects(store.acquire({ principal: 'p', slotId: 'r' }, 1, Number.NaN, 1), /ERR/, 'another error is the caller\'s')
  })
}
