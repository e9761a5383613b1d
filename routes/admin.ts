import { createHash, timingSafeEqual } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyReply, FastifyRequest, FastifySchema } from 'fastify'
import { InvalidOptionsError, RunRecordNotFoundError, UnauthorizedError } from '../lib/core/errors.js'
import { EventLoopDelayMonitor } from '../lib/core/event-loop-delay.js'
import { packageVersion } from '../lib/core/version.js'
import type { AuditQuery, RunRecord } from '../lib/stores/types.js'
import { SseStream } from '../lib/runs/sse.js'
import {
  AdminAgentList, AdminApprovalList, AdminApprovalsQuery, AdminAuditPage, AdminAuditQuery, AdminCheckpointList,
  AdminHealth, AdminLiveSnapshot, AdminPageQuery, AdminRun, AdminSessionList, AdminStats
} from '../schemas/admin.js'
import { ErrorResponse, errorResponses } from '../schemas/common.js'
import { AdminRunEventsPage, AdminRunEventsQuery, AdminRunPage, AdminRunsQuery, RunParams } from '../schemas/runs.js'
import { AdminWebhookAttemptPage, AdminWebhooksQuery } from '../schemas/webhooks.js'
import { AdminSchedulePage, AdminScheduleListQuery } from '../schemas/schedules.js'
import { RouteIndex, buildNotFoundHandler } from '../lib/core/error-reply.js'
import { healthReport } from '../lib/core/health-probe.js'
import { requestContextOf } from '../lib/core/request-context.js'
import { consoleAssets } from '../lib/console/assets.js'
import { routePluginScope } from '../lib/service/composition.js'

export interface AdminApiPluginOptions {
  /**
   * Answers unknown paths (404) and wrong methods (405 with `Allow`) under the prefix. The service passes
   * its shared one; by default the plugin builds one from its own routes. Either way it runs after this
   * plugin's hooks, so that a request without the token is a 401 whatever its path or method.
   */
  notFoundHandler?: (request: FastifyRequest, reply: FastifyReply) => void
}

export const DEFAULT_AUDIT_LIMIT = 50
export const DEFAULT_EVENTS_LIMIT = 100
/** the runs in progress the live feed lists, of each status */
export const LIVE_RUNS_LIMIT = 100

/** A run as the Admin API lists it: without its result. */
function withoutResult ({ result: _result, ...record }: RunRecord): AdminRun {
  return record
}

function sha256 (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}

/** `4xx` → 400..499, `404` → 404..404 (the store's inclusive range). */
export function statusRange (status: string): { statusFrom: number, statusTo: number } {
  const from = Number(status[0]) * 100
  if (/xx$/i.test(status)) return { statusFrom: from, statusTo: from + 99 }
  return { statusFrom: Number(status), statusTo: Number(status) }
}

/**
 * The read-only operational overlay (docs/operations.md): health, agents, audit, sessions, approvals,
 * checkpoints and stats, under the prefix it is registered with. Needs the core plugin with
 * `adminApi` enabled in its options.
 */
const adminApi: FastifyPluginAsyncTypebox<AdminApiPluginOptions> = async (fastify, options) => {
  routePluginScope(fastify, 'adminApiPlugin')
  const state = fastify.agentService
  const { settings, stats } = state
  const admin = settings.adminApi
  if (admin === null) throw new InvalidOptionsError('/adminApi must be { enabled: true } to register the Admin API')

  const routes = new RouteIndex()
  routes.collect(fastify)
  // Fastify's 404 context takes a route config (fastify's own lib/four-oh-four.js reads `opts.config`) though its types do not
  // say so. Marked admin, a 404 or 405 under the prefix is what an admin route is: no service auth, counted apart.
  const notFoundOptions = { config: { admin: true } } as Parameters<typeof fastify.setNotFoundHandler>[0] & object
  fastify.setNotFoundHandler(notFoundOptions, options.notFoundHandler ?? buildNotFoundHandler(routes))

  // Hashing both sides gives equal lengths for timingSafeEqual, so the token's length does not leak either.
  const expected = admin.bearerToken === null ? null : sha256(admin.bearerToken)
  if (expected === null) {
    fastify.log.warn({ prefix: fastify.prefix }, `Admin API at ${fastify.prefix} has no adminApi.bearerToken: anyone who can reach it can read the audit log, sessions, approvals and stats`)
  }

  fastify.addHook('onRequest', (request, reply, done) => {
    if (expected === null || requestContextOf(request).config.adminPublic === true) return done()
    const match = /^Bearer +(\S+) *$/i.exec(request.headers.authorization ?? '')
    if (match !== null && timingSafeEqual(sha256(match[1]!), expected)) {
      requestContextOf(request).principal = 'admin'
      return done()
    }
    void reply.header('www-authenticate', 'Bearer realm="admin"')
    done(new UnauthorizedError(match === null ? 'Admin API bearer token required' : 'Invalid Admin API bearer token'))
  })

  // The Admin API's source rule (docs/operations.md) taken literally: with both options set to different stores, the admin API reads one the
  // service never writes to. Legal, but almost certainly not what was meant: say so once.
  for (const name of ['auditStore', 'checkpointStore'] as const) {
    if (admin[name] !== settings[name]) {
      fastify.log.warn({ option: `adminApi.${name}` }, `adminApi.${name} is not the service's ${name}: the Admin API will not show what the service writes`)
    }
  }

  const monitor = new EventLoopDelayMonitor()
  monitor.start()
  fastify.addHook('onClose', async () => monitor.stop())

  // Only GET: no HEAD twin, so every other method is a 405 with `Allow: GET`.
  const route = <S extends FastifySchema>(summary: string, schema: S) => ({
    exposeHeadRoute: false,
    config: { admin: true as const },
    schema: {
      summary,
      tags: ['admin'],
      // service auth does not apply here: only the Admin API's own token (if any)
      security: expected === null ? [] : [{ adminBearer: [] }],
      ...schema
    }
  })
  const errors = (...statuses: number[]): ReturnType<typeof errorResponses> => errorResponses(...statuses, 401, 429, 503)

  fastify.get('/health', route('Deep health: process, event loop, database', {
    operationId: 'getAdminHealth',
    response: { 200: AdminHealth, 503: Type.Union([AdminHealth, ErrorResponse], { description: 'Degraded, or shutting down' }), ...errorResponses(401, 429) }
  }), async (_request, reply) => {
    const body = await health()
    return reply.code(body.status === 'ok' ? 200 : 503).send(body)
  })

  async function health (): Promise<AdminHealth> {
    const report = await healthReport(settings.checks, settings.healthTimeoutMs)
    const memory = process.memoryUsage()
    return {
      status: report.status,
      uptimeSeconds: Math.floor((Date.now() - Date.parse(state.startedAt)) / 1000),
      startedAt: state.startedAt,
      version: packageVersion,
      process: {
        pid: process.pid,
        node: process.version,
        platform: process.platform,
        arch: process.arch,
        memory: { rss: memory.rss, heapTotal: memory.heapTotal, heapUsed: memory.heapUsed, external: memory.external },
        eventLoopDelayMs: monitor.read()
      },
      checks: report.checks
    }
  }

  const agents = (): AdminAgentList => ({
    agents: [...settings.agents].map(([name, agent]) => {
      const figures = stats.agent(name)
      const item: AdminAgentList['agents'][number] = {
        name,
        description: agent.description ?? '',
        metadata: agent.metadata ?? {},
        stats: { runs: figures.runs, failed: figures.failed, inFlight: figures.inFlight, tokens: figures.tokens }
      }
      // as the OpenAPI document gives it: plain JSON Schema (a Standard Schema's from its library's converter)
      const input = settings.agentSchemas.get(name)?.input
      if (input !== undefined) item.input = input
      return item
    })
  })

  fastify.get('/agents', route('Agents with this instance\'s figures', {
    operationId: 'listAdminAgents',
    response: { 200: AdminAgentList, ...errors() }
  }), async (): Promise<AdminAgentList> => agents())

  fastify.get('/audit', route('The audit log, most recent first, by cursor', {
    operationId: 'listAuditEntries',
    querystring: AdminAuditQuery,
    response: { 200: AdminAuditPage, ...errors(400) }
  }), async (request) => {
    const { limit = DEFAULT_AUDIT_LIMIT, cursor, agent, status } = request.query
    const query: AuditQuery = { limit }
    if (cursor !== undefined) query.cursor = cursor
    if (agent !== undefined) query.agent = agent
    if (status !== undefined) Object.assign(query, statusRange(status))
    return admin.auditStore.query(query)
  })

  fastify.get('/sessions', route('Active (unexpired) sessions, most recently active first', {
    operationId: 'listAdminSessions',
    querystring: AdminPageQuery,
    response: { 200: AdminSessionList, ...errors(400) }
  }), async (request) => {
    const { limit = DEFAULT_AUDIT_LIMIT, cursor } = request.query
    return settings.sessionStore.list(cursor === undefined ? { limit } : { limit, cursor })
  })

  fastify.get('/approvals', route('Pending approvals, oldest first', {
    operationId: 'listAdminApprovals',
    querystring: AdminApprovalsQuery,
    response: { 200: AdminApprovalList, ...errors(400) }
  }), async (request) => ({ approvals: await settings.approvalStore.listPending(request.query) }))

  fastify.get('/checkpoints', route('Resumable runs\' checkpoints, without their state', {
    operationId: 'listCheckpoints',
    response: { 200: AdminCheckpointList, ...errors() }
  }), async () => ({ checkpoints: await admin.checkpointStore.list() }))

  fastify.get('/runs', route('Runs of every principal, most recent first, without their results', {
    operationId: 'listAdminRuns',
    description: 'Filters: `status`, `agent`, `sessionId`, `principal`; `runId` answers that one run (when it matches the others), on one page.',
    querystring: AdminRunsQuery,
    response: { 200: AdminRunPage, ...errors(400) }
  }), async (request) => {
    const { limit = DEFAULT_AUDIT_LIMIT, cursor, runId, ...filters } = request.query
    if (runId !== undefined) {
      const record = await settings.runStore.get(runId)
      const matches = record !== null && Object.entries(filters).every(([name, value]) => record[name as keyof typeof filters] === value)
      return { runs: matches ? [withoutResult(record)] : [], nextCursor: null }
    }
    const page = await settings.runStore.list({ limit, cursor, ...filters })
    return { runs: page.runs.map(withoutResult), nextCursor: page.nextCursor }
  })

  fastify.get('/runs/:runId/events', route('A run\'s events from its log, whoever started it, in order, by page', {
    operationId: 'listAdminRunEvents',
    params: RunParams,
    querystring: AdminRunEventsQuery,
    response: { 200: AdminRunEventsPage, ...errors(400, 404) }
  }), async (request) => {
    const { runId } = request.params
    const { after = 0, limit = DEFAULT_EVENTS_LIMIT } = request.query
    const record = await settings.runStore.get(runId)
    if (record === null) throw new RunRecordNotFoundError(runId)
    const events = await settings.runStore.events(runId, after, limit)
    return {
      run: withoutResult(record),
      events: events.map((event) => ({ seq: event.seq, type: event.type, data: JSON.parse(event.data) as unknown })),
      nextAfter: events.length === limit ? events.at(-1)!.seq : null
    }
  })

  fastify.get('/webhooks', route('Webhook delivery attempts, most recent first, by cursor', {
    operationId: 'listWebhookAttempts',
    querystring: AdminWebhooksQuery,
    response: { 200: AdminWebhookAttemptPage, ...errors(400) }
  }), async (request) => {
    const { limit = DEFAULT_AUDIT_LIMIT, ...filters } = request.query
    // without the option there is no outbox to read (and a store named for it is left unopened)
    if (settings.webhooks === null) return { attempts: [], nextCursor: null }
    return settings.webhooks.store.attempts({ limit, ...filters })
  })

  fastify.get('/schedules', route('Schedules of every principal, most recently created first, by cursor', {
    operationId: 'listAdminSchedules',
    description: 'Filter: `principal`. Each with its next and last run; enable or disable one through the service\'s routes (`PATCH /v1/schedules/:id`) as its principal.',
    querystring: AdminScheduleListQuery,
    response: { 200: AdminSchedulePage, ...errors(400) }
  }), async (request) => {
    const { limit = DEFAULT_AUDIT_LIMIT, cursor, principal } = request.query
    const page = await settings.scheduleStore.list({ limit, ...(cursor === undefined ? {} : { cursor }), ...(principal === undefined ? {} : { principal }) })
    return { schedules: page.rows.map((row) => row.state.schedule), nextCursor: page.nextCursor }
  })

  fastify.get('/stats', route('Service figures since start', {
    operationId: 'getStats',
    response: { 200: AdminStats, ...errors() }
  }), async (): Promise<AdminStats> => stats.snapshot())

  // TypeBox's value module (dozens of files) is loaded with the Admin API, not with the package (bench/import.js)
  const { Value } = await import('@sinclair/typebox/value')
  /** What the console showed by polling six routes, read once for every interval of a live feed. */
  async function snapshot (): Promise<AdminLiveSnapshot> {
    const store = settings.runStore
    const [healthBody, running, queued, approvals] = await Promise.all([
      health(),
      store.list({ limit: LIVE_RUNS_LIMIT, status: 'running' }),
      store.list({ limit: LIVE_RUNS_LIMIT, status: 'queued' }),
      settings.approvalStore.listPending({})
    ])
    const body: AdminLiveSnapshot = {
      at: new Date().toISOString(),
      health: healthBody,
      stats: stats.snapshot(),
      agents: agents().agents,
      runs: [...running.runs, ...queued.runs].map(withoutResult),
      approvals,
      cluster: {
        running: running.runs.length,
        queued: queued.runs.length,
        approvalsPending: approvals.length,
        capped: running.nextCursor !== null || queued.nextCursor !== null
      }
    }
    // the rule of every admin answer (nothing but the records leaves), kept without Fastify's serializer
    return Value.Clean(AdminLiveSnapshot, Value.Clone(body)) as AdminLiveSnapshot
  }

  const feeds = new Set<LiveFeed>()
  fastify.get('/live', route('The live feed: a snapshot of health, figures, runs in progress and pending approvals at every interval', {
    operationId: 'getAdminLiveFeed',
    description: 'Server-Sent Events: `event: snapshot` with an AdminLiveSnapshot now and every `adminApi.liveIntervalMs` ' +
      '(`event: problem` with `{ code, message }` when one could not be read), until the server ends the response after ' +
      '`adminApi.liveFeedMs` (a minute by default); the client opens the next. One audit entry per connection, written ' +
      'when it opens: an open console costs one entry a minute.',
    produces: ['text/event-stream'],
    response: {
      200: { description: 'snapshots', content: { 'text/event-stream': { schema: AdminLiveSnapshot } } },
      ...errors()
    }
  }), (request, reply) => {
    // its one entry now, not when it ends: an operator reading the audit log sees who watches
    state.audit.record(request, 200)
    reply.hijack()
    const feed = new LiveFeed(new SseStream(reply.raw, reply.getHeaders() as Record<string, string>), snapshot, admin.liveIntervalMs, () => feeds.delete(feed))
    feeds.add(feed)
    state.heartbeat.add(feed.stream)
    reply.raw.on('close', () => {
      feed.stream.closed()
      state.heartbeat.delete(feed.stream)
      feed.stop()
    })
    feed.start(admin.liveFeedMs)
  })
  // a feed is never what keeps a closing server open
  fastify.addHook('preClose', (done) => {
    for (const feed of feeds) feed.stop()
    done()
  })

  // prom-client is loaded with the Admin API only: importing the package does not pay for it (bench/import.js)
  const { ServiceMetrics } = await import('../lib/service/metrics.js')
  const metrics = new ServiceMetrics(state, settings.metricsRegistry, fastify.log)
  fastify.get('/metrics', route('Prometheus metrics, in the text exposition format', {
    operationId: 'getMetrics',
    produces: ['text/plain'],
    response: { 200: Type.String({ description: 'prom-client\'s text exposition format (version 0.0.4)' }), ...errors() }
  }), async (_request, reply) => {
    const { body, contentType } = await metrics.scrape()
    return reply.type(contentType).send(body)
  })

  // The operator console: a page and its assets, served from memory; the data comes from the routes above (with
  // the token typed into the page), its actions from the service's own routes (with a service credential).
  const { prefix } = fastify
  const assets = consoleAssets({ adminPrefix: prefix, apiPrefix: prefix.slice(0, prefix.length - admin.prefix.length) + '/v1' })
  for (const [path, asset] of assets) {
    fastify.get(path, { exposeHeadRoute: false, config: { admin: true, adminPublic: true }, schema: { hide: true } }, async (_request, reply) => {
      return reply
        .type(asset.contentType)
        .header('cache-control', 'no-cache')
        // nothing leaves the origin, and nothing from elsewhere runs
        .header('content-security-policy', "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
        .header('x-content-type-options', 'nosniff')
        .send(asset.body)
    })
  }
}

/**
 * One open live feed: a snapshot at once and after each interval (the next read starts once the last is sent, so
 * a slow store never stacks reads), until its time is up, the client leaves or the server closes.
 */
class LiveFeed {
  readonly stream: SseStream
  readonly #read: () => Promise<AdminLiveSnapshot>
  readonly #intervalMs: number
  readonly #forget: () => void
  #timer: NodeJS.Timeout | undefined
  #deadline: NodeJS.Timeout | undefined
  #stopped = false

  constructor (stream: SseStream, read: () => Promise<AdminLiveSnapshot>, intervalMs: number, forget: () => void) {
    this.stream = stream
    this.#read = read
    this.#intervalMs = intervalMs
    this.#forget = forget
  }

  start (durationMs: number): void {
    this.#deadline = setTimeout(() => this.stop(), durationMs)
    void this.#tick()
  }

  async #tick (): Promise<void> {
    const text = await this.#read().then(
      (body) => `event: snapshot\ndata: ${JSON.stringify(body)}\n\n`,
      (err: { code?: unknown, message?: unknown }) => `event: problem\ndata: ${JSON.stringify({ code: typeof err.code === 'string' ? err.code : 'INTERNAL_ERROR', message: String(err.message) })}\n\n`)
    if (this.#stopped) return
    this.stream.write(text)
    this.#timer = setTimeout(() => { void this.#tick() }, this.#intervalMs)
  }

  /** Ends the response (the client opens the next feed); idempotent. */
  stop (): void {
    if (this.#stopped) return
    this.#stopped = true
    clearTimeout(this.#timer)
    clearTimeout(this.#deadline)
    this.stream.end()
    this.#forget()
  }
}

/**
 * Register with `{ prefix: settings.adminApi.prefix }`; the service does so when `adminApi` is enabled.
 * encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check.
 */
export const adminApiPlugin = fp(adminApi, { fastify: '5.x', name: 'fastify-agents-admin-api', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default adminApiPlugin
