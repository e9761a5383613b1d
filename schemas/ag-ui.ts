import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'

// AG-UI's RunAgentInput (what HttpAgent sends), as far as the service reads it; other fields (state, tools,
// context, forwardedProps, fields of later protocol versions) are let through and ignored.

export const AgUiMessage = Type.Object({
  id: Type.String(),
  role: Type.String({ description: 'user, assistant, system, developer, tool, reasoning, activity' }),
  content: Type.Optional(Type.Unknown({ description: 'a string, or (user messages) a list of input parts: { type: "text", text }, …' }))
}, { additionalProperties: true })
export type AgUiMessage = Static<typeof AgUiMessage>

export const AgUiResumeEntry = Type.Object({
  // an approval id (36), ':' and an AG-UI run id (128)
  interruptId: Type.String({ minLength: 1, maxLength: 165, description: 'the interrupt being answered: its id as the service gave it (the approval id, then the id of the AG-UI run it interrupted), or the bare approval id' }),
  status: Type.Union([Type.Literal('resolved'), Type.Literal('cancelled')]),
  payload: Type.Optional(Type.Unknown({ description: 'resolved: { approved: boolean, comment?: string, payload?: the edited payload, response?: string }' }))
}, { additionalProperties: true })
export type AgUiResumeEntry = Static<typeof AgUiResumeEntry>

export const AgUiApprovalAnswer = Type.Object({
  approved: Type.Boolean(),
  comment: Type.Optional(Type.String({ maxLength: 2000 })),
  payload: Type.Optional(Type.Unknown({ description: 'only with approved: true: the payload edited (checked against the approval\'s schema)' })),
  response: Type.Optional(Type.String({ maxLength: 10_000 }))
}, { additionalProperties: false })

export const RunAgentInput = Type.Object({
  threadId: Type.String({ minLength: 1, maxLength: 128, description: 'names a session in the caller\'s own space' }),
  runId: Type.String({ minLength: 1, maxLength: 128, description: 'the client\'s id for this AG-UI run, echoed in its events' }),
  parentRunId: Type.Optional(Type.String({ maxLength: 128 })),
  messages: Type.Array(AgUiMessage, { description: 'the client\'s copy of the thread: only the last user message is read' }),
  resume: Type.Optional(Type.Array(AgUiResumeEntry, { description: 'answers to the interrupts (approvals) that ended the previous AG-UI run' }))
}, { additionalProperties: true })
export type RunAgentInput = Static<typeof RunAgentInput>

export const AgUiStreamDescription = 'AG-UI 1.0 events as Server-Sent Events (`data: <event>`): RUN_STARTED (threadId, runId, ' +
  'metadata { runId, sessionId, traceId } of the service\'s run), TEXT_MESSAGE_*, REASONING_*, TOOL_CALL_*, CUSTOM for ' +
  'custom events, STATE_SNAPSHOT for checkpoints, then RUN_FINISHED (result, usage; an interrupt outcome for an approval, ' +
  'with a CUSTOM on_interrupt event before it; cancelled for a cancelled run) or RUN_ERROR.'
