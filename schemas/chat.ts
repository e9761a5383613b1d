import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentName, Id } from './common.js'

// The AI SDK's chat transport (what useChat's DefaultChatTransport sends), as far as the service reads it: other
// fields (the transport's `body` option, newer SDK fields) are let through and ignored.

export const UiMessagePart = Type.Object({
  type: Type.String({ description: 'text, reasoning, tool-<name>, dynamic-tool, data-<name>, file, step-start, …' })
}, { additionalProperties: true })

export const UiMessage = Type.Object({
  id: Type.String(),
  role: Type.Union([Type.Literal('system'), Type.Literal('user'), Type.Literal('assistant')]),
  parts: Type.Array(UiMessagePart),
  metadata: Type.Optional(Type.Unknown())
}, { additionalProperties: true })
export type UiMessage = Static<typeof UiMessage>

export const ChatRequest = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128, description: 'the chat id: names a session in the caller\'s own space' }),
  messages: Type.Array(UiMessage, {
    minItems: 1,
    description: 'the client\'s copy of the chat: only its last message is read (a user message\'s text is the input; ' +
      'an assistant message may carry approval responses), the history is the server\'s own'
  }),
  trigger: Type.Optional(Type.Union([Type.Literal('submit-message'), Type.Literal('regenerate-message')])),
  messageId: Type.Optional(Type.String())
}, { additionalProperties: true })
export type ChatRequest = Static<typeof ChatRequest>

export const ChatParams = Type.Object({ name: AgentName }, { additionalProperties: false })
export const ChatStreamParams = Type.Object({ name: AgentName, id: Id }, { additionalProperties: false })

export const ChatMessages = Type.Array(UiMessage, {
  title: 'ChatMessages',
  description: 'the chat\'s messages, oldest first, as the AI SDK\'s UIMessage[] (what `useChat({ messages })` takes): ' +
    'each run\'s user message (id `<runId>-user`) and, once it has ended, the assistant message its stream built (id the ' +
    'run id): text, reasoning, tool parts with their states and approvals, data parts'
})

export const ChatStreamQuery = Type.Object({
  approvals: Type.Optional(Type.Union([Type.Literal('end'), Type.Literal('wait')], {
    description: '`end` (default): the stream ends at an approval still pending, so that the page can answer it (the ' +
      'SDK sends an answer only once its stream has ended). `wait`: the stream shows the request and goes on: the ' +
      'decision, wherever it is made (POST /v1/approvals/:id, the console, another tab), then the rest of the run — ' +
      'for a page that watches rather than answers.'
  }))
}, { additionalProperties: false })
export type ChatStreamQuery = Static<typeof ChatStreamQuery>

export const UiMessageStreamDescription = 'The AI SDK UI message stream, version 1 (`x-vercel-ai-ui-message-stream: v1`): ' +
  '`data: <chunk>` frames, then `data: [DONE]`. The message id is the run id; `start` carries `messageMetadata` ' +
  '{ runId, sessionId, traceId }, `finish` { usage }. text-*, reasoning-*, tool-input-*, tool-output-*, data-<type> for ' +
  'custom events; an approval is the `tool-approval-request` of the tool call it belongs to (same name, its input as ' +
  'payload, no result yet), else a dynamic tool call of its own, after which the response finishes while the run ' +
  'waits; a failed run ends with `error` (`abort` when cancelled).'
