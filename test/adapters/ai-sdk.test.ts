import { createRequire } from 'node:module'
import t from 'tap'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { Chat } from '@ai-sdk/react'
import {
  DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, readUIMessageStream, simulateReadableStream,
  stepCountIs, streamText, tool
} from 'ai'
import type { ModelMessage, UIMessage } from 'ai'
import * as aiTest from 'ai/test'
import type { LanguageModelV4CallOptions, LanguageModelV4StreamPart, LanguageModelV4Usage } from '@ai-sdk/provider'
import { z } from 'zod'
import { aiSdkAgent, durableModel, durableTools, modelMessages } from '../../adapters/ai-sdk.js'
import type { StreamTextOutputV6 } from '../../adapters/ai-sdk.js'
import type { ApprovalRecord } from '../../lib/stores/types.js'
import { build, eventually, handOffPair, keepAlive, listen, parseSse } from '../helper.js'
import { openSse, openWs } from '../helpers/streams.js'

// test/adapters/ai-sdk-majors.test.ts runs this file against ai 6 too (what Node 20 installs). ai 7's models speak
// the V4 spec, ai 6's the V3 one, alike in what this file uses.
const MockLanguageModelV4 = aiTest.MockLanguageModelV4 ?? aiTest.MockLanguageModelV3
type MockLanguageModelV4 = aiTest.MockLanguageModelV4
const aiVersion = (createRequire(import.meta.url)('ai/package.json') as { version: string }).version
t.comment(`ai ${aiVersion}`)
/** What ai 6 lacks: the `toolApproval` option, and the UI stream's `tool-approval-response` chunk (its Chat refuses it). */
const specV4 = aiTest.MockLanguageModelV4 !== undefined
const ai7Only = (what: string): { skip: string | false } => ({ skip: Number(aiVersion.split('.')[0]) < 7 ? `ai 7 only: ${what}` : false })

type Prompt = LanguageModelV4CallOptions['prompt']

function usage (input: number | undefined, output: number | undefined): LanguageModelV4Usage {
  return {
    inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: output, text: output, reasoning: undefined }
  }
}

function text (value: string, id = 't'): LanguageModelV4StreamPart[] {
  return [{ type: 'text-start', id }, { type: 'text-delta', id, delta: value }, { type: 'text-end', id }]
}

function finish (reason: 'stop' | 'tool-calls' | 'error', tokens = usage(1, 1)): LanguageModelV4StreamPart {
  return { type: 'finish', finishReason: { unified: reason, raw: reason }, usage: tokens }
}

function toolCall (toolCallId: string, toolName: string, input: unknown): LanguageModelV4StreamPart {
  return { type: 'tool-call', toolCallId, toolName, input: JSON.stringify(input) }
}

/** A mock model that answers each call with the parts `reply` picks from the prompt; it keeps every call's options. */
function scripted (reply: (prompt: Prompt, call: number) => LanguageModelV4StreamPart[]): MockLanguageModelV4 {
  const model: MockLanguageModelV4 = new MockLanguageModelV4({
    doStream: async (options) => ({ stream: simulateReadableStream({ chunks: reply(options.prompt, model.doStreamCalls.length - 1) }) })
  })
  return model
}

/** The last tool result the model was shown, if the prompt ends with one. */
function lastToolOutput (prompt: Prompt): { type: string, value?: unknown, reason?: string } | undefined {
  const last = prompt.at(-1)
  if (last?.role !== 'tool') return undefined
  const result = last.content.findLast((part) => part.type === 'tool-result')
  return result?.output as { type: string, value?: unknown, reason?: string } | undefined
}

/** The approval's expiry timer is unref'ed; with inject() and no socket, nothing else keeps the process up. */
async function pendingApproval (app: FastifyInstance): Promise<ApprovalRecord> {
  return eventually(async () => {
    const res = await app.inject({ method: 'GET', url: '/v1/approvals' })
    return (res.json().approvals as ApprovalRecord[])[0]
  })
}

async function decide (app: FastifyInstance, body: { approved: boolean, comment?: string }): Promise<ApprovalRecord> {
  const approval = await pendingApproval(app)
  const res = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: body })
  if (res.statusCode !== 200) throw new Error(res.body)
  return approval
}

function runStream (app: FastifyInstance, agent: string, input: unknown, extra: Record<string, unknown> = {}) {
  return app.inject({ method: 'POST', url: `/v1/agents/${agent}/runs`, payload: { input, stream: true, ...extra } })
}

/** Event types and data, without run.started (its ids differ per run). */
function eventsOf (body: string): Array<[string, any]> {
  return parseSse(body).filter((e) => e.event !== 'run.started').map((e) => [e.event, e.data])
}

t.test('text, reasoning, a tool call with its input streamed, its result: in order, with the usage of every step', async (t) => {
  const model = scripted((prompt) => lastToolOutput(prompt) === undefined
    ? [
        { type: 'stream-start', warnings: [] },
        { type: 'reasoning-start', id: 'r' },
        { type: 'reasoning-delta', id: 'r', delta: 'The user wants a sum.' },
        { type: 'reasoning-end', id: 'r' },
        ...text('Let me add. '),
        { type: 'tool-input-start', id: 'call_1', toolName: 'add' },
        { type: 'tool-input-delta', id: 'call_1', delta: '{"a":1,' },
        { type: 'tool-input-delta', id: 'call_1', delta: '"b":2}' },
        { type: 'tool-input-end', id: 'call_1' },
        toolCall('call_1', 'add', { a: 1, b: 2 }),
        finish('tool-calls', usage(3, 4))
      ]
    : [...text('It is 3.'), finish('stop', usage(5, 6))])
  const add = tool({ inputSchema: z.object({ a: z.number(), b: z.number() }), execute: async ({ a, b }) => a + b })
  const agent = aiSdkAgent({
    description: 'adds',
    // a promise of the result is as good as the result
    run: async (input, ctx) => streamText({ model, tools: { add }, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(3) })
  })
  const { app } = build(t, { agents: { calc: agent } })

  const res = await runStream(app, 'calc', 'What is 1 + 2?')
  t.equal(res.statusCode, 200)
  const events = eventsOf(res.body)
  t.same(events.slice(0, -1), [
    ['reasoning.delta', { text: 'The user wants a sum.' }],
    ['message.delta', { text: 'Let me add. ' }],
    ['tool.call.delta', { toolCallId: 'call_1', name: 'add', delta: '{"a":1,' }],
    ['tool.call.delta', { toolCallId: 'call_1', name: 'add', delta: '"b":2}' }],
    ['tool.call', { toolCallId: 'call_1', name: 'add', input: { a: 1, b: 2 } }],
    ['tool.result', { toolCallId: 'call_1', name: 'add', output: 3, isError: false }],
    ['message.delta', { text: 'It is 3.' }]
  ])
  t.match(events.at(-1), ['run.completed', {
    status: 'completed',
    output: 'Let me add. It is 3.',
    usage: { inputTokens: 8, outputTokens: 10, totalTokens: 18 },
    finishReason: 'stop'
  }])
  t.equal(model.doStreamCalls.length, 2)
  t.same(model.doStreamCalls[0]!.prompt, [{ role: 'user', content: [{ type: 'text', text: 'What is 1 + 2?' }] }])

  const json = (await app.inject({ method: 'POST', url: '/v1/agents/calc/runs', payload: { input: 'again' } })).json()
  t.match(json, { output: 'Let me add. It is 3.', usage: { inputTokens: 8, outputTokens: 10 }, finishReason: 'stop' }, 'the same as a JSON run')
})

t.test('tool errors are results with isError; a streaming tool gives one result, its last', async (t) => {
  const model = scripted((_prompt, call) => call === 0
    ? [toolCall('c1', 'fails', {}), toolCall('c2', 'throwsText', {}), toolCall('c3', 'counts', {}), finish('tool-calls')]
    : [...text('Done.'), finish('stop')])
  const tools = {
    fails: tool({ inputSchema: z.object({}), execute: async (): Promise<string> => { throw new Error('disk full') } }),
    // eslint-disable-next-line no-throw-literal
    throwsText: tool({ inputSchema: z.object({}), execute: async (): Promise<string> => { throw 'not an Error' } }),
    counts: tool({ inputSchema: z.object({}), async * execute () { yield 1; yield 2; yield 3 } })
  }
  const agent = aiSdkAgent({ run: (input, ctx) => streamText({ model, tools, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(3) }) })
  const { app } = build(t, { agents: { tools: agent } })
  const events = eventsOf((await runStream(app, 'tools', 'go')).body)
  const results = events.filter(([type]) => type === 'tool.result').map(([, data]) => data)
  t.same(results.sort((a, b) => a.toolCallId.localeCompare(b.toolCallId)), [
    { toolCallId: 'c1', name: 'fails', output: 'disk full', isError: true },
    { toolCallId: 'c2', name: 'throwsText', output: 'not an Error', isError: true },
    { toolCallId: 'c3', name: 'counts', output: 3, isError: false }
  ])
  t.match(events.at(-1), ['run.completed', { output: 'Done.', usage: { inputTokens: 2, outputTokens: 2 } }])
})

t.test('an error in the stream fails the run AGENT_ERROR, on JSON and SSE', async (t) => {
  const model = scripted(() => [...text('Part'), { type: 'error', error: new Error('upstream overloaded') }, finish('error')])
  const agent = aiSdkAgent({ run: (input, ctx) => streamText({ model, messages: modelMessages(ctx, input), abortSignal: ctx.signal, onError: () => {} }) })
  const { app } = build(t, { agents: { flaky: agent }, exposeErrors: true })

  const json = await app.inject({ method: 'POST', url: '/v1/agents/flaky/runs', payload: { input: 'hi' } })
  t.equal(json.statusCode, 500)
  t.match(json.json(), { code: 'AGENT_ERROR', message: 'upstream overloaded' })

  const events = eventsOf((await runStream(app, 'flaky', 'hi')).body)
  t.same(events.map(([type]) => type), ['message.delta', 'run.failed'])
  t.match(events[1]![1], { error: { code: 'AGENT_ERROR', message: 'upstream overloaded' } })
})

/** A model that streams a first word, then waits until its call is aborted; it keeps the signal it got. */
function hanging (): { model: MockLanguageModelV4, signal: () => AbortSignal | undefined } {
  let signal: AbortSignal | undefined
  const model = new MockLanguageModelV4({
    doStream: async (options) => {
      signal = options.abortSignal
      return {
        stream: new ReadableStream<LanguageModelV4StreamPart>({
          start (controller) {
            for (const part of text('Thinking')) controller.enqueue(part)
            options.abortSignal?.addEventListener('abort', () => controller.error(options.abortSignal?.reason))
          }
        })
      }
    }
  })
  return { model, signal: () => signal }
}

t.test('a run timeout aborts the model call', async (t) => {
  const { model, signal } = hanging()
  const agent = aiSdkAgent({ run: (input, ctx) => streamText({ model, messages: modelMessages(ctx, input), abortSignal: ctx.signal }) })
  const { app } = build(t, { agents: { slow: agent }, requestTimeoutMs: 200 })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/slow/runs', payload: { input: 'hi' } })
  t.equal(res.statusCode, 504)
  t.equal(res.json().code, 'AGENT_TIMEOUT')
  await eventually(() => signal()?.aborted === true)
  t.pass('the model saw its abort signal')
})

t.test('the SSE client going away aborts the model call', async (t) => {
  const { model, signal } = hanging()
  const agent = aiSdkAgent({ run: (input, ctx) => streamText({ model, messages: modelMessages(ctx, input), abortSignal: ctx.signal }) })
  const { url } = await listen(t, { agents: { slow: agent } })
  const stream = await openSse(url, '/v1/agents/slow/runs', { input: 'hi' })
  t.same((await stream.next('message.delta')).data, { text: 'Thinking' })
  t.equal(signal()?.aborted, false)
  stream.close()
  await eventually(() => signal()?.aborted === true)
  t.pass('the model saw its abort signal')
})

t.test('run.cancel over WebSocket aborts the model call', async (t) => {
  const { model, signal } = hanging()
  const agent = aiSdkAgent({ run: (input, ctx) => streamText({ model, messages: modelMessages(ctx, input), abortSignal: ctx.signal }) })
  const { url } = await listen(t, { agents: { slow: agent }, websocket: true })
  const ws = await openWs(url)
  t.teardown(() => ws.socket.close())
  ws.send({ type: 'run.start', ref: 's', agent: 'slow', input: 'hi' })
  const delta = await ws.next((frame) => frame.type === 'message.delta')
  t.same(delta.data, { text: 'Thinking' })
  t.equal(signal()?.aborted, false)
  ws.send({ type: 'run.cancel', runId: delta.runId })
  const failed = await ws.next((frame) => frame.type === 'run.failed')
  t.equal(failed.data.error.code, 'CANCELLED')
  await eventually(() => signal()?.aborted === true)
  t.pass('the model saw its abort signal')
})

// The model asks to delete a file, then reports what the tool message it was shown says.
function deleter (): MockLanguageModelV4 {
  return scripted((prompt) => {
    const output = lastToolOutput(prompt)
    if (output === undefined) return [...text('I will delete it. '), toolCall('del_1', 'deleteFile', { path: '/tmp/report.txt' }), finish('tool-calls', usage(10, 5))]
    if (output.type === 'execution-denied') return [...text(`Not deleted (${output.reason}).`), finish('stop', usage(20, 4))]
    return [...text(`Done: ${String(output.value)}.`), finish('stop', usage(20, 3))]
  })
}

function deleterAgent (model: MockLanguageModelV4, deleted: string[], approvalTimeoutMs?: number) {
  const deleteFile = tool({
    description: 'Deletes a file',
    inputSchema: z.object({ path: z.string() }),
    needsApproval: true,
    execute: async ({ path }) => { deleted.push(path); return `deleted ${path}` }
  })
  return aiSdkAgent({
    approvalTimeoutMs,
    run: (input, ctx) => streamText({ model, tools: { deleteFile }, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(5) })
  })
}

t.test('needsApproval, approved: the service approval is asked, the tool runs, the model goes on', async (t) => {
  keepAlive(t)
  const model = deleter()
  const deleted: string[] = []
  const { app } = build(t, { agents: { files: deleterAgent(model, deleted) } })
  const run = runStream(app, 'files', 'Delete the report')
  const approval = await decide(app, { approved: true, comment: 'go ahead' })
  t.match(approval, { agent: 'files', action: 'deleteFile', payload: { path: '/tmp/report.txt' }, reason: null, status: 'pending' })

  const events = eventsOf((await run).body)
  t.same(events.map(([type]) => type), [
    'message.delta', 'tool.call', 'approval.requested', 'approval.decided', 'tool.result', 'message.delta', 'run.completed'
  ])
  t.same(events[1]![1], { toolCallId: 'del_1', name: 'deleteFile', input: { path: '/tmp/report.txt' } })
  t.equal(events[3]![1].approval.status, 'approved')
  t.same(events[4]![1], { toolCallId: 'del_1', name: 'deleteFile', output: 'deleted /tmp/report.txt', isError: false })
  t.match(events[6]![1], {
    output: 'I will delete it. Done: deleted /tmp/report.txt.',
    usage: { inputTokens: 30, outputTokens: 8, totalTokens: 38 },
    finishReason: 'stop'
  })
  t.same(deleted, ['/tmp/report.txt'])

  // the second call carried the first call's messages, and the approval, which the SDK turned into the tool's result
  t.equal(model.doStreamCalls.length, 2)
  t.match(model.doStreamCalls[1]!.prompt, [
    { role: 'user', content: [{ type: 'text', text: 'Delete the report' }] },
    { role: 'assistant', content: [{ type: 'text', text: 'I will delete it. ' }, { type: 'tool-call', toolCallId: 'del_1', toolName: 'deleteFile' }] },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'del_1', output: { type: 'text', value: 'deleted /tmp/report.txt' } }] }
  ])
})

t.test('a result shaped as ai 6 names it (fullStream, response.messages) is read the same', async (t) => {
  keepAlive(t)
  const model = deleter()
  const deleted: string[] = []
  const deleteFile = tool({
    description: 'Deletes a file',
    inputSchema: z.object({ path: z.string() }),
    needsApproval: true,
    execute: async ({ path }) => { deleted.push(path); return `deleted ${path}` }
  })
  const files = aiSdkAgent({
    run: (input, ctx) => {
      const result = streamText({ model, tools: { deleteFile }, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(5) })
      // what ai 6's StreamTextResult has (ai 7 has them too, but for response.messages): no `stream`, no `responseMessages`
      const response = 'responseMessages' in result
        ? Promise.resolve(result.responseMessages).then((messages) => ({ messages }))
        : (result as unknown as StreamTextOutputV6).response
      return { fullStream: result.fullStream, response }
    }
  })
  const { app } = build(t, { agents: { files } })
  const run = runStream(app, 'files', 'Delete the report')
  await decide(app, { approved: true })
  const events = eventsOf((await run).body)
  t.same(events.map(([type]) => type), ['message.delta', 'tool.call', 'approval.requested', 'approval.decided', 'tool.result', 'message.delta', 'run.completed'])
  t.match(events.at(-1)![1], { output: 'I will delete it. Done: deleted /tmp/report.txt.' }, 'the continuation carried the response messages')
  t.same(deleted, ['/tmp/report.txt'])
})

t.test('needsApproval, rejected: the tool is denied and the model is told why', async (t) => {
  keepAlive(t)
  const model = deleter()
  const deleted: string[] = []
  const { app } = build(t, { agents: { files: deleterAgent(model, deleted) } })
  const run = app.inject({ method: 'POST', url: '/v1/agents/files/runs', payload: { input: 'Delete the report', stream: true } })
  await decide(app, { approved: false })
  const events = eventsOf((await run).body)
  const result = events.find(([type]) => type === 'tool.result')
  t.same(result?.[1], { toolCallId: 'del_1', name: 'deleteFile', output: 'A reviewer rejected this tool call.', isError: true })
  t.match(events.at(-1), ['run.completed', { output: 'I will delete it. Not deleted (A reviewer rejected this tool call.).', finishReason: 'stop' }])
  t.same(deleted, [], 'the tool never ran')
  t.match(lastToolOutput(model.doStreamCalls[1]!.prompt), { type: 'execution-denied', reason: 'A reviewer rejected this tool call.' })
})

t.test('needsApproval, approved with an edit: the tool runs with the edited input, and the model sees the call as edited', async (t) => {
  keepAlive(t)
  const model = deleter()
  const deleted: string[] = []
  const { app } = build(t, { agents: { files: deleterAgent(model, deleted) } })
  const run = runStream(app, 'files', 'Delete the report')
  const approval = await pendingApproval(app)
  const res = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, payload: { path: '/tmp/copy.txt' } } })
  t.equal(res.statusCode, 200)
  const events = eventsOf((await run).body)
  t.same(events.find(([type]) => type === 'tool.result')?.[1], { toolCallId: 'del_1', name: 'deleteFile', output: 'deleted /tmp/copy.txt', isError: false })
  t.same(deleted, ['/tmp/copy.txt'], 'the edited input was executed, not the one asked for')
  t.match(model.doStreamCalls[1]!.prompt[1], { role: 'assistant', content: [{ type: 'text' }, { type: 'tool-call', toolCallId: 'del_1', input: { path: '/tmp/copy.txt' } }] })
})

t.test('needsApproval, rejected with a response and no comment: the response is the reason the model is told', async (t) => {
  keepAlive(t)
  const model = deleter()
  const { app } = build(t, { agents: { files: deleterAgent(model, []) } })
  const run = runStream(app, 'files', 'Delete the report')
  await decide(app, { approved: false, response: 'keep it until Friday' } as { approved: boolean })
  await run
  t.match(lastToolOutput(model.doStreamCalls[1]!.prompt), { type: 'execution-denied', reason: 'keep it until Friday' })
})

t.test('needsApproval, expired: approvalTimeoutMs bounds the wait, and the model is told nobody decided', async (t) => {
  keepAlive(t)
  const model = deleter()
  const deleted: string[] = []
  const { app } = build(t, { agents: { files: deleterAgent(model, deleted, 50) } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/files/runs', payload: { input: 'Delete the report', stream: true } })
  const events = eventsOf(res.body)
  const requested = events.find(([type]) => type === 'approval.requested')![1].approval
  t.equal(Date.parse(requested.expiresAt) - Date.parse(requested.requestedAt), 50)
  t.equal(events.find(([type]) => type === 'approval.decided')![1].approval.status, 'expired')
  const reason = 'Nobody decided on this tool call before its approval expired.'
  t.same(events.find(([type]) => type === 'tool.result')![1], { toolCallId: 'del_1', name: 'deleteFile', output: reason, isError: true })
  t.match(events.at(-1), ['run.completed', { output: `I will delete it. Not deleted (${reason}).` }])
  t.same(deleted, [])
})

t.test('two approvals in one run: the second continuation keeps the first; a comment is the reason given', async (t) => {
  keepAlive(t)
  const ran: string[] = []
  const step = (name: string) => tool({
    inputSchema: z.object({}),
    needsApproval: true,
    execute: async () => { ran.push(name); return `${name} done` }
  })
  const model = scripted((_prompt, call) => [
    [toolCall('b1', 'build', {}), finish('tool-calls')],
    [toolCall('d1', 'deploy', {}), finish('tool-calls')],
    [...text('Built, not deployed.'), finish('stop')]
  ][call]!)
  const agent = aiSdkAgent({
    run: (input, ctx) => streamText({ model, tools: { build: step('build'), deploy: step('deploy') }, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(5) })
  })
  const { app } = build(t, { agents: { release: agent } })
  const run = runStream(app, 'release', 'Ship it')
  t.equal((await decide(app, { approved: true })).action, 'build')
  t.equal((await decide(app, { approved: false, comment: 'Not on a Friday' })).action, 'deploy')
  const events = eventsOf((await run).body)
  t.same(events.filter(([type]) => type === 'tool.result').map(([, data]) => data), [
    { toolCallId: 'b1', name: 'build', output: 'build done', isError: false },
    { toolCallId: 'd1', name: 'deploy', output: 'Not on a Friday', isError: true }
  ])
  t.same(ran, ['build'])
  t.match(events.at(-1), ['run.completed', { output: 'Built, not deployed.', usage: { inputTokens: 3, outputTokens: 3 } }])
  const third = model.doStreamCalls[2]!.prompt
  const partTypes = (content: Prompt[number]['content']) => typeof content === 'string'
    ? content
    : content.map((part) => part.type === 'tool-result' ? part.output.type : part.type)
  t.same(third.map((m) => [m.role, partTypes(m.content)]), [
    ['user', ['text']],
    ['assistant', ['tool-call']],
    ['tool', ['text']],
    ['assistant', ['tool-call']],
    ['tool', ['execution-denied']]
  ], 'the build call and its result are still there when the deploy is denied')
})

t.test('toolApproval: automatic decisions ask nobody; user-approval asks like needsApproval', ai7Only('toolApproval'), async (t) => {
  keepAlive(t)
  const ran: string[] = []
  const make = (name: string) => tool({ inputSchema: z.object({}), execute: async () => { ran.push(name); return `${name} ok` } })
  const model = scripted((prompt) => lastToolOutput(prompt) === undefined
    ? [toolCall('a1', 'read', {}), toolCall('a2', 'drop', {}), toolCall('a3', 'write', {}), finish('tool-calls')]
    : [...text('Finished.'), finish('stop')])
  const agent = aiSdkAgent({
    run: (input, ctx) => streamText({
      model,
      tools: { read: make('read'), drop: make('drop'), write: make('write') },
      toolApproval: { read: 'approved', drop: 'denied', write: { type: 'user-approval', reason: 'writes need a look' } },
      messages: modelMessages(ctx, input),
      abortSignal: ctx.signal,
      stopWhen: stepCountIs(5)
    })
  })
  const { app } = build(t, { agents: { policy: agent } })
  const run = runStream(app, 'policy', 'Tidy up')
  const approval = await decide(app, { approved: true })
  t.match(approval, { action: 'write', reason: 'writes need a look' })
  const events = eventsOf((await run).body)
  t.equal(events.filter(([type]) => type === 'approval.requested').length, 1, 'only the user-approval tool asked')
  t.same(events.filter(([type]) => type === 'tool.result').map(([, data]) => data), [
    { toolCallId: 'a2', name: 'drop', output: 'This tool call was denied.', isError: true },
    { toolCallId: 'a1', name: 'read', output: 'read ok', isError: false },
    { toolCallId: 'a3', name: 'write', output: 'write ok', isError: false }
  ])
  t.same(ran.sort(), ['read', 'write'])
})

t.test('durableTools: a tool completed before a drain\'s hand-off is not executed again on the next attempt', async (t) => {
  const charged: unknown[] = []
  let attempt = 0
  // attempt 1: a tool call, then a model call that hangs until the run is handed off; attempt 2: the same call, then text
  const model = new MockLanguageModelV4({
    doStream: async (options) => {
      const call = model.doStreamCalls.length - 1
      const parts: LanguageModelV4StreamPart[] = lastToolOutput(options.prompt) === undefined
        ? [toolCall('pay_1', 'chargeCard', { cents: 500 }), finish('tool-calls')]
        : [...text(`charged: ${JSON.stringify((lastToolOutput(options.prompt) as { value: unknown }).value)}`), finish('stop')]
      if (attempt === 1 && call === 1) {
        return { stream: new ReadableStream<LanguageModelV4StreamPart>({ start (c) { options.abortSignal?.addEventListener('abort', () => c.error(options.abortSignal?.reason)) } }) }
      }
      return { stream: simulateReadableStream({ chunks: parts }) }
    }
  })
  const chargeCard = tool({
    inputSchema: z.object({ cents: z.number() }),
    execute: async ({ cents }, { toolCallId }) => { charged.push({ cents, toolCallId }); return { receipt: `r-${cents}` } }
  })
  const streamingTool = tool({ inputSchema: z.object({}), async * execute () { yield 'partial'; yield 'whole' } })
  const clientTool = tool({ inputSchema: z.object({}) })
  const payer = aiSdkAgent({
    resumable: true,
    run: (input, ctx) => {
      attempt++
      const tools = durableTools(ctx, { chargeCard, streamingTool, clientTool })
      t.equal(tools.clientTool, clientTool, 'a tool without execute is left as it is')
      return streamText({ model, tools, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(5) })
    }
  })
  const { a, b, handOver } = await handOffPair(t, { agents: { payer } })
  const { runId } = (await a.app.inject({ method: 'POST', url: '/v1/agents/payer/runs', payload: { input: 'pay', background: true } })).json()
  await eventually(() => model.doStreamCalls.length === 2)
  const record = await handOver(runId, 'completed')
  t.match(record.result, { output: 'charged: {"receipt":"r-500"}' })
  t.same(charged, [{ cents: 500, toolCallId: 'pay_1' }], 'charged once over two attempts')
  const steps = parseSse((await b.app.inject({ url: `/v1/runs/${runId}/events` })).body).filter((e) => e.event === 'step.completed')
  t.same(steps.map((e) => e.data), [{ name: 'tool.chargecard', index: 0, output: { receipt: 'r-500' } }], 'journaled once, by the first attempt')

  // a streaming tool's durable output is its last value
  const stream = await durableTools({ step: async (_name: string, fn: () => unknown) => fn() } as unknown as Parameters<typeof durableTools>[0], { streamingTool }).streamingTool.execute!({}, { toolCallId: 's', messages: [] } as never)
  t.equal(stream, 'whole')
})

/** A model stream that ends only when the call is aborted (a run handed off mid-call). */
function untilAborted (options: LanguageModelV4CallOptions): ReadableStream<LanguageModelV4StreamPart> {
  return new ReadableStream<LanguageModelV4StreamPart>({ start (c) { options.abortSignal?.addEventListener('abort', () => c.error(options.abortSignal?.reason)) } })
}

/** Two services on one set of stores: `a` runs the first attempt, `b` takes the run over when `a` drains. */
async function handOff (t: Test, agents: Record<string, ReturnType<typeof aiSdkAgent>>) {
  return await handOffPair(t, { agents })
}

t.test('durableModel: a model call finished before a drain\'s hand-off is not made again, nor its tool executed', async (t) => {
  const charged: unknown[] = []
  let attempt = 0
  const png = new Uint8Array([137, 80, 78, 71])
  // call 0: a tool call (with the response's metadata and a file); call 1 (attempt 1): hangs until the hand-off;
  // call 2 (attempt 2): the text. Attempt 2 gets call 0 from the journal.
  const model: MockLanguageModelV4 = new MockLanguageModelV4({
    doStream: async (options) => {
      const call = model.doStreamCalls.length - 1
      if (call === 0) {
        return {
          stream: simulateReadableStream<LanguageModelV4StreamPart>({
            chunks: [
              { type: 'stream-start', warnings: [] },
              { type: 'response-metadata', id: 'resp_0', modelId: 'mock', timestamp: new Date(1000) },
              // ai 7's spec (v4) wraps a file's bytes in { type: 'data' }, ai 6's (v3) gives them as they are
              { type: 'file', mediaType: 'image/png', data: specV4 ? { type: 'data', data: png } : png } as unknown as LanguageModelV4StreamPart,
              { type: 'tool-input-start', id: 'pay_1', toolName: 'chargeCard' },
              { type: 'tool-input-delta', id: 'pay_1', delta: '{"cents":' },
              { type: 'tool-input-delta', id: 'pay_1', delta: '500}' },
              { type: 'tool-input-end', id: 'pay_1' },
              toolCall('pay_1', 'chargeCard', { cents: 500 }),
              finish('tool-calls', usage(3, 2))
            ]
          })
        }
      }
      if (attempt === 1) return { stream: untilAborted(options) }
      return { stream: simulateReadableStream({ chunks: [...text('charged '), ...text(JSON.stringify((lastToolOutput(options.prompt) as { value: unknown }).value), 'u'), finish('stop')] }) }
    }
  })
  const chargeCard = tool({
    inputSchema: z.object({ cents: z.number() }),
    execute: async ({ cents }, { toolCallId }) => { charged.push({ cents, toolCallId }); return { receipt: `r-${cents}` } }
  })
  const steps: unknown[] = []
  const payer = aiSdkAgent({
    resumable: true,
    run: (input, ctx) => {
      attempt++
      return streamText({
        model: durableModel(ctx, model),
        tools: durableTools(ctx, { chargeCard }),
        messages: modelMessages(ctx, input),
        abortSignal: ctx.signal,
        stopWhen: stepCountIs(5),
        onStepFinish: (step) => { steps.push({ attempt, timestamp: step.response.timestamp, files: step.files.length }) }
      })
    }
  })
  const { a, b, handOver } = await handOff(t, { payer })
  const { runId } = (await a.app.inject({ method: 'POST', url: '/v1/agents/payer/runs', payload: { input: 'pay', background: true } })).json()
  await eventually(() => model.doStreamCalls.length === 2)
  const record = await handOver(runId, 'completed')
  t.equal(model.doStreamCalls.length, 3, 'the model was called for the first step once, over two attempts')
  t.same(charged, [{ cents: 500, toolCallId: 'pay_1' }], 'the tool executed once')
  t.match(record.result, { output: 'charged {"receipt":"r-500"}', usage: { inputTokens: 4, outputTokens: 3 } }, 'the replayed step counts in the output and the usage')
  t.match(steps, [
    { attempt: 1, timestamp: new Date(1000), files: 1 },
    { attempt: 2, timestamp: new Date(1000), files: 1 },
    { attempt: 2 }
  ], 'the SDK reads the replayed step as it read the call: its timestamp a Date, its file bytes')
  const log = parseSse((await b.app.inject({ url: `/v1/runs/${runId}/events` })).body)
  const journaled = log.filter((e) => e.event === 'step.completed').map((e) => e.data)
  t.same(journaled.map((step) => [step.name, step.index]), [['tool.chargecard', 1], ['model', 0], ['model', 2]], 'each call and tool journaled once, the model\'s once it finished')
  t.same(journaled[1].output.parts.filter((part: { type: string }) => part.type.startsWith('tool-input')), [
    { type: 'tool-input-start', id: 'pay_1', toolName: 'chargeCard' },
    { type: 'tool-input-delta', id: 'pay_1', delta: '{"cents":500}' },
    { type: 'tool-input-end', id: 'pay_1' }
  ], 'a call\'s deltas journaled as one')
  t.match(journaled[1].output.parts, [
    { type: 'stream-start' },
    { type: 'response-metadata', timestamp: '1970-01-01T00:00:01.000Z' },
    { type: 'file', data: specV4 ? { type: 'data', data: 'iVBORw==' } : 'iVBORw==' }
  ], 'the timestamp as JSON, the bytes as base64')
})

t.test('durableModel: a model call at a journaled step of another name fails the run STEP_MISMATCH; a failed call is not journaled', async (t) => {
  let attempt = 0
  const model = new MockLanguageModelV4({
    doStream: async (options) => attempt === 1
      ? { stream: untilAborted(options) }
      : { stream: simulateReadableStream({ chunks: [...text('hi'), finish('stop')] }) }
  })
  // attempt 1: a step of its own, then the model (hangs); attempt 2: the model first, where the journal holds that step
  const reordered = aiSdkAgent({
    resumable: true,
    run: async (input, ctx) => {
      attempt++
      if (attempt === 1) await ctx.step('setup', () => 'ready')
      return streamText({ model: durableModel(ctx, model), messages: modelMessages(ctx, input), abortSignal: ctx.signal })
    }
  })
  const { a, b, handOver } = await handOff(t, { reordered })
  const { runId } = (await a.app.inject({ method: 'POST', url: '/v1/agents/reordered/runs', payload: { input: 'go', background: true } })).json()
  await eventually(() => model.doStreamCalls.length === 1)
  const record = await handOver(runId, 'failed')
  t.match(record.error, { code: 'STEP_MISMATCH', message: /Step 0 is "model" in this attempt, but "setup"/ })
  t.equal(model.doStreamCalls.length, 1, 'the model is not called at a mismatched step')
  const log = parseSse((await b.app.inject({ url: `/v1/runs/${runId}/events` })).body)
  t.same(log.filter((e) => e.event === 'step.completed').map((e) => e.data.name), ['setup'], 'the hung call, aborted, journaled nothing')
})

t.test('durableModel: only a finished call is journaled; generate calls and the model\'s fields pass through', async (t) => {
  const journaled: unknown[] = []
  const failures: string[] = []
  const ctx = {
    step: async (_name: string, fn: () => Promise<unknown>) => fn().then((output) => { journaled.push(output); return output }, (error: Error) => { failures.push(error.message); throw error })
  } as unknown as Parameters<typeof durableModel>[0]
  const model: MockLanguageModelV4 = new MockLanguageModelV4({
    provider: 'mock-provider',
    modelId: 'mock-id',
    doGenerate: async () => ({ content: [{ type: 'text', text: 'generated' }], finishReason: { unified: 'stop', raw: 'stop' }, usage: usage(1, 1), warnings: [] }),
    doStream: async () => ({
      stream: simulateReadableStream<LanguageModelV4StreamPart>({
        chunks: model.doStreamCalls.length === 1 ? [...text('half')] : [...text('no'), { type: 'error', error: new Error('overloaded') }]
      })
    })
  })
  const durable = durableModel(ctx, model)
  t.match(durable, { specificationVersion: model.specificationVersion, provider: 'mock-provider', modelId: 'mock-id' })
  t.same(await durable.supportedUrls, await model.supportedUrls)
  const generated = await durable.doGenerate({ prompt: [] } as never)
  t.match(generated.content, [{ text: 'generated' }], 'doGenerate is the model\'s own')
  for (let i = 0; i < 2; i++) {
    const { stream } = await durable.doStream({ prompt: [] } as never)
    const parts: unknown[] = []
    for await (const part of stream) parts.push(part)
    t.ok(parts.length > 0, 'the call streams to the SDK all the same')
  }
  await eventually(() => failures.length === 2)
  t.same(journaled, [])
  t.same(failures, ['The model call ended without finishing: not journaled', 'The model call ended in an error: not journaled'])
  t.throws(() => durableModel(ctx, 'openai/gpt-4.1' as never), /durableModel: model must be a language model object/)
})

t.test('a second turn: modelMessages gives the model the session history', async (t) => {
  const model = scripted((_prompt, call) => [...text(call === 0 ? 'Hello, Ada.' : 'You are Ada.'), finish('stop', usage(undefined, undefined))])
  const agent = aiSdkAgent({ run: (input, ctx) => streamText({ model, messages: modelMessages(ctx, input), abortSignal: ctx.signal }) })
  const { app } = build(t, { agents: { chat: agent } })
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/chat/runs', payload: { input: 'I am Ada.' } })).json()
  t.match(first, { output: 'Hello, Ada.', usage: { inputTokens: 0, outputTokens: 0 } }, 'no usage reported counts as zero')
  const second = (await app.inject({ method: 'POST', url: '/v1/agents/chat/runs', payload: { input: { question: 'Who am I?' }, sessionId: first.sessionId } })).json()
  t.equal(second.output, 'You are Ada.')
  t.same(model.doStreamCalls[1]!.prompt, [
    { role: 'user', content: [{ type: 'text', text: 'I am Ada.' }] },
    { role: 'assistant', content: [{ type: 'text', text: 'Hello, Ada.' }] },
    { role: 'user', content: [{ type: 'text', text: '{"question":"Who am I?"}' }] }
  ])
})

t.test('a run() that does not use modelMessages cannot take a decision back to the model', async (t) => {
  keepAlive(t)
  const model = deleter()
  const deleteFile = tool({ inputSchema: z.object({ path: z.string() }), needsApproval: true, execute: async () => 'deleted' })
  const agent = aiSdkAgent({
    run: (input, ctx) => streamText({ model, tools: { deleteFile }, prompt: String(input), abortSignal: ctx.signal })
  })
  const { app } = build(t, { agents: { files: agent }, exposeErrors: true })
  const run = app.inject({ method: 'POST', url: '/v1/agents/files/runs', payload: { input: 'Delete the report' } })
  await decide(app, { approved: true })
  const res = await run
  t.equal(res.statusCode, 500)
  t.match(res.json(), { code: 'AGENT_ERROR', message: /did not build its messages with modelMessages/ })
})

t.test('modelMessages: history as user and assistant text, JSON for anything else, the input last', async (t) => {
  const ctx = {
    history: [
      { role: 'user', content: { q: 1 }, runId: 'r1', at: '' },
      { role: 'assistant', content: null, runId: 'r1', at: '' },
      { role: 'assistant', content: 'plain', runId: 'r2', at: '' }
    ]
  } as unknown as Parameters<typeof modelMessages>[0]
  const messages: ModelMessage[] = modelMessages(ctx, 42)
  t.same(messages, [
    { role: 'user', content: '{"q":1}' },
    { role: 'assistant', content: 'null' },
    { role: 'assistant', content: 'plain' },
    { role: 'user', content: '42' }
  ])
})

t.test('the agent: its fields passed through, its options checked when it is made', async (t) => {
  const input = Type.Object({ prompt: Type.String() })
  const run = () => { throw new Error('not called') }
  const agent = aiSdkAgent({ description: 'd', metadata: { m: 1 }, input, resumable: true, approvalTimeoutMs: 1_000, run })
  t.same(Object.keys(agent).sort(), ['description', 'input', 'metadata', 'resumable', 'run'])
  t.equal(agent.input, input)
  t.equal(agent.resumable, true)
  t.same(Object.keys(aiSdkAgent({ run })), ['run'], 'nothing the user did not set')

  t.throws(() => aiSdkAgent({} as never), { name: 'TypeError', message: /aiSdkAgent: run must be a function/ })
  for (const bad of [-1, 1.5, 2 ** 31, Number.NaN]) {
    t.throws(() => aiSdkAgent({ run, approvalTimeoutMs: bad }), { name: 'RangeError', message: /aiSdkAgent: approvalTimeoutMs must be an integer from 0 to 2147483647/ })
  }
})

t.test('an input schema types run() and is checked before the model is called', async (t) => {
  const model = scripted(() => [...text('Summary.'), finish('stop')])
  const agent = aiSdkAgent({
    input: Type.Object({ text: Type.String(), words: Type.Integer({ minimum: 1 }) }),
    run: (input, ctx) => {
      const words: number = input.words
      // @ts-expect-error the schema says text is a string
      const wrong: number = input.text
      void wrong
      return streamText({ model, prompt: `Summarise in ${words} words: ${input.text}`, abortSignal: ctx.signal })
    }
  })
  // @ts-expect-error run's own annotation contradicts the schema
  aiSdkAgent({ input: Type.Object({ n: Type.Number() }), run: (input: { n: string }) => streamText({ model, prompt: input.n }) })
  const { app } = build(t, { agents: { summarise: agent } })
  const bad = await app.inject({ method: 'POST', url: '/v1/agents/summarise/runs', payload: { input: { text: 'x', words: 0 } } })
  t.equal(bad.statusCode, 400)
  t.match(bad.json(), { code: 'FST_ERR_VALIDATION', message: 'body/input/words must be >= 1' })
  t.equal(model.doStreamCalls.length, 0, 'the model was never called')
  const ok = await app.inject({ method: 'POST', url: '/v1/agents/summarise/runs', payload: { input: { text: 'a long text', words: 3 } } })
  t.equal(ok.json().output, 'Summary.')
})

/** A Chat (the engine of useChat) on an agent's chat route; `finished()` resolves at its next onFinish. */
function chatOn (url: string, agent: string, id: string) {
  const finishes: Array<() => void> = []
  const chat = new Chat({
    id,
    transport: new DefaultChatTransport({ api: `${url}/v1/agents/${agent}/chat` }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: () => { finishes.shift()?.() }
  })
  return { chat, finished: () => new Promise<void>((resolve) => finishes.push(resolve)) }
}

function lastMessage (chat: Chat<UIMessage>): UIMessage {
  const message = chat.messages.at(-1)
  if (message?.role !== 'assistant') throw new Error(`no assistant message: ${JSON.stringify(chat.messages)}`)
  return message
}

for (const approved of [true, false]) {
  t.test(`useChat: a needsApproval call is one tool part, its approval on it, then ${approved ? 'its output' : 'denied'} (the SDK's Chat reads it)`, ai7Only('tool-approval-response chunks'), async (t) => {
    const model = deleter()
    const deleted: string[] = []
    const { url } = await listen(t, { agents: { files: deleterAgent(model, deleted) } })
    const { chat, finished } = chatOn(url, 'files', 'c')
    await chat.sendMessage({ text: 'Delete the report' })
    t.equal(chat.status, 'ready', 'the response ended at the approval')
    const asked = lastMessage(chat)
    t.same(asked.parts.map((part) => part.type), ['text', 'tool-deleteFile'], 'one tool part: the SDK\'s call, no dynamic one')
    const part = asked.parts[1] as { toolCallId: string, state: string, input: unknown, approval: { id: string } }
    t.match(part, { toolCallId: 'del_1', state: 'approval-requested', input: { path: '/tmp/report.txt' } })

    const done = finished()
    await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : 'keep it' })
    await done
    const message = lastMessage(chat)
    t.equal(message.id, asked.id, 'the same message goes on')
    t.same(message.parts.map((p) => p.type), ['text', 'tool-deleteFile', 'text'])
    t.match(message.parts[1], approved
      ? { toolCallId: 'del_1', state: 'output-available', output: 'deleted /tmp/report.txt' }
      : { toolCallId: 'del_1', state: 'output-denied', approval: { approved: false, reason: 'keep it' } })
    t.match(message.parts[2], { type: 'text', text: approved ? 'Done: deleted /tmp/report.txt.' : 'Not deleted (keep it).' })
    t.same(deleted, approved ? ['/tmp/report.txt'] : [])
  })
}

t.test('useChat: a step\'s two approvals come in one response, and one request answers both', ai7Only('tool-approval-response chunks'), async (t) => {
  const model = scripted((prompt) => lastToolOutput(prompt) === undefined
    ? [toolCall('del_1', 'deleteFile', { path: '/a' }), toolCall('del_2', 'deleteFile', { path: '/b' }), finish('tool-calls')]
    : [...text('Tidied.'), finish('stop')])
  const deleted: string[] = []
  const { url } = await listen(t, { agents: { files: deleterAgent(model, deleted) } })
  const { chat, finished } = chatOn(url, 'files', 'two')
  await chat.sendMessage({ text: 'Delete both' })
  const parts = lastMessage(chat).parts as Array<{ type: string, toolCallId: string, state: string, approval: { id: string } }>
  t.same(parts.map((part) => [part.type, part.toolCallId, part.state]), [
    ['tool-deleteFile', 'del_1', 'approval-requested'],
    ['tool-deleteFile', 'del_2', 'approval-requested']
  ])
  await chat.addToolApprovalResponse({ id: parts[0]!.approval.id, approved: true })
  const done = finished()
  await chat.addToolApprovalResponse({ id: parts[1]!.approval.id, approved: false })
  await done
  t.match(lastMessage(chat).parts, [
    { toolCallId: 'del_1', state: 'output-available', output: 'deleted /a' },
    { toolCallId: 'del_2', state: 'output-denied' },
    { type: 'text', text: 'Tidied.' }
  ])
  t.same(deleted, ['/a'])
})

t.test('a page that watches a tool call\'s approval decided elsewhere: requested, responded, output, read by readUIMessageStream', ai7Only('tool-approval-response chunks'), async (t) => {
  const model = deleter()
  const deleted: string[] = []
  const { service, url } = await listen(t, { agents: { files: deleterAgent(model, deleted) } })
  const { chat } = chatOn(url, 'files', 'watched')
  await chat.sendMessage({ text: 'Delete the report' })
  const approvalId = ((lastMessage(chat).parts[1]) as { approval: { id: string } }).approval.id

  const transport = new DefaultChatTransport({
    api: `${url}/v1/agents/files/chat`,
    prepareReconnectToStreamRequest: ({ api, id }) => ({ api: `${api}/${encodeURIComponent(id)}/stream?approvals=wait` })
  })
  const stream = await transport.reconnectToStream({ chatId: 'watched' })
  const states: string[] = []
  let last: UIMessage | undefined
  const read = (async () => {
    for await (const message of readUIMessageStream({ stream: stream! })) {
      last = message
      t.notOk(message.parts.some((part) => part.type === 'dynamic-tool'), 'never a second tool part')
      const part = message.parts.find((p) => p.type === 'tool-deleteFile') as { state: string } | undefined
      if (part !== undefined && part.state !== states.at(-1)) states.push(part.state)
    }
  })()
  await eventually(() => states.includes('approval-requested'))
  const decision = await service.app.inject({ method: 'POST', url: `/v1/approvals/${approvalId}`, payload: { approved: true, comment: 'fine' } })
  t.equal(decision.statusCode, 200)
  await read
  t.same(states, ['input-available', 'approval-requested', 'approval-responded', 'output-available'])
  t.match(last!.parts, [
    { type: 'text', text: 'I will delete it. ' },
    { type: 'tool-deleteFile', toolCallId: 'del_1', output: 'deleted /tmp/report.txt', approval: { id: approvalId, approved: true, reason: 'fine' } },
    { type: 'text', text: 'Done: deleted /tmp/report.txt.' }
  ])
  t.same(deleted, ['/tmp/report.txt'])
})
