// A chat's messages rebuilt from run logs (GET …/chat/:id/messages): each assistant message must equal what the AI
// SDK's own client makes of the chat stream's chunks for the same log (readUIMessageStream over the projection's
// replay), for every kind of part the projection writes.
import t from 'tap'
import { readUIMessageStream } from 'ai'
import type { UIMessage, UIMessageChunk } from 'ai'
import { UiMessageStreamProjection } from '../../../../lib/frontends/chat/ui-message-stream.js'
import { assistantMessage, keptAssistantMessage, userMessage } from '../../../../lib/frontends/chat/ui-messages.js'
import type { RunEvent } from '../../../../lib/frontends/run-events.js'
import { RUN_ID, approval, completed, failed, log, started } from './helpers.js'

/** What the SDK's client builds from the chunks the chat stream sends for the whole log: its last message. */
async function sdkMessage (events: readonly RunEvent[]): Promise<UIMessage | undefined> {
  const chunks: UIMessageChunk[] = []
  for (const frame of new UiMessageStreamProjection().replay(events).split('\n\n')) {
    if (frame.startsWith('data: ') && frame !== 'data: [DONE]') chunks.push(JSON.parse(frame.slice(6)))
  }
  const stream = new ReadableStream<UIMessageChunk>({ start (controller) { for (const chunk of chunks) controller.enqueue(chunk); controller.close() } })
  let last: UIMessage | undefined
  for await (const message of readUIMessageStream({ stream, message: { id: RUN_ID, role: 'assistant', parts: [] } })) last = message
  return last
}

/** As JSON carries it (what the route sends): undefined fields gone. */
function json (value: unknown): unknown {
  return JSON.parse(JSON.stringify(value))
}

const toolCall = (id: string, name: string, input: unknown): [string, unknown] => ['tool.call', { toolCallId: id, name, input }]
const toolResult = (id: string, name: string, output: unknown, isError = false): [string, unknown] => ['tool.result', { toolCallId: id, name, output, isError }]

const logs: Record<string, RunEvent[]> = {
  'text, reasoning, a data part, streamed and failed tool calls': log([
    started(),
    ['reasoning.delta', { text: 'Let me ' }], ['reasoning.delta', { text: 'think.' }],
    ['message.delta', { text: 'Hello' }], ['message.delta', { text: ', world' }],
    ['progress.step', { n: 1 }],
    ['tool.call.delta', { toolCallId: 'c1', name: 'lookup', delta: '{"q":' }],
    ['tool.call.delta', { toolCallId: 'c1', name: 'lookup', delta: '"x"}' }],
    toolCall('c1', 'lookup', { q: 'x' }), toolResult('c1', 'lookup', { hits: 2 }),
    toolCall('c2', 'fetchPage', { url: 'u' }), toolResult('c2', 'fetchPage', 'timeout', true),
    ['checkpoint.saved', { step: 1 }],
    ['message.delta', { text: 'Done.' }],
    completed('Hello, world. Done.')
  ]),
  'an approval of its own, approved: the request, then its outcome': log([
    started(), ['message.delta', { text: 'Sending.' }],
    ['approval.requested', { approval: approval() }], ['approval.decided', { approval: approval('approved') }],
    ['message.delta', { text: ' Sent.' }], completed('sent')
  ]),
  'an approval of its own, denied, without a reason': log([
    started(),
    ['approval.requested', { approval: approval('pending', { reason: null }) }], ['approval.decided', { approval: approval('rejected') }],
    completed('not sent')
  ]),
  'a tool call\'s approval, approved with a comment: its request and response on the call': log([
    started(), toolCall('c1', 'sendEmail', { to: 'bob@example.com' }),
    ['approval.requested', { approval: approval() }], ['approval.decided', { approval: approval('approved') }],
    toolResult('c1', 'sendEmail', 'sent'), completed('sent', 'tool-calls')
  ]),
  'a tool call\'s approval, denied without a comment: the refusal is the outcome': log([
    started(), toolCall('c1', 'sendEmail', { to: 'bob@example.com' }),
    ['approval.requested', { approval: approval('pending', { reason: null }) }],
    ['approval.decided', { approval: { ...approval('rejected'), decision: { approved: false, decidedBy: 'alice', decidedAt: '2030-01-01T00:01:00.000Z' } } }],
    toolResult('c1', 'sendEmail', 'denied', true), completed('not sent')
  ]),
  'an approval never decided: the response ended there': log([
    started(), ['message.delta', { text: 'Sending.' }], ['approval.requested', { approval: approval() }],
    failed('APPROVAL_EXPIRED', 'expired')
  ]),
  'a failed run: its error in the metadata': log([started(), ['message.delta', { text: 'Work' }], failed('AGENT_ERROR', 'boom')]),
  'a cancelled run: the text so far': log([started(), ['message.delta', { text: 'tick' }], failed('CANCELLED', 'The run was cancelled')]),
  'a run resumed after its first attempt failed: one message, the end in between as news': log([
    started(), ['message.delta', { text: 'Work' }], failed('AGENT_ERROR', 'boom'),
    ['run.requeued', { attempt: 2, reason: 'RESUMED' }], started(2), ['message.delta', { text: 'Again' }], completed('again')
  ])
}

for (const [name, events] of Object.entries(logs)) {
  t.test(`equal to the SDK's own message for the stream: ${name}`, async (t) => {
    const ours = assistantMessage(RUN_ID, events)
    t.same(json(ours), json(await sdkMessage(events)))
    t.equal(ours.id, RUN_ID)
  })
}

t.test('a tool input cut short: its raw text, and its input only once it is whole JSON (the SDK also repairs a partial one)', async (t) => {
  const cut = log([started(), ['tool.call.delta', { toolCallId: 'c1', name: 'lookup', delta: '{"q":' }], failed('AGENT_ERROR', 'boom')])
  const sdk = json(await sdkMessage(cut)) as { parts: Array<Record<string, unknown>> }
  delete sdk.parts[0]!.input
  t.same(json(assistantMessage(RUN_ID, cut)), sdk)
  t.match(assistantMessage(RUN_ID, cut).parts[0], { state: 'input-streaming', rawInput: '{"q":', input: undefined })
  const whole = log([started(), ['tool.call.delta', { toolCallId: 'c1', name: 'lookup', delta: '{"q":1}' }], failed('AGENT_ERROR', 'boom')])
  t.same(json(assistantMessage(RUN_ID, whole)), json(await sdkMessage(whole)))
})

t.test('a queued run cancelled before it started (no run.started): the run id, the error in the metadata', async (t) => {
  const events = log([failed('CANCELLED', 'The run was cancelled')])
  const ours = assistantMessage('queued-run', events)
  t.same(json(ours), { id: 'queued-run', role: 'assistant', parts: [], metadata: { error: { code: 'CANCELLED', message: 'The run was cancelled' } } })
})

t.test('a stream the SDK could not read (a result for a call it never saw) is a bug, not a message', async (t) => {
  t.throws(() => assistantMessage(RUN_ID, log([started(), toolResult('nope', 'x', 1), completed('x')])), /no tool call nope/)
})

t.test('user messages and turns whose logs are gone', async (t) => {
  t.same(json(userMessage('r-user', 'hi')), { id: 'r-user', role: 'user', parts: [{ type: 'text', text: 'hi' }] })
  t.same(json(userMessage('r-user', { q: 1 })), { id: 'r-user', role: 'user', parts: [{ type: 'text', text: '{"q":1}' }] })
  t.same(json(keptAssistantMessage('r', 'echo: hi')), { id: 'r', role: 'assistant', parts: [{ type: 'text', text: 'echo: hi', state: 'done' }] })
})
