import { generateKeyPairSync } from 'node:crypto'
import type { KeyObject } from 'node:crypto'
import t from 'tap'
import Fastify from 'fastify'
import fastifyJwt from '@fastify/jwt'
import fastifyAgents, { createAgentService } from '../../index.js'
import { grants, jwtAlgorithms, rolesOf } from '../../lib/auth/credentials.js'
import type { Agent, JwtAuthOptions } from '../../lib/core/types.js'
import { build, echo } from '../helper.js'
import { b64url, ecKeys, ed25519Keys, nowSeconds, rsaKeys, signJwt } from '../helpers/jwt.js'
import type { SigningKey } from '../helpers/jwt.js'

const SECRET = 'a-long-enough-hmac-secret-for-hs256-tests'
const hs: SigningKey = { alg: 'HS256', secret: SECRET }
const other: Agent = { async run () { return { output: 'other' } } }

function jwtService (t: Parameters<typeof build>[0], auth: Partial<JwtAuthOptions> = {}) {
  return build(t, { agents: { echo, other }, auth: { strategy: 'jwt', secret: SECRET, ...auth } as JwtAuthOptions })
}

function claims (extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { sub: 'user-1', roles: ['agents:run'], iat: nowSeconds(), exp: nowSeconds() + 60, ...extra }
}

function bearer (token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` }
}

t.test('HS256: a valid token runs; the principal is its sub', async (t) => {
  const service = jwtService(t)
  const res = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: bearer(signJwt(claims(), hs)), payload: { input: 'hi' } })
  t.equal(res.statusCode, 200)
  const session = await service.app.inject({ method: 'GET', url: `/v1/sessions/${res.json().sessionId}`, headers: bearer(signJwt(claims(), hs)) })
  t.equal(session.json().principal, 'user-1')
  const someoneElse = await service.app.inject({ method: 'GET', url: `/v1/sessions/${res.json().sessionId}`, headers: bearer(signJwt(claims({ sub: 'user-2' }), hs)) })
  t.equal(someoneElse.statusCode, 404, 'another sub does not see the session')
})

t.test('a bad token is 401 with WWW-Authenticate: Bearer ... invalid_token', async (t) => {
  const service = jwtService(t)
  const valid = signJwt(claims(), hs)
  const [head, body, sig] = valid.split('.')
  const cases: Record<string, string> = {
    'one part': head!,
    'two parts': `${head}.${body}`,
    'four parts': `${valid}.extra`,
    'empty parts': '..',
    'bad base64 header': `!!!.${body}.${sig}`,
    'bad base64 payload': `${head}.%%%.${sig}`,
    'header not JSON': `${b64url('not json')}.${body}.${sig}`,
    'payload not JSON': `${head}.${b64url('{"sub":')}.${sig}`,
    'payload an array': signJwt([] as unknown as Record<string, unknown>, hs),
    'signature of another secret': signJwt(claims(), { alg: 'HS256', secret: 'another-secret' }),
    'signature tampered': `${head}.${b64url(JSON.stringify(claims({ sub: 'admin' })))}.${sig}`,
    'alg none': signJwt(claims(), { alg: 'none' }),
    'alg none, signature kept': `${b64url(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${body}.${sig}`,
    'alg swapped to HS512': signJwt(claims(), { alg: 'HS512', secret: SECRET }),
    'alg header says RS256': signJwt(claims(), hs, { alg: 'RS256' }),
    'no sub': signJwt(claims({ sub: undefined }), hs),
    'empty sub': signJwt(claims({ sub: '' }), hs),
    'numeric sub': signJwt(claims({ sub: 42 }), hs),
    'expired by one second': signJwt(claims({ exp: nowSeconds() - 1 }), hs),
    'not valid yet': signJwt(claims({ nbf: nowSeconds() + 60 }), hs),
    'exp not a number': signJwt(claims({ exp: 'tomorrow' }), hs)
  }
  for (const [name, token] of Object.entries(cases)) {
    const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(token) })
    t.equal(res.statusCode, 401, name)
    t.equal(res.json().code, 'UNAUTHORIZED', name)
    t.equal(res.headers['www-authenticate'], 'Bearer realm="fastify-agents", error="invalid_token"', name)
    t.notOk(res.body.includes(token), `${name}: the token is not echoed`)
  }
  const expired = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(cases['expired by one second']!) })
  t.equal(expired.json().message, 'The token has expired')
  const none = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(cases['alg none']!) })
  t.match(none.json().message, /not signed|not allowed|invalid|malformed/)
  const missing = await service.app.inject({ method: 'GET', url: '/v1/agents' })
  t.equal(missing.headers['www-authenticate'], 'Bearer realm="fastify-agents"', 'no token: no error attribute')
})

t.test('X-API-Key is not a credential under JWT auth', async (t) => {
  const service = jwtService(t)
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-api-key': signJwt(claims(), hs) } })
  t.equal(res.statusCode, 401)
  t.equal(res.json().message, 'Missing credentials: send the JWT as Authorization: Bearer <token>')
})

t.test('iss and aud are checked when configured', async (t) => {
  const service = jwtService(t, { issuer: 'https://issuer.example', audience: ['fastify-agents', 'other-api'] })
  const cases: Array<[string, Record<string, unknown>, number]> = [
    ['right iss and aud', { iss: 'https://issuer.example', aud: 'fastify-agents' }, 200],
    ['aud as a list containing ours', { iss: 'https://issuer.example', aud: ['x', 'other-api'] }, 200],
    ['wrong aud', { iss: 'https://issuer.example', aud: 'someone-else' }, 401],
    ['no aud', { iss: 'https://issuer.example' }, 401],
    ['wrong iss', { iss: 'https://evil.example', aud: 'fastify-agents' }, 401],
    ['no iss', { aud: 'fastify-agents' }, 401]
  ]
  for (const [name, extra, status] of cases) {
    const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(extra), hs)) })
    t.equal(res.statusCode, status, name)
  }
  const wrongAud = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims({ iss: 'https://issuer.example', aud: 'someone-else' }), hs)) })
  t.match(wrongAud.json().message, /^The token was refused: .*aud/)
  t.notMatch(wrongAud.json().message, 'someone-else')
})

t.test('roles: 403 FORBIDDEN without the role; agents:run:<name> runs that agent only', async (t) => {
  const service = jwtService(t)
  const run = (roles: unknown, agent = 'echo') => service.app.inject({
    method: 'POST', url: `/v1/agents/${agent}/runs`, headers: bearer(signJwt(claims({ roles }), hs)), payload: { input: 1 }
  })
  t.equal((await run(['agents:run'])).statusCode, 200)
  t.equal((await run('agents:run')).statusCode, 200, 'a string claim')
  t.equal((await run('approvals:read agents:run')).statusCode, 200, 'space-separated roles')
  t.equal((await run(['agents:run:echo'])).statusCode, 200)
  const wrongAgent = await run(['agents:run:echo'], 'other')
  t.equal(wrongAgent.statusCode, 403)
  t.match(wrongAgent.json(), { code: 'FORBIDDEN', message: 'The token lacks the role for run on agent "other"' })
  t.equal((await run([])).statusCode, 403)
  t.equal((await run(undefined)).statusCode, 403)
  t.equal((await run(['approvals:read', 'approvals:decide'])).statusCode, 403)
  t.equal((await run(['agents:run:'])).statusCode, 403)
  t.equal((await run(['agents:runner'])).statusCode, 403)
  t.equal((await run(42)).statusCode, 403)

  // sessions and the agent list need some run role; a per-agent one is enough
  const sessions = await service.app.inject({ method: 'POST', url: '/v1/sessions', headers: bearer(signJwt(claims({ roles: ['agents:run:echo'] }), hs)), payload: {} })
  t.equal(sessions.statusCode, 201)
  const list = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims({ roles: ['approvals:read'] }), hs)) })
  t.equal(list.statusCode, 403)
  const one = await service.app.inject({ method: 'GET', url: '/v1/agents/other', headers: bearer(signJwt(claims({ roles: ['agents:run:echo'] }), hs)) })
  t.equal(one.statusCode, 403)
})

t.test('approvals need approvals:read to read and approvals:decide to decide', async (t) => {
  const service = jwtService(t)
  const as = (roles: string[]) => bearer(signJwt(claims({ roles }), hs))
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/approvals', headers: as(['approvals:read']) })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/approvals', headers: as(['agents:run', 'approvals:decide']) })).statusCode, 403)
  const decide = (roles: string[]) => service.app.inject({ method: 'POST', url: '/v1/approvals/nope', headers: as(roles), payload: { approved: true } })
  t.equal((await decide(['approvals:read'])).statusCode, 403)
  t.equal((await decide(['approvals:decide'])).statusCode, 404, 'allowed through to the route: the approval does not exist')
})

t.test('access is configurable per route; rolesClaim names the claim, dotted for nested claims', async (t) => {
  const service = jwtService(t, { rolesClaim: 'realm_access.roles', access: { run: ['runner'], readApprovals: ['ops', 'auditor'] } })
  const as = (roles: unknown) => bearer(signJwt(claims({ roles: undefined, realm_access: { roles } }), hs))
  const run = (roles: unknown, agent = 'echo') => service.app.inject({ method: 'POST', url: `/v1/agents/${agent}/runs`, headers: as(roles), payload: { input: 1 } })
  t.equal((await run(['runner'])).statusCode, 200)
  t.equal((await run(['runner:echo'])).statusCode, 200)
  t.equal((await run(['runner:echo'], 'other')).statusCode, 403)
  t.equal((await run(['agents:run'])).statusCode, 403, 'the default role no longer grants it')
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/approvals', headers: as(['auditor']) })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/approvals', headers: as(['approvals:read']) })).statusCode, 403)
  // decideApprovals was not overridden: its default stays
  t.equal((await service.app.inject({ method: 'POST', url: '/v1/approvals/x', headers: as(['approvals:decide']), payload: { approved: false } })).statusCode, 404)
  // a top-level claim with the dotted name wins over the nested path
  const literal = bearer(signJwt(claims({ roles: undefined, 'realm_access.roles': ['runner'] }), hs))
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: literal })).statusCode, 200)
})

t.test('RS256 with a public key; HS256 signed with that public key (algorithm confusion) fails', async (t) => {
  const rsa = rsaKeys()
  const service = build(t, { auth: { strategy: 'jwt', publicKey: rsa.publicPem } })
  const good = signJwt(claims(), { alg: 'RS256', privateKey: rsa.privateKey })
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(good) })).statusCode, 200)
  const ps = signJwt(claims(), { alg: 'PS256', privateKey: rsa.privateKey })
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(ps) })).statusCode, 200, 'PS256 with the same RSA key')
  const confused = signJwt(claims(), { alg: 'HS256', secret: rsa.publicPem })
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(confused) })
  t.equal(res.statusCode, 401)
  const confusedHeader = signJwt(claims(), { alg: 'HS256', secret: rsa.publicPem }, { alg: 'RS256' })
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(confusedHeader) })).statusCode, 401)
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'none' })) })).statusCode, 401)
  const otherKey = signJwt(claims(), { alg: 'RS256', privateKey: rsaKeys().privateKey })
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(otherKey) })).statusCode, 401)
})

t.test('pinned algorithms: only the listed ones are accepted', async (t) => {
  const rsa = rsaKeys()
  const service = build(t, { auth: { strategy: 'jwt', publicKey: rsa.publicPem, algorithms: ['RS256'] } })
  t.equal((await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'RS256', privateKey: rsa.privateKey })) })).statusCode, 200)
  const ps = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'PS256', privateKey: rsa.privateKey })) })
  t.equal(ps.statusCode, 401)
  t.equal(ps.json().message, 'The token is signed with an algorithm that is not allowed')
})

t.test('ES256 and EdDSA public keys', async (t) => {
  const ec = ecKeys()
  const es = build(t, { auth: { strategy: 'jwt', publicKey: ec.publicPem } })
  t.equal((await es.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'ES256', privateKey: ec.privateKey })) })).statusCode, 200)
  t.equal((await es.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'ES256', privateKey: ecKeys().privateKey })) })).statusCode, 401)
  const ec384 = ecKeys('secp384r1')
  const es384 = build(t, { auth: { strategy: 'jwt', publicKey: ec384.publicPem } })
  t.equal((await es384.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'ES384', privateKey: ec384.privateKey })) })).statusCode, 200)
  const ed = ed25519Keys()
  const eddsa = build(t, { auth: { strategy: 'jwt', publicKey: ed.publicPem } })
  t.equal((await eddsa.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'EdDSA', privateKey: ed.privateKey })) })).statusCode, 200)
  t.equal((await eddsa.app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), { alg: 'HS256', secret: ed.publicPem })) })).statusCode, 401)
})

t.test('key and algorithm mistakes are refused at registration, naming the option', async (t) => {
  const rsa = rsaKeys()
  const make = (auth: Record<string, unknown>) => () => createAgentService({ logger: false, agents: { echo }, auth: { strategy: 'jwt', ...auth } as JwtAuthOptions })
  t.throws(make({ publicKey: 'not a key' }), /\/auth\/publicKey must be a PEM public key/)
  t.throws(make({ publicKey: rsa.publicPem, algorithms: ['ES256'] }), /\/auth\/algorithms ES256 cannot be verified with this rsa publicKey/)
  t.throws(make({ publicKey: rsa.publicPem, algorithms: ['HS256'] }), /\/auth\/algorithms must not be HS\* with a publicKey/)
  t.throws(make({ secret: SECRET, publicKey: rsa.publicPem }), /\/auth must have secret or publicKey, not both/)
  t.throws(() => jwtAlgorithms({ strategy: 'jwt', publicKey: ecKeys('secp256k1').publicPem }), /unsupported key type/)
  t.same(jwtAlgorithms({ strategy: 'jwt', secret: SECRET }), ['HS256'])
  t.same(jwtAlgorithms({ strategy: 'jwt', secret: SECRET, algorithms: ['HS512'] }), ['HS512'])
  t.same(jwtAlgorithms({ strategy: 'jwt', publicKey: ed25519Keys().publicPem }), ['EdDSA'])
  const pem = (type: 'rsa-pss' | 'ed448' | 'x25519') => (generateKeyPairSync as (type: string, options: object) => { publicKey: KeyObject })(type, type === 'rsa-pss' ? { modulusLength: 2048 } : {})
    .publicKey.export({ type: 'spki', format: 'pem' }) as string
  t.same(jwtAlgorithms({ strategy: 'jwt', publicKey: pem('rsa-pss') }), ['PS256', 'PS384', 'PS512'])
  t.same(jwtAlgorithms({ strategy: 'jwt', publicKey: pem('ed448') }), ['EdDSA'])
  t.throws(() => jwtAlgorithms({ strategy: 'jwt', publicKey: pem('x25519') }), /unsupported key type \(x25519\)/)
})

t.test('plugin mode next to the host app\'s own @fastify/jwt', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyJwt, { secret: 'the-host-apps-own-secret' })
  app.get('/mine', { onRequest: (request) => request.jwtVerify() }, async (request) => ({ user: request.user }))
  await app.register(fastifyAgents, { agents: { echo }, auth: { strategy: 'jwt', secret: SECRET } })
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(signJwt(claims(), hs)) })).statusCode, 200)
  const hostToken = app.jwt.sign({ sub: 'host-user', roles: ['agents:run'] })
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents', headers: bearer(hostToken) })).statusCode, 401, "the host's tokens are not ours")
  t.equal((await app.inject({ method: 'GET', url: '/mine', headers: bearer(hostToken) })).statusCode, 200, 'the host app keeps its own JWT')
})

t.test('lib/auth roles helpers', async (t) => {
  t.same([...rolesOf({ roles: ['a', 1, 'b'] }, 'roles')], ['a', 'b'])
  t.same([...rolesOf({ scope: '  a  b ' }, 'scope')], ['a', 'b'])
  t.same([...rolesOf({ a: null }, 'a.b')], [])
  t.same([...rolesOf({}, 'roles')], [])
  t.ok(grants(new Set(['approvals:read']), ['approvals:read'], 'readApprovals', undefined))
  t.notOk(grants(new Set(['approvals:read:x']), ['approvals:read'], 'readApprovals', 'x'), 'per-item roles only exist for run')
})
