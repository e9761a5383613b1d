// fastify-agents: named AI agents over HTTP, SSE and WebSocket, as Fastify plugins. This file is the public
// surface: test/app/public-api.test.ts lists every name it exports, so that nothing internal leaks out unnoticed.
import { fastifyAgents } from './app/plugin.js'

export default fastifyAgents
export { fastifyAgents }
export { createAgentService } from './app/service.js'
export type { AgentService, ListenOptions } from './app/service.js'
export { buildOpenApiDocument } from './app/openapi.js'
export { demoAgents } from './app/demo-agents.js'
export { defineAgent } from './lib/runs/define-agent.js'
export type { TypedAgent } from './lib/runs/define-agent.js'
export type { AgentSchema, InferSchema, JsonSchema } from './lib/core/agent-schemas.js'

// Each concern on its own: the core first (with the options), then the request pipeline (or its hook plugins one by
// one, in its order), then the route plugins you want; a route plugin refuses to register without a hook it needs.
export { corePlugin } from './plugins/core.js'
export type { CorePluginOptions } from './plugins/core.js'
export { requestPipelinePlugin } from './app/pipeline.js'
export { requestContextPlugin } from './plugins/request-context.js'
export type { RequestContextOptions } from './plugins/request-context.js'
export { drainPlugin } from './plugins/drain.js'
export { auditPlugin } from './lib/audit/index.js'
export { corsPlugin } from './plugins/cors.js'
export { authPlugin } from './lib/auth/index.js'
export { rateLimitPlugin } from './plugins/rate-limit.js'
export { idempotencyPlugin } from './lib/idempotency/index.js'
export { agentsPlugin } from './routes/agents.js'
export type { AgentsPluginOptions } from './routes/agents.js'
export { sessionsPlugin } from './routes/sessions.js'
export type { SessionsPluginOptions } from './routes/sessions.js'
export { healthPlugin } from './routes/health.js'
export type { HealthPluginOptions } from './routes/health.js'
export { approvalsPlugin } from './routes/approvals.js'
export { runsPlugin } from './routes/runs.js'
export { schedulesPlugin } from './lib/schedules/index.js'
export type { SchedulesPluginOptions } from './lib/schedules/index.js'
export type { RunsPluginOptions } from './routes/runs.js'
export type { ApprovalsPluginOptions } from './routes/approvals.js'
export { websocketPlugin } from './routes/websocket.js'
export type { WebsocketPluginOptions } from './routes/websocket.js'
export { chatPlugin } from './lib/frontends/chat/index.js'
export type { ChatPluginOptions } from './lib/frontends/chat/index.js'
export { agUiPlugin } from './lib/frontends/ag-ui/index.js'
export type { AgUiPluginOptions } from './lib/frontends/ag-ui/index.js'
export { a2aPlugin } from './lib/frontends/a2a/index.js'
export type { A2APluginOptions } from './lib/frontends/a2a/index.js'
export { openAiPlugin } from './lib/frontends/openai/index.js'
export type { OpenAiPluginOptions } from './lib/frontends/openai/index.js'
export { mcpPlugin } from './lib/frontends/mcp/index.js'
export type { McpPluginOptions } from './lib/frontends/mcp/index.js'
export { adminApiPlugin } from './routes/admin.js'
export type { AdminApiPluginOptions } from './routes/admin.js'

// For routes and loggers of your own next to the service's.
export { hasAccess, redactingRequestSerializer } from './lib/auth/credentials.js'
export type { Access } from './lib/auth/credentials.js'

export {
  AgentError, AgentNotFoundError, AgentTimeoutError, ApprovalAlreadyDecidedError, ApprovalExpiredError, ApprovalNotFoundError,
  ForbiddenError, IdempotencyInProgressError, IdempotencyKeyInvalidError, IdempotencyKeyReusedError, InvalidOptionsError,
  MethodNotAllowedError, MissingPluginError, QuotaExceededError, RateLimitedError, RouteNotFoundError, RunInProgressError, RunNotFoundError, RunSessionMismatchError,
  SessionNotFoundError, ShutdownError, UnauthorizedError, UpgradeRequiredError
} from './lib/core/errors.js'
export type * from './lib/core/types.js'
export type { RunEvent, RunFailureCode, RunOutcome, RunResult } from './lib/runs/run.js'
export * from './lib/stores/index.js'

export * as schemas from './schemas/index.js'
