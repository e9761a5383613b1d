import fp from 'fastify-plugin'
import swagger from '@fastify/swagger'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import { RouteIndex, buildErrorHandler, buildNotFoundHandler } from '../lib/core/error-reply.js'
import { resolveSettings } from '../lib/service/settings.js'
import type { Settings } from '../lib/service/settings.js'
import type { AgentServiceOptions } from '../lib/core/types.js'
import { answerAsTheService } from '../lib/service/composition.js'
import { auditPlugin } from '../lib/audit/index.js'
import { corePlugin } from '../plugins/core.js'
import { drainPlugin } from '../plugins/drain.js'
import { requestContextPlugin } from '../plugins/request-context.js'
import { a2aPlugin } from '../lib/frontends/a2a/index.js'
import { adminApiPlugin } from '../routes/admin.js'
import { agUiPlugin } from '../lib/frontends/ag-ui/index.js'
import { agentsPlugin } from '../routes/agents.js'
import { approvalsPlugin } from '../routes/approvals.js'
import { chatPlugin } from '../lib/frontends/chat/index.js'
import { healthPlugin } from '../routes/health.js'
import { runsPlugin } from '../routes/runs.js'
import { sessionsPlugin } from '../routes/sessions.js'
import { websocketPlugin } from '../routes/websocket.js'
import { openAiPlugin } from '../lib/frontends/openai/index.js'
import { mcpPlugin } from '../lib/frontends/mcp/index.js'
import { schedulesPlugin } from '../lib/schedules/index.js'
import { requestPipelinePlugin } from './pipeline.js'
import { openApiOptions } from './swagger.js'

/** Everything the service mounts, in its own encapsulated scope: the host app keeps its own validator and error handler. */
async function serviceScope (scope: FastifyInstance): Promise<void> {
  const service = scope.agentService
  const { settings } = service
  const routes = new RouteIndex()
  routes.collect(scope)
  const notFound = buildNotFoundHandler(routes)

  answerAsTheService(scope)
  await scope.register(requestPipelinePlugin)

  // what needs no credential (health) shows no lock in the document
  const publicRoutes = new Set<string>()
  scope.addHook('onRoute', (route) => {
    if (route.config?.public !== true) return
    const path = route.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    for (const method of [route.method].flat()) publicRoutes.add(`${method} ${path}`)
  })
  await scope.register(swagger, await openApiOptions(settings, publicRoutes))
  service.useOpenApiDocument(() => scope.swagger() as unknown as Record<string, unknown>)
  if (settings.docs) {
    const { default: swaggerUi } = await import('@fastify/swagger-ui')
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
    await v1.register(healthPlugin, { prefix: '/health', operationId: 'getV1Health' })
    await v1.register(agentsPlugin)
    await v1.register(sessionsPlugin)
    await v1.register(approvalsPlugin)
    await v1.register(runsPlugin)
    await v1.register(schedulesPlugin)
    // the front-end protocols (docs/front-ends.md): the same runs, as useChat, AG-UI and A2A clients speak them
    await v1.register(chatPlugin)
    await v1.register(agUiPlugin)
    await v1.register(a2aPlugin)
    // agents as models: the OpenAI-shaped APIs
    if (settings.openaiCompat) await v1.register(openAiPlugin)
    // every agent a tool, over MCP
    if (settings.mcp) await v1.register(mcpPlugin)
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
    // the hooks that apply to every request of the app, 404s included (the scope's pipeline then skips them)
    await fastify.register(requestContextPlugin, { trustRequestId: true })
    await fastify.register(drainPlugin)
    await fastify.register(auditPlugin)
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
