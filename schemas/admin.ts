// The Admin API's records (docs/operations.md). Every response is serialized through these schemas, so a
// field that is not listed here never leaves the process, whatever a store or the stats hand over.
import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { Cursor, Metadata, NextCursor, PageLimit } from './common.js'
import { HealthChecks } from './health.js'
import { Session } from './sessions.js'
import { Approval } from './approvals.js'
import { RunRecord } from './runs.js'

const Count = Type.Integer({ minimum: 0 })
const DateTime = Type.String({ format: 'date-time' })
const Limit = PageLimit(500, 50)

const Percentiles = Type.Object({ p50: Type.Number(), p95: Type.Number(), p99: Type.Number() }, { description: 'milliseconds' })
const Tokens = Type.Object({ input: Count, output: Count, total: Count })

export const AdminHealth = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
  uptimeSeconds: Count,
  startedAt: DateTime,
  version: Type.String({ description: 'the fastify-agents version' }),
  process: Type.Object({
    pid: Type.Integer(),
    node: Type.String({ description: 'process.version' }),
    platform: Type.String(),
    arch: Type.String(),
    memory: Type.Object({ rss: Count, heapTotal: Count, heapUsed: Count, external: Count }, { description: 'bytes' }),
    eventLoopDelayMs: Type.Object({ p50: Type.Number(), p99: Type.Number() }, { description: 'over the last minute or so' })
  }),
  checks: HealthChecks
}, { title: 'AdminHealth' })
export type AdminHealth = Static<typeof AdminHealth>

export const AdminAgentStats = Type.Object({ runs: Count, failed: Count, inFlight: Count, tokens: Tokens }, { title: 'AdminAgentStats' })

export const AdminAgentList = Type.Object({
  agents: Type.Array(Type.Object({
    name: Type.String(),
    description: Type.String(),
    metadata: Metadata,
    input: Type.Optional(Type.Unknown({ description: 'the JSON Schema of its input, when it has one (the console\'s playground shapes its input by it)' })),
    stats: AdminAgentStats
  }))
}, { title: 'AdminAgentList' })
export type AdminAgentList = Static<typeof AdminAgentList>

export const AdminAuditQuery = Type.Object({
  limit: Type.Optional(Limit),
  cursor: Type.Optional(Cursor),
  agent: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  status: Type.Optional(Type.String({ pattern: '^[1-5]([0-9]{2}|[xX]{2})$', description: 'one status (`404`) or a class (`4xx`)' }))
}, { additionalProperties: false })
export type AdminAuditQuery = Static<typeof AdminAuditQuery>

export const AdminAuditEntry = Type.Object({
  id: Type.String({ description: 'the service\'s own id; never the client\'s X-Request-ID' }),
  at: DateTime,
  requestId: Type.String(),
  method: Type.String(),
  route: Type.String({ description: 'the route pattern; empty for unknown routes' }),
  url: Type.String(),
  status: Type.Integer(),
  durationMs: Type.Number(),
  principal: Type.String(),
  ip: Type.String(),
  agent: Type.Optional(Type.String()),
  runId: Type.Optional(Type.String()),
  sessionId: Type.Optional(Type.String()),
  traceId: Type.Optional(Type.String()),
  idempotencyKey: Type.Optional(Type.String()),
  replayed: Type.Optional(Type.Boolean()),
  admin: Type.Optional(Type.Boolean({ description: 'an Admin API request (counted apart from the service\'s figures)' }))
}, { title: 'AdminAuditEntry' })

export const AdminAuditPage = Type.Object({
  entries: Type.Array(AdminAuditEntry, { description: 'most recent first' }),
  nextCursor: NextCursor
}, { title: 'AdminAuditPage' })
export type AdminAuditPage = Static<typeof AdminAuditPage>

export const AdminPageQuery = Type.Object({
  limit: Type.Optional(Limit),
  cursor: Type.Optional(Cursor)
}, { additionalProperties: false })
export type AdminPageQuery = Static<typeof AdminPageQuery>

export const AdminSessionList = Type.Object({
  sessions: Type.Array(Session, { description: 'unexpired, most recently active first' }),
  nextCursor: NextCursor
}, { title: 'AdminSessionList' })

export const AdminApprovalsQuery = Type.Object({
  agent: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  runId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 }))
}, { additionalProperties: false })
export type AdminApprovalsQuery = Static<typeof AdminApprovalsQuery>

/** The same record as `/v1/approvals` answers: one schema, so the two can never drift apart. */
export const AdminApproval = Approval

export const AdminApprovalList = Type.Object({
  approvals: Type.Array(AdminApproval, { description: 'pending and unexpired, oldest first' })
}, { title: 'AdminApprovalList' })

export const AdminCheckpointList = Type.Object({
  checkpoints: Type.Array(Type.Object({
    runId: Type.String(),
    agent: Type.String(),
    sessionId: Type.String(),
    step: Type.Integer({ minimum: 1 }),
    createdAt: DateTime,
    updatedAt: DateTime,
    bytes: Type.Integer({ minimum: 0, description: 'size of the JSON-encoded state (the state itself is not shown)' })
  }), { description: 'runs that have not completed (resumable), most recently updated first' })
}, { title: 'AdminCheckpointList' })

export const AdminAgentFigures = Type.Object({
  runs: Count,
  completed: Count,
  failed: Count,
  inFlight: Count,
  tokens: Tokens,
  latencyMs: Percentiles
}, { title: 'AdminAgentFigures' })

export const AdminStats = Type.Object({
  since: DateTime,
  uptimeSeconds: Count,
  requests: Type.Object({
    total: Count,
    byStatus: Type.Object({ '2xx': Count, '3xx': Count, '4xx': Count, '5xx': Count })
  }, { description: 'service requests; Admin API requests are counted in `admin` only' }),
  errors: Type.Integer({ minimum: 0, description: 'responses with status >= 500 plus streamed runs that ended in run.failed' }),
  runs: Type.Object({
    started: Count,
    completed: Count,
    failed: Count,
    timedOut: Type.Integer({ minimum: 0, description: 'the part of `failed` that hit requestTimeoutMs' }),
    inFlight: Count
  }),
  tokens: Tokens,
  latencyMs: Percentiles,
  admin: Type.Object({ requests: Count }),
  auditFailures: Type.Integer({ minimum: 0, description: 'audit entries lost because the audit store failed' }),
  agents: Type.Record(Type.String(), AdminAgentFigures)
}, { title: 'AdminStats' })
export type AdminStats = Static<typeof AdminStats>

/** A run as the Admin API lists it: without its result. */
export const AdminRun = Type.Omit(RunRecord, ['result'], { title: 'AdminRun' })
export type AdminRun = Static<typeof AdminRun>

/**
 * One snapshot of the live feed (`GET {prefix}/live`, the console's): what it showed by polling six routes. The
 * cluster figures come from the shared stores; `stats` and the agents' figures are this instance's.
 */
export const AdminLiveSnapshot = Type.Object({
  at: DateTime,
  health: AdminHealth,
  stats: AdminStats,
  agents: AdminAgentList.properties.agents,
  runs: Type.Array(AdminRun, { description: 'in progress (running, then queued; at most 100 of each), every instance\'s' }),
  approvals: Type.Array(AdminApproval, { description: 'pending and unexpired, oldest first' }),
  cluster: Type.Object({
    running: Count,
    queued: Count,
    approvalsPending: Count,
    capped: Type.Boolean({ description: 'more than 100 runs running or queued: the counts are at least these' })
  }, { description: 'from the shared stores: every instance\'s' })
}, { title: 'AdminLiveSnapshot' })
export type AdminLiveSnapshot = Static<typeof AdminLiveSnapshot>
