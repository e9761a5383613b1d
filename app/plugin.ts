import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import { RouteIndex, buildErrorHandler, buildNotFoundHandler } from '../lib/core/error-reply.js'
import { resolveSettings } from '../lib/core/settings.js'
import type { Settings } from '../lib/core/settings.js'
import type { AgentServiceOptions } from '../lib/core/types.js'
import { JsonTooDeepError, UnstorableInputError } from '../lib/core/errors.js'
import { formatSchemaErrors, jsonDeeperThan, strictValidatorCompiler, unstorableText } from '../lib/core/validation.js'
import { auditPlugin } from '../plugins/audit.js'
import { authPlugin } from '../plugins/auth.js'
import { corePlugin } from '../plugins/core.js'
import { corsPlugin } from '../plugins/cors.js'
import { drainPlugin } from '../plugins/drain.js'
import { idempotencyPlugin } from '../plugins/idempotency.js'
import { rateLimitPlugin } from '../plugins/rate-limit.js'
import { requestContextPlugin } from '../plugins/request-context.js'
import { a2aPlugin } from '../routes/a2a.js'
import { adminApiPlugin } from '../routes/admin.js'
import { agUiPlugin } from '../routes/ag-ui.js'
import { agentsPlugin } from '../routes/agents.js'
import { approvalsPlugin } from '../routes/approvals.js'
import { chatPlugin } from '../routes/chat.js'
import { healthPlugin } from '../routes/health.js'
import { runsPlugin } from '../routes/runs.js'
import { sessionsPlugin } from '../routes/sessions.js'
import { websocketPlugin } from '../routes/websocket.js'
import { openApiOptions } from './swagger.js'

/** The hooks every request of a scope goes through, in order (idempotent: a scope that has them skips them). */
async function requestPipeline (scope: FastifyInstance): Promise<void> {
  if (!scope.hasPlugin('fastify-agents-request-context')) await scope.register(requestContextPlugin)
  // a drain refuses before anything else looks at the request
  if (!scope.hasPlugin('fastify-agents-drain')) await scope.register(drainPlugin)
  if (!scope.hasPlugin('fastify-agents-audit')) await scope.register(auditPlugin)
}

/** Everything the service mounts, in its own encapsulated scope: the host app keeps its own validator and error handler. */
async function serviceScope (scope: FastifyInstance): Promise<void> {
  const service = scope.agentService
  const { settings } = service
  const routes = new RouteIndex()
  routes.collect(scope)
  const notFound = buildNotFoundHandler(routes)

  scope.setValidatorCompiler(strictValidatorCompiler)
  scope.setSchemaErrorFormatter(formatSchemaErrors)
  scope.setErrorHandler(buildErrorHandler(settings.exposeErrors))
  // Our bodies are JSON only: anything else is a 415, not a 400 from a body that parsed as a string.
  scope.removeContentTypeParser('text/plain')
  // Nesting deeper than a store or a log line can walk is refused before it is parsed, let alone run (§19).
  // So is text no store can keep (NUL, lone surrogates): JSON text holds them only as \u escapes.
  const parseJson = scope.getDefaultJsonParser(scope.initialConfig.onProtoPoisoning!, scope.initialConfig.onConstructorPoisoning!)
  scope.removeContentTypeParser('application/json')
  scope.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    if (jsonDeeperThan(text, settings.maxJsonDepth)) return done(new JsonTooDeepError(settings.maxJsonDepth), undefined)
    parseJson(request, text, (error: Error | null, parsed?: unknown) => {
      const bad = error === null && text.includes('\\u') ? unstorableText(parsed, 'body') : null
      if (bad !== null) return done(new UnstorableInputError(bad.path, bad.holds), undefined)
      done(error, parsed)
    })
  })
  scope.addHook('preValidation', (request, _reply, done) => {
    const bad = unstorableText(request.params, 'params') ?? unstorableText(request.query, 'querystring')
    done(bad === null ? undefined : new UnstorableInputError(bad.path, bad.holds))
  })
  await requestPipeline(scope)
  // Traffic and security, in this order: CORS answers preflights before anyone asks for credentials; auth
  // names the principal; the rate limit counts by it (rejected requests too: auth's verdict comes after);
  // idempotency wraps the routes marked `config.idempotency`.
  await scope.register(corsPlugin)
  await scope.register(authPlugin)
  await scope.register(rateLimitPlugin)
  await scope.register(idempotencyPlugin)

  // what needs no credential (health) shows no lock in the document
  const publicRoutes = new Set<string>()
  scope.addHook('onRoute', (route) => {
    if (route.config?.public !== true) return
    const path = route.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    for (const method of [route.method].flat()) publicRoutes.add(`${method} ${path}`)
  })
  await scope.register(swagger, openApiOptions(settings, publicRoutes))
  service.useOpenApiDocument(() => scope.swagger() as unknown as Record<string, unknown>)
  if (settings.docs) {
    await scope.register(async (docs) => {
      // The page, its assets and the document load without credentials; the calls the page makes carry the
      // ones typed into its Authorize dialog (kept across reloads).
      docs.addHook('onRoute', (route) => { route.config = { ...route.config, public: true } })
      await docs.register(swaggerUi, { routePrefix: '/docs', uiConfig: { persistAuthorization: true } })
    })
  }

  await scope.register(async (health) => {
    health.setNotFoundHandler(notFound)
    await health.register(healthPlugin)
  }, { prefix: '/health' })

  await scope.register(async (v1) => {
    v1.setNotFoundHandler(notFound)
    await v1.register(healthPlugin, { prefix: '/health' })
    await v1.register(agentsPlugin)
    await v1.register(sessionsPlugin)
    await v1.register(approvalsPlugin)
    await v1.register(runsPlugin)
    // the front-end protocols (§17): the same runs, as useChat, AG-UI and A2A clients speak them
    await v1.register(chatPlugin)
    await v1.register(agUiPlugin)
    await v1.register(a2aPlugin)
    if (settings.websocket) await v1.register(websocketPlugin)
  }, { prefix: '/v1' })

  if (settings.adminApi !== null) {
    await scope.register(adminApiPlugin, { prefix: settings.adminApi.prefix, notFoundHandler: notFound })
  }
}

/**
 * Mounts the service on `fastify`. `ownsRoot`: the standalone service owns the whole app, so the request
 * context, the drain, the audit and our 404s apply at its root too.
 */
export async function mountService (fastify: FastifyInstance, settings: Settings, ownsRoot: boolean): Promise<void> {
  await fastify.register(corePlugin, { settings })
  if (ownsRoot) {
    const routes = new RouteIndex()
    routes.collect(fastify)
    await fastify.register(requestContextPlugin, { trustRequestId: true })
    await requestPipeline(fastify)
    fastify.setErrorHandler(buildErrorHandler(settings.exposeErrors))
    fastify.setNotFoundHandler(buildNotFoundHandler(routes))
  }
  await fastify.register(serviceScope)
}

const service: FastifyPluginAsync<AgentServiceOptions> = async (fastify, options) => {
  await mountService(fastify, resolveSettings(options), false)
}

/** The whole service as one plugin: `app.register(fastifyAgents, { agents })`. */
export const fastifyAgents = fp(service, { fastify: '5.x', name: 'fastify-agents' })
export default fastifyAgents
