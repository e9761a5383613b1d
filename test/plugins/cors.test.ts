import t from 'tap'
import { CORS_ALLOWED_HEADERS, CORS_EXPOSED_HEADERS } from '../../plugins/cors.js'
import { build, parseSse } from '../helper.js'

const ORIGIN = 'https://app.example'
const preflight = (origin: string, extra: Record<string, string> = {}) => ({
  origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, idempotency-key', ...extra
})

function corsHeaders (headers: Record<string, unknown>): string[] {
  return Object.keys(headers).filter((h) => h.startsWith('access-control-'))
}

t.test('without the cors option: no CORS headers at all', async (t) => {
  const service = build(t)
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: ORIGIN } })
  t.equal(res.statusCode, 200)
  t.same(corsHeaders(res.headers), [])
  const pre = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents', headers: preflight(ORIGIN) })
  t.same(corsHeaders(pre.headers), [])
  t.equal(pre.statusCode, 405, 'OPTIONS is no method of ours without CORS')
  t.ok(pre.headers['x-request-id'])
})

t.test('one origin: preflights allow the contract\'s methods and headers', async (t) => {
  const service = build(t, { cors: ORIGIN })
  const res = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents/echo/runs', headers: preflight(ORIGIN) })
  t.equal(res.statusCode, 204)
  t.equal(res.headers['access-control-allow-origin'], ORIGIN)
  t.equal(res.headers['access-control-allow-methods'], 'GET, POST, DELETE, OPTIONS')
  const allowed = String(res.headers['access-control-allow-headers']).split(', ')
  for (const header of ['authorization', 'content-type', 'x-api-key', 'idempotency-key', 'x-idempotency-key', 'x-request-id', 'traceparent', 'tracestate', 'last-event-id']) {
    t.ok(allowed.includes(header), header)
  }
  t.same(allowed, [...CORS_ALLOWED_HEADERS])
  t.match(res.headers.vary, /Origin/)
  t.ok(res.headers['x-request-id'], 'a preflight has its request id too')
})

t.test('a request from another origin gets no allow header', async (t) => {
  const service = build(t, { cors: ORIGIN })
  const pre = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents/echo/runs', headers: preflight('https://evil.example') })
  t.equal(pre.headers['access-control-allow-origin'], undefined)
  const lookalike = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents', headers: preflight(`${ORIGIN}.evil.example`) })
  t.equal(lookalike.headers['access-control-allow-origin'], undefined)
  const nullOrigin = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents', headers: preflight('null') })
  t.equal(nullOrigin.headers['access-control-allow-origin'], undefined)
  const get = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: 'https://evil.example' } })
  t.equal(get.statusCode, 200, 'CORS is the browser\'s rule: the server still answers')
  t.equal(get.headers['access-control-allow-origin'], undefined)
})

t.test('responses expose the headers a browser script needs', async (t) => {
  const service = build(t, { cors: ORIGIN, rateLimit: { maxRequests: 5, intervalMs: 60_000 } })
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: ORIGIN } })
  t.equal(res.headers['access-control-allow-origin'], ORIGIN)
  const exposed = String(res.headers['access-control-expose-headers']).split(', ')
  for (const header of ['x-request-id', 'retry-after', 'idempotent-replayed', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) {
    t.ok(exposed.includes(header), header)
  }
  t.same(exposed, [...CORS_EXPOSED_HEADERS])
})

t.test('`*` allows any origin', async (t) => {
  const service = build(t, { cors: '*' })
  const res = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents', headers: preflight('https://anyone.example') })
  t.equal(res.statusCode, 204)
  t.equal(res.headers['access-control-allow-origin'], '*')
  const get = await service.app.inject({ method: 'GET', url: '/health', headers: { origin: 'https://anyone.example' } })
  t.equal(get.headers['access-control-allow-origin'], '*')
})

t.test('preflights need no credentials and do not count for the rate limit', async (t) => {
  const service = build(t, { cors: ORIGIN, auth: { strategy: 'api-key', keys: ['k1'] }, rateLimit: { maxRequests: 1, intervalMs: 60_000 } })
  for (let i = 0; i < 5; i++) {
    const res = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents/echo/runs', headers: preflight(ORIGIN, { 'access-control-request-headers': 'x-api-key' }) })
    t.equal(res.statusCode, 204)
    t.equal(res.headers['x-ratelimit-remaining'], undefined)
  }
  // errors carry the CORS headers too, or the browser could not read them
  const unauthorized = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: ORIGIN } })
  t.equal(unauthorized.statusCode, 401)
  t.equal(unauthorized.headers['access-control-allow-origin'], ORIGIN)
  // the 401 spent the IP's budget; the key has its own, spent by this one
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: ORIGIN, 'x-api-key': 'k1' } })).statusCode, 200)
  const limited = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { origin: ORIGIN, 'x-api-key': 'k1' } })
  t.equal(limited.statusCode, 429)
  t.equal(limited.headers['access-control-allow-origin'], ORIGIN)
})

t.test('an OPTIONS without Origin is answered, and unknown paths stay 404 (the catch-all makes no 405)', async (t) => {
  const service = build(t, { cors: ORIGIN })
  const bare = await service.app.inject({ method: 'OPTIONS', url: '/v1/agents' })
  t.equal(bare.statusCode, 204)
  const unknown = await service.app.inject({ method: 'GET', url: '/v1/unknown' })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().code, 'ROUTE_NOT_FOUND')
  const wrongMethod = await service.app.inject({ method: 'DELETE', url: '/v1/agents' })
  t.equal(wrongMethod.statusCode, 405)
  t.notMatch(String(wrongMethod.headers.allow), 'OPTIONS')
})

t.test('SSE streams carry the CORS headers', async (t) => {
  const service = build(t, { cors: ORIGIN })
  const res = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: { origin: ORIGIN, accept: 'text/event-stream' }, payload: { input: 'hi' } })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], 'text/event-stream')
  t.equal(res.headers['access-control-allow-origin'], ORIGIN)
  t.ok(res.headers['access-control-expose-headers'])
  t.equal(parseSse(res.body).at(-1)!.event, 'run.completed')
})
