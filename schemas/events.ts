import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { Approval } from './approvals.js'

// The data of the built-in run events (README.md, "The event vocabulary"), as the front-end projections read them back from a
// run's log. run.completed carries the RunResult and run.failed the RunFailedEvent of schemas/runs.ts.

export const RunStartedData = Type.Object({
  runId: Type.String(),
  agent: Type.String(),
  sessionId: Type.Union([Type.String(), Type.Null()], { description: 'null for an ephemeral run (store: false)' }),
  requestId: Type.String(),
  traceId: Type.String(),
  attempt: Type.Integer({ minimum: 1 })
})
export type RunStartedData = Static<typeof RunStartedData>

export const TextDeltaData = Type.Object({ text: Type.String() })
export type TextDeltaData = Static<typeof TextDeltaData>

export const ToolCallDeltaData = Type.Object({ toolCallId: Type.String(), name: Type.String(), delta: Type.String() })
export type ToolCallDeltaData = Static<typeof ToolCallDeltaData>

export const ToolCallData = Type.Object({ toolCallId: Type.String(), name: Type.String(), input: Type.Unknown() })
export type ToolCallData = Static<typeof ToolCallData>

export const ToolResultData = Type.Object({ toolCallId: Type.String(), name: Type.String(), output: Type.Unknown(), isError: Type.Boolean() })
export type ToolResultData = Static<typeof ToolResultData>

export const ApprovalEventData = Type.Object({ approval: Approval })
export type ApprovalEventData = Static<typeof ApprovalEventData>

export const CheckpointSavedData = Type.Object({ step: Type.Integer({ minimum: 1 }) })
export type CheckpointSavedData = Static<typeof CheckpointSavedData>

export const RunRequeuedData = Type.Object({
  attempt: Type.Integer({ minimum: 2, description: 'the attempt that follows' }),
  reason: Type.String({ description: 'SHUTDOWN (its instance drained), INSTANCE_LOST (its lease lapsed) or RESUMED (resumeRunId)' })
})
export type RunRequeuedData = Static<typeof RunRequeuedData>
