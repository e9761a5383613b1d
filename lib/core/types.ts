import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify'
import type {
  ApprovalStatus, ApprovalStore, AuditStore, CheckpointStore, IdempotencyStore, Message, SessionStore
} from '../stores/types.js'

export interface AgentEvent {
  type: string
  data?: unknown
}

export interface AgentUsage {
  inputTokens?: number
  outputTokens?: number
}

export interface AgentResult {
  output: unknown
  usage?: AgentUsage
  finishReason?: string
}

export interface ApprovalRequest {
  action: string
  payload?: unknown
  reason?: string
  /** how long the approval stays pending; default 15 minutes */
  timeoutMs?: number
}

export interface Decision {
  approved: boolean
  comment?: string | null
  decidedBy?: string | null
  status: ApprovalStatus
}

export interface TraceContext {
  traceId: string
  parentSpanId?: string
  traceFlags?: string
  traceState?: string
}

export interface RunContext {
  runId: string
  agent: string
  sessionId: string
  principal: string
  requestId: string
  trace: TraceContext
  /** aborted on timeout, client disconnect, drain and cancel */
  signal: AbortSignal
  /** the session's earlier messages */
  history: Message[]
  /** a custom stream event; 'message.delta' with `{ text }` for text */
  emit(type: string, data?: unknown): void
  requestApproval(request: ApprovalRequest): Promise<Decision>
  checkpoint(state: unknown): Promise<void>
  /** present when resuming a checkpointed run */
  resume?: { step: number, state: unknown }
  metadata: Record<string, unknown>
  log: FastifyBaseLogger
}

export type AgentRunReturn = Promise<AgentResult> | AsyncIterable<string | AgentEvent>

export interface Agent<Input = unknown> {
  description?: string
  metadata?: Record<string, unknown>
  run(input: Input, ctx: RunContext): AgentRunReturn
}

export type DbHealthResult = boolean | { ok: boolean, latencyMs?: number, error?: string }

export interface DbHealthCheck {
  health(): Promise<DbHealthResult>
}

export interface AdminApiOptions {
  enabled?: boolean
  prefix?: string
  bearerToken?: string
  auditStore?: AuditStore
  checkpointStore?: CheckpointStore
}

export interface ApiKeyAuthOptions {
  strategy: 'api-key'
  keys: string[]
}

export type JwtAlgorithm =
  | 'HS256' | 'HS384' | 'HS512' | 'RS256' | 'RS384' | 'RS512' | 'PS256' | 'PS384' | 'PS512'
  | 'ES256' | 'ES384' | 'ES512' | 'EdDSA'

export interface JwtAuthOptions {
  strategy: 'jwt'
  secret?: string
  publicKey?: string
  algorithms?: JwtAlgorithm[]
  issuer?: string | string[]
  audience?: string | string[]
  rolesClaim?: string
  access?: { run?: string[], readApprovals?: string[], decideApprovals?: string[] }
}

export interface RateLimitOptions {
  maxRequests: number
  intervalMs: number
  /** an ioredis client: the budget is shared by every instance using it */
  redis?: object
}

export interface IdempotencyOptions {
  store?: IdempotencyStore
  ttlMs?: number
  lockLeaseMs?: number
}

export interface AgentServiceOptions {
  // Agents are checked for a `run` method at registration, whatever their input type.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  agents: Record<string, Agent<any>>
  cors?: string
  auth?: ApiKeyAuthOptions | JwtAuthOptions
  rateLimit?: RateLimitOptions
  idempotency?: IdempotencyOptions
  auditStore?: AuditStore
  sessionStore?: SessionStore
  checkpointStore?: CheckpointStore
  approvalStore?: ApprovalStore
  websocket?: boolean
  requestTimeoutMs?: number
  host?: string
  exposeErrors?: boolean
  /** an object with health(), a pg Pool, a better-sqlite3 Database or an ioredis client */
  db?: DbHealthCheck | object
  healthTimeoutMs?: number
  sessionTtlMs?: number
  logger?: FastifyServerOptions['logger'] | FastifyBaseLogger
  /** `true` is the deprecated form of `{ enabled: true }` */
  adminApi?: AdminApiOptions | true
  bodyLimit?: number
  trustProxy?: boolean
  docs?: boolean
}
