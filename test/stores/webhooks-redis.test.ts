// The Redis outbox of webhook deliveries (docs/webhooks.md): the conformance suite with a twin on its own client, and
// two instances of the service sharing it.
import type { FastifyBaseLogger } from 'fastify'
import { Redis } from 'ioredis'
import t from 'tap'
import { tapTest } from '../helper.js'
import { RedisWebhookStore } from '../../lib/stores/redis-webhooks.js'
import { redisStores } from '../../lib/stores/redis.js'
import { redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'
import { attemptOf, delivery, webhookStoreConformance } from '../../lib/testing/webhooks.js'
import { deliveredOnceAcrossInstances } from './webhook-instances.js'

if (await requireRedis(t)) {
  const shared = new Redis(redisUrl())
  t.teardown(() => shared.quit())

  // the twin is another instance: a client of its own on the same prefix
  webhookStoreConformance(tapTest(t), {
    store: (t) => redisStores(shared, { prefix: withRedisPrefix(t, shared) }).webhookStore,
    twin: (t, first) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisWebhookStore(client, { prefix: (first as RedisWebhookStore).prefix })
    }
  })

  t.test('two instances sharing the outbox: each event delivered once', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const other = new Redis(redisUrl())
    t.teardown(() => other.quit())
    await deliveredOnceAcrossInstances(t, [new RedisWebhookStore(shared, { prefix }), new RedisWebhookStore(other, { prefix })])
  })

  t.test('a URL makes a client of its own, quit with the store; every key under the prefix, none left by a purge', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisWebhookStore(redisUrl(), { prefix })
    t.equal(store.ownsConnection, true)
    store.useLogger({ warn: () => {}, info: () => {} } as unknown as FastifyBaseLogger)
    await store.probe()
    // a large backlog goes in several scripts
    const many = Array.from({ length: 1_200 }, () => delivery({ dueAt: 0 }))
    await store.enqueue(many)
    const claimed = await store.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now(), 2_000)
    t.equal(claimed.length, 1_200)
    for (const one of claimed.slice(0, 300)) await store.record(attemptOf(one, 'delivered'), 'a', { dueAt: 0, retentionMs: 1 })
    const page = await store.attempts({ limit: 500, outcome: 'delivered' })
    t.equal(page.attempts.length, 300, 'a page gathered over several reads')
    t.equal(await store.purge(Date.now() + 1_000, 1_000), 300)
    const keys = await shared.keys(`${prefix}*`)
    t.ok(keys.every((key) => key.startsWith(prefix)))
    t.notOk(keys.some((key) => key.startsWith(`${prefix}wh-attempt`)), 'no attempt left, nor an index of them')
    await store.close()
    await store.close()
    await t.rejects(store.attempts({ limit: 1 }), { code: 'FA_STORE_CLOSED' })
    t.throws(() => new RedisWebhookStore(shared, { prefix: 1 as unknown as string }), { name: 'TypeError', message: /prefix/ })
    t.equal(new RedisWebhookStore(shared).prefix, 'fa:', 'the default prefix')
    const gone = new Redis(redisUrl())
    await gone.quit()
    await t.rejects(new RedisWebhookStore(gone, { prefix }).purge(0, 1), /Connection is closed/, 'a failure other than a forgotten script')
  })

  t.test('scripts the server forgot are sent again', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisWebhookStore(shared, { prefix })
    await shared.script('FLUSH')
    await store.enqueue([delivery()])
    t.equal((await store.claim({ owner: 'a', until: Date.now() + 60_000 }, Date.now() + 86_400_000, 10)).length, 1)
  })
}
