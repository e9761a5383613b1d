import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { Id } from './common.js'
import { RunOptionsFields } from './runs.js'

// The WebSocket protocol at /v1/ws (docs/runs.md). Messages are JSON text frames.

/** Chosen by the client, echoed on every frame about that run or request. */
export const WsRef = Type.Union([Type.String({ maxLength: 128 }), Type.Integer()], {
  description: 'a client-chosen tag, echoed on every frame of the run it started (or on the error it caused)'
})
export type WsRef = Static<typeof WsRef>

export const WsRunStart = Type.Object({
  type: Type.Literal('run.start'),
  ref: Type.Optional(WsRef),
  agent: Type.String({ minLength: 1, maxLength: 128 }),
  input: Type.Unknown({ description: 'checked against the input schema of the agent, when it has one (an error frame FST_ERR_VALIDATION)' }),
  ...RunOptionsFields
}, { additionalProperties: false, required: ['type', 'agent', 'input'] })
export type WsRunStart = Static<typeof WsRunStart>

export const WsRunCancel = Type.Object({
  type: Type.Literal('run.cancel'),
  ref: Type.Optional(WsRef),
  runId: Id
}, { additionalProperties: false })
export type WsRunCancel = Static<typeof WsRunCancel>

export const WsClientMessage = Type.Union([WsRunStart, WsRunCancel])
export type WsClientMessage = Static<typeof WsClientMessage>

/** Every run event (the SSE event types), one frame each, `seq` from 1 per run. */
export const WsEventFrame = Type.Object({
  type: Type.String({
    description: 'run.started, message.delta, reasoning.delta, tool.call.delta, tool.call, tool.result, approval.requested, ' +
      'approval.decided, checkpoint.saved, a custom type, then run.completed or run.failed; data as in the SSE stream'
  }),
  runId: Type.String(),
  ref: Type.Optional(WsRef),
  seq: Type.Integer({ minimum: 1 }),
  data: Type.Unknown()
})
export type WsEventFrame = Static<typeof WsEventFrame>

export const WsErrorCode = Type.Union([
  Type.Literal('INVALID_JSON'), Type.Literal('INVALID_MESSAGE'), Type.Literal('UNKNOWN_MESSAGE_TYPE'),
  Type.Literal('TOO_MANY_RUNS'), Type.Literal('AGENT_NOT_FOUND'), Type.Literal('SESSION_NOT_FOUND'),
  Type.Literal('RUN_NOT_FOUND'), Type.Literal('RUN_IN_PROGRESS'), Type.Literal('RUN_SESSION_MISMATCH'),
  Type.Literal('FORBIDDEN'), Type.Literal('SHUTDOWN'), Type.Literal('INTERNAL_ERROR'), Type.Literal('SESSION_BUSY'),
  Type.Literal('CANCELLED'), Type.Literal('FST_ERR_VALIDATION'), Type.Literal('QUOTA_EXCEEDED')
])

/** A message that could not be acted on; the connection stays open. */
export const WsErrorFrame = Type.Object({
  type: Type.Literal('error'),
  ref: Type.Optional(WsRef),
  error: Type.Object({ code: WsErrorCode, message: Type.String() })
})
export type WsErrorFrame = Static<typeof WsErrorFrame>

export const WsServerFrame = Type.Union([WsEventFrame, WsErrorFrame])
export type WsServerFrame = Static<typeof WsServerFrame>
