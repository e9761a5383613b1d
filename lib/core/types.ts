import type { FastifyBaseLogger } from 'fastify'
import type { Static } from '@sinclair/typebox'
import type { AgentSchema } from './agent-schemas.js'
import type { ApprovalStatus } from '../../schemas/approvals.js'
import type { SessionMessage } from '../../schemas/sessions.js'

/** A session's message, as the agent reads its history (the stores keep them in this shape). */
type Message = Static<typeof SessionMessage>

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
  /**
   * what an edited payload must match (TypeBox, JSON Schema, or a Standard Schema with a JSON Schema converter):
   * a decision whose payload does not is refused (400), the approval still pending
   */
  schema?: AgentSchema
}

/** What a step's function is given: the same key on every attempt, to make its side effect idempotent downstream. */
export interface StepInfo {
  /** the run's attempt, from 1 */
  attempt: number
  /** `<runId>:<index>`: the same on every attempt of the run */
  idempotencyKey: string
}

export interface Decision {
  approved: boolean
  comment?: string | null
  decidedBy?: string | null
  status: ApprovalStatus
  /** what was approved: the edited payload, else the one asked for (absent when nobody decided: expired, cancelled) */
  payload?: unknown
  /** the decision edited the payload */
  edited?: boolean
  /** a free-form answer */
  response?: string
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
  /**
   * A durable step (docs/durable-agents.md): `fn` runs once per run, its JSON result journaled in the run's log before
   * this resolves; a later attempt of the run gets the journaled result back without calling `fn`.
   */
  step<T>(name: string, fn: (info: StepInfo) => T | Promise<T>): Promise<T>
  /** present when resuming a checkpointed run */
  resume?: { step: number, state: unknown }
  metadata: Record<string, unknown>
  log: FastifyBaseLogger
  /** present when the run is a schedule's fire (docs/schedules.md): the schedule and the due time it fires for */
  schedule?: { id: string, scheduledFor: string }
}

export type AgentRunReturn = Promise<AgentResult> | AsyncIterable<string | AgentEvent>

export interface Agent<Input = unknown> {
  description?: string
  metadata?: Record<string, unknown>
  /**
   * validates the run request's input (strictly, before anything runs): a 400 FST_ERR_VALIDATION when it fails; the
   * OpenAPI document shows it on the agent's own run operation. TypeBox, a JSON Schema (draft-07, or 2020-12 by its
   * `$schema`) or a Standard Schema with a JSON Schema converter (Zod, ArkType, Valibot's `toStandardJsonSchema()`)
   */
  input?: AgentSchema
  /** the result's `output`, for the OpenAPI document (not checked at run time); the same kinds of schema as `input` */
  output?: AgentSchema
  /** the run may be requeued on another instance (docs/runs.md) */
  resumable?: boolean
  run(input: Input, ctx: RunContext): AgentRunReturn
}

export type {
  AdminApiOptions, AgentServiceOptions, ApiKeyAuthOptions, DbHealthCheck, DbHealthResult, IdempotencyOptions, JwtAlgorithm,
  JwtAuthOptions, RateLimitOptions
} from '../../schemas/options.js'
export type { WebhooksOptions } from '../../schemas/webhooks.js'
export type { QuotasOptions } from '../../schemas/options.js'
