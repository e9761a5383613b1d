import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentName, Id } from './common.js'

const NullableString = (options: { description?: string } = {}) => Type.Union([Type.String(), Type.Null()], options)

export const ApprovalStatus = Type.Union([
  Type.Literal('pending'), Type.Literal('approved'), Type.Literal('rejected'), Type.Literal('expired'), Type.Literal('cancelled')
])
export type ApprovalStatus = Static<typeof ApprovalStatus>

export const MAX_APPROVAL_RESPONSE_LENGTH = 10_000

export const ApprovalDecision = Type.Object({
  approved: Type.Boolean(),
  comment: NullableString(),
  decidedBy: NullableString({ description: 'as given, else the principal that decided (null when auth is off)' }),
  decidedAt: Type.String({ format: 'date-time' }),
  payload: Type.Optional(Type.Unknown({ description: 'what was approved: the edited payload, else the one the agent asked for' })),
  edited: Type.Optional(Type.Boolean({ description: 'the decision edited the payload' })),
  response: Type.Optional(Type.String({ maxLength: MAX_APPROVAL_RESPONSE_LENGTH, description: 'a free-form answer to the agent' }))
}, { title: 'ApprovalDecision' })
export type ApprovalDecision = Static<typeof ApprovalDecision>

export const Approval = Type.Object({
  id: Type.String(),
  runId: Type.String(),
  agent: Type.String(),
  sessionId: Type.String(),
  principal: Type.String({ description: 'who started the run that asks' }),
  action: Type.String(),
  payload: Type.Unknown({ description: 'what the agent wants to do, as it passed it' }),
  reason: NullableString(),
  status: ApprovalStatus,
  requestedAt: Type.String({ format: 'date-time' }),
  expiresAt: Type.String({ format: 'date-time' }),
  decision: Type.Optional(ApprovalDecision),
  schema: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'the JSON Schema an edited payload must match, as the agent gave it' }))
}, { title: 'Approval', description: 'A request for a human decision, made by a run through ctx.requestApproval()' })
export type Approval = Static<typeof Approval>

export const ApprovalList = Type.Object({
  approvals: Type.Array(Approval, { description: 'pending and unexpired, oldest first' })
}, { title: 'ApprovalList' })
export type ApprovalList = Static<typeof ApprovalList>

export const ApprovalParams = Type.Object({ id: Id })
export type ApprovalParams = Static<typeof ApprovalParams>

export const ApprovalListQuery = Type.Object({
  agent: Type.Optional(AgentName),
  runId: Type.Optional(Id)
})
export type ApprovalListQuery = Static<typeof ApprovalListQuery>

export const DecideApprovalRequest = Type.Object({
  approved: Type.Boolean(),
  comment: Type.Optional(Type.String({ maxLength: 2000 })),
  payload: Type.Optional(Type.Unknown({ description: 'only with approved: true: the payload edited (checked against the approval\'s schema)' })),
  response: Type.Optional(Type.String({ maxLength: MAX_APPROVAL_RESPONSE_LENGTH, description: 'a free-form answer to the agent' })),
  decidedBy: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'default: the principal (when auth is on)' }))
}, { title: 'DecideApprovalRequest', additionalProperties: false })
export type DecideApprovalRequest = Static<typeof DecideApprovalRequest>
