import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { RedisConnection, RedisIdempotencyStore, RedisSessionStore, redisStores } from '../../lib/stores/redis.js'
import { redisReachable, redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { idempotencyStoreConformance, sessionStoreConformance } from './conformance.js'
import { runStoreConformance } from './run-conformance.js'

const OPTIONS = { ttlMs: 60_000, leaseMs: 60_000 }

t.test('an unreachable Redis is reported as such', async (t) => {
  t.equal(await redisReachable('redis://127.0.0.1:1'), false)
})

if (await requireRedis(t)) {
  const shared = new Redis(redisUrl())
  t.teardown(() => shared.quit())

  const stores = (t: Test) => redisStores(shared, { prefix: withRedisPrefix(t, shared) })
  sessionStoreConformance(t, (t) => stores(t).sessionStore)
  idempotencyStoreConformance(t, (t) => stores(t).idempotency.store)
  // the twin is another instance: a client of its own on the same prefix
  runStoreConformance(t, {
    store: (t) => stores(t).runStore,
    twin: (t, first) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisRunStore(client, { prefix: (first as RedisRunStore).prefix })
    }
  })

  t.test('two stores sharing a prefix: one reserver wins across both', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const other = new Redis(redisUrl())
    t.teardown(() => other.quit())
    const a = new RedisIdempotencyStore(shared, { prefix })
    const b = new RedisIdempotencyStore(other, { prefix })
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).reserve('k1', `fp-${i}`, OPTIONS)))
    t.equal(results.filter((r) => r.outcome === 'reserved').length, 1)
    await a.complete('k1', { status: 200, body: 'done', contentType: 'text/plain' }, 60_000)
    t.match(await b.get('k1'), { state: 'completed', response: { body: 'done' } })
    const c = new RedisIdempotencyStore(shared, { prefix: `${prefix}other:` })
    t.strictSame(await c.reserve('k1', 'fp', OPTIONS), { outcome: 'reserved' }, 'another prefix is another namespace')
  })

  t.test('list() drops ids whose session expired, across several batches', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const store = new RedisSessionStore(shared, { prefix })
    for (const id of ['a', 'b', 'c', 'd', 'e', 'f', 'g']) {
      await store.create({ id, agent: null, principal: 'p', metadata: {} }, ['b', 'c', 'd', 'f'].includes(id) ? 30 : 60_000)
      await sleep(2)
    }
    await sleep(50)
    const first = await store.list({ limit: 1 })
    t.same(first.sessions.map((s) => s.id), ['g'])
    const second = await store.list({ limit: 1, cursor: first.nextCursor as string })
    t.same(second.sessions.map((s) => s.id), ['e'])
    const rest = await store.list({ limit: 5, cursor: second.nextCursor as string })
    t.same(rest.sessions.map((s) => s.id), ['a'])
    t.equal(rest.nextCursor, null)
    t.same(await shared.zrange(`${prefix}sessions`, '0', '-1'), ['a', 'e', 'g'], 'expired ids removed from the index')
  })

  t.test('a client you pass is never closed; one made from a URL is quit with the last store', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const mine = redisStores(shared, { prefix })
    await mine.sessionStore.create({ id: 's1', agent: null, principal: 'p', metadata: {} }, 60_000)
    await mine.sessionStore.close?.()
    await mine.sessionStore.close?.()
    await mine.idempotency.store.close?.()
    t.equal(shared.status, 'ready')
    await t.rejects(mine.sessionStore.get('s1'), { code: 'FA_STORE_CLOSED' })

    const connection = new RedisConnection(redisUrl())
    const sessions = new RedisSessionStore(connection, { prefix })
    const idempotency = new RedisIdempotencyStore(connection, { prefix })
    t.match(await sessions.get('s1'), { id: 's1' })
    await idempotency.reserve('k1', 'fp', OPTIONS)
    const probe = {}
    const client = connection.acquire(probe)
    await connection.release(probe)
    await sessions.close()
    t.equal(client.status, 'ready', 'the idempotency store still uses it')
    await idempotency.close()
    if (client.status !== 'end') await once(client, 'end')
    t.equal(client.status, 'end')

    const owned = redisStores(redisUrl(), { prefix })
    t.match(await owned.idempotency.store.get('k1'), { state: 'in_progress' })
    await owned.idempotency.store.close?.()
    await owned.sessionStore.close?.()
  })

  t.test('scripts are sent in full when the server does not know them', async (t) => {
    const prefix = withRedisPrefix(t, shared)
    const failing = (message: string): Redis => new Proxy(shared, {
      get (target, property) {
        if (property === 'evalsha') return async () => { throw new Error(message) }
        const value = Reflect.get(target, property) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
    })
    const store = new RedisIdempotencyStore(failing('NOSCRIPT No matching script. Please use EVAL.'), { prefix })
    t.strictSame(await store.reserve('k1', 'fp', OPTIONS), { outcome: 'reserved' })
    const broken = new RedisIdempotencyStore(failing('ERR something else'), { prefix })
    await t.rejects(broken.reserve('k1', 'fp', OPTIONS), { message: 'ERR something else' })
  })

  t.test("keys live under 'fa:' unless told otherwise", async (t) => {
    const store = new RedisIdempotencyStore(shared)
    const key = `default-prefix-${process.pid}-${Date.now()}`
    await store.reserve(key, 'fp', OPTIONS)
    t.equal(await shared.exists(`fa:idem:${key}`), 1)
    await store.release(key)
    t.equal(await shared.exists(`fa:idem:${key}`), 0)
    await store.close()
  })

  t.test('bad arguments throw a TypeError naming the problem', async (t) => {
    t.throws(() => redisStores('http://localhost:6379'), { name: 'TypeError', message: /redis:\/\// })
    t.throws(() => redisStores(42 as unknown as string), TypeError)
    t.throws(() => redisStores({} as unknown as string), TypeError)
    t.throws(() => new RedisSessionStore(shared, { prefix: 42 as unknown as string }), { name: 'TypeError', message: /prefix/ })
  })
}
