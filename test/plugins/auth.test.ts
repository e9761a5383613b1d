import { createHash } from 'node:crypto'
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import fastifyAgents, { hasAccess } from '../../index.js'
import { ApiKeyVerifier, apiKeyPrincipal, readCredential, redactAccessToken, redactingRequestSerializer, withTokenRedaction } from '../../lib/auth/credentials.js'
import { auditEntries, build, echo } from '../helper.js'

const KEY_A = 'key-a-0123456789abcdef'
const KEY_B = 'key-b-fedcba9876543210'
const apiKeys = { auth: { strategy: 'api-key' as const, keys: [KEY_A, KEY_B] } }

function principalOf (key: string): string {
  return 'key_' + createHash('sha256').update(key).digest('hex').slice(0, 12)
}

t.test('no credentials: 401 in the contract shape with WWW-Authenticate and X-Request-ID', async (t) => {
  const service = build(t, apiKeys)
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents' })
  t.equal(res.statusCode, 401)
  t.equal(res.headers['www-authenticate'], 'Bearer realm="fastify-agents"')
  t.ok(res.headers['x-request-id'])
  const body = res.json()
  t.match(body, { statusCode: 401, error: 'Unauthorized', code: 'UNAUTHORIZED', message: 'Missing credentials: send the API key as X-API-Key: <key> or Authorization: Bearer <key>', requestId: res.headers['x-request-id'] })
  t.type(body.traceId, 'string')
})

t.test('X-API-Key and Authorization: Bearer both authenticate; the principal is key_ + 12 hex of sha256', async (t) => {
  const service = build(t, apiKeys)
  const viaHeader = await service.app.inject({ method: 'POST', url: '/v1/sessions', headers: { 'x-api-key': KEY_A }, payload: {} })
  t.equal(viaHeader.statusCode, 201)
  t.equal(viaHeader.json().principal, principalOf(KEY_A))
  t.match(viaHeader.json().principal, /^key_[0-9a-f]{12}$/)
  const viaBearer = await service.app.inject({ method: 'POST', url: '/v1/sessions', headers: { authorization: `Bearer ${KEY_B}` }, payload: {} })
  t.equal(viaBearer.statusCode, 201)
  t.equal(viaBearer.json().principal, principalOf(KEY_B))
  // the scheme is case-insensitive (RFC 7235)
  const lower = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `bearer ${KEY_A}` } })
  t.equal(lower.statusCode, 200)
  // the same key in both headers is one credential
  const both = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${KEY_A}`, 'x-api-key': KEY_A } })
  t.equal(both.statusCode, 200)
  t.equal(apiKeyPrincipal(KEY_A), principalOf(KEY_A))
})

t.test('a wrong key: 401 invalid_token', async (t) => {
  const service = build(t, apiKeys)
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': KEY_A + 'x' } })
  t.equal(res.statusCode, 401)
  t.equal(res.headers['www-authenticate'], 'Bearer realm="fastify-agents", error="invalid_token"')
  t.equal(res.json().message, 'Invalid API key')
})

t.test('malformed Authorization headers are 401, never a crash or a pass', async (t) => {
  const service = build(t, apiKeys)
  const malformed = [
    'Basic ' + Buffer.from(`user:${KEY_A}`).toString('base64'),
    'Bearer',
    'Bearer ',
    `Bearer  ${KEY_A}`,
    `Bearer ${KEY_A} extra`,
    `Bearer\t${KEY_A}`,
    `Token ${KEY_A}`,
    KEY_A,
    `Bearer ${KEY_A}\u0000`,
    `Bearer ${KEY_A}é`,
    ''
  ]
  for (const authorization of malformed) {
    const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization } })
    t.equal(res.statusCode, 401, JSON.stringify(authorization))
    t.equal(res.json().code, 'UNAUTHORIZED')
    t.match(res.headers['www-authenticate'], /^Bearer realm="fastify-agents"/)
  }
})

t.test('keys with whitespace or other characters around them do not match', async (t) => {
  const service = build(t, apiKeys)
  for (const key of [` ${KEY_A}`, `${KEY_A} `, `${KEY_A}\n`, KEY_A.slice(0, 5) + ' ' + KEY_A.slice(5), `\t${KEY_A}`, '']) {
    const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': key } })
    t.equal(res.statusCode, 401, JSON.stringify(key))
  }
  // a repeated header arrives joined ("a, a"): refused, never split into something that might match
  const repeated = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': [KEY_A, KEY_A] } })
  t.equal(repeated.statusCode, 401)
})

t.test('two different credentials at once are refused', async (t) => {
  const service = build(t, apiKeys)
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${KEY_A}`, 'x-api-key': KEY_B } })
  t.equal(res.statusCode, 401)
  t.equal(res.json().message, 'Several different credentials: send exactly one')
})

t.test('oversized credentials are refused unread', async (t) => {
  const service = build(t, apiKeys)
  const huge = 'k'.repeat(20_000)
  const viaKey = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': huge } })
  t.equal(viaKey.statusCode, 401)
  t.equal(viaKey.json().message, 'X-API-Key is too long')
  const viaBearer = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${huge}` } })
  t.equal(viaBearer.statusCode, 401)
  t.equal(viaBearer.json().message, 'The Authorization header is too long')
  const justUnder = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${'k'.repeat(8192)}` } })
  t.equal(justUnder.json().message, 'Invalid API key')
  const bearerTooLong = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${'k'.repeat(8193)}` } })
  t.equal(bearerTooLong.json().message, 'The Authorization header is too long')
})

t.test('/health and /v1/health are public; unknown routes under /v1 ask for credentials first', async (t) => {
  const service = build(t, apiKeys)
  t.equal((await service.app.inject({ method: 'GET', url: '/health' })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/health' })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/nope' })).statusCode, 401)
  const known = await service.app.inject({ method: 'GET', url: '/v1/nope', headers: { 'x-api-key': KEY_A } })
  t.equal(known.statusCode, 404)
  t.equal(known.json().code, 'ROUTE_NOT_FOUND')
  // an OPTIONS that is no CORS preflight (no Access-Control-Request-Method) is not exempt
  t.equal((await service.app.inject({ method: 'OPTIONS', url: '/v1/agents', headers: { origin: 'https://app.example' } })).statusCode, 401)
  t.equal((await service.app.inject({ method: 'OPTIONS', url: '/v1/agents', headers: { origin: 'https://app.example', 'access-control-request-method': 'GET' } })).statusCode, 405)
  // a 405 on a known path also needs a credential first
  t.equal((await service.app.inject({ method: 'PUT', url: '/v1/agents' })).statusCode, 401)
  t.equal((await service.app.inject({ method: 'PUT', url: '/v1/agents', headers: { 'x-api-key': KEY_A } })).statusCode, 405)
})

t.test('an unauthenticated request never reaches the body parser or the agent', async (t) => {
  let runs = 0
  const service = build(t, { ...apiKeys, agents: { echo: { async run (input) { runs++; return { output: input } } } } })
  const res = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: { 'content-type': 'text/xml' }, payload: '<x/>' })
  t.equal(res.statusCode, 401, '401, not 415')
  const big = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'x'.repeat(2 * 1024 * 1024) } })
  t.equal(big.statusCode, 401, '401, not 413')
  t.equal(runs, 0)
})

t.test('without auth every route is open and the principal is anonymous', async (t) => {
  const service = build(t)
  const res = await service.app.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
  t.equal(res.statusCode, 201)
  t.equal(res.json().principal, 'anonymous')
  // a credential sent anyway changes nothing
  const withKey = await service.app.inject({ method: 'POST', url: '/v1/sessions', headers: { 'x-api-key': KEY_A }, payload: {} })
  t.equal(withKey.json().principal, 'anonymous')
})

t.test('sessions belong to their principal: another key gets 404, never the session', async (t) => {
  const service = build(t, apiKeys)
  const a = { 'x-api-key': KEY_A }
  const b = { 'x-api-key': KEY_B }
  const created = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: a, payload: { input: 'secret of A' } })
  t.equal(created.statusCode, 200)
  const sessionId = created.json().sessionId

  const read = await service.app.inject({ method: 'GET', url: `/v1/sessions/${sessionId}`, headers: b })
  t.equal(read.statusCode, 404)
  t.equal(read.json().code, 'SESSION_NOT_FOUND')
  t.notMatch(read.body, 'secret of A')

  const run = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: b, payload: { input: 'hijack', sessionId } })
  t.equal(run.statusCode, 404)
  t.equal(run.json().code, 'SESSION_NOT_FOUND')

  const del = await service.app.inject({ method: 'DELETE', url: `/v1/sessions/${sessionId}`, headers: b })
  t.equal(del.statusCode, 404)

  const own = await service.app.inject({ method: 'GET', url: `/v1/sessions/${sessionId}`, headers: a })
  t.equal(own.statusCode, 200)
  t.equal(own.json().turns, 1, 'B changed nothing')
  t.equal(own.json().principal, principalOf(KEY_A))
})

t.test('the key appears in no audit entry and no log line', async (t) => {
  const lines: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  const service = build(t, { ...apiKeys, logger: { level: 'trace', stream } as never })
  await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': KEY_A } })
  await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${KEY_B}` } })
  await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': KEY_A + 'wrong' } })
  await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: { 'x-api-key': KEY_A }, payload: { input: 1 } })
  const entries = await auditEntries(service.app)
  t.equal(entries.length, 4)
  t.same(entries.map((e) => e.principal).sort(), [principalOf(KEY_A), principalOf(KEY_A), principalOf(KEY_B), 'anonymous'].sort())
  const everything = JSON.stringify(entries) + lines.join('')
  t.ok(lines.length > 0, 'something was logged')
  t.notOk(everything.includes(KEY_A), 'key A nowhere')
  t.notOk(everything.includes(KEY_B), 'key B nowhere')
})

t.test('WebSocket upgrades may carry the credential as access_token; it is redacted from audit and logs', async (t) => {
  const lines: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  const service = build(t, { ...apiKeys, logger: { level: 'info', stream } as never })
  const upgrade = { upgrade: 'websocket', connection: 'upgrade' }
  // an upgrade request to a plain route: the credential is accepted, the route answers as HTTP
  const ok = await service.app.inject({ method: 'GET', url: `/v1/agents?access_token=${KEY_A}`, headers: upgrade })
  t.equal(ok.statusCode, 200)
  const wrong = await service.app.inject({ method: 'GET', url: '/v1/agents?access_token=nope', headers: upgrade })
  t.equal(wrong.statusCode, 401)
  const twice = await service.app.inject({ method: 'GET', url: `/v1/agents?access_token=${KEY_A}&access_token=${KEY_A}`, headers: upgrade })
  t.equal(twice.statusCode, 401)
  t.equal(twice.json().message, 'access_token must be given once')
  // outside an upgrade the query parameter is no credential (it would end up in proxies' logs)
  const plain = await service.app.inject({ method: 'GET', url: `/v1/agents?access_token=${KEY_A}` })
  t.equal(plain.statusCode, 401)
  const entries = await auditEntries(service.app)
  t.equal(entries.length, 4)
  for (const entry of entries) t.match(entry.url, /access_token=\[REDACTED\]/)
  t.equal(entries.find((e) => e.status === 200)!.principal, principalOf(KEY_A))
  t.notOk((JSON.stringify(entries) + lines.join('')).includes(KEY_A))
  t.ok(lines.some((l) => l.includes('access_token=[REDACTED]')), 'the request log line shows the redacted URL')
})

t.test('api-key auth in plugin mode: the host app keeps its own routes open', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.get('/mine', async () => ({ ok: true }))
  await app.register(fastifyAgents, { agents: { echo }, ...apiKeys })
  t.equal((await app.inject({ method: 'GET', url: '/mine' })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 401)
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': KEY_A } })).statusCode, 200)
})

t.test('hasAccess: true with auth off; false for a request that did not authenticate', async (t) => {
  for (const [options, expected] of [[{}, true], [apiKeys, false]] as const) {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(fastifyAgents, { agents: { echo }, ...options })
    // a host app's route is outside the service's auth: nobody authenticated on it
    app.get('/mine', async (request) => ({ run: hasAccess(request, 'run', 'echo') }))
    t.same((await app.inject({ method: 'GET', url: '/mine', headers: { 'x-api-key': KEY_A } })).json(), { run: expected })
  }
})

t.test('Admin API routes ignore service auth (they have their own token)', async (t) => {
  const service = build(t, { ...apiKeys, adminApi: { enabled: true, bearerToken: 'admin-token' } })
  const admin = await service.app.inject({ method: 'GET', url: '/admin/health', headers: { authorization: 'Bearer admin-token' } })
  t.equal(admin.statusCode, 200)
  // a service key is not an admin token
  const withKey = await service.app.inject({ method: 'GET', url: '/admin/health', headers: { 'x-api-key': KEY_A } })
  t.equal(withKey.statusCode, 401)
})

t.test('lib/auth helpers', async (t) => {
  t.test('readCredential', async (t) => {
    t.same(readCredential({ authorization: undefined, apiKey: undefined, queryToken: undefined }, true), { kind: 'none' })
    t.same(readCredential({ authorization: undefined, apiKey: 'k', queryToken: undefined }, false), { kind: 'none' }, 'X-API-Key ignored under JWT')
    t.same(readCredential({ authorization: ['Bearer a', 'Bearer b'], apiKey: undefined, queryToken: undefined }, true).kind, 'invalid')
    t.same(readCredential({ authorization: undefined, apiKey: ['a', 'b'], queryToken: undefined }, true), { kind: 'invalid', reason: 'X-API-Key must be given once' })
    t.same(readCredential({ authorization: undefined, apiKey: undefined, queryToken: 'tok' }, true), { kind: 'token', token: 'tok' })
  })
  t.test('ApiKeyVerifier compares every key', async (t) => {
    const verifier = new ApiKeyVerifier({ strategy: 'api-key', keys: ['one', 'two', 'three'] })
    t.equal(verifier.verify('two'), principalOf('two'))
    t.equal(verifier.verify('three'), principalOf('three'))
    t.equal(verifier.verify('four'), null)
    t.equal(verifier.verify(''), null)
  })
  t.test('redaction', async (t) => {
    t.equal(redactAccessToken('/v1/ws?access_token=abc&x=1&access_token=def#f'), '/v1/ws?access_token=[REDACTED]&x=1&access_token=[REDACTED]#f')
    t.equal(redactAccessToken('/v1/ws?my_access_token=abc'), '/v1/ws?my_access_token=abc')
    t.same(redactingRequestSerializer({ method: 'GET', url: '/x?access_token=s', host: 'h', ip: '1.2.3.4', socket: { remotePort: 5 } }),
      { method: 'GET', url: '/x?access_token=[REDACTED]', host: 'h', remoteAddress: '1.2.3.4', remotePort: 5 })
    t.same(redactingRequestSerializer({ method: 'GET', url: '/x' }).remotePort, undefined)
    t.equal(withTokenRedaction(false), false)
    t.equal(withTokenRedaction(undefined), undefined)
    t.same(Object.keys((withTokenRedaction(true) as { serializers: object }).serializers), ['req'])
    const own = (): object => ({})
    t.equal((withTokenRedaction({ level: 'warn', serializers: { req: own } }) as { serializers: { req: unknown } }).serializers.req, own, 'your own req serializer is kept')
  })
})
