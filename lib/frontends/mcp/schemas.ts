// The JSON shapes of the MCP front end that the service makes (tools, results, tasks) and what the OpenAPI document
// shows of /v1/mcp. The protocol itself is the SDK's: these are only what we fill in.
import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'

const JsonSchema = Type.Record(Type.String(), Type.Unknown())

export const McpTool = Type.Object({
  name: Type.String({ description: 'the agent\'s name' }),
  description: Type.Optional(Type.String()),
  inputSchema: JsonSchema,
  outputSchema: Type.Optional(JsonSchema),
  execution: Type.Object({ taskSupport: Type.Literal('optional') })
})
export type McpTool = Static<typeof McpTool>

export const McpToolResult = Type.Object({
  content: Type.Array(Type.Object({ type: Type.Literal('text'), text: Type.String() })),
  structuredContent: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  isError: Type.Boolean(),
  _meta: Type.Record(Type.String(), Type.Unknown(), { description: 'runId, sessionId, traceId of the run' })
})
export type McpToolResult = Static<typeof McpToolResult>

export const McpTaskStatus = Type.Union([
  Type.Literal('working'), Type.Literal('input_required'), Type.Literal('completed'), Type.Literal('failed'), Type.Literal('cancelled')
])

export const McpTask = Type.Object({
  taskId: Type.String({ description: 'the run\'s id' }),
  status: McpTaskStatus,
  statusMessage: Type.Optional(Type.String()),
  ttl: Type.Integer(),
  createdAt: Type.String(),
  lastUpdatedAt: Type.String(),
  pollInterval: Type.Integer()
})
export type McpTask = Static<typeof McpTask>

/** What the run keeps for its task (RunSpec.frontend.mcp). */
export interface McpKept {
  ttl: number
}

export const McpJsonRpcMessage = Type.Object({
  jsonrpc: Type.Literal('2.0'),
  id: Type.Optional(Type.Union([Type.String(), Type.Integer()])),
  method: Type.Optional(Type.String()),
  params: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  result: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  error: Type.Optional(Type.Object({ code: Type.Integer(), message: Type.String(), data: Type.Optional(Type.Unknown()) }))
}, { title: 'McpJsonRpcMessage', description: 'A JSON-RPC 2.0 message of the Model Context Protocol' })

export const McpStreamDescription = 'Server-Sent Events, each `event: message` with one JSON-RPC message as `data`: ' +
  '`notifications/progress` (a text delta of the run, with `_meta.progressToken`), `elicitation/create` (a pending approval ' +
  'of the run, for a client that declared the elicitation capability), then the response to the request.'

export const McpDescription = 'The Model Context Protocol over Streamable HTTP, stateless: any instance answers any request. ' +
  'Every agent the caller may run is a tool (`tools/list`); `tools/call` runs it (progress notifications with ' +
  '`_meta.progressToken`; closing the request cancels the run); with `task` it starts a background run answered at once, ' +
  'then `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`. A pending approval of the run is an `elicitation/create` ' +
  'request (accept with `approved`, decline, or cancel to leave it pending), decided on whichever instance receives the answer. ' +
  'Connect with `new StreamableHTTPClientTransport(new URL(\'/v1/mcp\', base))` of @modelcontextprotocol/sdk.'
