// The AG-UI projection, read by @ag-ui/client itself: an HttpAgent whose fetch answers with the
// projection's bytes runs them through the client's own SSE parser, schema enforcement, verifier and
// state reducer; the exported parse + verify pipeline is checked on its own, and shown to reject a
// broken sequence so that its approval means something.
import t from 'tap'
import type { Test } from 'tap'
import { HttpAgent, runHttpRequest, transformHttpEventStream, verifyEvents } from '@ag-ui/client'
import type { AgentSubscriber, BaseEvent, RunAgentInput } from '@ag-ui/client'
import { lastValueFrom, toArray } from 'rxjs'
import { AG_UI_HEADERS, AgUiProjection, APPROVAL_RESPONSE_SCHEMA, parseInterruptId } from '../../../../lib/frontends/ag-ui/events.js'
import type { AgUiRunOptions } from '../../../../lib/frontends/ag-ui/events.js'
import { SSE_PING } from '../../../../lib/frontends/run-events.js'
import type { RunEvent } from '../../../../lib/frontends/run-events.js'
import { RUN_ID, SESSION_ID, TRACE_ID, approval, completed, failed, log, started, streamOf } from './helpers.js'

const URL_ = 'http://svc.test/v1/agents/helper/ag-ui'
const THREAD = 'thread-1'

function projected (events: readonly RunEvent[], options: AgUiRunOptions): string[] {
  const projection = new AgUiProjection(options)
  return events.map((event) => projection.push(event))
}

/** Collects what the client complains about: stripped fields, unknown events, version mismatches. */
function complaints (t: Test): string[] {
  const said: string[] = []
  const { warn, error } = console
  console.warn = (...args: unknown[]) => { said.push(args.map(String).join(' ')) }
  console.error = (...args: unknown[]) => { said.push(args.map(String).join(' ')) }
  t.teardown(() => { console.warn = warn; console.error = error })
  return said
}

/** An HttpAgent whose fetch answers with the queued bodies and records the RunAgentInput it sent. */
function agentOver (bodies: string[][]) {
  const sent: RunAgentInput[] = []
  const agent = new HttpAgent({
    url: URL_,
    threadId: THREAD,
    fetch: async (_url, init) => {
      sent.push(JSON.parse(String(init.body)))
      return new Response(streamOf(bodies.shift()!), { headers: AG_UI_HEADERS })
    }
  })
  const seen: BaseEvent[] = []
  const subscriber: AgentSubscriber = { onEvent: ({ event }) => { seen.push(event) } }
  return { agent, sent, seen, subscriber }
}

/** The client's own transport pipeline alone: parse the HTTP body, then verify the sequence. */
async function verified (pieces: string[]): Promise<BaseEvent[]> {
  const events$ = transformHttpEventStream(runHttpRequest(async () => new Response(streamOf(pieces), { headers: AG_UI_HEADERS })))
  return await lastValueFrom(events$.pipe(verifyEvents(), toArray()))
}

const FULL_RUN = log([
  started(),
  ['reasoning.delta', { text: 'Let me ' }],
  ['reasoning.delta', { text: 'think.' }],
  ['message.delta', { text: 'Hello' }],
  ['message.delta', { text: ', world' }],
  ['progress.step', { n: 1 }],
  ['tool.call.delta', { toolCallId: 'call-1', name: 'lookup', delta: '{"q":' }],
  ['tool.call.delta', { toolCallId: 'call-1', name: 'lookup', delta: '"x"}' }],
  ['tool.call', { toolCallId: 'call-1', name: 'lookup', input: { q: 'x' } }],
  ['tool.result', { toolCallId: 'call-1', name: 'lookup', output: { hits: 2 }, isError: false }],
  ['tool.call', { toolCallId: 'call-2', name: 'fetchPage', input: { url: 'https://example.com' } }],
  ['tool.result', { toolCallId: 'call-2', name: 'fetchPage', output: 'timeout', isError: true }],
  ['checkpoint.saved', { step: 1 }],
  ['message.delta', { text: 'Done.' }],
  completed('Hello, world. Done.')
])

t.test('a full run, through HttpAgent.runAgent: no complaint, the messages and the result', async (t) => {
  const said = complaints(t)
  const { agent, sent, seen, subscriber } = agentOver([projected(FULL_RUN, { threadId: THREAD, runId: 'client-run-1' })])
  const result = await agent.runAgent({ runId: 'client-run-1' }, subscriber)
  t.same(said, [], 'the client stripped nothing and warned of nothing')
  t.same(result.result, 'Hello, world. Done.')

  t.same(seen.map((event) => event.type), [
    'RUN_STARTED',
    'REASONING_START', 'REASONING_MESSAGE_START', 'REASONING_MESSAGE_CONTENT', 'REASONING_MESSAGE_CONTENT', 'REASONING_MESSAGE_END', 'REASONING_END',
    'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_CONTENT', 'CUSTOM', 'TEXT_MESSAGE_END',
    'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT',
    'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT',
    'STATE_SNAPSHOT',
    'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END',
    'RUN_FINISHED'
  ])
  t.match(seen[0], { threadId: THREAD, runId: 'client-run-1', metadata: { runId: RUN_ID, sessionId: SESSION_ID, traceId: TRACE_ID } })
  t.match(seen[10], { name: 'progress.step', value: { n: 1 } })
  t.match(seen.at(-1), { outcome: { type: 'success' }, usage: [{ inputTokens: 3, outputTokens: 5, totalTokens: 8 }] })

  t.match(agent.messages, [
    { role: 'reasoning', content: 'Let me think.' },
    { role: 'assistant', content: 'Hello, world' },
    { role: 'assistant', toolCalls: [{ id: 'call-1', function: { name: 'lookup', arguments: '{"q":"x"}' } }] },
    { role: 'tool', toolCallId: 'call-1', content: '{"hits":2}' },
    { role: 'assistant', toolCalls: [{ id: 'call-2', function: { name: 'fetchPage', arguments: '{"url":"https://example.com"}' } }] },
    { role: 'tool', toolCallId: 'call-2', content: 'timeout', metadata: { isError: true } },
    { role: 'assistant', content: 'Done.' }
  ])
  t.same(agent.state, { step: 1 }, 'the checkpoint became the state snapshot')
  t.same(agent.pendingInterrupts, [])

  t.match(sent[0], { threadId: THREAD, runId: 'client-run-1', messages: [], tools: [], context: [], protocolVersion: '1.0' })
})

t.test('the exported parse + verify pipeline passes the same bytes, with pings between frames', async (t) => {
  const pieces = projected(FULL_RUN, { threadId: THREAD, runId: 'r' }).flatMap((piece) => [SSE_PING, piece])
  const events = await verified(pieces)
  t.equal(events.length, 26)
  t.equal(events.at(-1)!.type, 'RUN_FINISHED')
})

t.test('the verifier in that pipeline does reject a broken sequence', async (t) => {
  const pieces = projected(log([started(), ['message.delta', { text: 'x' }]]), { threadId: THREAD, runId: 'r' })
  pieces.push(`data: ${JSON.stringify({ type: 'RUN_FINISHED', threadId: THREAD, runId: 'r' })}\n\n`)
  await t.rejects(verified(pieces), /text messages are still active/)
})

const ASKING = log([
  started(),
  ['message.delta', { text: 'Sending.' }],
  ['tool.call.delta', { toolCallId: 'call-9', name: 'sendEmail', delta: '{"to":' }],
  ['approval.requested', { approval: approval('pending') }]
])

t.test('an approval ends the AG-UI run as an interrupt; the resume answers it in a new run with parentRunId', async (t) => {
  const said = complaints(t)
  const rest = log([
    ['approval.decided', { approval: approval('approved') }],
    ['tool.result', { toolCallId: 'call-9', name: 'sendEmail', output: 'sent', isError: false }],
    ['message.delta', { text: 'Sent.' }],
    completed('Sent.')
  ], 5)
  const { agent, sent, seen, subscriber } = agentOver([
    projected(ASKING, { threadId: THREAD, runId: 'client-run-1' }),
    projected(rest, { threadId: THREAD, runId: 'client-run-2', parentRunId: 'client-run-1', delivered: ASKING })
  ])
  const first = await agent.runAgent({ runId: 'client-run-1' }, subscriber)
  t.equal(first.result, undefined, 'an interrupted run has no result')
  t.same(seen.slice(-6).map((event) => event.type),
    ['TEXT_MESSAGE_END', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'CUSTOM', 'RUN_FINISHED'],
    'what is open is closed before the run finishes')
  t.match(seen.at(-2), { name: 'on_interrupt' })
  t.same(JSON.parse((seen.at(-2) as unknown as { value: string }).value), {
    approvalId: 'appr-1', action: 'sendEmail', payload: { to: 'bob@example.com' }, reason: 'Sends mail on your behalf', expiresAt: '2030-01-01T00:10:00.000Z'
  })
  t.same(agent.pendingInterrupts, [{
    id: 'appr-1:client-run-1',
    reason: 'approval',
    message: 'Sends mail on your behalf',
    responseSchema: APPROVAL_RESPONSE_SCHEMA,
    expiresAt: '2030-01-01T00:10:00.000Z',
    metadata: { action: 'sendEmail', payload: { to: 'bob@example.com' }, runId: RUN_ID, approvalId: 'appr-1' }
  }], 'the client holds the interrupt until a resume answers it; its id names the approval and the AG-UI run it interrupted')
  t.same(parseInterruptId(agent.pendingInterrupts[0]!.id), { approvalId: 'appr-1', agUiRunId: 'client-run-1' })
  t.same(parseInterruptId('appr-1'), { approvalId: 'appr-1' }, 'a bare approval id names the approval alone')

  await t.rejects(agent.runAgent({ runId: 'client-run-x' }), /pending interrupt/, 'the client itself refuses a run that ignores it')

  seen.length = 0
  const second = await agent.runAgent({
    runId: 'client-run-2',
    resume: [{ interruptId: 'appr-1:client-run-1', status: 'resolved', payload: { approved: true, comment: 'go' } }]
  }, subscriber)
  t.same(said, [])
  t.match(sent.at(-1), { threadId: THREAD, runId: 'client-run-2', resume: [{ interruptId: 'appr-1:client-run-1', status: 'resolved', payload: { approved: true, comment: 'go' } }] })
  t.notOk('parentRunId' in sent.at(-1)!, 'the client does not send parentRunId: the server knows the parent')
  t.match(seen[0], { type: 'RUN_STARTED', runId: 'client-run-2', parentRunId: 'client-run-1', metadata: { runId: RUN_ID } })
  t.match(seen[1], { type: 'CUSTOM', name: 'approval.decided', value: { approval: { status: 'approved' } } })
  t.equal(second.result, 'Sent.')
  t.same(agent.pendingInterrupts, [])
  t.match(agent.messages.filter((message) => message.role === 'tool'), [{ toolCallId: 'call-9', content: 'sent' }])
  t.match(agent.messages.at(-1), { role: 'assistant', content: 'Sent.' })
})

t.test('a failed run ends with RUN_ERROR; a cancelled one with the cancelled outcome', async (t) => {
  const said = complaints(t)
  const { agent, seen, subscriber } = agentOver([
    projected(log([started(), ['reasoning.delta', { text: 'hm' }], failed('AGENT_TIMEOUT', 'too slow')]), { threadId: THREAD, runId: 'a' }),
    projected(log([started(), ['tool.call.delta', { toolCallId: 'c', name: 'n', delta: '{' }], failed('CANCELLED', 'stop')]), { threadId: THREAD, runId: 'b' })
  ])
  let reported: unknown
  await agent.runAgent({ runId: 'a' }, { ...subscriber, onRunErrorEvent: ({ event }) => { reported = event } })
  t.match(seen.at(-1), { type: 'RUN_ERROR', message: 'too slow', code: 'AGENT_TIMEOUT' })
  t.match(reported, { message: 'too slow' }, 'the client hands the error to its subscribers')

  seen.length = 0
  let outcome: string | undefined
  await agent.runAgent({ runId: 'b' }, { ...subscriber, onRunFinishedEvent: (params) => { outcome = params.outcome } })
  t.same(seen.slice(-2).map((event) => event.type), ['TOOL_CALL_END', 'RUN_FINISHED'])
  t.equal(outcome, 'cancelled')
  t.same(said.filter((line) => line.includes('[ag-ui]')), [])
})

t.test('edge events: requeue, a custom event without data, a tool result for a call whose args only streamed', async (t) => {
  const events = log([
    started(),
    ['run.requeued', { attempt: 2, reason: 'SHUTDOWN' }],
    started(2),
    ['ping', undefined],
    ['approval.other', {}],
    ['tool.call.delta', { toolCallId: 'c', name: 'n', delta: '{}' }],
    ['tool.result', { toolCallId: 'c', name: 'n', output: undefined, isError: false }],
    ['tool.call', { toolCallId: 'd', name: 'n', input: undefined }],
    failed('CANCELLED', 'x')
  ])
  const pieces = projected(events, { threadId: THREAD, runId: 'r' })
  const types = (await verified(pieces)).map((event) => event.type)
  t.same(types, ['RUN_STARTED', 'CUSTOM', 'CUSTOM', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT',
    'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'RUN_FINISHED'])
  t.match(pieces[3], '"value":null')
  t.match(pieces[7], '"delta":"null"')
  t.equal(pieces[4], '', 'reserved types that are no built-in are left out')
})

t.test('a run resumed under its id: an attempt\'s end that the run goes on after (goesOn) is a CUSTOM event, what it left open closed', async (t) => {
  const events = log([
    started(),
    ['message.delta', { text: 'a' }],
    ['tool.call.delta', { toolCallId: 'c', name: 'n', delta: '{}' }],
    failed('AGENT_ERROR', 'boom'),
    ['run.requeued', { attempt: 2, reason: 'RESUMED' }],
    started(2),
    ['message.delta', { text: 'b' }],
    completed('b')
  ]).map((event) => event.type === 'run.failed' ? { ...event, goesOn: true as const } : event)
  const pieces = projected(events, { threadId: THREAD, runId: 'r' })
  const verifiedEvents = await verified(pieces)
  t.same(verifiedEvents.map((event) => event.type), [
    'RUN_STARTED', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'TOOL_CALL_START', 'TOOL_CALL_ARGS',
    'TOOL_CALL_END', 'CUSTOM', 'CUSTOM', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END', 'RUN_FINISHED'
  ], 'the client\'s verifier takes it: one AG-UI run, to the last attempt\'s end')
  t.match(verifiedEvents[7], { name: 'run.failed', value: { error: { code: 'AGENT_ERROR', message: 'boom' } } })
  t.match(verifiedEvents[8], { name: 'run.requeued', value: { attempt: 2, reason: 'RESUMED' } })
  t.match(verifiedEvents.at(-1), { outcome: { type: 'success' }, result: 'b' })
})

t.test('a run whose log starts with its terminal event, an approval without reason, and the end', async (t) => {
  const only = new AgUiProjection({ threadId: THREAD, runId: 'r' })
  t.same(only.head(), AG_UI_HEADERS)
  const text = only.push(log([failed('CANCELLED', 'queued run cancelled')])[0]!)
  t.same((await verified([text])).map((event) => event.type), ['RUN_STARTED', 'RUN_FINISHED'])
  t.notMatch(text, '"metadata"', 'no service ids to give without run.started')
  t.ok(only.ended)
  t.equal(only.push(log([started()])[0]!), '', 'nothing after the end')

  const bare = approval('pending', { reason: null, payload: undefined })
  const asked = projected(log([started(), ['approval.requested', { approval: bare }]]), { threadId: THREAD, runId: 'r' })
  const events = await verified(asked)
  t.match(events.at(-1), { outcome: { interrupts: [{ message: 'Approve sendEmail?', metadata: { payload: null } }] } })
})
