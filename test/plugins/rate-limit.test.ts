import t from 'tap'
import Fastify from 'fastify'
import fastifyRateLimit from '@fastify/rate-limit'
import { Redis } from 'ioredis'
import fastifyAgents from '../../index.js'
import { build, echo, sleep } from '../helper.js'
import { redisUrl, requireRedis, withRedisPrefix } from '../helpers/services.js'

const limit = (maxRequests: number, intervalMs = 60_000) => ({ rateLimit: { maxRequests, intervalMs } })

t.test('over the budget: 429 RATE_LIMITED in the contract shape with retry-after and x-ratelimit-*', async (t) => {
  const service = build(t, limit(2))
  const first = await service.app.inject({ method: 'GET', url: '/v1/agents' })
  t.equal(first.statusCode, 200)
  t.equal(first.headers['x-ratelimit-limit'], '2')
  t.equal(first.headers['x-ratelimit-remaining'], '1')
  t.equal(first.headers['x-ratelimit-reset'], '60')
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).headers['x-ratelimit-remaining'], '0')
  const limited = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })
  t.equal(limited.statusCode, 429)
  t.equal(limited.headers['retry-after'], '60')
  t.equal(limited.headers['x-ratelimit-limit'], '2')
  t.equal(limited.headers['x-ratelimit-remaining'], '0')
  t.equal(limited.headers['x-ratelimit-reset'], '60')
  t.ok(limited.headers['x-request-id'])
  t.match(limited.json(), { statusCode: 429, error: 'Too Many Requests', code: 'RATE_LIMITED', message: 'Rate limit exceeded, retry in 1 minute', requestId: limited.headers['x-request-id'] })
  t.type(limited.json().traceId, 'string')
})

t.test('the budget comes back after the interval', async (t) => {
  const service = build(t, limit(1, 300))
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 429)
  await sleep(400)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 200)
})

t.test('health is exempt; every other request counts, 404s and 401s too', async (t) => {
  const service = build(t, { ...limit(3), auth: { strategy: 'api-key', keys: ['k1'] } })
  for (let i = 0; i < 10; i++) {
    const health = await service.app.inject({ method: 'GET', url: i % 2 === 0 ? '/health' : '/v1/health' })
    t.equal(health.statusCode, 200)
    t.equal(health.headers['x-ratelimit-remaining'], undefined)
  }
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 401)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': 'wrong' } })).statusCode, 401)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/nothing-here' })).statusCode, 401)
  const fourth = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': 'wrong-again' } })
  t.equal(fourth.statusCode, 429, 'guessing keys from one address is limited')
})

t.test('keyed by principal: one key spent does not limit another', async (t) => {
  const service = build(t, { ...limit(2), auth: { strategy: 'api-key', keys: ['key-a', 'key-b'] } })
  const as = (key: string) => service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': key } })
  t.equal((await as('key-a')).statusCode, 200)
  t.equal((await as('key-a')).statusCode, 200)
  t.equal((await as('key-a')).statusCode, 429)
  t.equal((await as('key-b')).statusCode, 200)
  // the same principal from another address shares its budget
  const elsewhere = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': 'key-a' }, remoteAddress: '10.9.8.7' })
  t.equal(elsewhere.statusCode, 429)
})

t.test('without auth: keyed by client IP; X-Forwarded-For only with trustProxy', async (t) => {
  const untrusted = build(t, limit(1))
  const from = (service: typeof untrusted, forwardedFor: string) =>
    service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-forwarded-for': forwardedFor } })
  t.equal((await from(untrusted, '1.1.1.1')).statusCode, 200)
  t.equal((await from(untrusted, '2.2.2.2')).statusCode, 429, 'a client cannot buy a new budget with a header')

  const trusted = build(t, { ...limit(1), trustProxy: true })
  t.equal((await from(trusted, '1.1.1.1')).statusCode, 200)
  t.equal((await from(trusted, '1.1.1.1')).statusCode, 429)
  t.equal((await from(trusted, '2.2.2.2')).statusCode, 200, 'behind a trusted proxy each client has its own budget')
})

t.test('Admin API requests count too', async (t) => {
  const service = build(t, { ...limit(2), adminApi: { enabled: true, bearerToken: 'admin-token' } })
  const admin = { authorization: 'Bearer admin-token' }
  t.equal((await service.app.inject({ method: 'GET', url: '/admin/stats', headers: admin })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/admin/stats', headers: admin })).statusCode, 200)
  const limited = await service.app.inject({ method: 'GET', url: '/admin/stats', headers: admin })
  t.equal(limited.statusCode, 429)
  t.equal(limited.json().code, 'RATE_LIMITED')
})

t.test('plugin mode: refused when the host app registers @fastify/rate-limit itself', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyRateLimit, { max: 100, timeWindow: 1000 })
  await t.rejects(async () => { await app.register(fastifyAgents, { agents: { echo }, ...limit(5) }) }, /\/rateLimit cannot be used when the app registers @fastify\/rate-limit itself/)
})

t.test('plugin mode without rateLimit leaves the host app\'s routes alone', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.get('/mine', async () => ({ ok: true }))
  await app.register(fastifyAgents, { agents: { echo }, ...limit(1) })
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 429)
  for (let i = 0; i < 3; i++) t.equal((await app.inject({ method: 'GET', url: '/mine' })).statusCode, 200)
})

t.test('with redis the budget is shared by every instance', async (t) => {
  if (!await requireRedis(t)) return
  const prefix = withRedisPrefix(t)
  // two clients, as two processes would have; the key prefix keeps this test's counters to itself
  const clientA = new Redis(redisUrl(), { keyPrefix: prefix })
  const clientB = new Redis(redisUrl(), { keyPrefix: prefix })
  t.teardown(async () => { await clientA.quit(); await clientB.quit() })
  const auth = { strategy: 'api-key' as const, keys: ['shared-key'] }
  const one = build(t, { auth, rateLimit: { maxRequests: 3, intervalMs: 60_000, redis: clientA } })
  const two = build(t, { auth, rateLimit: { maxRequests: 3, intervalMs: 60_000, redis: clientB } })
  const get = (service: typeof one) => service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': 'shared-key' } })
  t.equal((await get(one)).headers['x-ratelimit-remaining'], '2')
  t.equal((await get(two)).headers['x-ratelimit-remaining'], '1')
  t.equal((await get(one)).headers['x-ratelimit-remaining'], '0')
  const limited = await get(two)
  t.equal(limited.statusCode, 429)
  t.equal(limited.json().code, 'RATE_LIMITED')
  t.ok(Number(limited.headers['retry-after']) > 0)
  t.equal((await get(one)).statusCode, 429)
  const keys = await clientA.keys(`${prefix}fastify-agents:rate-limit:*`)
  t.equal(keys.length, 1, 'one counter, under our namespace')
  t.match(keys[0], /principal:key_[0-9a-f]{12}$/)

  // concurrent requests on both instances never overspend the shared budget
  const burst = await Promise.all(Array.from({ length: 10 }, (_, i) => get(i % 2 === 0 ? one : two)))
  t.same(burst.map((r) => r.statusCode), Array(10).fill(429))
})

t.test('concurrent requests on both instances spend exactly the budget', async (t) => {
  if (!await requireRedis(t)) return
  const prefix = withRedisPrefix(t)
  const clientA = new Redis(redisUrl(), { keyPrefix: prefix })
  const clientB = new Redis(redisUrl(), { keyPrefix: prefix })
  t.teardown(async () => { await clientA.quit(); await clientB.quit() })
  const one = build(t, { rateLimit: { maxRequests: 5, intervalMs: 60_000, redis: clientA } })
  const two = build(t, { rateLimit: { maxRequests: 5, intervalMs: 60_000, redis: clientB } })
  const burst = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? one : two).app.inject({ method: 'GET', url: '/v1/agents' })))
  t.equal(burst.filter((r) => r.statusCode === 200).length, 5)
  t.equal(burst.filter((r) => r.statusCode === 429).length, 7)
})

t.test('an unreachable redis lets requests through rather than failing them', async (t) => {
  // nothing listens on port 1; no retries and no offline queue, so every command fails at once
  const broken = new Redis({ port: 1, host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  broken.on('error', () => {})
  t.teardown(() => broken.disconnect())
  const service = build(t, { rateLimit: { maxRequests: 1, intervalMs: 60_000, redis: broken } })
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 200)
})
