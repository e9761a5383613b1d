// The UI message stream projection, read by the AI SDK's own client: the `Chat` class behind `useChat`
// (@ai-sdk/react) over a DefaultChatTransport whose fetch answers with the projection's bytes. Every
// scenario runs twice, once over the SDK's reference producer (createUIMessageStream writing the expected
// chunks, through JsonToSseTransformStream) and once over the projection, with the same assertions; the
// projection's bytes must also equal the reference's.
import t from 'tap'
import type { Test } from 'tap'
import { Chat } from '@ai-sdk/react'
import {
  DefaultChatTransport, JsonToSseTransformStream, UI_MESSAGE_STREAM_HEADERS as SDK_HEADERS, createUIMessageStream,
  lastAssistantMessageIsCompleteWithApprovalResponses
} from 'ai'
import type { UIMessage, UIMessageChunk } from 'ai'
import { UI_MESSAGE_STREAM_HEADERS, UiMessageStreamProjection } from '../../../../lib/frontends/chat/ui-message-stream.js'
import type { UiMessageStreamOptions } from '../../../../lib/frontends/chat/ui-message-stream.js'
import { SSE_PING } from '../../../../lib/frontends/run-events.js'
import type { Approval, RunEvent } from '../../../../lib/frontends/run-events.js'
import { eventually } from '../../../helper.js'
import { RUN_ID, SESSION_ID, TRACE_ID, approval, completed, failed, log, started, streamOf, textOf } from './helpers.js'

const API = 'http://svc.test/v1/agents/helper/chat'
const START: UIMessageChunk = { type: 'start', messageId: RUN_ID, messageMetadata: { runId: RUN_ID, sessionId: SESSION_ID, traceId: TRACE_ID } }
const USAGE = { inputTokens: 3, outputTokens: 5, totalTokens: 8 }

type Source = 'reference' | 'projection'
interface Served { url: string, method: string, body: any }

/** The SDK's own producer writing `chunks`, as its createUIMessageStreamResponse would send them. */
function referenceStream (chunks: readonly UIMessageChunk[]): ReadableStream<Uint8Array> {
  return createUIMessageStream({ execute: ({ writer }) => { for (const chunk of chunks) writer.write(chunk) } })
    .pipeThrough(new JsonToSseTransformStream())
    .pipeThrough(new TextEncoderStream())
}

/** The projection's writes, one per event (replayed events first, when given). */
function projected (events: readonly RunEvent[], options?: UiMessageStreamOptions & { replay?: readonly RunEvent[] }): string[] {
  const projection = new UiMessageStreamProjection(options)
  const pieces = options?.replay === undefined ? [] : [projection.replay(options.replay)]
  for (const event of events) pieces.push(projection.push(event))
  return pieces
}

/** A Chat (the engine of useChat) whose transport's fetch answers with the queued bodies, in order. */
function chatOver (bodies: Array<ReadableStream<Uint8Array> | null>, init: { messages?: UIMessage[] } = {}) {
  const served: Served[] = []
  const finished: Array<() => void> = []
  const fetch = async (url: string | URL | Request, request?: RequestInit): Promise<Response> => {
    served.push({ url: String(url), method: request?.method ?? 'GET', body: request?.body == null ? undefined : JSON.parse(String(request.body)) })
    const body = bodies.shift()
    if (body === undefined) throw new Error('no answer queued')
    return body === null ? new Response(null, { status: 204 }) : new Response(body, { headers: UI_MESSAGE_STREAM_HEADERS })
  }
  const chat = new Chat({
    id: 'chat-1',
    messages: init.messages ?? [],
    transport: new DefaultChatTransport({ api: API, fetch }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: () => { finished.shift()?.() }
  })
  /** Resolves when the next request's stream has been consumed; rejects when no request comes. */
  const nextFinish = () => new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no request finished within 5 s')), 5_000)
    finished.push(() => { clearTimeout(timer); resolve() })
  })
  return { chat, served, nextFinish }
}

/** Runs `check` over the reference producer and over the projection, after checking their bytes agree. */
async function both (
  t: Test, events: RunEvent[], chunks: UIMessageChunk[],
  check: (t: Test, chat: Chat<UIMessage>, source: Source) => void | Promise<void>
): Promise<void> {
  const pieces = projected(events)
  t.equal(pieces.join(''), await textOf(referenceStream(chunks)), 'the projection writes the bytes the SDK itself writes')
  for (const source of ['reference', 'projection'] as const) {
    await t.test(source, async (t) => {
      const { chat } = chatOver([source === 'reference' ? referenceStream(chunks) : streamOf(pieces)])
      await chat.sendMessage({ text: 'hi' })
      await check(t, chat, source)
    })
  }
}

function assistant (chat: Chat<UIMessage>): UIMessage {
  const message = chat.messages.at(-1)
  if (message?.role !== 'assistant') throw new Error('no assistant message')
  return message
}

const FULL_RUN = log([
  started(),
  ['reasoning.delta', { text: 'Let me ' }],
  ['reasoning.delta', { text: 'think.' }],
  ['message.delta', { text: 'Hello' }],
  ['message.delta', { text: ', world' }],
  ['progress.step', { n: 1 }],
  ['message.delta', { text: '!' }],
  ['tool.call.delta', { toolCallId: 'call-1', name: 'lookup', delta: '{"q":' }],
  ['tool.call.delta', { toolCallId: 'call-1', name: 'lookup', delta: '"x"}' }],
  ['tool.call', { toolCallId: 'call-1', name: 'lookup', input: { q: 'x' } }],
  ['tool.result', { toolCallId: 'call-1', name: 'lookup', output: { hits: 2 }, isError: false }],
  ['tool.call', { toolCallId: 'call-2', name: 'fetchPage', input: { url: 'https://example.com' } }],
  ['tool.result', { toolCallId: 'call-2', name: 'fetchPage', output: 'timeout', isError: true }],
  ['checkpoint.saved', { step: 1 }],
  ['message.delta', { text: 'Done.' }],
  completed('Hello, world!Done.')
])

const FULL_CHUNKS: UIMessageChunk[] = [
  START,
  { type: 'reasoning-start', id: 'reasoning-2' },
  { type: 'reasoning-delta', id: 'reasoning-2', delta: 'Let me ' },
  { type: 'reasoning-delta', id: 'reasoning-2', delta: 'think.' },
  { type: 'reasoning-end', id: 'reasoning-2' },
  { type: 'text-start', id: 'text-4' },
  { type: 'text-delta', id: 'text-4', delta: 'Hello' },
  { type: 'text-delta', id: 'text-4', delta: ', world' },
  { type: 'text-end', id: 'text-4' },
  { type: 'data-progress.step', data: { n: 1 } },
  { type: 'text-start', id: 'text-7' },
  { type: 'text-delta', id: 'text-7', delta: '!' },
  { type: 'text-end', id: 'text-7' },
  { type: 'tool-input-start', toolCallId: 'call-1', toolName: 'lookup', providerExecuted: true },
  { type: 'tool-input-delta', toolCallId: 'call-1', inputTextDelta: '{"q":' },
  { type: 'tool-input-delta', toolCallId: 'call-1', inputTextDelta: '"x"}' },
  { type: 'tool-input-available', toolCallId: 'call-1', toolName: 'lookup', input: { q: 'x' }, providerExecuted: true },
  { type: 'tool-output-available', toolCallId: 'call-1', output: { hits: 2 } },
  { type: 'tool-input-available', toolCallId: 'call-2', toolName: 'fetchPage', input: { url: 'https://example.com' }, providerExecuted: true },
  { type: 'tool-output-error', toolCallId: 'call-2', errorText: 'timeout' },
  { type: 'text-start', id: 'text-15' },
  { type: 'text-delta', id: 'text-15', delta: 'Done.' },
  { type: 'text-end', id: 'text-15' },
  { type: 'finish', finishReason: 'stop', messageMetadata: { usage: USAGE } }
]

function checkFullRun (t: Test, chat: Chat<UIMessage>): void {
  t.equal(chat.status, 'ready')
  t.equal(chat.error, undefined)
  const message = assistant(chat)
  t.equal(message.id, RUN_ID, 'the message id is the run id')
  t.same(message.metadata, { runId: RUN_ID, sessionId: SESSION_ID, traceId: TRACE_ID, usage: USAGE }, 'start and finish metadata, merged')
  t.same(message.parts.map((part) => part.type),
    ['reasoning', 'text', 'data-progress.step', 'text', 'tool-lookup', 'tool-fetchPage', 'text'])
  t.match(message.parts[0], { type: 'reasoning', text: 'Let me think.', state: 'done' })
  t.match(message.parts[1], { type: 'text', text: 'Hello, world', state: 'done' })
  t.match(message.parts[2], { type: 'data-progress.step', data: { n: 1 } })
  t.match(message.parts[3], { type: 'text', text: '!', state: 'done' })
  t.match(message.parts[4], { toolCallId: 'call-1', state: 'output-available', input: { q: 'x' }, output: { hits: 2 }, providerExecuted: true })
  t.match(message.parts[5], { toolCallId: 'call-2', state: 'output-error', input: { url: 'https://example.com' }, errorText: 'timeout' })
  t.match(message.parts[6], { type: 'text', text: 'Done.', state: 'done' })
}

t.test('the headers are the SDK\'s own, less `connection`', async (t) => {
  const { connection, ...expected } = SDK_HEADERS as Record<string, string>
  t.equal(connection, 'keep-alive')
  t.same(new UiMessageStreamProjection().head(), expected)
  t.equal(UI_MESSAGE_STREAM_HEADERS['x-vercel-ai-ui-message-stream'], 'v1')
})

t.test('a run with reasoning, text, a custom event, tool calls and a result', async (t) => {
  await both(t, FULL_RUN, FULL_CHUNKS, checkFullRun)
})

t.test('SSE comments (`: ping`) between frames change nothing for the client', async (t) => {
  const pieces = projected(FULL_RUN).flatMap((piece) => [SSE_PING, piece])
  const { chat } = chatOver([streamOf(pieces)])
  await chat.sendMessage({ text: 'hi' })
  checkFullRun(t, chat)
})

t.test('the request the transport sends: POST {id, messages, trigger, messageId}', async (t) => {
  const { chat, served } = chatOver([streamOf(projected(FULL_RUN))])
  await chat.sendMessage({ text: 'hi' })
  t.equal(served[0]!.method, 'POST')
  t.equal(served[0]!.url, API)
  t.match(served[0]!.body, { id: 'chat-1', trigger: 'submit-message', messageId: undefined })
  t.same(Object.keys(served[0]!.body).sort(), ['id', 'messages', 'trigger'], 'messageId is left out when undefined')
  t.match(served[0]!.body.messages, [{ role: 'user', parts: [{ type: 'text', text: 'hi' }] }])
})

t.test('a failed run ends with an error the chat reports, after metadata naming the code', async (t) => {
  await both(t, log([started(), ['message.delta', { text: 'Work' }], failed('AGENT_ERROR', 'boom')]), [
    START,
    { type: 'text-start', id: 'text-2' },
    { type: 'text-delta', id: 'text-2', delta: 'Work' },
    { type: 'text-end', id: 'text-2' },
    { type: 'message-metadata', messageMetadata: { error: { code: 'AGENT_ERROR', message: 'boom' } } },
    { type: 'error', errorText: 'boom' }
  ], (t, chat) => {
    t.equal(chat.status, 'error')
    t.equal(chat.error?.message, 'boom')
    const message = assistant(chat)
    t.match(message.parts, [{ type: 'text', text: 'Work', state: 'done' }])
    t.match(message.metadata, { error: { code: 'AGENT_ERROR' } })
  })
})

t.test('a cancelled run ends with an abort: no error, the text so far kept', async (t) => {
  await both(t, log([started(), ['reasoning.delta', { text: 'Hm' }], failed('CANCELLED', 'cancelled by the user')]), [
    START,
    { type: 'reasoning-start', id: 'reasoning-2' },
    { type: 'reasoning-delta', id: 'reasoning-2', delta: 'Hm' },
    { type: 'reasoning-end', id: 'reasoning-2' },
    { type: 'message-metadata', messageMetadata: { error: { code: 'CANCELLED', message: 'cancelled by the user' } } },
    { type: 'abort', reason: 'cancelled by the user' }
  ], (t, chat) => {
    t.equal(chat.status, 'ready')
    t.equal(chat.error, undefined)
    t.match(assistant(chat).parts, [{ type: 'reasoning', text: 'Hm', state: 'done' }])
  })
})

t.test('a queued run cancelled before it started: its log is the terminal event alone', async (t) => {
  await both(t, log([failed('CANCELLED', 'cancelled')]), [
    { type: 'message-metadata', messageMetadata: { error: { code: 'CANCELLED', message: 'cancelled' } } },
    { type: 'abort', reason: 'cancelled' }
  ], (t, chat) => {
    t.equal(chat.status, 'ready')
    t.same(assistant(chat).parts, [], 'an empty assistant message carrying the metadata')
  })
})

t.test('a requeued run: the new attempt continues the same message; an unknown finish reason is `other`', async (t) => {
  const requeued = { attempt: 2, reason: 'INSTANCE_LOST' }
  await both(t, log([
    started(), ['message.delta', { text: 'a' }], ['run.requeued', requeued], started(2),
    ['message.delta', { text: 'b' }], completed('ab', 'max-steps')
  ]), [
    START,
    { type: 'text-start', id: 'text-2' },
    { type: 'text-delta', id: 'text-2', delta: 'a' },
    { type: 'text-end', id: 'text-2' },
    { type: 'data-run.requeued', data: requeued },
    { type: 'text-start', id: 'text-5' },
    { type: 'text-delta', id: 'text-5', delta: 'b' },
    { type: 'text-end', id: 'text-5' },
    { type: 'finish', finishReason: 'other', messageMetadata: { usage: USAGE } }
  ], (t, chat) => {
    const message = assistant(chat)
    t.same(message.parts.map((part) => part.type), ['text', 'data-run.requeued', 'text'])
    t.match(message.parts[1], { data: requeued })
  })
})

t.test('a run resumed under its id: an attempt\'s end that the run goes on after is news, pushed marked goesOn or replayed', async (t) => {
  const resumed = { attempt: 2, reason: 'RESUMED' }
  const events = log([
    started(), ['message.delta', { text: 'a' }], failed('AGENT_ERROR', 'boom'), ['run.requeued', resumed], started(2),
    ['message.delta', { text: 'b' }], completed('b')
  ])
  const marked = events.map((event) => event.type === 'run.failed' ? { ...event, goesOn: true as const } : event)
  t.equal(projected([], { replay: events }).join(''), projected(marked).join(''), 'a replay of the log tells it as a follower does')
  await both(t, marked, [
    START,
    { type: 'text-start', id: 'text-2' },
    { type: 'text-delta', id: 'text-2', delta: 'a' },
    { type: 'text-end', id: 'text-2' },
    { type: 'data-run.failed', data: { error: { code: 'AGENT_ERROR', message: 'boom' }, traceId: TRACE_ID } },
    { type: 'data-run.requeued', data: resumed },
    { type: 'text-start', id: 'text-6' },
    { type: 'text-delta', id: 'text-6', delta: 'b' },
    { type: 'text-end', id: 'text-6' },
    { type: 'finish', finishReason: 'stop', messageMetadata: { usage: USAGE } }
  ], (t, chat) => {
    t.equal(chat.status, 'ready')
    t.equal(chat.error, undefined, 'the first attempt\'s failure is not the chat\'s')
    t.same(assistant(chat).parts.map((part) => part.type), ['text', 'data-run.failed', 'data-run.requeued', 'text'])
  })
})

t.test('events the chat has no use for are left out; a custom event without data carries null', async (t) => {
  const pieces = projected(log([started(), ['approval.unknown', {}], ['ping', undefined], ['tool.progress', { p: 1 }]]))
  t.same(pieces.slice(1), ['', `data: ${JSON.stringify({ type: 'data-ping', data: null })}\n\n`, ''])
})

t.test('a tool error without output has an empty error text', async (t) => {
  const pieces = projected(log([['tool.result', { toolCallId: 'c', name: 'n', output: undefined, isError: true }]]))
  t.same(pieces, [`data: ${JSON.stringify({ type: 'tool-output-error', toolCallId: 'c', errorText: '' })}\n\n`])
})

// An approval that no tool call of the run owns (another tool's, or none): a dynamic tool call of its own.
const APPROVAL_LOG = log([
  started(),
  ['tool.call', { toolCallId: 'call-9', name: 'draft', input: { to: 'bob' } }],
  ['message.delta', { text: 'Sending.' }],
  ['approval.requested', { approval: approval('pending') }]
])
const APPROVAL_CHUNKS: UIMessageChunk[] = [
  START,
  { type: 'tool-input-available', toolCallId: 'call-9', toolName: 'draft', input: { to: 'bob' }, providerExecuted: true },
  { type: 'text-start', id: 'text-3' },
  { type: 'text-delta', id: 'text-3', delta: 'Sending.' },
  { type: 'text-end', id: 'text-3' },
  { type: 'start-step' },
  { type: 'tool-input-available', toolCallId: 'appr-1', toolName: 'sendEmail', input: { to: 'bob@example.com' }, dynamic: true, providerExecuted: true },
  { type: 'tool-approval-request', approvalId: 'appr-1', toolCallId: 'appr-1', reason: 'Sends mail on your behalf' },
  { type: 'finish', finishReason: 'tool-calls' }
]
function rest (status: 'approved' | 'rejected'): RunEvent[] {
  return log([
    ['approval.decided', { approval: approval(status) }],
    ['tool.result', { toolCallId: 'call-9', name: 'draft', output: status === 'approved' ? 'sent' : 'denied', isError: status !== 'approved' }],
    ['message.delta', { text: status === 'approved' ? 'Sent.' : 'Not sent.' }],
    completed('done')
  ], 5)
}
function restChunks (status: 'approved' | 'rejected'): UIMessageChunk[] {
  return [
    START,
    { type: 'tool-approval-response', approvalId: 'appr-1', approved: status === 'approved', reason: 'ok' },
    status === 'approved'
      ? { type: 'tool-output-available', toolCallId: 'appr-1', output: approval('approved').decision }
      : { type: 'tool-output-denied', toolCallId: 'appr-1' },
    status === 'approved'
      ? { type: 'tool-output-available', toolCallId: 'call-9', output: 'sent' }
      : { type: 'tool-output-error', toolCallId: 'call-9', errorText: 'denied' },
    { type: 'text-start', id: 'text-7' },
    { type: 'text-delta', id: 'text-7', delta: status === 'approved' ? 'Sent.' : 'Not sent.' },
    { type: 'text-end', id: 'text-7' },
    { type: 'finish', finishReason: 'stop', messageMetadata: { usage: USAGE } }
  ]
}

for (const status of ['approved', 'rejected'] as const) {
  t.test(`an approval ends the response; the decision (${status}) comes back in the next request, whose response continues the same message`, async (t) => {
    const first = projected(APPROVAL_LOG)
    t.equal(first.join(''), await textOf(referenceStream(APPROVAL_CHUNKS)), 'first response: the SDK\'s bytes')
    const second = projected(rest(status), { delivered: APPROVAL_LOG })
    t.equal(second.join(''), await textOf(referenceStream(restChunks(status))), 'continuation: the SDK\'s bytes')

    for (const source of ['reference', 'projection'] as const) {
      await t.test(source, async (t) => {
        const { chat, served, nextFinish } = chatOver(source === 'reference'
          ? [referenceStream(APPROVAL_CHUNKS), referenceStream(restChunks(status))]
          : [streamOf(first), streamOf(second)])
        await chat.sendMessage({ text: 'mail bob' })
        t.equal(chat.status, 'ready', 'the first response has finished')
        const asked = assistant(chat)
        t.same(asked.parts.map((part) => part.type), ['tool-draft', 'text', 'step-start', 'dynamic-tool'])
        t.match(asked.parts[3], {
          type: 'dynamic-tool',
          toolName: 'sendEmail',
          toolCallId: 'appr-1',
          state: 'approval-requested',
          input: { to: 'bob@example.com' },
          approval: { id: 'appr-1', requestReason: 'Sends mail on your behalf' }
        })

        const done = nextFinish()
        await chat.addToolApprovalResponse({ id: 'appr-1', approved: status === 'approved', reason: 'my call' })
        await done
        t.equal(served.length, 2, 'sendAutomaticallyWhen sent the decision at once')
        const { body } = served[1]!
        t.match(body, { id: 'chat-1', trigger: 'submit-message', messageId: RUN_ID })
        t.match(body.messages.at(-1).parts.at(-1), {
          type: 'dynamic-tool',
          toolCallId: 'appr-1',
          state: 'approval-responded',
          approval: { id: 'appr-1', approved: status === 'approved', reason: 'my call' }
        }, 'the approval response travels as the tool part of the last assistant message')

        t.equal(chat.messages.length, 2, 'no new message: the run goes on in the same one')
        const message = assistant(chat)
        t.equal(message.id, RUN_ID)
        t.same(message.parts.map((part) => part.type), ['tool-draft', 'text', 'step-start', 'dynamic-tool', 'text'])
        t.match(message.parts[0], status === 'approved' ? { state: 'output-available', output: 'sent' } : { state: 'output-error', errorText: 'denied' })
        t.match(message.parts[3], status === 'approved'
          ? { state: 'output-available', output: { approved: true, decidedBy: 'alice' } }
          : { state: 'output-denied' })
        t.match(message.parts[4], { type: 'text', text: status === 'approved' ? 'Sent.' : 'Not sent.' })
        t.equal(chat.status, 'ready')
      })
    }
  })
}

t.test('resume: GET {api}/{chatId}/stream replays the run from its start under the same message id', async (t) => {
  const whole = [...APPROVAL_LOG, ...rest('approved')]
  const chunks = [...APPROVAL_CHUNKS.slice(0, -1), ...restChunks('approved').slice(1)]
  const replayed = projected([], { replay: whole })
  t.equal(replayed.join(''), await textOf(referenceStream(chunks)), 'a decided approval does not end a replay')

  const user: UIMessage = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'mail bob' }] }
  for (const source of ['reference', 'projection'] as const) {
    await t.test(source, async (t) => {
      const { chat, served } = chatOver([source === 'reference' ? referenceStream(chunks) : streamOf(replayed)], { messages: [user] })
      await chat.resumeStream()
      t.same(served.map(({ url, method }) => ({ url, method })), [{ url: `${API}/chat-1/stream`, method: 'GET' }])
      t.equal(chat.messages.length, 2)
      const message = assistant(chat)
      t.equal(message.id, RUN_ID)
      t.same(message.parts.map((part) => part.type), ['tool-draft', 'text', 'step-start', 'dynamic-tool', 'text'])
      t.match(message.parts[3], { state: 'output-available' })
    })
  }
})

t.test('resume of a run still waiting for its approval ends at the request, which the client can answer', async (t) => {
  const projection = new UiMessageStreamProjection()
  const text = projection.replay(APPROVAL_LOG)
  t.equal(text, await textOf(referenceStream(APPROVAL_CHUNKS)))
  t.ok(projection.ended)
  t.equal(projection.push(rest('approved')[0]!), '', 'nothing is written after [DONE]')

  const { chat } = chatOver([streamOf([text])], { messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'x' }] }] })
  await chat.resumeStream()
  t.match(assistant(chat).parts.at(-1), { state: 'approval-requested', approval: { id: 'appr-1' } })
})

t.test('resume when the chat has no run in progress: 204, and the chat stays as it was', async (t) => {
  const user: UIMessage = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'x' }] }
  const { chat, served } = chatOver([null], { messages: [user] })
  await chat.resumeStream()
  t.equal(served[0]!.method, 'GET')
  t.equal(chat.status, 'ready')
  t.equal(chat.error, undefined)
  t.same(chat.messages, [user])
})

t.test('an approval without a reason or payload, and one that expired', async (t) => {
  const bare = approval('pending', { reason: null, payload: undefined })
  const first = projected(log([started(), ['approval.requested', { approval: bare }]]))
  const expected: UIMessageChunk[] = [
    START,
    { type: 'start-step' },
    { type: 'tool-input-available', toolCallId: 'appr-1', toolName: 'sendEmail', input: null, dynamic: true, providerExecuted: true },
    { type: 'tool-approval-request', approvalId: 'appr-1', toolCallId: 'appr-1' },
    { type: 'finish', finishReason: 'tool-calls' }
  ]
  t.equal(first.join(''), await textOf(referenceStream(expected)))
  const delivered = log([started(), ['approval.requested', { approval: bare }]])
  const second = projected(log([['approval.decided', { approval: approval('expired', { reason: null }) }], failed('AGENT_ERROR', 'gave up')], 3), { delivered })
  t.equal(second.join(''), await textOf(referenceStream([
    START,
    { type: 'tool-approval-response', approvalId: 'appr-1', approved: false },
    { type: 'tool-output-denied', toolCallId: 'appr-1' },
    { type: 'message-metadata', messageMetadata: { error: { code: 'AGENT_ERROR', message: 'gave up' } } },
    { type: 'error', errorText: 'gave up' }
  ])))
  const approvedWithoutDecision = projected(log([['approval.decided', { approval: approval('pending', { status: 'approved' }) }]], 3), { delivered })
  t.match(approvedWithoutDecision.join(''), '"output":{"approved":true}', 'an approved approval without its decision record still says so')
})

t.test('a continuation learns nothing it cannot use from a log without run.started', async (t) => {
  const pieces = projected(log([['message.delta', { text: 'x' }]], 2), { delivered: log([['checkpoint.saved', { step: 1 }]]) })
  t.same(pieces, [
    `data: ${JSON.stringify({ type: 'text-start', id: 'text-2' })}\n\ndata: ${JSON.stringify({ type: 'text-delta', id: 'text-2', delta: 'x' })}\n\n`
  ], 'no start chunk: there is no message id to give')
})

// The AI SDK adapter's approvals: asked for a tool call, with the tool's name as action and the call's input as
// payload. Such an approval is that call's own tool-approval-request (same toolCallId), as the SDK makes it: one tool
// part, never a second, dynamic one.
const DELETE = { path: '/tmp/report.txt' }
function deletion (id: string, status: Approval['status'] = 'pending', input: unknown = DELETE): Approval {
  return approval(status, { id, action: 'deleteFile', payload: input, reason: null })
}
const CALL_LOG = log([
  started(),
  ['message.delta', { text: 'I will delete it.' }],
  ['tool.call', { toolCallId: 'del_1', name: 'deleteFile', input: DELETE }],
  ['approval.requested', { approval: deletion('appr-1') }]
])
const CALL_CHUNKS: UIMessageChunk[] = [
  START,
  { type: 'text-start', id: 'text-2' },
  { type: 'text-delta', id: 'text-2', delta: 'I will delete it.' },
  { type: 'text-end', id: 'text-2' },
  { type: 'tool-input-available', toolCallId: 'del_1', toolName: 'deleteFile', input: DELETE, providerExecuted: true },
  { type: 'tool-approval-request', approvalId: 'appr-1', toolCallId: 'del_1' },
  { type: 'finish', finishReason: 'tool-calls' }
]
function callRest (status: 'approved' | 'rejected'): RunEvent[] {
  const approved = status === 'approved'
  return log([
    ['approval.decided', { approval: deletion('appr-1', status) }],
    // the adapter's result for a denied call: the denial, as an error (the chat shows the denial alone)
    ['tool.result', { toolCallId: 'del_1', name: 'deleteFile', output: approved ? 'deleted /tmp/report.txt' : 'ok', isError: !approved }],
    ['message.delta', { text: approved ? 'Done.' : 'Not deleted.' }],
    completed('done')
  ], 5)
}
function callRestChunks (status: 'approved' | 'rejected'): UIMessageChunk[] {
  const approved = status === 'approved'
  return [
    START,
    { type: 'tool-approval-response', approvalId: 'appr-1', approved, reason: 'ok' },
    approved
      ? { type: 'tool-output-available', toolCallId: 'del_1', output: 'deleted /tmp/report.txt' }
      : { type: 'tool-output-denied', toolCallId: 'del_1' },
    { type: 'text-start', id: 'text-7' },
    { type: 'text-delta', id: 'text-7', delta: approved ? 'Done.' : 'Not deleted.' },
    { type: 'text-end', id: 'text-7' },
    { type: 'finish', finishReason: 'stop', messageMetadata: { usage: USAGE } }
  ]
}

for (const status of ['approved', 'rejected'] as const) {
  t.test(`an approval asked for a tool call is that call's request: one tool part, approval-requested, then ${status === 'approved' ? 'output-available' : 'output-denied'}`, async (t) => {
    const first = projected(CALL_LOG)
    t.equal(first.join(''), await textOf(referenceStream(CALL_CHUNKS)), 'first response: the SDK\'s bytes')
    const second = projected(callRest(status), { delivered: CALL_LOG })
    t.equal(second.join(''), await textOf(referenceStream(callRestChunks(status))), 'continuation: the SDK\'s bytes')

    for (const source of ['reference', 'projection'] as const) {
      await t.test(source, async (t) => {
        const { chat, served, nextFinish } = chatOver(source === 'reference'
          ? [referenceStream(CALL_CHUNKS), referenceStream(callRestChunks(status))]
          : [streamOf(first), streamOf(second)])
        await chat.sendMessage({ text: 'delete the report' })
        const asked = assistant(chat)
        t.same(asked.parts.map((part) => part.type), ['text', 'tool-deleteFile'], 'one tool part, no dynamic one')
        t.match(asked.parts[1], { toolCallId: 'del_1', state: 'approval-requested', input: DELETE, approval: { id: 'appr-1' } })

        const done = nextFinish()
        await chat.addToolApprovalResponse({ id: 'appr-1', approved: status === 'approved' })
        await done
        t.equal(served.length, 2, 'sendAutomaticallyWhen sent the answer at once')
        t.match(served[1]!.body.messages.at(-1).parts.at(-1), { type: 'tool-deleteFile', toolCallId: 'del_1', state: 'approval-responded' })
        const message = assistant(chat)
        t.same(message.parts.map((part) => part.type), ['text', 'tool-deleteFile', 'text'])
        t.match(message.parts[1], status === 'approved'
          ? { toolCallId: 'del_1', state: 'output-available', output: 'deleted /tmp/report.txt', approval: { id: 'appr-1', approved: true } }
          : { toolCallId: 'del_1', state: 'output-denied', approval: { id: 'appr-1', approved: false, reason: 'ok' } })
        t.equal(chat.status, 'ready')
      })
    }
  })
}

t.test('a step\'s approvals asked together: the response ends once each waiting call has its request; one answer sends them all', async (t) => {
  const burst = log([
    started(),
    ['tool.call', { toolCallId: 'del_1', name: 'deleteFile', input: { path: '/a' } }],
    ['tool.call', { toolCallId: 'del_2', name: 'deleteFile', input: { path: '/b' } }],
    // in the order the store took them, not the calls'
    ['approval.requested', { approval: deletion('appr-2', 'pending', { path: '/b' }) }],
    ['approval.requested', { approval: deletion('appr-1', 'pending', { path: '/a' }) }]
  ])
  const first = projected(burst)
  t.notMatch(first[3], /"finish"/, 'del_1 still waits for its request: the response goes on')
  t.match(first[4], /"type":"finish","finishReason":"tool-calls"/)
  const rest = log([
    ['approval.decided', { approval: deletion('appr-2', 'rejected', { path: '/b' }) }],
    ['approval.decided', { approval: deletion('appr-1', 'approved', { path: '/a' }) }],
    ['tool.result', { toolCallId: 'del_2', name: 'deleteFile', output: 'ok', isError: true }],
    ['tool.result', { toolCallId: 'del_1', name: 'deleteFile', output: 'deleted /a', isError: false }],
    completed('done')
  ], 6)
  const { chat, served, nextFinish } = chatOver([streamOf(first), streamOf(projected(rest, { delivered: burst }))])
  await chat.sendMessage({ text: 'delete both' })
  t.match(assistant(chat).parts, [
    { toolCallId: 'del_1', state: 'approval-requested', approval: { id: 'appr-1' } },
    { toolCallId: 'del_2', state: 'approval-requested', approval: { id: 'appr-2' } }
  ])
  await chat.addToolApprovalResponse({ id: 'appr-1', approved: true })
  t.equal(served.length, 1, 'one answer of two: nothing sent yet')
  const done = nextFinish()
  await chat.addToolApprovalResponse({ id: 'appr-2', approved: false })
  await done
  t.equal(served.length, 2)
  t.match(served[1]!.body.messages.at(-1).parts, [{ state: 'approval-responded' }, { state: 'approval-responded' }], 'both answers in one request')
  t.match(assistant(chat).parts, [
    { toolCallId: 'del_1', state: 'output-available', output: 'deleted /a' },
    { toolCallId: 'del_2', state: 'output-denied' }
  ])
})

t.test('which tool call an approval belongs to: the first unanswered, unclaimed call of its name with its input', async (t) => {
  const projection = new UiMessageStreamProjection()
  const pieces = log([
    started(),
    ['tool.call', { toolCallId: 'done', name: 'deleteFile', input: DELETE }],
    ['tool.result', { toolCallId: 'done', name: 'deleteFile', output: 'deleted', isError: false }],
    ['tool.call', { toolCallId: 'other', name: 'deleteFile', input: { path: '/elsewhere' } }],
    ['tool.call', { toolCallId: 'twin-1', name: 'deleteFile', input: DELETE }],
    ['tool.call', { toolCallId: 'twin-2', name: 'deleteFile', input: DELETE }],
    ['approval.requested', { approval: deletion('appr-1') }],
    ['approval.requested', { approval: { ...deletion('appr-2'), reason: 'It cannot be undone' } }],
    ['approval.requested', { approval: deletion('appr-3') }]
  ]).map((event) => projection.push(event))
  t.match(pieces[6], /"tool-approval-request","approvalId":"appr-1","toolCallId":"twin-1"}/, 'not the answered call, nor another input')
  t.match(pieces[7], /"tool-approval-request","approvalId":"appr-2","toolCallId":"twin-2","reason":"It cannot be undone"}/)
  t.match(pieces[8], /"dynamic":true/, 'no call left for it: a dynamic tool call of its own')
  t.ok(projection.ended)
})

/** A response body the test writes into as the run goes on. */
function liveStream () {
  const encoder = new TextEncoder()
  let controller!: ReadableStreamDefaultController<Uint8Array>
  const stream = new ReadableStream<Uint8Array>({ start (c) { controller = c } })
  return {
    stream,
    write: (pieces: readonly string[]) => { for (const piece of pieces) if (piece !== '') controller.enqueue(encoder.encode(piece)) },
    close: () => controller.close()
  }
}

for (const kind of ['dynamic', 'a tool call\'s'] as const) {
  t.test(`throughApprovals (a page that watches): ${kind} approval shown, then the decision made elsewhere and the rest, in one response`, async (t) => {
    const [asking, remainder, chunks] = kind === 'dynamic'
      ? [APPROVAL_LOG, rest('approved'), [...APPROVAL_CHUNKS.slice(0, -1), ...restChunks('approved').slice(1)]]
      : [CALL_LOG, callRest('approved'), [...CALL_CHUNKS.slice(0, -1), ...callRestChunks('approved').slice(1)]]
    const projection = new UiMessageStreamProjection({ throughApprovals: true })
    const before = asking.map((event) => projection.push(event))
    t.notOk(projection.ended, 'the request does not end the response')
    const after = remainder.map((event) => projection.push(event))
    t.equal([...before, ...after].join(''), await textOf(referenceStream(chunks)), 'the SDK\'s bytes')

    const live = liveStream()
    const { chat } = chatOver([live.stream], { messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'x' }] }] })
    const resumed = chat.resumeStream()
    live.write(before)
    const tool = () => assistant(chat).parts.find((part) => part.type === 'dynamic-tool' || part.type === 'tool-deleteFile') as { state: string } | undefined
    await eventually(() => chat.messages.length === 2 && tool()?.state === 'approval-requested')
    t.equal(chat.status, 'streaming', 'the page follows on')
    live.write(after)
    live.close()
    await resumed
    t.equal(tool()?.state, 'output-available')
    t.match(assistant(chat).parts.at(-1), { type: 'text', text: kind === 'dynamic' ? 'Sent.' : 'Done.' })
    t.equal(chat.status, 'ready')
  })
}

t.test('a replay past a tool call\'s decided approval: the request, the decision, the rest; one still pending ends it', async (t) => {
  const decided = new UiMessageStreamProjection().replay([...CALL_LOG, ...callRest('approved')])
  t.equal(decided, await textOf(referenceStream([...CALL_CHUNKS.slice(0, -1), ...callRestChunks('approved').slice(1)])))
  const pending = new UiMessageStreamProjection()
  t.equal(pending.replay(CALL_LOG), await textOf(referenceStream(CALL_CHUNKS)))
  t.ok(pending.ended)
})
