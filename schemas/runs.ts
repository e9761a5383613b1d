import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { Id, Metadata, Usage } from './common.js'

export const RunRequest = Type.Object({
  input: Type.Unknown({ description: 'anything JSON; passed to the agent as is' }),
  sessionId: Type.Optional(Id),
  resumeRunId: Type.Optional(Id),
  metadata: Type.Optional(Metadata),
  stream: Type.Optional(Type.Boolean({ description: 'answer as Server-Sent Events (also chosen by Accept: text/event-stream)' }))
}, { title: 'RunRequest', additionalProperties: false, required: ['input'] })
export type RunRequest = Static<typeof RunRequest>

export const RunResult = Type.Object({
  runId: Type.String(),
  agent: Type.String(),
  sessionId: Type.String(),
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

export const SseStreamDescription = 'A Server-Sent Events stream: `id: <seq>`, `event: <type>`, `data: <json>` per event. ' +
  'Types: run.started, message.delta, approval.requested, approval.decided, checkpoint.saved, custom ones, ' +
  'then exactly one of run.completed (the JSON result) or run.failed ({ error: { code, message }, traceId }).'
