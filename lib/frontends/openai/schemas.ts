// The OpenAI-shaped requests as far as the service reads them, and the answers as the document shows them. Other
// fields of the OpenAI APIs (temperature, tools, max_output_tokens, …) are let through and ignored: the agent
// decides its own model, tools and sampling.
import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentName } from '../../../schemas/common.js'

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()])

/** OpenAI's metadata: at most 16 string pairs, given to the agent as `ctx.metadata`. */
export const OpenAiMetadata = Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), { maxProperties: 16 })

export const InputItem = Type.Object({
  type: Type.Optional(Type.String({ description: 'message (the default with a role), mcp_approval_response; function_call, function_call_output and reasoning items of earlier turns are read as history' })),
  role: Type.Optional(Type.String({ description: 'user, assistant, system, developer' }))
}, { additionalProperties: true, description: 'An input item of the Responses API' })

export const ResponseRequest = Type.Object({
  model: Type.String({ minLength: 1, description: 'the agent\'s name' }),
  input: Type.Optional(Type.Union([Type.String(), Type.Array(InputItem)], {
    description: 'a user message, or items: the last user message\'s text is the agent\'s input, the earlier messages follow the ' +
      'session\'s history in ctx.history; `mcp_approval_response` items answer the approvals the previous response asked for'
  })),
  instructions: Type.Optional(Nullable(Type.String({ description: 'echoed in the response; the agent keeps its own instructions' }))),
  previous_response_id: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 200, description: 'continues that response\'s session (the server\'s history)' }))),
  conversation: Type.Optional(Nullable(Type.Union([
    Type.String({ minLength: 1, maxLength: 128 }),
    Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) }, { additionalProperties: true })
  ], { description: 'a session of the caller\'s (its id), continued' }))),
  stream: Type.Optional(Nullable(Type.Boolean())),
  background: Type.Optional(Nullable(Type.Boolean({ description: 'answered at once (queued); the run is a background run' }))),
  store: Type.Optional(Nullable(Type.Boolean({ description: 'false: an ephemeral run (no session, gone once it ends)' }))),
  metadata: Type.Optional(Nullable(OpenAiMetadata))
}, { additionalProperties: true, title: 'ResponseRequest' })
export type ResponseRequest = Static<typeof ResponseRequest>

export const ResponseParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false })

export const ResponseQuery = Type.Object({
  stream: Type.Optional(Type.Boolean({ description: 'the response\'s events as SSE: those after `starting_after`, then live ones' })),
  starting_after: Type.Optional(Type.String({ description: 'a sequence_number: the events after it (a non-negative integer)' }))
}, { additionalProperties: true })
export type ResponseQuery = Static<typeof ResponseQuery>

export const ChatMessage = Type.Object({
  role: Type.String({ description: 'system, developer, user, assistant, tool' }),
  content: Type.Optional(Type.Unknown({ description: 'a string, or parts ({ type: "text", text }, …)' }))
}, { additionalProperties: true })

export const ChatCompletionRequest = Type.Object({
  model: Type.String({ minLength: 1, description: 'the agent\'s name' }),
  messages: Type.Array(ChatMessage, { minItems: 1, description: 'the last is a user message: its text is the input; the earlier user and assistant messages are ctx.history' }),
  stream: Type.Optional(Nullable(Type.Boolean())),
  stream_options: Type.Optional(Nullable(Type.Object({ include_usage: Type.Optional(Nullable(Type.Boolean())) }, { additionalProperties: true }))),
  metadata: Type.Optional(Nullable(OpenAiMetadata))
}, { additionalProperties: true, title: 'ChatCompletionRequest' })
export type ChatCompletionRequest = Static<typeof ChatCompletionRequest>

export const ModelParams = Type.Object({ model: AgentName }, { additionalProperties: false })

export const Model = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: Type.Integer(),
  owned_by: Type.String()
}, { title: 'Model' })
export type Model = Static<typeof Model>

export const ModelList = Type.Object({ object: Type.Literal('list'), data: Type.Array(Model) }, { title: 'ModelList' })

/** The error body of these routes: OpenAI's shape, the service's code in `code`. */
export const OpenAiError = Type.Object({
  error: Type.Object({
    message: Type.String(),
    type: Type.String({ description: 'invalid_request_error, authentication_error, permission_error, rate_limit_error, server_error' }),
    param: Nullable(Type.String()),
    code: Nullable(Type.String({ description: 'the service\'s error code (AGENT_NOT_FOUND, RESPONSE_NOT_FOUND, FST_ERR_VALIDATION, …)' }))
  })
}, { title: 'OpenAiError', description: 'Every error of the OpenAI-shaped routes' })
export type OpenAiError = Static<typeof OpenAiError>

const errorDescriptions: Record<number, string> = {
  400: 'Invalid request',
  401: 'Missing or invalid credentials',
  403: 'Authenticated, but lacking the role',
  404: 'Not found (a model, a response)',
  409: 'Conflict',
  413: 'Body too large',
  415: 'Unsupported content type',
  422: 'Idempotency key reused with another body',
  429: 'Rate limited, or over quota',
  500: 'Internal error',
  503: 'Unavailable (shutting down, a store unavailable)',
  504: 'Agent timed out'
}

// one schema object per status for every route and service: its serializer is compiled once (lib/core/serializers.ts)
const errorSchemas = new Map<number, typeof OpenAiError>()

export function openAiErrors (...statuses: number[]): Record<number, typeof OpenAiError> {
  const out: Record<number, typeof OpenAiError> = {}
  for (const status of statuses) {
    let schema = errorSchemas.get(status)
    if (schema === undefined) {
      schema = Type.Composite([OpenAiError], { title: 'OpenAiError', description: errorDescriptions[status] }) as unknown as typeof OpenAiError
      errorSchemas.set(status, schema)
    }
    out[status] = schema
  }
  return out
}

/** The response object (a view of a run); its fields beside these are OpenAI's fixed defaults. */
export const ResponseObject = Type.Object({
  id: Type.String(),
  object: Type.Literal('response'),
  created_at: Type.Integer(),
  status: Type.String({ description: 'queued, in_progress, completed, failed, cancelled, incomplete' }),
  model: Type.String(),
  output: Type.Array(Type.Object({ type: Type.String(), id: Type.String() }, { additionalProperties: true }), {
    description: 'message (output_text), reasoning (reasoning_text), function_call and function_call_output (the agent\'s own tools), mcp_approval_request'
  }),
  usage: Nullable(Type.Object({ input_tokens: Type.Integer(), output_tokens: Type.Integer(), total_tokens: Type.Integer() }, { additionalProperties: true })),
  error: Nullable(Type.Object({ code: Type.String(), message: Type.String() })),
  incomplete_details: Nullable(Type.Object({ reason: Type.String() })),
  previous_response_id: Nullable(Type.String()),
  conversation: Nullable(Type.Object({ id: Type.String() })),
  metadata: Type.Record(Type.String(), Type.String())
}, { additionalProperties: true, title: 'Response' })

export const DeletedResponse = Type.Object({ id: Type.String(), object: Type.Literal('response'), deleted: Type.Literal(true) }, { title: 'DeletedResponse' })

export const ChatCompletion = Type.Object({
  id: Type.String(),
  object: Type.Literal('chat.completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(Type.Object({
    index: Type.Integer(),
    message: Type.Object({ role: Type.Literal('assistant'), content: Nullable(Type.String()) }, { additionalProperties: true }),
    finish_reason: Type.String()
  }, { additionalProperties: true })),
  usage: Type.Object({ prompt_tokens: Type.Integer(), completion_tokens: Type.Integer(), total_tokens: Type.Integer() })
}, { additionalProperties: true, title: 'ChatCompletion' })

export const ResponseStreamDescription = 'The Responses API\'s streaming events: `event: <type>` + `data: {type, sequence_number, …}`, ' +
  'sequence_number from 0, the same on every replay: response.created, response.in_progress, response.output_item.added/done, ' +
  'response.content_part.added/done, response.output_text.delta/done, response.reasoning_text.delta/done, ' +
  'response.function_call_arguments.delta/done, then response.completed (also at an approval: its last item is the ' +
  'mcp_approval_request), response.incomplete or response.failed.'

export const ChatStreamDescription = '`data: <chat.completion.chunk>` frames (`choices[0].delta.content`), a last chunk with ' +
  '`finish_reason`, with `stream_options.include_usage` one more with `usage` and no choices, then `data: [DONE]`; a failed ' +
  'run: `data: {"error": {…}}`.'

