import { Type } from '@sinclair/typebox'
import type { Static, TUnsafe } from '@sinclair/typebox'
import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify'
import type { Registry } from 'prom-client'
// Types only (the options' objects with methods): nothing of lib/ is loaded by the schemas.
import type { Agent } from '../lib/core/types.js'
import type { ApprovalStore, AuditStore, CheckpointStore, IdempotencyStore, QuotaStore, RunStore, ScheduleStore, SessionStore, WebhookStore } from '../lib/stores/types.js'
import { WebhooksOptions } from './webhooks.js'

// Options mix JSON values with objects that carry methods (agents, stores, clients). The JSON parts are
// plain JSON Schema; for the others the `x-methods` keyword (checked by lib/service/settings.ts) names the
// methods an object must have, so a store without `append` is reported like any other bad value.
function withMethods<T> (methods: readonly string[], description: string): TUnsafe<T> {
  return Type.Unsafe<T>({ type: 'object', 'x-methods': methods, description })
}

// The methods a store must have, checked at registration; lib/stores/types.ts holds each list against its interface.
export const storeMethods = {
  auditStore: ['append', 'query'],
  sessionStore: ['create', 'get', 'appendTurn', 'delete', 'list', 'listByPrincipal'],
  approvalStore: ['create', 'get', 'listPending', 'decide', 'expire', 'cancel', 'waitForDecision'],
  checkpointStore: ['save', 'load', 'delete', 'list'],
  idempotencyStore: ['reserve', 'renew', 'complete', 'release'],
  runStore: [
    'create', 'reopen', 'start', 'claim', 'append', 'finish', 'renew', 'lapsed', 'requeue', 'abandon', 'get', 'spec', 'events',
    'cancel', 'watch', 'watchSession', 'watchQueue', 'listBySession', 'list', 'purge', 'delete'
  ],
  webhookStore: ['enqueue', 'claim', 'record', 'attempts', 'purge'],
  quotaStore: ['acquire', 'renew', 'release', 'addTokens', 'tokens', 'purge'],
  scheduleStore: ['insert', 'get', 'write', 'writeAll', 'delete', 'list', 'take', 'nextWake', 'watch']
} as const

// Agents are checked for a `run` method at registration, whatever their input type.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const AgentOption = withMethods<Agent<any>>(['run'], 'an agent: an object with a run(input, ctx) method')
export const AuditStoreOption = withMethods<AuditStore>(storeMethods.auditStore, 'an AuditStore')
export const SessionStoreOption = withMethods<SessionStore>(storeMethods.sessionStore, 'a SessionStore')
export const ApprovalStoreOption = withMethods<ApprovalStore>(storeMethods.approvalStore, 'an ApprovalStore')
export const CheckpointStoreOption = withMethods<CheckpointStore>(storeMethods.checkpointStore, 'a CheckpointStore')
export const IdempotencyStoreOption = withMethods<IdempotencyStore>(storeMethods.idempotencyStore, 'an IdempotencyStore')
export const RunStoreOption = withMethods<RunStore>(storeMethods.runStore, 'a RunStore')
export const WebhookStoreOption = withMethods<WebhookStore>(storeMethods.webhookStore, 'a WebhookStore: the outbox of webhook deliveries')
export const ScheduleStoreOption = withMethods<ScheduleStore>(storeMethods.scheduleStore, 'a ScheduleStore: the schedules, shared by the instances firing them')
export const QuotaStoreOption = withMethods<QuotaStore>(storeMethods.quotaStore, 'a QuotaStore: the counts of the `quotas` option, shared by the instances using it')

// Positive integers (the rest checked by the schema): a quota of 0 or 1.5 runs says nothing an operator means.
export const QuotasOptions = Type.Object({
  maxConcurrentRuns: Type.Optional(Type.Integer({ minimum: 1, description: 'the most runs one principal has in progress at once, queued background runs included' })),
  tokens: Type.Optional(Type.Object({
    limit: Type.Integer({ minimum: 1, description: 'input plus output tokens one principal may use per window' }),
    intervalMs: Type.Integer({ minimum: 1, description: 'the window, aligned to multiples of it since the epoch' })
  }, { additionalProperties: false }))
}, { additionalProperties: false })

export const AdminApiOptions = Type.Object({
  enabled: Type.Optional(Type.Boolean({ default: false })),
  // the rules for prefix (leading "/", no trailing "/", no clash) are checked by lib/service/settings.ts, each with its own message
  prefix: Type.Optional(Type.String({ default: '/admin' })),
  bearerToken: Type.Optional(Type.String({ minLength: 1 })),
  auditStore: Type.Optional(AuditStoreOption),
  checkpointStore: Type.Optional(CheckpointStoreOption),
  liveIntervalMs: Type.Optional(Type.Integer({ minimum: 50, maximum: 3_600_000, default: 2000, description: 'how often the live feed (the console\'s) sends a snapshot' })),
  liveFeedMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 3_600_000, default: 60_000, description: 'how long one live-feed connection stays open (one audit entry each) before the client opens the next' }))
}, { additionalProperties: false })

export const ApiKeyAuthOptions = Type.Object({
  strategy: Type.Literal('api-key'),
  keys: Type.Array(Type.String({ minLength: 1, pattern: '^\\S+$' }), { minItems: 1 })
}, { additionalProperties: false })

export const JwtAuthOptions = Type.Object({
  strategy: Type.Literal('jwt'),
  secret: Type.Optional(Type.String({ minLength: 1 })),
  publicKey: Type.Optional(Type.String({ minLength: 1 })),
  algorithms: Type.Optional(Type.Array(Type.Union([
    Type.Literal('HS256'), Type.Literal('HS384'), Type.Literal('HS512'),
    Type.Literal('RS256'), Type.Literal('RS384'), Type.Literal('RS512'),
    Type.Literal('PS256'), Type.Literal('PS384'), Type.Literal('PS512'),
    Type.Literal('ES256'), Type.Literal('ES384'), Type.Literal('ES512'),
    Type.Literal('EdDSA')
  ]), { minItems: 1 })),
  issuer: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
  audience: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
  rolesClaim: Type.Optional(Type.String({ minLength: 1 })),
  access: Type.Optional(Type.Object({
    run: Type.Optional(Type.Array(Type.String())),
    readApprovals: Type.Optional(Type.Array(Type.String())),
    decideApprovals: Type.Optional(Type.Array(Type.String()))
  }, { additionalProperties: false }))
}, { additionalProperties: false })

export const AuthOptions = Type.Union([ApiKeyAuthOptions, JwtAuthOptions])

export const RateLimitOptions = Type.Object({
  maxRequests: Type.Integer({ minimum: 1 }),
  intervalMs: Type.Integer({ minimum: 1 }),
  redis: Type.Optional(withMethods<object>(['eval'], 'an ioredis client: the budget is shared by every instance using it'))
}, { additionalProperties: false })

/**
 * The shortest run lease: renewals (every sixth of it) must get through a stall of the store or of the event loop
 * of up to half a lease. On a loaded 2-core machine stalls of 400 ms were measured; at 500-700 ms leases runs of
 * live instances were still lost (README, "Background runs, leases and recovery").
 */
export const MIN_RUN_LEASE_MS = 1_000

export const IdempotencyOptions = Type.Object({
  store: Type.Optional(IdempotencyStoreOption),
  ttlMs: Type.Optional(Type.Integer({ minimum: 1 })),
  lockLeaseMs: Type.Optional(Type.Integer({ minimum: 1 }))
}, { additionalProperties: false })

export const AgentServiceOptions = Type.Object({
  agents: Type.Record(Type.String(), AgentOption, { minProperties: 1 }),
  cors: Type.Optional(Type.String({ minLength: 1 })),
  auth: Type.Optional(AuthOptions),
  rateLimit: Type.Optional(RateLimitOptions),
  idempotency: Type.Optional(IdempotencyOptions),
  auditStore: Type.Optional(AuditStoreOption),
  sessionStore: Type.Optional(SessionStoreOption),
  checkpointStore: Type.Optional(CheckpointStoreOption),
  approvalStore: Type.Optional(ApprovalStoreOption),
  runStore: Type.Optional(RunStoreOption),
  auditRetentionMs: Type.Optional(Type.Integer({ minimum: 1, description: 'how long a durable audit store keeps an entry (default 30 days)' })),
  approvalRetentionMs: Type.Optional(Type.Integer({ minimum: 1, description: 'how long a durable approval store keeps an approval that is no longer pending, from its request (default 7 days)' })),
  runRetentionMs: Type.Optional(Type.Integer({ minimum: 1, description: 'how long a run\'s record and events are kept after it ends (default 1 h)' })),
  maxRetainedRuns: Type.Optional(Type.Integer({ minimum: 1, description: 'the most ended runs the memory run store the service makes keeps, the longest-ended dropped first (default 10,000); not with runStore' })),
  runLeaseMs: Type.Optional(Type.Integer({ minimum: MIN_RUN_LEASE_MS, description: `how long a run's lease lasts unless renewed: another instance takes over within this + 5 s of an instance's death (default 30 s, at least ${MIN_RUN_LEASE_MS} ms)` })),
  runConcurrency: Type.Optional(Type.Integer({ minimum: 1, description: 'the most background (and handed-off) runs one instance runs at once (default 64)' })),
  maxRunAttempts: Type.Optional(Type.Integer({ minimum: 1, description: 'attempts of a resumable run whose instances keep getting lost (default 3)' })),
  webhooks: Type.Optional(WebhooksOptions),
  webhookStore: Type.Optional(WebhookStoreOption),
  quotas: Type.Optional(QuotasOptions),
  quotaStore: Type.Optional(QuotaStoreOption),
  scheduleStore: Type.Optional(ScheduleStoreOption),
  maxStreamBufferBytes: Type.Optional(Type.Integer({ minimum: 1024, description: 'what one connection may hold unsent before it is cut (default 8 MiB)' })),
  websocket: Type.Optional(Type.Boolean()),
  openaiCompat: Type.Optional(Type.Boolean({ description: 'the OpenAI-shaped routes /v1/models, /v1/responses and /v1/chat/completions (default true)' })),
  mcp: Type.Optional(Type.Boolean({ description: 'the MCP endpoint /v1/mcp: every agent a tool (default true)' })),
  requestTimeoutMs: Type.Optional(Type.Integer({ minimum: 1 })),
  host: Type.Optional(Type.String({ minLength: 1 })),
  publicUrl: Type.Optional(Type.String({ minLength: 1, description: 'the URL clients reach the service at (behind a proxy, a prefix): the OpenAPI document\'s server' })),
  exposeErrors: Type.Optional(Type.Boolean()),
  db: Type.Optional(Type.Unsafe<DbHealthCheck | object>({ type: 'object', description: 'an object with health(), a pg Pool, a better-sqlite3 Database or an ioredis client' })),
  healthTimeoutMs: Type.Optional(Type.Integer({ minimum: 1 })),
  storeTimeoutMs: Type.Optional(Type.Integer({ minimum: 1, description: 'the deadline of every store call made while serving a request; past it the request is 503 STORE_UNAVAILABLE (default 5000)' })),
  sessionTtlMs: Type.Optional(Type.Integer({ minimum: 1 })),
  logger: Type.Optional(Type.Unsafe<FastifyServerOptions['logger'] | FastifyBaseLogger>(Type.Union([Type.Boolean(), Type.Object({})]))),
  adminApi: Type.Optional(Type.Union([Type.Literal(true), AdminApiOptions], { description: '`true` is the deprecated form of `{ enabled: true }`' })),
  bodyLimit: Type.Optional(Type.Integer({ minimum: 1 })),
  headersTimeoutMs: Type.Optional(Type.Integer({ minimum: 1, description: 'standalone: a request\'s headers must arrive within this, else 408 and the connection closed (default 10000)' })),
  bodyTimeoutMs: Type.Optional(Type.Integer({ minimum: 1, description: 'standalone: a whole request, headers and body, must arrive within this from its first byte, else 408 and the connection closed (default 30000)' })),
  maxJsonDepth: Type.Optional(Type.Integer({ minimum: 1, description: 'JSON bodies nested deeper are 400 JSON_TOO_DEEP, before any agent runs (default 64)' })),
  trustProxy: Type.Optional(Type.Boolean()),
  docs: Type.Optional(Type.Boolean()),
  drainTimeoutMs: Type.Optional(Type.Integer({ minimum: 0, description: 'how long app.close() lets runs finish before aborting them with SHUTDOWN (plugin mode; the standalone close(ms) takes its own)' })),
  metrics: Type.Optional(Type.Object({
    registry: Type.Optional(withMethods<Registry>(['metrics', 'registerMetric', 'getSingleMetric'], 'a prom-client Registry: {adminPrefix}/metrics serves it, with the service\'s metrics added'))
  }, { additionalProperties: false }))
}, { additionalProperties: false })
export type AgentServiceOptions = Static<typeof AgentServiceOptions>
export type AdminApiOptions = Static<typeof AdminApiOptions>
export type ApiKeyAuthOptions = Static<typeof ApiKeyAuthOptions>
export type JwtAuthOptions = Static<typeof JwtAuthOptions>
export type JwtAlgorithm = NonNullable<JwtAuthOptions['algorithms']>[number]
export type RateLimitOptions = Static<typeof RateLimitOptions>
export type IdempotencyOptions = Static<typeof IdempotencyOptions>
export type QuotasOptions = Static<typeof QuotasOptions>

export type DbHealthResult = boolean | { ok: boolean, latencyMs?: number, error?: string }

export interface DbHealthCheck {
  health(): Promise<DbHealthResult>
}
