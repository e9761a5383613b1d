import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentName } from './common.js'

// A2A's JSON-RPC envelope and agent card, for the document: @a2a-js/sdk's own handlers check the requests (a request
// they refuse is a JSON-RPC error, never a 400) and write the answers.

export const A2AParams = Type.Object({ name: AgentName }, { additionalProperties: false })

export const A2AJsonRpcRequest = Type.Object({
  jsonrpc: Type.Optional(Type.Literal('2.0')),
  id: Type.Optional(Type.Union([Type.String(), Type.Number(), Type.Null()])),
  method: Type.Optional(Type.String({
    description: 'v1.0: SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask; v0.3: message/send, ' +
      'message/stream, tasks/get, tasks/cancel, tasks/resubscribe'
  })),
  params: Type.Optional(Type.Unknown())
}, { additionalProperties: true, description: 'A JSON-RPC 2.0 request of A2A: a task is a run, its contextId a session' })

export const A2AJsonRpcResponse = Type.Object({
  jsonrpc: Type.Literal('2.0'),
  id: Type.Union([Type.String(), Type.Number(), Type.Null()]),
  result: Type.Optional(Type.Unknown()),
  error: Type.Optional(Type.Object({ code: Type.Integer(), message: Type.String(), data: Type.Optional(Type.Unknown()) }))
}, { description: 'A JSON-RPC 2.0 response (errors are JSON-RPC errors, answered 200)' })

// (the v1.0 document leaves out empty strings, as proto3 JSON does)
export const A2AAgentCard = Type.Object({
  name: Type.String(),
  description: Type.Optional(Type.String()),
  version: Type.Optional(Type.String())
}, { additionalProperties: true, description: 'The A2A agent card: v1.0 with `A2A-Version: 1.0`, else v0.3' })
export type A2AAgentCard = Static<typeof A2AAgentCard>

export const A2AStreamDescription = 'JSON-RPC responses as Server-Sent Events (`data: <response>`): the task, then its status ' +
  'and artifact updates until it completes, fails, is cancelled or needs input (an approval).'
