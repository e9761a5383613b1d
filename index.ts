// fastify-agents: named AI agents over HTTP, SSE and WebSocket, as Fastify plugins.
import { fastifyAgents } from './plugins/service.js'

export default fastifyAgents
export { fastifyAgents }
export { defineAgent } from './lib/define-agent.js'
export { demoAgents } from './lib/demo-agents.js'
export { createAgentService } from './lib/service.js'
export type { AgentService, ListenOptions } from './lib/service.js'
export { buildOpenApiDocument } from './lib/openapi.js'
export { resolveSettings } from './lib/settings.js'
export type { Settings } from './lib/settings.js'

export { corePlugin } from './plugins/core.js'
export type { AgentServiceState, CorePluginOptions } from './plugins/core.js'
export { requestContextPlugin, RequestContext } from './plugins/request-context.js'
export type { RequestContextOptions } from './plugins/request-context.js'
export { agentsPlugin } from './plugins/agents.js'
export type { AgentsPluginOptions } from './plugins/agents.js'
export { sessionsPlugin } from './plugins/sessions.js'
export type { SessionsPluginOptions } from './plugins/sessions.js'
export { healthPlugin } from './plugins/health.js'
export type { HealthPluginOptions } from './plugins/health.js'
export { auditPlugin } from './plugins/audit.js'
export { authPlugin, hasAccess } from './plugins/auth.js'
export { redactingRequestSerializer } from './lib/auth.js'
export type { Access } from './plugins/auth.js'
export { corsPlugin } from './plugins/cors.js'
export { rateLimitPlugin } from './plugins/rate-limit.js'
export { idempotencyPlugin } from './plugins/idempotency.js'
export { adminApiPlugin } from './plugins/admin-api.js'
export type { AdminApiPluginOptions } from './plugins/admin-api.js'

export * from './lib/errors.js'
export type * from './lib/types.js'
export type { RunEvent, RunOutcome, RunResult, RunFailureCode } from './lib/runner.js'
export * from './lib/stores/index.js'

export * as schemas from './schemas/index.js'
