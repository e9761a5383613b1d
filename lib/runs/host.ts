// What the run pipeline needs of the service that hosts it, named here so that lib/runs depends on these few members
// and not on the service object above it (lib/service/service.ts is one host; docs/architecture.md has the layers).
import type { FastifyRequest } from 'fastify'
import type { Access } from '../core/access.js'
import type { Agent } from '../core/types.js'
import type { CompiledAgentSchemas } from '../core/agent-schemas.js'
import type { ApprovalStore, CheckpointStore, RunStore, SessionStore, StoredEvent } from '../stores/types.js'
import type { LeaseHolder, RunCapabilities, RunEvent, RunOutcome, RunSink } from './run.js'
import type { RunRegistry } from './registry.js'
import type { SseHeartbeat } from './sse.js'
import type { RunWorker } from './worker.js'

/** The settings the runs read (the service's resolved options hold them all). */
export interface RunSettings {
  readonly agents: ReadonlyMap<string, Agent>
  /** each agent with an `input` or `output` schema: its compiled schemas */
  readonly agentSchemas: ReadonlyMap<string, CompiledAgentSchemas>
  readonly runStore: RunStore
  readonly sessionStore: SessionStore
  readonly approvalStore: ApprovalStore
  readonly checkpointStore: CheckpointStore
  readonly sessionTtlMs: number
  readonly runRetentionMs: number
  readonly runLeaseMs: number
  readonly runConcurrency: number
  readonly maxRunAttempts: number
  readonly maxStreamBufferBytes: number
  readonly maxJsonDepth: number
  readonly requestTimeoutMs: number | null
  readonly exposeErrors: boolean
}

/** Counters of what went wrong or was cut, each only ever added to. */
export type StatsCounter = 'runLogFailures' | 'slowConsumers' | 'auditFailures'
/** Figures that go up and down with what is open now. */
export type StatsGauge = 'followers' | 'approvalsPending'

/**
 * How the service's figures are told what happens (lib/service/stats.ts keeps them, the Admin API and the metrics
 * read them): every writer, in every layer, goes through these methods.
 */
export interface StatsRecorder {
  runStarted(agent: string): void
  /** `streamed`: the run's outcome reached the client as an event, not as an HTTP status */
  runEnded(agent: string, outcome: RunOutcome, streamed: boolean, firstEventMs: number): void
  count(counter: StatsCounter, by?: number): void
  gauge(gauge: StatsGauge, delta: 1 | -1): void
  recordQueueWait(seconds: number): void
  recordApprovalWait(seconds: number): void
  /** one webhook delivery attempt ended: 'delivered', 'retried', 'failed'; 'lost' for one the outbox never took */
  recordWebhookDelivery(outcome: string): void
  /** a schedule's fire started its run: from its due time to the run's start (docs/schedules.md) */
  recordScheduleLag(seconds: number): void
  recordRequest(status: number, durationMs: number, admin: boolean, route: string): void
}

/** A run's sink that can be flushed (a RunLog), as the worker's hand-off needs. */
export interface FlushableSink extends RunSink {
  flush(): Promise<void>
  durable(seq: number, lease: LeaseHolder): Promise<void>
}

/** The `quotas` option as the runs see it: a slot per run, given back at the run's end (lib/quotas/quotas.ts). */
export interface RunQuotas {
  admit(principal: string, runId: string): Promise<boolean>
  release(principal: string, runId: string): Promise<void>
  keep(principal: string, runId: string): Promise<void>
  sink(principal: string, runId: string, inner: FlushableSink): FlushableSink
  renew(): Promise<void>
}

/** The request's audit entry, as the runs add to it and end it (lib/audit/log.ts). */
export interface RunAudit {
  note(request: FastifyRequest, note: { agent?: string, sessionId?: string, runId?: string }): void
  record(request: FastifyRequest, status: number): void
  commit(request: FastifyRequest, status: number): Promise<void>
}

/** Who a run is: what a listener of its stored events (webhooks) needs beside the events. */
export interface RunIdentity {
  runId: string
  agent: string
  sessionId: string | null
  principal: string
}
/** Told of a run's events once the run store has them (in order, each once per instance that stored it). */
export type StoredEventsListener = (run: RunIdentity, events: readonly StoredEvent[]) => void

/** Everything lib/runs uses of its host. */
export interface RunHost {
  readonly settings: RunSettings
  readonly stats: StatsRecorder
  readonly runs: RunRegistry
  readonly worker: RunWorker
  readonly heartbeat: SseHeartbeat
  readonly capabilities: RunCapabilities
  readonly audit: RunAudit
  readonly quotas: RunQuotas | null
  readonly drain: { readonly draining: boolean }
  hasAccess(request: FastifyRequest, access: Access, agent?: string): boolean
  /** before a streamed run's response ends: what the request holds (an idempotency key) is settled */
  settleStream(request: FastifyRequest, final: RunEvent | undefined): Promise<void>
  /** these events are stored (the run log, and the recovery, whose events the store writes itself) */
  eventsStored(run: RunIdentity, events: readonly StoredEvent[]): void
}
