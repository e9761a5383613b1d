// The package's public surface: every name index.ts exports. A name added here is a decision (README,
// CHANGELOG); an internal (settings, the request context's state, the core decorator) must never appear.
import t from 'tap'
import * as api from '../../index.js'

t.test('index.ts exports exactly the public names', async (t) => {
  t.same(Object.keys(api).sort(), [
    'AgentError', 'AgentNotFoundError', 'AgentTimeoutError', 'ApprovalAlreadyDecidedError', 'ApprovalExpiredError',
    'ApprovalNotFoundError', 'BackedRunStore', 'DEFAULT_AUDIT_CAPACITY', 'DEFAULT_MAX_RETAINED_DELIVERIES', 'DEFAULT_MAX_RETAINED_RUNS', 'DEFAULT_MAX_SESSIONS', 'ForbiddenError', 'IdempotencyInProgressError',
    'IdempotencyKeyInvalidError', 'IdempotencyKeyReusedError', 'InvalidOptionsError', 'MemoryApprovalStore', 'MemoryAuditStore',
    'MemoryCheckpointStore', 'MemoryIdempotencyStore', 'MemoryQuotaStore', 'MemoryRunStore', 'MemorySessionStore', 'MemoryWebhookStore', 'MethodNotAllowedError', 'MissingPluginError', 'PostgresApprovalStore',
    'PostgresAuditStore', 'PostgresCheckpointStore', 'PostgresConnection', 'PostgresIdempotencyStore', 'PostgresQuotaStore', 'PostgresRunStore', 'PostgresSessionStore', 'PostgresWebhookStore',
    'QuotaExceededError', 'RateLimitedError', 'RedisConnection', 'RedisIdempotencyStore', 'RedisQuotaStore', 'RedisRunStore', 'RedisSessionStore', 'RedisWebhookStore', 'RouteNotFoundError', 'RunInProgressError',
    'RunNotFoundError', 'RunSessionMismatchError', 'RunSignals', 'SessionNotFoundError', 'ShutdownError', 'SqliteApprovalStore', 'SqliteAuditStore',
    'SqliteCheckpointStore', 'SqliteConnection', 'SqliteIdempotencyStore', 'SqliteQuotaStore', 'SqliteRunStore', 'SqliteSessionStore', 'SqliteWebhookStore', 'UnauthorizedError',
    'UpgradeRequiredError', 'a2aPlugin', 'adminApiPlugin', 'agUiPlugin', 'agentsPlugin', 'approvalsPlugin', 'auditPlugin', 'authPlugin',
    'buildOpenApiDocument', 'chatPlugin', 'corePlugin', 'corsPlugin', 'createAgentService', 'default', 'defineAgent', 'demoAgents', 'drainPlugin',
    'fastifyAgents', 'hasAccess', 'healthPlugin', 'idempotencyPlugin', 'mcpPlugin', 'memoryStores', 'openAiPlugin', 'postgresStores', 'rateLimitPlugin',
    'redactingRequestSerializer', 'redisStores', 'requestContextPlugin', 'requestPipelinePlugin', 'runsPlugin', 'schemas', 'sessionsPlugin',
    'sqliteStores', 'websocketPlugin'
  ])
  t.equal(api.default, api.fastifyAgents)
})

t.test('fastify-agents/testing exports exactly the store suites', async (t) => {
  const testing = await import('../../lib/testing/index.js')
  t.same(Object.keys(testing).sort(), [
    'approvalStoreConformance', 'auditStoreConformance', 'checkpointStoreConformance', 'factoriesOf',
    'idempotencyStoreConformance', 'quotaStoreConformance', 'runStoreConformance', 'sessionStoreConformance',
    'storeConformance', 'webhookStoreConformance'
  ])
})
