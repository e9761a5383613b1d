import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { Cursor, Id, Metadata, NextCursor, PageLimit, Usage } from './common.js'

export const OnDisconnect = Type.Union([Type.Literal('cancel'), Type.Literal('continue')], {
  description: 'what a client going away does to the run: cancel it (default), or let it go on (rejoin through /v1/runs/:runId/events)'
})
export type OnDisconnect = Static<typeof OnDisconnect>

export const Multitask = Type.Union([Type.Literal('reject'), Type.Literal('interrupt'), Type.Literal('enqueue')], {
  description: 'when the session already has a run in progress: 409 SESSION_BUSY (default), cancel it and start, or wait for it'
})
export type Multitask = Static<typeof Multitask>

/** What a run request asks for beyond the agent, over HTTP and WebSocket alike. */
export const RunOptionsFields = {
  sessionId: Type.Optional(Id),
  resumeRunId: Type.Optional(Id),
  metadata: Type.Optional(Metadata),
  onDisconnect: Type.Optional(OnDisconnect),
  multitask: Type.Optional(Multitask),
  store: Type.Optional(Type.Boolean({ description: 'false: an ephemeral run (no session; its record and events are dropped when it ends)' }))
}

export const RunRequest = Type.Object({
  input: Type.Unknown({ description: 'anything JSON, checked against the input schema of the agent, when it has one; passed to the agent as is' }),
  ...RunOptionsFields,
  stream: Type.Optional(Type.Boolean({ description: 'answer as Server-Sent Events (also chosen by Accept: text/event-stream)' })),
  background: Type.Optional(Type.Boolean({ description: 'queue the run and answer 202 at once: any instance sharing the run store runs it; follow it at /v1/runs/:runId/events' }))
}, { title: 'RunRequest', additionalProperties: false, required: ['input'] })
export type RunRequest = Static<typeof RunRequest>

export const ReplayRunRequest = Type.Object({
  input: Type.Optional(Type.Unknown({ description: 'the new run\'s input; default: the replayed run\'s own' })),
  state: Type.Optional(Type.Unknown({ description: 'replaces the checkpoint\'s state in ctx.resume' })),
  metadata: RunOptionsFields.metadata,
  onDisconnect: RunOptionsFields.onDisconnect,
  stream: Type.Optional(Type.Boolean({ description: 'answer as Server-Sent Events (also chosen by Accept: text/event-stream)' })),
  background: Type.Optional(Type.Boolean({ description: 'queue the run and answer 202 at once' }))
}, { title: 'ReplayRunRequest', additionalProperties: false })
export type ReplayRunRequest = Static<typeof ReplayRunRequest>

const SessionIdOrNull = Type.Union([Type.String(), Type.Null()], { description: 'null for an ephemeral run (store: false)' })

export const RunResult = Type.Object({
  runId: Type.String(),
  agent: Type.String(),
  sessionId: SessionIdOrNull,
  status: Type.Literal('completed'),
  output: Type.Unknown(),
  usage: Usage,
  finishReason: Type.String(),
  requestId: Type.String(),
  traceId: Type.String()
}, { title: 'RunResult' })
export type RunResult = Static<typeof RunResult>

export const RunFailedEvent = Type.Object({
  error: Type.Object({ code: Type.String(), message: Type.String() }),
  traceId: Type.String()
}, { title: 'RunFailedEvent' })
export type RunFailedEvent = Static<typeof RunFailedEvent>

export const SseStreamDescription = 'A Server-Sent Events stream: `id: <seq>`, `event: <type>`, `data: <json>` per event. ' +
  'Types: run.started ({ runId, agent, sessionId, requestId, traceId, attempt }), message.delta ({ text }), ' +
  'reasoning.delta ({ text }), tool.call.delta ({ toolCallId, name, delta }), tool.call ({ toolCallId, name, input }), ' +
  'tool.result ({ toolCallId, name, output, isError }), approval.requested and approval.decided ({ approval }), ' +
  'checkpoint.saved ({ step }), custom ones (lower-case, dot-separated, at most 64 characters), ' +
  'then exactly one of run.completed (the JSON result) or run.failed ({ error: { code, message }, traceId }).'

export const RunStatus = Type.Union([
  Type.Literal('queued'), Type.Literal('running'), Type.Literal('completed'), Type.Literal('failed'), Type.Literal('cancelled')
])
export type RunStatus = Static<typeof RunStatus>

export const RunError = Type.Object({ code: Type.String(), message: Type.String() })
export type RunError = Static<typeof RunError>

const DateTime = Type.String({ format: 'date-time' })

/** A run as a resource (docs/runs.md): kept with its event log until `runRetentionMs` after it ends. */
export const RunRecord = Type.Object({
  runId: Type.String(),
  agent: Type.String(),
  sessionId: SessionIdOrNull,
  principal: Type.String(),
  status: RunStatus,
  background: Type.Boolean(),
  attempt: Type.Integer({ minimum: 1 }),
  lastSeq: Type.Integer({ minimum: 0, description: 'the seq of the run\'s last stored event; seqs run from 1 without gaps' }),
  createdAt: DateTime,
  startedAt: Type.Optional(DateTime),
  endedAt: Type.Optional(DateTime),
  result: Type.Optional(RunResult),
  error: Type.Optional(RunError),
  requestId: Type.String(),
  traceId: Type.String(),
  scheduleId: Type.Optional(Type.String({ description: 'the schedule whose fire the run is (docs/schedules.md)' })),
  scheduledFor: Type.Optional(Type.String({ format: 'date-time', description: 'the due time the schedule fired for (with scheduleId)' }))
})
export type RunRecord = Static<typeof RunRecord>

export const RunParams = Type.Object({ runId: Id }, { additionalProperties: false })

export const RunEventsQuery = Type.Object({
  // checked by the route after ownership (a bad cursor on another principal's run is a 404, not a 400)
  after: Type.Optional(Type.String({ description: 'resume after this seq (a non-negative integer); Last-Event-ID wins' }))
}, { additionalProperties: false })

export const SessionRunsQuery = Type.Object({
  limit: Type.Optional(PageLimit(100, 20)),
  cursor: Type.Optional(Cursor)
}, { additionalProperties: false })
export type SessionRunsQuery = Static<typeof SessionRunsQuery>

export const RunPage = Type.Object({
  runs: Type.Array(RunRecord, { description: 'most recent first' }),
  nextCursor: NextCursor
})
export type RunPage = Static<typeof RunPage>

export const AdminRunsQuery = Type.Object({
  limit: Type.Optional(PageLimit(500, 50)),
  cursor: Type.Optional(Cursor),
  status: Type.Optional(RunStatus),
  agent: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  sessionId: Type.Optional(Id),
  principal: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'who started the run' })),
  runId: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'that one run (with the other filters, if it matches them)' }))
}, { additionalProperties: false })

export const AdminRunPage = Type.Object({
  runs: Type.Array(Type.Omit(RunRecord, ['result']), { description: 'every principal\'s, most recent first, without results' }),
  nextCursor: NextCursor
})

export const AdminRunEventsQuery = Type.Object({
  after: Type.Optional(Type.Integer({ minimum: 0, description: 'the events after this seq (default 0: from the first)' })),
  limit: Type.Optional(PageLimit(500, 100))
}, { additionalProperties: false })

export const AdminRunEventsPage = Type.Object({
  run: Type.Omit(RunRecord, ['result']),
  events: Type.Array(Type.Object({
    seq: Type.Integer({ minimum: 1 }),
    type: Type.String(),
    data: Type.Unknown({ description: 'the event\'s data, as the run sent it' })
  }), { description: 'in order' }),
  nextAfter: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], { description: 'the `after` of the next page; null when the log holds no more (yet)' })
}, { title: 'AdminRunEventsPage' })

/** The answer to a background run request: 202, with `Location: /v1/runs/<runId>`. */
export const QueuedRun = Type.Object({
  runId: Type.String(),
  sessionId: SessionIdOrNull,
  status: Type.Literal('queued'),
  requestId: Type.String(),
  traceId: Type.String()
}, { title: 'QueuedRun' })
export type QueuedRun = Static<typeof QueuedRun>
