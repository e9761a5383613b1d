import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages'
import { StringOutputParser } from '@langchain/core/output_parsers'
import { RunnableLambda } from '@langchain/core/runnables'
import { fakeModel } from '@langchain/core/testing'
import { tool } from '@langchain/core/tools'
import { FakeListChatModel } from '@langchain/core/utils/testing'
import { END, interrupt, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph'
import type { LangGraphRunnableConfig } from '@langchain/langgraph'
import { ToolNode, toolsCondition } from '@langchain/langgraph/prebuilt'
import { z } from 'zod'
import { langGraphAgent } from '../../adapters/langchain.js'
import type { InterruptDecision } from '../../adapters/langchain.js'
import type { ApprovalRecord } from '../../lib/stores/types.js'
import { build, eventually, keepAlive, parseSse } from '../helper.js'


/** The approval's expiry timer is unref'ed; with inject() and no socket, nothing else keeps the process up. */
async function decide (app: FastifyInstance, body: { approved: boolean, comment?: string }): Promise<ApprovalRecord> {
  const approval = await eventually(async () => {
    const res = await app.inject({ method: 'GET', url: '/v1/approvals' })
    return (res.json().approvals as ApprovalRecord[])[0]
  })
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

/** A one-node graph: `node` gets the state and the run's config. */
function oneNode (node: (state: typeof MessagesAnnotation.State, config: LangGraphRunnableConfig) => Promise<typeof MessagesAnnotation.Update>) {
  return new StateGraph(MessagesAnnotation).addNode('node', node).addEdge(START, 'node').addEdge('node', END).compile({ checkpointer: new MemorySaver() })
}

t.test('a ReAct graph: text, tool calls, tool results (errors flagged) in order, usage summed, the last AI message as output', async (t) => {
  const add = tool(async ({ a, b }) => String(a + b), { name: 'add', description: 'Adds', schema: z.object({ a: z.number(), b: z.number() }) })
  const boom = tool(async (): Promise<string> => { throw new Error('kaput') }, { name: 'boom', description: 'Fails', schema: z.object({}) })
  const model = fakeModel()
    .respond(new AIMessage({
      content: '',
      tool_calls: [{ id: 'call_1', name: 'add', args: { a: 1, b: 2 } }, { id: 'call_2', name: 'boom', args: {} }],
      usage_metadata: { input_tokens: 4, output_tokens: 2, total_tokens: 6 }
    }))
    .respond(new AIMessage({ content: 'It is 3.', usage_metadata: { input_tokens: 10, output_tokens: 3, total_tokens: 13 } }))
  const bound = model.bindTools([add, boom])
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('agent', async (state) => ({ messages: [await bound.invoke(state.messages)] }))
    .addNode('tools', new ToolNode([add, boom], { handleToolErrors: true }))
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', toolsCondition)
    .addEdge('tools', 'agent')
    .compile({ checkpointer: new MemorySaver() })
  const { app } = build(t, { agents: { react: langGraphAgent(graph, { description: 'adds' }) } })

  const events = eventsOf((await runStream(app, 'react', 'What is 1 + 2?')).body)
  t.same(events.slice(0, -1), [
    ['tool.call', { toolCallId: 'call_1', name: 'add', input: { a: 1, b: 2 } }],
    ['tool.call', { toolCallId: 'call_2', name: 'boom', input: {} }],
    ['tool.result', { toolCallId: 'call_1', name: 'add', output: '3', isError: false }],
    ['tool.result', { toolCallId: 'call_2', name: 'boom', output: 'Error: kaput\n Please fix your mistakes.', isError: true }],
    ['message.delta', { text: 'It is 3.' }]
  ])
  t.match(events.at(-1), ['run.completed', { output: 'It is 3.', usage: { inputTokens: 14, outputTokens: 5, totalTokens: 19 }, finishReason: 'stop' }])
  t.match(model.calls[0]!.messages, [{ content: 'What is 1 + 2?' }], 'the input as one human message')
})

t.test('a streaming chat model: one text delta per chunk', async (t) => {
  const model = new FakeListChatModel({ responses: ['Hello there'] })
  const graph = oneNode(async (state) => ({ messages: [await model.invoke(state.messages)] }))
  const { app } = build(t, { agents: { hello: langGraphAgent(graph) } })
  const events = eventsOf((await runStream(app, 'hello', { greet: true })).body)
  const deltas = events.filter(([type]) => type === 'message.delta').map(([, data]) => data.text)
  t.same(deltas, [...'Hello there'])
  t.match(events.at(-1), ['run.completed', { output: 'Hello there', usage: { inputTokens: 0, outputTokens: 0 } }])
})

t.test('the session is the thread: a MemorySaver keeps the conversation per session', async (t) => {
  const model = fakeModel()
    .respond(new AIMessage('Hello, Ada.'))
    .respond(new AIMessage('You are Ada.'))
    .respond(new AIMessage('I do not know you.'))
  const graph = oneNode(async (state) => ({ messages: [await model.invoke(state.messages)] }))
  const { app } = build(t, { agents: { chat: langGraphAgent(graph) } })
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/chat/runs', payload: { input: 'I am Ada.' } })).json()
  t.equal(first.output, 'Hello, Ada.')
  const second = (await app.inject({ method: 'POST', url: '/v1/agents/chat/runs', payload: { input: 'Who am I?', sessionId: first.sessionId } })).json()
  t.equal(second.output, 'You are Ada.')
  t.same(model.calls[1]!.messages.map((m) => [m.type, m.text]), [['human', 'I am Ada.'], ['ai', 'Hello, Ada.'], ['human', 'Who am I?']])
  const other = (await app.inject({ method: 'POST', url: '/v1/agents/chat/runs', payload: { input: 'Who am I?' } })).json()
  t.equal(other.output, 'I do not know you.')
  t.same(model.calls[2]!.messages.map((m) => m.text), ['Who am I?'], 'another session starts afresh')
})

function refunds () {
  return oneNode(async (state) => {
    const decision = interrupt<{ action: string, amount: number }, InterruptDecision>({ action: 'refund', amount: 30 })
    // @ts-expect-error the decision is typed: approved is a boolean
    void (decision.approved satisfies string)
    const answer = decision.approved ? 'Refunded 30.' : `Not refunded (${decision.status}${decision.comment ? `: ${decision.comment}` : ''}).`
    return { messages: [new AIMessage(answer)] }
  })
}

t.test('an interrupt is an approval: approved through POST /v1/approvals/:id, the graph resumes and completes', async (t) => {
  keepAlive(t)
  const { app } = build(t, { agents: { refunds: langGraphAgent(refunds()) } })
  const run = runStream(app, 'refunds', 'Refund order 7')
  const approval = await decide(app, { approved: true, comment: 'fine' })
  t.match(approval, { agent: 'refunds', action: 'refund', payload: { action: 'refund', amount: 30 }, status: 'pending' })
  const events = eventsOf((await run).body)
  t.same(events.map(([type]) => type), ['approval.requested', 'approval.decided', 'message.delta', 'run.completed'])
  t.match(events.at(-1), ['run.completed', { output: 'Refunded 30.' }])
})

t.test('an interrupt rejected, or expired after approvalTimeoutMs: the graph gets the decision', async (t) => {
  keepAlive(t)
  const { app } = build(t, {
    agents: { refunds: langGraphAgent(refunds()), hurried: langGraphAgent(refunds(), { approvalTimeoutMs: 50 }) }
  })
  const run = app.inject({ method: 'POST', url: '/v1/agents/refunds/runs', payload: { input: 'Refund order 7' } })
  await decide(app, { approved: false, comment: 'out of policy' })
  t.equal((await run).json().output, 'Not refunded (rejected: out of policy).')
  const expired = (await app.inject({ method: 'POST', url: '/v1/agents/hurried/runs', payload: { input: 'Refund order 8' } })).json()
  t.equal(expired.output, 'Not refunded (expired).')
})

t.test('an interrupt decided with an edit and a response: the graph resumes with the decision object, the edited payload in it', async (t) => {
  keepAlive(t)
  const refunder = oneNode(async () => {
    const decision = interrupt<{ action: string, amount: number }, InterruptDecision>({ action: 'refund', amount: 30 })
    const { amount } = decision.payload as { amount: number }
    return { messages: [new AIMessage(`Refunded ${amount}${decision.edited === true ? ' (edited)' : ''}: ${decision.response ?? ''}`)] }
  })
  const { app } = build(t, { agents: { refunds: langGraphAgent(refunder) } })
  const run = app.inject({ method: 'POST', url: '/v1/agents/refunds/runs', payload: { input: 'Refund order 7' } })
  const approval = await eventually(async () => (await app.inject({ url: '/v1/approvals' })).json().approvals[0])
  const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, payload: { action: 'refund', amount: 20 }, response: 'partial refund' } })
  t.equal(decided.statusCode, 200)
  t.equal((await run).json().output, 'Refunded 20 (edited): partial refund')
})

t.test('several interrupts: parallel nodes and a node that interrupts again; each an approval, nothing counted twice', async (t) => {
  keepAlive(t)
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('a', async () => {
      const decision = interrupt({ action: 'one' }) as { approved: boolean }
      return { messages: [new AIMessage({ content: `a:${decision.approved}`, usage_metadata: { input_tokens: 1, output_tokens: 1, total_tokens: 2 } })] }
    })
    .addNode('b', async () => {
      const first = interrupt('Proceed?') as { approved: boolean }
      const second = interrupt({ action: '' }) as { approved: boolean }
      const third = interrupt(null) as { approved: boolean }
      return { messages: [new AIMessage(`b:${first.approved},${second.approved},${third.approved}`)] }
    })
    .addEdge(START, 'a').addEdge(START, 'b').addEdge('a', END).addEdge('b', END)
    .compile({ checkpointer: new MemorySaver() })
  const { app } = build(t, { agents: { fanout: langGraphAgent(graph) } })
  const run = runStream(app, 'fanout', 'go')
  const actions: string[] = []
  for (const approved of [true, false, true, false]) actions.push((await decide(app, { approved })).action)
  t.same(actions.slice(0, 2).sort(), ['interrupt', 'one'], 'the parallel interrupts: one named by its value')
  t.same(actions.slice(2), ['interrupt', 'interrupt'], 'an empty action and a null value: "interrupt"')
  const events = eventsOf((await run).body)
  t.same(events.filter(([type]) => type === 'message.delta').map(([, data]) => data.text).sort(), ['a:true', 'b:false,true,false'])
  t.match(events.at(-1), ['run.completed', { output: 'b:false,true,false', usage: { inputTokens: 1, outputTokens: 1 } }])
})

t.test('odd messages: a tool call without an id, tool messages without names, updates without messages', async (t) => {
  const noCalls = new AIMessage('no calls')
  // a message whose tool_calls was never filled in (the type allows it)
  Object.assign(noCalls, { tool_calls: undefined })
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('call', async () => ({ messages: [new AIMessage({ content: '', tool_calls: [{ name: 'lookup', args: { q: 1 } }] })] }))
    .addNode('answer', async () => ({
      messages: [
        new ToolMessage({ content: 'found', tool_call_id: '' }),
        new ToolMessage({ content: [{ type: 'text', text: 'other' }], tool_call_id: 'x', name: 'named' }),
        new ToolMessage({ content: 'lost', tool_call_id: 'y', status: 'error' })
      ]
    }))
    .addNode('nothing', async () => ({}))
    .addNode('last', async () => ({ messages: noCalls }))
    .addEdge(START, 'call').addEdge('call', 'answer').addEdge('answer', 'nothing').addEdge('nothing', 'last').addEdge('last', END)
    .compile()
  const { app } = build(t, { agents: { odd: langGraphAgent(graph) } })
  const events = eventsOf((await runStream(app, 'odd', 'x')).body)
  t.same(events.filter(([type]) => type.startsWith('tool.')), [
    ['tool.call', { toolCallId: '', name: 'lookup', input: { q: 1 } }],
    ['tool.result', { toolCallId: '', name: 'lookup', output: 'found', isError: false }],
    ['tool.result', { toolCallId: 'x', name: 'named', output: [{ type: 'text', text: 'other' }], isError: false }],
    ['tool.result', { toolCallId: 'y', name: '', output: 'lost', isError: true }]
  ])
  t.match(events.at(-1), ['run.completed', { output: 'no calls' }])
})

t.test('a node that throws fails the run AGENT_ERROR', async (t) => {
  const graph = oneNode(async () => { throw new Error('graph broke') })
  const { app } = build(t, { agents: { broken: langGraphAgent(graph) }, exposeErrors: true })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/broken/runs', payload: { input: 'x' } })
  t.equal(res.statusCode, 500)
  t.match(res.json(), { code: 'AGENT_ERROR', message: 'graph broke' })
})

t.test('a run timeout aborts the graph: its node sees the signal', async (t) => {
  let signal: AbortSignal | undefined
  const graph = oneNode(async (_state, config) => {
    signal = config.signal
    await new Promise((resolve) => config.signal?.addEventListener('abort', resolve))
    return {}
  })
  const { app } = build(t, { agents: { slow: langGraphAgent(graph) }, requestTimeoutMs: 200 })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/slow/runs', payload: { input: 'x' } })
  t.equal(res.statusCode, 504)
  await eventually(() => signal?.aborted === true)
  t.pass('the node saw its abort signal')
})

t.test('a plain Runnable: chat model chunks and strings are text, a usage-only chunk counts, other chunks are ignored', async (t) => {
  const asMessages = (input: unknown) => [new HumanMessage(String(input))]
  const chat = new FakeListChatModel({ responses: ['Hi!'] })
  const usageOnly = fakeModel().respond(new AIMessage({ content: '', usage_metadata: { input_tokens: 7, output_tokens: 0, total_tokens: 7 } }))
  const { app } = build(t, {
    agents: {
      chat: langGraphAgent(chat, { toGraphInput: asMessages }),
      counted: langGraphAgent(usageOnly, { toGraphInput: asMessages }),
      chain: langGraphAgent(new FakeListChatModel({ responses: ['parsed'] }).pipe(new StringOutputParser()), { toGraphInput: asMessages }),
      lambda: langGraphAgent(RunnableLambda.from(() => ({ answer: 42 })))
    }
  })
  const chatEvents = eventsOf((await runStream(app, 'chat', 'hello')).body)
  t.same(chatEvents.filter(([type]) => type === 'message.delta').map(([, data]) => data.text), ['H', 'i', '!'])
  t.match(chatEvents.at(-1), ['run.completed', { output: 'Hi!' }])
  const counted = eventsOf((await runStream(app, 'counted', 'hello')).body)
  t.same(counted.map(([type]) => type), ['run.completed'])
  t.match(counted[0]![1], { output: '', usage: { inputTokens: 7, outputTokens: 0 } })
  const chain = (await app.inject({ method: 'POST', url: '/v1/agents/chain/runs', payload: { input: 'x' } })).json()
  t.equal(chain.output, 'parsed')
  const lambda = (await app.inject({ method: 'POST', url: '/v1/agents/lambda/runs', payload: { input: 'x' } })).json()
  t.equal(lambda.output, '')
})

t.test('toGraphInput gets the input and the run context', async (t) => {
  const seen: unknown[] = []
  const graph = oneNode(async (state) => ({ messages: [new AIMessage(`got ${state.messages.at(-1)!.text}`)] }))
  const agent = langGraphAgent<{ n: number }>(graph, {
    toGraphInput: (input, ctx) => {
      seen.push(ctx.sessionId)
      return { messages: [new HumanMessage(`n=${input.n}`)] }
    }
  })
  const { app } = build(t, { agents: { custom: agent } })
  const res = (await app.inject({ method: 'POST', url: '/v1/agents/custom/runs', payload: { input: { n: 2 } } })).json()
  t.equal(res.output, 'got n=2')
  t.same(seen, [res.sessionId])
})

t.test('the agent: its fields passed through, its options checked when it is made', async (t) => {
  const graph = oneNode(async () => ({}))
  const input = Type.String()
  const agent = langGraphAgent(graph, { description: 'd', metadata: { m: 1 }, input, resumable: true, approvalTimeoutMs: 10 })
  t.same(Object.keys(agent).sort(), ['description', 'input', 'metadata', 'resumable', 'run'])
  t.same(Object.keys(langGraphAgent(graph)), ['run'])
  t.throws(() => langGraphAgent({} as never), { name: 'TypeError', message: /langGraphAgent: graph must be a compiled graph or a Runnable/ })
  t.throws(() => langGraphAgent(null as never), { name: 'TypeError' })
  t.throws(() => langGraphAgent(graph, { approvalTimeoutMs: -5 }), { name: 'RangeError', message: /langGraphAgent: approvalTimeoutMs/ })
})

t.test('an input schema types toGraphInput and is checked before the graph runs', async (t) => {
  let ran = 0
  const graph = oneNode(async (state) => { ran++; return { messages: [new AIMessage(`got ${state.messages.at(-1)!.text}`)] } })
  const agent = langGraphAgent(graph, {
    input: Type.Object({ orderId: Type.Integer() }),
    toGraphInput: (input) => {
      const id: number = input.orderId
      // @ts-expect-error the schema has no such property
      void input.amount
      return { messages: [new HumanMessage(`order ${id}`)] }
    }
  })
  // @ts-expect-error toGraphInput's own annotation contradicts the schema
  langGraphAgent(graph, { input: Type.Object({ orderId: Type.Integer() }), toGraphInput: (input: { orderId: string }) => input.orderId })
  const { app } = build(t, { agents: { orders: agent } })
  const bad = await app.inject({ method: 'POST', url: '/v1/agents/orders/runs', payload: { input: { orderId: '7' } } })
  t.match(bad.json(), { statusCode: 400, code: 'FST_ERR_VALIDATION', message: 'body/input/orderId must be integer' })
  t.equal(ran, 0)
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/orders/runs', payload: { input: { orderId: 7 } } })).json().output, 'got order 7')
})
