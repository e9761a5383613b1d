import { Type } from '@sinclair/typebox'
import type { TSchema } from '@sinclair/typebox'

// Options mix JSON values with objects that carry methods (agents, stores, clients). The JSON parts are
// plain JSON Schema; for the others the `x-methods` keyword (checked by lib/settings.ts) names the
// methods an object must have, so a store without `append` is reported like any other bad value.
function withMethods (methods: string[], description: string): TSchema {
  return Type.Unsafe<object>({ type: 'object', 'x-methods': methods, description })
}

export const AgentOption = withMethods(['run'], 'an agent: an object with a run(input, ctx) method')
export const AuditStoreOption = withMethods(['append', 'query', 'count'], 'an AuditStore')
export const SessionStoreOption = withMethods(['create', 'get', 'appendTurn', 'touch', 'delete', 'list'], 'a SessionStore')
export const ApprovalStoreOption = withMethods(['create', 'get', 'listPending', 'decide', 'expire', 'cancel', 'waitForDecision'], 'an ApprovalStore')
export const CheckpointStoreOption = withMethods(['save', 'load', 'delete', 'list'], 'a CheckpointStore')
export const IdempotencyStoreOption = withMethods(['reserve', 'renew', 'complete', 'release', 'get'], 'an IdempotencyStore')

export const AdminApiOptions = Type.Object({
  enabled: Type.Optional(Type.Boolean({ default: false })),
  // the rules for prefix (leading "/", no trailing "/", no clash) are checked by lib/settings.ts, each with its own message
  prefix: Type.Optional(Type.String({ default: '/admin' })),
  bearerToken: Type.Optional(Type.String({ minLength: 1 })),
  auditStore: Type.Optional(AuditStoreOption),
  checkpointStore: Type.Optional(CheckpointStoreOption)
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
  redis: Type.Optional(withMethods(['eval'], 'an ioredis client'))
}, { additionalProperties: false })

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
  websocket: Type.Optional(Type.Boolean()),
  requestTimeoutMs: Type.Optional(Type.Integer({ minimum: 1 })),
  host: Type.Optional(Type.String({ minLength: 1 })),
  exposeErrors: Type.Optional(Type.Boolean()),
  db: Type.Optional(Type.Unsafe<object>({ type: 'object', description: 'an object with health(), a pg Pool, a better-sqlite3 Database or an ioredis client' })),
  healthTimeoutMs: Type.Optional(Type.Integer({ minimum: 1 })),
  sessionTtlMs: Type.Optional(Type.Integer({ minimum: 1 })),
  logger: Type.Optional(Type.Union([Type.Boolean(), Type.Object({})])),
  adminApi: Type.Optional(Type.Union([Type.Literal(true), AdminApiOptions])),
  bodyLimit: Type.Optional(Type.Integer({ minimum: 1 })),
  trustProxy: Type.Optional(Type.Boolean()),
  docs: Type.Optional(Type.Boolean())
}, { additionalProperties: false })
