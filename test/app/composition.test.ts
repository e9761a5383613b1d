// Every way of assembling the service serves each route with at least the protection its options ask for
// (README, "Each concern on its own"): a route plugin registered without the hook plugin that enforces one of its
// options is refused at registration, naming that plugin; the safe compositions serve and protect.
import t from 'tap'
import type { Test } from 'tap'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyPluginAsync, FastifyPluginCallback } from 'fastify'
import agentService, {
  MemoryAuditStore, a2aPlugin, adminApiPlugin, agUiPlugin, agentsPlugin, approvalsPlugin, auditPlugin, authPlugin, chatPlugin, corePlugin,
  corsPlugin, createAgentService, drainPlugin, hasAccess, healthPlugin, idempotencyPlugin, mcpPlugin, openAiPlugin, rateLimitPlugin, requestContextPlugin,
  requestPipelinePlugin, runsPlugin, sessionsPlugin, websocketPlugin
} from '../../index.js'
import type { AgentServiceOptions } from '../../index.js'
import { auditEntries, echo } from '../helper.js'
import { nowSeconds, signJwt } from '../helpers/jwt.js'

type Plugin = FastifyPluginAsync<any> | FastifyPluginCallback<any>

const SECRET = 'a-secret-of-at-least-thirty-two-bytes!'
const API_KEY = { auth: { strategy: 'api-key' as const, keys: ['k'] } }

/** The hook plugins in the order of requestPipelinePlugin. */
const HOOKS: Record<string, Plugin> = {
  requestContextPlugin, drainPlugin, auditPlugin, corsPlugin, authPlugin, rateLimitPlugin, idempotencyPlugin
}

/** Each route plugin, with what it needs in the core's options to register at all. */
const ROUTES: Record<string, { plugin: Plugin, options?: Partial<AgentServiceOptions> }> = {
  healthPlugin: { plugin: healthPlugin },
  agentsPlugin: { plugin: agentsPlugin },
  sessionsPlugin: { plugin: sessionsPlugin },
  approvalsPlugin: { plugin: approvalsPlugin },
  runsPlugin: { plugin: runsPlugin },
  chatPlugin: { plugin: chatPlugin },
  agUiPlugin: { plugin: agUiPlugin },
  a2aPlugin: { plugin: a2aPlugin },
  openAiPlugin: { plugin: openAiPlugin },
  mcpPlugin: { plugin: mcpPlugin },
  websocketPlugin: { plugin: websocketPlugin, options: { websocket: true } },
  adminApiPlugin: { plugin: adminApiPlugin, options: { adminApi: { enabled: true, bearerToken: 'admin' } } }
}

/** Each option that asks for protection, the hook plugin that enforces it, and the route plugins it applies to. */
const PROTECTIONS: Array<{ option: string, options: Partial<AgentServiceOptions>, enforcer: string, applies: (route: string) => boolean }> = [
  { option: 'auth (api-key)', options: API_KEY, enforcer: 'authPlugin', applies: (route) => route !== 'healthPlugin' && route !== 'adminApiPlugin' },
  { option: 'auth (jwt)', options: { auth: { strategy: 'jwt', secret: SECRET } }, enforcer: 'authPlugin', applies: (route) => route !== 'healthPlugin' && route !== 'adminApiPlugin' },
  { option: 'rateLimit', options: { rateLimit: { maxRequests: 5, intervalMs: 60_000 } }, enforcer: 'rateLimitPlugin', applies: (route) => route !== 'healthPlugin' },
  { option: 'idempotency', options: { idempotency: {} }, enforcer: 'idempotencyPlugin', applies: (route) => route === 'agentsPlugin' || route === 'approvalsPlugin' || route === 'openAiPlugin' },
  { option: 'cors', options: { cors: 'https://app.example' }, enforcer: 'corsPlugin', applies: () => true },
  { option: 'auditStore', options: { auditStore: new MemoryAuditStore() }, enforcer: 'auditPlugin', applies: () => true },
  { option: 'drainTimeoutMs', options: { drainTimeoutMs: 1_000 }, enforcer: 'drainPlugin', applies: (route) => route !== 'healthPlugin' }
]

/** The core with `options`, then every hook plugin but `missing` (and those that cannot register without it). */
async function composeWithout (t: Test, options: Partial<AgentServiceOptions>, missing: string): Promise<FastifyInstance> {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, { agents: { echo }, ...options })
  for (const [name, hook] of Object.entries(HOOKS)) {
    if (name === missing) continue
    // these two declare authPlugin as a dependency (their keys and budgets are by principal)
    if (missing === 'authPlugin' && (name === 'rateLimitPlugin' || name === 'idempotencyPlugin')) continue
    await app.register(hook)
  }
  return app
}

t.test('a route plugin registered without the hook plugin one of its options needs is an error naming that plugin', async (t) => {
  for (const protection of PROTECTIONS) {
    for (const [route, { plugin, options }] of Object.entries(ROUTES)) {
      const app = await composeWithout(t, { ...options, ...protection.options }, protection.enforcer)
      const registering = app.register(plugin, { prefix: '/v1' })
      if (protection.applies(route)) {
        await t.rejects(async () => { await registering }, {
          code: 'FST_AGENTS_MISSING_PLUGIN',
          message: new RegExp(`^${route} cannot serve \\S+ /v1\\S* without ${protection.enforcer} \\(`)
        }, `${protection.option} × ${route}`)
      } else {
        await registering
        await app.ready()
        t.pass(`${protection.option} × ${route}: not needed`)
      }
    }
  }
})

t.test('the error names every missing plugin at once, and the way out', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, { agents: { echo }, ...API_KEY, rateLimit: { maxRequests: 1, intervalMs: 1_000 }, idempotency: {} })
  await app.register(requestContextPlugin)
  await t.rejects(async () => { await app.register(agentsPlugin, { prefix: '/api' }) }, {
    code: 'FST_AGENTS_MISSING_PLUGIN',
    message: 'agentsPlugin cannot serve GET /api/agents without drainPlugin (the drain on close), auditPlugin (the audit log), ' +
      'authPlugin (the auth option), rateLimitPlugin (the rateLimit option): register requestPipelinePlugin (or those plugins) ' +
      'before it, in its scope or an enclosing one'
  })
})

t.test('hook plugins registered in another scope, or after the route plugin, do not count', async (t) => {
  const sibling = Fastify({ logger: false })
  t.teardown(() => sibling.close())
  await sibling.register(corePlugin, { agents: { echo }, ...API_KEY })
  await sibling.register(async (scope) => { await scope.register(requestPipelinePlugin) })
  await sibling.register(requestContextPlugin)
  await t.rejects(async () => { await sibling.register(agentsPlugin) }, { message: /without drainPlugin .*, auditPlugin .*, authPlugin/ })

  const late = Fastify({ logger: false })
  t.teardown(() => late.close())
  await late.register(corePlugin, { agents: { echo }, ...API_KEY })
  await late.register(requestContextPlugin)
  late.register(agentsPlugin)
  late.register(requestPipelinePlugin)
  await t.rejects(async () => { await late.ready() }, { code: 'FST_AGENTS_MISSING_PLUGIN', message: /authPlugin \(the auth option\)/ })
})

t.test('issue 23: the README\'s composition with api-key auth answers 401 without a key, and leaves the host\'s routes open', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  app.get('/mine', async () => ({ mine: true }))
  await app.register(corePlugin, { agents: { echo }, ...API_KEY })
  await app.register(async (api) => {
    await api.register(requestPipelinePlugin)
    await api.register(healthPlugin, { prefix: '/health' })
    for (const plugin of [agentsPlugin, sessionsPlugin, approvalsPlugin, runsPlugin, chatPlugin, agUiPlugin, a2aPlugin, openAiPlugin, mcpPlugin]) await api.register(plugin)
  }, { prefix: '/api' })
  const run = { method: 'POST' as const, url: '/api/agents/echo/runs', payload: { input: 1 } }
  const refused = await app.inject(run)
  t.equal(refused.statusCode, 401)
  t.match(refused.json(), { code: 'UNAUTHORIZED', requestId: refused.headers['x-request-id'] })
  t.ok(refused.headers['www-authenticate'])
  t.equal((await app.inject({ ...run, headers: { 'x-api-key': 'k' } })).statusCode, 200)
  t.equal((await app.inject('/api/health')).statusCode, 200, 'health stays public')
  for (const [method, url] of [['GET', '/api/agents'], ['POST', '/api/sessions'], ['GET', '/api/approvals'], ['GET', '/api/runs/x'],
    ['POST', '/api/agents/echo/chat'], ['POST', '/api/agents/echo/ag-ui'], ['POST', '/api/a2a/echo'], ['GET', '/api/models'], ['POST', '/api/responses'], ['POST', '/api/mcp']] as const) {
    t.equal((await app.inject({ method, url, payload: method === 'POST' ? {} : undefined })).statusCode, 401, `${method} ${url}`)
  }
  t.same((await app.inject('/mine')).json(), { mine: true }, 'the host\'s own route, outside the scope')
})

t.test('the hook plugins one by one, in the pipeline\'s order, protect as the pipeline does', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, {
    agents: { echo },
    auth: { strategy: 'jwt', secret: SECRET },
    rateLimit: { maxRequests: 3, intervalMs: 60_000 },
    idempotency: {},
    cors: 'https://app.example'
  })
  for (const hook of Object.values(HOOKS)) await app.register(hook)
  await app.register(agentsPlugin)
  const token = (roles: string[]): string => signJwt({ sub: 'ada', roles, exp: nowSeconds() + 60 }, { alg: 'HS256', secret: SECRET })
  const run = (headers: Record<string, string>) => app.inject({ method: 'POST', url: '/agents/echo/runs', payload: { input: 1 }, headers })

  t.equal((await run({})).statusCode, 401, 'no token')
  t.equal((await run({ authorization: `Bearer ${token([])}` })).statusCode, 403, 'a token without the role')
  const first = await run({ authorization: `Bearer ${token(['agents:run'])}`, 'idempotency-key': 'once' })
  t.equal(first.statusCode, 200)
  t.equal(first.headers['x-ratelimit-limit'], '3', 'counted by the rate limit')
  const again = await run({ authorization: `Bearer ${token(['agents:run'])}`, 'idempotency-key': 'once' })
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.json().runId, first.json().runId)
  t.equal((await run({ authorization: `Bearer ${token(['agents:run'])}` })).statusCode, 429, 'the fourth request of the window')
  const preflight = await app.inject({
    method: 'OPTIONS', url: '/agents/echo/runs', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' }
  })
  t.equal(preflight.headers['access-control-allow-origin'], 'https://app.example')
})

t.test('the composed path audits into the audit store it was given, and applies quotas', async (t) => {
  const auditStore = new MemoryAuditStore()
  let release = (): void => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, {
    agents: { held: { async run () { await held; return { output: 'done' } } } },
    auditStore,
    quotas: { maxConcurrentRuns: 1 }
  })
  await app.register(requestPipelinePlugin)
  await app.register(agentsPlugin)
  const first = await app.inject({ method: 'POST', url: '/agents/held/runs', payload: { input: 1, background: true } })
  t.equal(first.statusCode, 202)
  const second = await app.inject({ method: 'POST', url: '/agents/held/runs', payload: { input: 1, background: true } })
  t.equal(second.statusCode, 429)
  t.equal(second.json().code, 'QUOTA_EXCEEDED')
  release()
  const entries = await auditEntries(app)
  t.same(entries.map((e) => e.status).sort(), [202, 429])
  t.equal((await auditStore.query({ limit: 10 })).entries.length, 2, 'in the store given')
})

t.test('every assembly refuses a run without a key under api-key auth', async (t) => {
  const plugin = Fastify({ logger: false })
  t.teardown(() => plugin.close())
  await plugin.register(agentService, { agents: { echo }, ...API_KEY })
  const standalone = createAgentService({ agents: { echo }, logger: false, ...API_KEY })
  t.teardown(() => standalone.close(0))
  for (const [name, app] of [['fastifyAgents', plugin], ['createAgentService', standalone.app]] as const) {
    const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })
    t.equal(res.statusCode, 401, name)
  }
})

t.test('hasAccess: everyone without auth; with auth but no authPlugin, nobody, with an error naming it', async (t) => {
  for (const auth of [undefined, API_KEY.auth]) {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    await app.register(corePlugin, { agents: { echo }, ...(auth === undefined ? {} : { auth }) })
    await app.register(requestContextPlugin)
    app.get('/mine', async (request) => ({ granted: hasAccess(request, 'run') }))
    const res = await app.inject('/mine')
    if (auth === undefined) {
      t.same(res.json(), { granted: true })
    } else {
      t.equal(res.statusCode, 500)
      t.match(res.json(), { code: 'FST_AGENTS_MISSING_PLUGIN', message: /the auth option is set but authPlugin is not registered/ })
    }
  }
})

t.test('a route plugin on its own answers as the service does, and leaves the host\'s routes as they were', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  app.post('/host', { schema: { querystring: { type: 'object', properties: { n: { type: 'integer' } } } } }, async (request) => request.query)
  await app.register(corePlugin, { agents: { echo }, maxJsonDepth: 4 })
  await app.register(async (api) => {
    await api.register(requestPipelinePlugin)
    await api.register(agentsPlugin)
  }, { prefix: '/api' })
  const run = (payload: string, type = 'application/json') => app.inject({ method: 'POST', url: '/api/agents/echo/runs', payload, headers: { 'content-type': type } })

  const missing = await app.inject({ method: 'POST', url: '/api/agents/nobody/runs', payload: { input: 1 } })
  t.match(missing.json(), { statusCode: 404, code: 'AGENT_NOT_FOUND', requestId: missing.headers['x-request-id'] }, 'the error shape')
  t.equal((await run(JSON.stringify({ input: 1, extra: true }))).statusCode, 400, 'strict: no stripped property')
  t.equal((await run(JSON.stringify({ input: [[[[[1]]]]] }))).json().code, 'JSON_TOO_DEEP', 'maxJsonDepth')
  t.equal((await run(JSON.stringify({ input: 'a\\u0000b' }).replace('\\\\u', '\\u'))).json().code, 'FA_UNSTORABLE_TEXT', 'text no store can keep')
  t.equal((await run('hello', 'text/plain')).statusCode, 415, 'JSON only')
  const host = await app.inject({ method: 'POST', url: '/host?n=5' })
  t.same(host.json(), { n: 5 }, 'the host keeps its own validator')
  t.equal(host.headers['x-request-id'], undefined, 'and none of our hooks')
})
