import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentNamePattern, Cursor, Id, Metadata, NextCursor, PageLimit } from './common.js'

export const CreateSessionRequest = Type.Object({
  agent: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  metadata: Type.Optional(Metadata)
}, { title: 'CreateSessionRequest', additionalProperties: false })
export type CreateSessionRequest = Static<typeof CreateSessionRequest>

export const Session = Type.Object({
  id: Type.String(),
  agent: Type.Union([Type.String(), Type.Null()]),
  principal: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
  lastActiveAt: Type.String({ format: 'date-time' }),
  turns: Type.Integer({ minimum: 0 }),
  metadata: Metadata
}, { title: 'Session' })
export type Session = Static<typeof Session>

export const SessionMessage = Type.Object({
  role: Type.Union([Type.Literal('user'), Type.Literal('assistant')]),
  content: Type.Unknown(),
  runId: Type.String(),
  at: Type.String({ format: 'date-time' })
}, { title: 'SessionMessage' })

export const SessionWithMessages = Type.Composite([Session, Type.Object({ messages: Type.Array(SessionMessage) })], { title: 'SessionWithMessages' })
export type SessionWithMessages = Static<typeof SessionWithMessages>

export const SessionParams = Type.Object({ id: Id }, { additionalProperties: false })

export const ForkSessionRequest = Type.Object({
  beforeRunId: Type.Optional(Id),
  afterRunId: Type.Optional(Id),
  metadata: Type.Optional(Metadata)
}, { title: 'ForkSessionRequest', additionalProperties: false, description: 'at most one of beforeRunId and afterRunId; neither: every message' })
export type ForkSessionRequest = Static<typeof ForkSessionRequest>

export const ForkedFrom = Type.Object({ sessionId: Type.String(), runId: Type.Optional(Type.String()) }, { title: 'ForkedFrom' })
export type ForkedFrom = Static<typeof ForkedFrom>

export const ForkedSession = Type.Composite([SessionWithMessages, Type.Object({ forkedFrom: ForkedFrom })], {
  title: 'ForkedSession', description: 'the new session; `forkedFrom` is kept in its metadata too'
})
export type ForkedSession = Static<typeof ForkedSession>

export const SessionListQuery = Type.Object({
  limit: Type.Optional(PageLimit(100, 20)),
  cursor: Type.Optional(Cursor),
  agent: Type.Optional(Type.String({ pattern: AgentNamePattern, description: 'only the sessions of this agent' }))
}, { additionalProperties: false })
export type SessionListQuery = Static<typeof SessionListQuery>

export const SessionPage = Type.Object({
  sessions: Type.Array(Session, { description: 'the caller\'s own, unexpired, most recently active first (without messages)' }),
  nextCursor: NextCursor
}, { title: 'SessionPage' })
export type SessionPage = Static<typeof SessionPage>
