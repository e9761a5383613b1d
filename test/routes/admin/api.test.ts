import { randomUUID } from 'node:crypto'
import SwaggerParser from '@apidevtools/swagger-parser'
import t from 'tap'
import { packageVersion } from '../../../lib/core/version.js'
import { MemoryAuditStore, MemorySessionStore } from '../../../lib/stores/memory.js'
import type { ApprovalRecord, AuditEntry, AuditPage, AuditQuery } from '../../../lib/stores/types.js'
import type { Agent } from '../../../lib/core/types.js'
import { build, echo, sleep } from '../../helper.js'
import { nowSeconds, signJwt } from '../../helpers/jwt.js'

const TOKEN = 'admin-secret-token'
const auth = { authorization: `Bearer ${TOKEN}` }
const ENDPOINTS = ['health', 'agents', 'audit', 'sessions', 'approvals', 'checkpoints', 'stats']

const keys = (value: object): string[] => Object.keys(value).sort()

t.test('401 without the token, with the wrong one, with another scheme; WWW-Authenticate realm="admin"', async (t) => {
  const service = build(t, { adminApi: { enabled: true, bearerToken: TOKEN } })
  const wrong: Array<[Record<string, string>, string]> = [
    [{}, 'Admin API bearer token required'],
    [{ authorization: 'Bearer wrong' }, 'Invalid Admin API bearer token'],
    [{ authorization: `Bearer ${TOKEN}x` }, 'Invalid Admin API bearer token'],
    [{ authorization: `Bearer ${TOKEN.slice(0, -1)}` }, 'Invalid Admin API bearer token'],
    [{ authorization: `Bearer ${TOKEN} extra` }, 'Admin API bearer token required'],
    [{ authorization: `Basic ${Buffer.from(`admin:${TOKEN}`).toString('base64')}` }, 'Admin API bearer token required'],
    [{ authorization: TOKEN }, 'Admin API bearer token required'],
    [{ 'x-api-key': TOKEN }, 'Admin API bearer token required']
  ]
  for (const endpoint of ENDPOINTS) {
    for (const [headers, message] of wrong) {
      const response = await service.app.inject({ url: `/admin/${endpoint}`, headers })
      t.equal(response.statusCode, 401, `${endpoint} ${JSON.stringify(headers)}`)
      t.equal(response.headers['www-authenticate'], 'Bearer realm="admin"')
      t.ok(response.headers['x-request-id'])
      t.match(response.json(), { statusCode: 401, error: 'Unauthorized', code: 'UNAUTHORIZED', message })
    }
    t.equal((await service.app.inject({ url: `/admin/${endpoint}`, headers: auth })).statusCode, 200, `${endpoint} with the token`)
  }
  // the scheme is case-insensitive (RFC 7235); the token is not
  t.equal((await service.app.inject({ url: '/admin/stats', headers: { authorization: `bearer ${TOKEN}` } })).statusCode, 200)
  t.equal((await service.app.inject({ url: '/admin/stats', headers: { authorization: `Bearer  ${TOKEN} ` } })).statusCode, 200)
  t.equal((await service.app.inject({ url: '/admin/stats', headers: { authorization: `Bearer ${TOKEN.toUpperCase()}` } })).statusCode, 401)
})

t.test('only GET: every other method is a 405 with Allow: GET — after auth', async (t) => {
  const service = build(t, { adminApi: { enabled: true, bearerToken: TOKEN } })
  for (const endpoint of ENDPOINTS) {
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'] as const) {
      const denied = await service.app.inject({ method, url: `/admin/${endpoint}` })
      t.equal(denied.statusCode, 401, `${method} ${endpoint} without the token`)
      t.equal(denied.headers['www-authenticate'], 'Bearer realm="admin"')
      const response = await service.app.inject({ method, url: `/admin/${endpoint}`, headers: auth })
      t.equal(response.statusCode, 405, `${method} ${endpoint}`)
      t.equal(response.headers.allow, 'GET')
      if (method !== 'HEAD') t.equal(response.json().code, 'METHOD_NOT_ALLOWED')
    }
  }
  const body = await service.app.inject({ method: 'POST', url: '/admin/stats', headers: auth, payload: { anything: true } })
  t.equal(body.statusCode, 405, 'a body changes nothing')
  const unknown = await service.app.inject({ url: '/admin/nothing-here', headers: auth })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().code, 'ROUTE_NOT_FOUND')
  t.equal((await service.app.inject({ url: '/admin/nothing-here' })).statusCode, 401, 'unknown paths under the prefix need the token too')
  t.equal((await service.app.inject({ url: '/admin', headers: auth })).statusCode, 404)
})

t.test('admin requests are audited (admin: true) and counted apart; principal "admin" with the token', async (t) => {
  const service = build(t, { adminApi: { enabled: true, bearerToken: TOKEN } })
  await service.app.inject({ url: '/admin/stats', headers: auth })
  await service.app.inject({ url: '/admin/stats' })
  await service.app.inject({ method: 'POST', url: '/admin/stats', headers: auth })
  await service.app.inject({ url: '/admin/nope', headers: auth })
  await service.app.agentService.audit.flush()
  const { entries } = (await service.app.inject({ url: '/admin/audit', headers: auth })).json()
  t.same(entries.map((e: AuditEntry) => [e.method, e.url, e.status, e.principal, e.admin]), [
    ['GET', '/admin/nope', 404, 'admin', true],
    ['POST', '/admin/stats', 405, 'admin', true],
    ['GET', '/admin/stats', 401, 'anonymous', true],
    ['GET', '/admin/stats', 200, 'admin', true]
  ])
  t.equal(entries[3].route, '/admin/stats')
  const stats = (await service.app.inject({ url: '/admin/stats', headers: auth })).json()
  t.equal(stats.admin.requests, 5)
  t.same(stats.requests, { total: 0, byStatus: { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 } })
  t.equal(stats.errors, 0)
})

t.test('service api-key auth does not apply to admin routes, and the admin token is no api key', async (t) => {
  const service = build(t, { auth: { strategy: 'api-key', keys: ['service-key'] }, adminApi: { enabled: true, bearerToken: TOKEN } })
  const app = service.app
  // the admin token alone opens the admin API
  t.equal((await app.inject({ url: '/admin/stats', headers: auth })).statusCode, 200)
  t.equal((await app.inject({ url: '/admin/nope', headers: auth })).statusCode, 404)
  const wrongMethod = await app.inject({ method: 'POST', url: '/admin/stats', headers: auth })
  t.equal(wrongMethod.statusCode, 405, 'the 405 of a known admin path is not a service 401')
  t.equal(wrongMethod.headers.allow, 'GET')
  // a service key does not
  for (const headers of [{ 'x-api-key': 'service-key' }, { authorization: 'Bearer service-key' }]) {
    const response = await app.inject({ url: '/admin/stats', headers })
    t.equal(response.statusCode, 401)
    t.equal(response.headers['www-authenticate'], 'Bearer realm="admin"')
  }
  // the admin token is not a service credential
  const service401 = await app.inject({ url: '/v1/agents', headers: auth })
  t.equal(service401.statusCode, 401)
  t.not(service401.headers['www-authenticate'], 'Bearer realm="admin"')
  t.equal((await app.inject({ url: '/v1/agents', headers: { 'x-api-key': 'service-key' } })).statusCode, 200)
  // both at once: each side takes its own
  t.equal((await app.inject({ url: '/admin/stats', headers: { ...auth, 'x-api-key': 'service-key' } })).statusCode, 200)
})

t.test('JWT service auth does not apply to admin routes either, and the admin token is no JWT', async (t) => {
  const secret = 'a-long-enough-hmac-secret-for-hs256-tests'
  const service = build(t, { auth: { strategy: 'jwt', secret }, adminApi: { enabled: true, bearerToken: TOKEN } })
  const jwt = signJwt({ sub: 'operator', roles: ['agents:run', 'approvals:read'], exp: nowSeconds() + 60 }, { alg: 'HS256', secret })
  t.equal((await service.app.inject({ url: '/v1/agents', headers: { authorization: `Bearer ${jwt}` } })).statusCode, 200)
  const withJwt = await service.app.inject({ url: '/admin/approvals', headers: { authorization: `Bearer ${jwt}` } })
  t.equal(withJwt.statusCode, 401, 'a valid service token opens nothing here')
  t.equal(withJwt.headers['www-authenticate'], 'Bearer realm="admin"')
  t.equal((await service.app.inject({ url: '/admin/approvals', headers: auth })).statusCode, 200, 'no role needed: the admin token is enough')
  t.equal((await service.app.inject({ url: '/v1/approvals', headers: auth })).statusCode, 401)
})

t.test('no bearerToken: open to anyone', async (t) => {
  const service = build(t, { auth: { strategy: 'api-key', keys: ['service-key'] }, adminApi: { enabled: true } })
  for (const endpoint of ENDPOINTS) {
    t.equal((await service.app.inject(`/admin/${endpoint}`)).statusCode, 200, endpoint)
  }
  t.equal((await service.app.inject({ url: '/admin/stats', headers: { authorization: 'Bearer whatever' } })).statusCode, 200)
  t.equal((await service.app.inject({ method: 'POST', url: '/admin/stats' })).statusCode, 405)
  await service.app.agentService.audit.flush()
  const { entries } = (await service.app.inject('/admin/audit?limit=1')).json()
  t.equal(entries[0].principal, 'anonymous')
})

t.test('health: process, event loop, version, uptime; the db probe decides the status', async (t) => {
  let healthy = true
  const service = build(t, { adminApi: { enabled: true }, db: { health: async () => healthy } })
  await service.app.ready()
  await sleep(100) // a few event-loop samples
  const response = await service.app.inject('/admin/health')
  t.equal(response.statusCode, 200)
  const body = response.json()
  t.same(keys(body), ['checks', 'process', 'startedAt', 'status', 'uptimeSeconds', 'version'])
  t.equal(body.status, 'ok')
  t.equal(body.version, packageVersion)
  t.equal(body.startedAt, service.app.agentService.startedAt)
  t.ok(Number.isInteger(body.uptimeSeconds) && body.uptimeSeconds >= 0)
  t.same(keys(body.process), ['arch', 'eventLoopDelayMs', 'memory', 'node', 'pid', 'platform'])
  t.equal(body.process.node, process.version)
  t.equal(body.process.pid, process.pid)
  t.equal(body.process.platform, process.platform)
  t.equal(body.process.arch, process.arch)
  t.same(keys(body.process.memory), ['external', 'heapTotal', 'heapUsed', 'rss'])
  for (const value of Object.values(body.process.memory)) t.ok(Number.isInteger(value) && (value as number) > 0)
  t.same(keys(body.process.eventLoopDelayMs), ['p50', 'p99'])
  t.ok(body.process.eventLoopDelayMs.p50 > 0, 'sampled since registration')
  t.ok(body.process.eventLoopDelayMs.p99 >= body.process.eventLoopDelayMs.p50)
  t.same(keys(body.checks), ['db'])
  t.equal(body.checks.db.status, 'ok')

  healthy = false
  const degraded = await service.app.inject('/admin/health')
  t.equal(degraded.statusCode, 503)
  t.match(degraded.json(), { status: 'degraded', checks: { db: { status: 'error', error: 'probe reported unhealthy' } }, version: packageVersion })
})

t.test('health without a db: no checks', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  const body = (await service.app.inject('/admin/health')).json()
  t.equal(body.status, 'ok')
  t.same(body.checks, {})
})

t.test('agents: each agent with its figures', async (t) => {
  const failing: Agent = { description: 'fails', metadata: { team: 'x' }, async run () { throw new Error('nope') } }
  const service = build(t, { agents: { echo, failing }, adminApi: { enabled: true } })
  await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'a' } })
  await service.app.inject({ method: 'POST', url: '/v1/agents/failing/runs', payload: { input: 'a' } })
  const body = (await service.app.inject('/admin/agents')).json()
  t.same(body, {
    agents: [
      { name: 'echo', description: 'echo', metadata: {}, stats: { runs: 1, failed: 0, inFlight: 0, tokens: { input: 1, output: 2, total: 3 } } },
      { name: 'failing', description: 'fails', metadata: { team: 'x' }, stats: { runs: 1, failed: 1, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } } }
    ]
  })
  const bare = build(t, { agents: { bare: { run: async () => ({ output: 1 }) } }, adminApi: { enabled: true } })
  t.match((await bare.app.inject('/admin/agents')).json().agents[0], { name: 'bare', description: '', metadata: {} })
})

t.test('sessions: unexpired, most recently active first, by cursor', async (t) => {
  const service = build(t, { adminApi: { enabled: true }, sessionTtlMs: 60_000 })
  const ids: string[] = []
  for (let i = 0; i < 5; i++) {
    const created = await service.app.inject({ method: 'POST', url: '/v1/sessions', payload: { agent: 'echo', metadata: { i } } })
    ids.push(created.json().id)
    await sleep(2) // distinct lastActiveAt
  }
  // a run on the first session makes it the most recently active
  await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'x', sessionId: ids[0] } })
  const expected = [ids[0], ids[4], ids[3], ids[2], ids[1]]

  const all = (await service.app.inject('/admin/sessions')).json()
  t.same(keys(all), ['nextCursor', 'sessions'])
  t.same(all.sessions.map((s: { id: string }) => s.id), expected)
  t.equal(all.nextCursor, null)
  t.same(keys(all.sessions[0]), ['agent', 'createdAt', 'id', 'lastActiveAt', 'metadata', 'principal', 'turns'])
  t.match(all.sessions[0], { agent: 'echo', principal: 'anonymous', turns: 1, metadata: { i: 0 } })

  const seen: string[] = []
  let cursor: string | null = null
  do {
    const query: string = cursor === null ? '' : `&cursor=${cursor}`
    const page: { sessions: Array<{ id: string }>, nextCursor: string | null } = (await service.app.inject(`/admin/sessions?limit=2${query}`)).json()
    t.ok(page.sessions.length <= 2)
    seen.push(...page.sessions.map((s) => s.id))
    cursor = page.nextCursor
  } while (cursor !== null)
  t.same(seen, expected)

  t.equal((await service.app.inject('/admin/sessions?limit=0')).statusCode, 400)
  t.equal((await service.app.inject('/admin/sessions?limit=501')).statusCode, 400)
  t.equal((await service.app.inject('/admin/sessions?page=2')).statusCode, 400)
  const bad = await service.app.inject('/admin/sessions?cursor=not-a-cursor')
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().code, 'FA_INVALID_CURSOR')
})

t.test('sessions: expired ones are not listed', async (t) => {
  const service = build(t, { adminApi: { enabled: true }, sessionTtlMs: 1000 })
  await service.app.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
  t.equal((await service.app.inject('/admin/sessions')).json().sessions.length, 1)
  await sleep(1100)
  t.same((await service.app.inject('/admin/sessions')).json(), { sessions: [], nextCursor: null })
})

function approval (overrides: Partial<ApprovalRecord> = {}): ApprovalRecord {
  const now = Date.now()
  return {
    id: randomUUID(),
    runId: randomUUID(),
    agent: 'echo',
    sessionId: randomUUID(),
    principal: 'anonymous',
    action: 'send-email',
    payload: { to: 'a@example.com' },
    reason: null,
    status: 'pending',
    requestedAt: new Date(now).toISOString(),
    expiresAt: new Date(now + 60_000).toISOString(),
    ...overrides
  }
}

t.test('approvals: the pending ones, oldest first, filters agent and runId', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  await service.app.ready()
  const store = service.app.agentService.settings.approvalStore
  const first = approval({ requestedAt: new Date(Date.now() - 1000).toISOString(), reason: 'because' })
  const second = approval({ agent: 'other' })
  const expired = approval({ expiresAt: new Date(Date.now() - 1).toISOString() })
  const decided = approval()
  for (const a of [second, first, expired, decided]) await store.create(a)
  await store.decide(decided.id, { approved: true, comment: null, decidedBy: 'op', decidedAt: new Date().toISOString() })

  const body = (await service.app.inject('/admin/approvals')).json()
  t.same(keys(body), ['approvals'])
  t.same(body.approvals.map((a: ApprovalRecord) => a.id), [first.id, second.id])
  t.same(body.approvals[0], first)
  t.same((await service.app.inject('/admin/approvals?agent=other')).json().approvals.map((a: ApprovalRecord) => a.id), [second.id])
  t.same((await service.app.inject(`/admin/approvals?runId=${first.runId}`)).json().approvals.map((a: ApprovalRecord) => a.id), [first.id])
  t.equal((await service.app.inject('/admin/approvals?status=pending')).statusCode, 400)
})

t.test('approvals: one requested by a running agent shows up while it waits', async (t) => {
  const asking: Agent = {
    async run (_input, ctx) {
      const decision = await ctx.requestApproval({ action: 'deploy', payload: { env: 'prod' } })
      return { output: decision.approved }
    }
  }
  const service = build(t, { agents: { asking }, adminApi: { enabled: true } })
  const run = service.app.inject({ method: 'POST', url: '/v1/agents/asking/runs', payload: { input: null } })
  let pending: ApprovalRecord[] = []
  while (pending.length === 0) {
    await sleep(5)
    pending = (await service.app.inject('/admin/approvals')).json().approvals
  }
  t.match(pending[0], { agent: 'asking', action: 'deploy', payload: { env: 'prod' }, status: 'pending', reason: null })
  const stats = (await service.app.inject('/admin/agents')).json().agents[0].stats
  t.equal(stats.inFlight, 1)
  await service.app.agentService.settings.approvalStore.decide(pending[0]!.id, { approved: true, comment: null, decidedBy: 'op', decidedAt: new Date().toISOString() })
  t.equal((await run).json().output, true)
  t.same((await service.app.inject('/admin/approvals')).json().approvals, [])
})

t.test('checkpoints: runs that did not complete, without their state, with its size', async (t) => {
  const checkpointing: Agent = {
    async run (input, ctx) {
      await ctx.checkpoint({ step: 'one', secret: 'do not show' })
      await ctx.checkpoint({ step: 'two', secret: 'do not show' })
      if (input === 'fail') throw new Error('after checkpointing')
      return { output: 'done' }
    }
  }
  const service = build(t, { agents: { checkpointing }, adminApi: { enabled: true } })
  const failed = await service.app.inject({ method: 'POST', url: '/v1/agents/checkpointing/runs', payload: { input: 'fail' } })
  t.equal(failed.statusCode, 500)
  await service.app.inject({ method: 'POST', url: '/v1/agents/checkpointing/runs', payload: { input: 'ok' } })

  const response = await service.app.inject('/admin/checkpoints')
  t.notMatch(response.body, /do not show/)
  const { checkpoints } = response.json()
  t.equal(checkpoints.length, 1, 'the completed run deleted its checkpoint')
  t.same(keys(checkpoints[0]), ['agent', 'bytes', 'createdAt', 'runId', 'sessionId', 'step', 'updatedAt'])
  t.match(checkpoints[0], { agent: 'checkpointing', step: 2, bytes: Buffer.byteLength(JSON.stringify({ step: 'two', secret: 'do not show' })) })
  const audit = (await service.app.inject('/admin/audit?limit=500')).json()
  t.ok(audit.entries.some((e: AuditEntry) => e.runId === checkpoints[0].runId && e.status === 500))
})

t.test('serialization drops whatever a store adds beyond the records', async (t) => {
  const audit = new MemoryAuditStore()
  const leakyAudit = {
    append: (entries: readonly AuditEntry[]) => audit.append(entries),
    async query (query: AuditQuery): Promise<AuditPage> {
      const page = await audit.query(query)
      return { ...page, total: 99, entries: page.entries.map((e) => ({ ...e, authorization: 'Bearer leaked' })) } as AuditPage
    }
  }
  const sessions = new MemorySessionStore()
  const leakySessions = {
    create: sessions.create.bind(sessions),
    get: sessions.get.bind(sessions),
    appendTurn: sessions.appendTurn.bind(sessions),
    delete: sessions.delete.bind(sessions),
    listByPrincipal: sessions.listByPrincipal.bind(sessions),
    async list (query: { limit: number }) {
      const page = await sessions.list(query)
      return { ...page, sessions: page.sessions.map((s) => ({ ...s, apiKey: 'leaked' })) }
    }
  }
  const service = build(t, { auditStore: leakyAudit, sessionStore: leakySessions, adminApi: { enabled: true } })
  await service.app.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
  await service.app.agentService.audit.flush()
  const auditResponse = await service.app.inject('/admin/audit')
  t.notMatch(auditResponse.body, /leaked|total/)
  t.equal(auditResponse.json().entries.length, 1)
  const sessionsResponse = await service.app.inject('/admin/sessions')
  t.notMatch(sessionsResponse.body, /leaked|apiKey/)
  t.equal(sessionsResponse.json().sessions.length, 1)
})

t.test('a failing store is a 500 in the contract\'s shape', async (t) => {
  const broken = {
    async append () {},
    async count () { return 0 },
    async query (): Promise<AuditPage> { throw new Error('connection refused') }
  }
  const service = build(t, { auditStore: broken, adminApi: { enabled: true } })
  const response = await service.app.inject('/admin/audit')
  t.equal(response.statusCode, 500)
  t.match(response.json(), { statusCode: 500, message: 'Internal Server Error', requestId: String })
})

t.test('OpenAPI: admin routes under the adminBearer scheme, GET only, documented errors', async (t) => {
  const service = build(t, { auth: { strategy: 'api-key', keys: ['k'] }, adminApi: { enabled: true, bearerToken: TOKEN, prefix: '/ops' } })
  await service.app.ready()
  const document = service.app.agentService.openApiDocument() as any
  await SwaggerParser.validate(structuredClone(document))
  t.same(document.components.securitySchemes.adminBearer, { type: 'http', scheme: 'bearer', description: 'The Admin API token (adminApi.bearerToken)' })
  t.same(document.security, [{ apiKey: [] }], 'the service\'s own scheme stays the default')
  for (const endpoint of ENDPOINTS) {
    const item = document.paths[`/ops/${endpoint}`]
    t.same(keys(item), ['get'], `${endpoint}: GET only`)
    t.same(item.get.security, [{ adminBearer: [] }], endpoint)
    t.same(item.get.tags, ['admin'])
    t.ok(item.get.responses['200'], `${endpoint} 200`)
    t.ok(item.get.responses['401'], `${endpoint} 401`)
    t.ok(item.get.responses['503'], `${endpoint} 503`)
  }
  const audit = document.paths['/ops/audit'].get
  t.same(audit.parameters.map((p: { name: string }) => p.name).sort(), ['agent', 'cursor', 'limit', 'status'])
  t.match(audit.parameters.find((p: { name: string }) => p.name === 'limit').schema, { minimum: 1, maximum: 500, default: 50 })
  t.same(document.paths['/ops/stats'].get.responses['200'].content['application/json'].schema, { $ref: '#/components/schemas/AdminStats' })
  t.ok(document.components.schemas.AdminStats.properties.admin)

  const open = build(t, { auth: { strategy: 'api-key', keys: ['k'] }, adminApi: { enabled: true } })
  await open.app.ready()
  const openDocument = open.app.agentService.openApiDocument() as any
  t.same(openDocument.paths['/admin/stats'].get.security, [], 'open: no credentials, not even the service\'s')
})
