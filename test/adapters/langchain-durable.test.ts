// The LangGraph adapter with `resumable: true` (docs/durable-agents.md): the graph checkpoints into the run's own
// checkpoint, so the attempt that takes a run over (a drain's hand-off, a resumeRunId) continues the graph from its
// last checkpoint instead of from the start; the graph's own checkpointer, if any, keeps the session's conversation.
import t from 'tap'
import type { Test } from 'tap'
import { AIMessage } from '@langchain/core/messages'
import { END, interrupt, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph'
import type { BaseCheckpointSaver } from '@langchain/langgraph'
import { langGraphAgent } from '../../adapters/langchain.js'
import type { InterruptDecision } from '../../adapters/langchain.js'
import { runCheckpointer } from '../../adapters/langgraph-checkpointer.js'
import type { Agent, AgentEvent, AgentResult, RunContext } from '../../lib/core/types.js'
import { build, eventually, handOffPair, gate, keepAlive, orAbort, parseSse } from '../helper.js'

/**
 * Two nodes, each counting its executions: `first` answers "one", `second` "two: <what it saw>", and waits for
 * `hold` while `holding()` says so (until the run is aborted).
 */
function twoNodes (holding: () => boolean, checkpointer?: BaseCheckpointSaver | false) {
  const executed = { first: 0, second: 0 }
  const hold = gate()
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('first', async () => {
      executed.first++
      return { messages: [new AIMessage('one')] }
    })
    .addNode('second', async (state, config) => {
      executed.second++
      if (holding()) await orAbort(hold.promise, config.signal!)
      return { messages: [new AIMessage(`two: ${state.messages.map((m) => m.text).join(', ')}`)] }
    })
    .addEdge(START, 'first')
    .addEdge('first', 'second')
    .addEdge('second', END)
    .compile(checkpointer === undefined ? {} : { checkpointer })
  return { graph, executed }
}

/** What the run's checkpoint holds of the graph, its bytes (base64 in the JSON) decoded. */
function savedText (state: unknown): string {
  return JSON.stringify(state, (_key, value: unknown) => typeof (value as { base64?: unknown } | null)?.base64 === 'string'
    ? Buffer.from((value as { base64: string }).base64, 'base64').toString()
    : value)
}

async function handOff (t: Test, agents: Record<string, Agent>) {
  return await handOffPair(t, { agents })
}

t.test('a graph handed off after its first node: the next attempt goes on from the checkpoint, the first node not run again', async (t) => {
  let attempts = 0
  const { graph, executed } = twoNodes(() => attempts === 1)
  const agent = langGraphAgent(graph, { resumable: true })
  const durable = { ...agent, run: (input: unknown, ctx: RunContext) => { attempts++; return agent.run(input, ctx) } }
  const { a, b, stores, handOver } = await handOff(t, { durable })
  const { runId } = (await a.app.inject({ method: 'POST', url: '/v1/agents/durable/runs', payload: { input: 'go', background: true } })).json()
  // the first node's writes are checkpointed (async in LangGraph) while the second waits
  await eventually(async () => executed.second === 1 && (await stores.checkpointStore.load(runId)) !== null)
  await eventually(async () => savedText((await stores.checkpointStore.load(runId))?.state).includes('AIMessage'))
  const record = await handOver(runId, 'completed')
  t.same(executed, { first: 1, second: 2 }, 'the first node ran once over two attempts; the second, cut off, again')
  t.equal(record.result.output, 'two: go, one', 'the second node saw the first one\'s message, from the checkpoint')
  t.equal(await stores.checkpointStore.load(runId), null, 'the completed run deleted its checkpoint')
  const log = parseSse((await b.app.inject({ url: `/v1/runs/${runId}/events` })).body).map((e) => e.event)
  t.ok(log.includes('checkpoint.saved'), 'the graph checkpointed into the run')
})

t.test('a run whose graph had ended when it was handed off: nothing runs again, its output from the checkpoint', async (t) => {
  let attempts = 0
  const hold = gate()
  const { graph, executed } = twoNodes(() => false)
  const agent = langGraphAgent(graph, { resumable: true })
  // the first attempt stops after the graph's end, before the run's
  const durable: Agent = {
    ...agent,
    async * run (input, ctx) {
      attempts++
      const result = yield * (agent.run(input, ctx) as AsyncGenerator<string | AgentEvent, AgentResult>)
      if (attempts === 1) await orAbort(hold.promise, ctx.signal)
      return result
    }
  }
  const { a, stores, handOver } = await handOff(t, { durable })
  const { runId } = (await a.app.inject({ method: 'POST', url: '/v1/agents/durable/runs', payload: { input: 'go', background: true } })).json()
  await eventually(async () => savedText((await stores.checkpointStore.load(runId))?.state).includes('two: go, one'))
  const record = await handOver(runId, 'completed')
  t.same(executed, { first: 1, second: 1 }, 'no node ran again')
  t.equal(record.result.output, 'two: go, one', 'the last AI message of the graph\'s last checkpoint')
})

t.test('resumeRunId continues a failed graph from its checkpoint; the graph\'s own checkpointer keeps the conversation', async (t) => {
  let failing = true
  const own = new MemorySaver()
  const executed = { first: 0, second: 0 }
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('first', async () => { executed.first++; return { messages: [new AIMessage('one')] } })
    .addNode('second', async (state) => {
      executed.second++
      if (failing) throw new Error('the second node failed')
      return { messages: [new AIMessage(`two after ${state.messages.length}`)] }
    })
    .addEdge(START, 'first')
    .addEdge('first', 'second')
    .addEdge('second', END)
    .compile({ checkpointer: own })
  const { app } = build(t, { agents: { durable: langGraphAgent(graph, { resumable: true }) }, exposeErrors: true })
  const { id: sessionId } = (await app.inject({ method: 'POST', url: '/v1/sessions', payload: { agent: 'durable' } })).json()
  const first = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/durable/runs', payload: { input: 'go', sessionId, stream: true } })).body)
  const runId = (first[0]!.data as { runId: string }).runId
  t.match(first.at(-1), { event: 'run.failed', data: { error: { message: 'the second node failed' } } })
  failing = false
  const resumed = await app.inject({ method: 'POST', url: '/v1/agents/durable/runs', payload: { input: 'go', resumeRunId: runId } })
  t.equal(resumed.statusCode, 200)
  t.equal(resumed.json().output, 'two after 2', 'the input and the first node\'s message, from the checkpoint')
  t.same(executed, { first: 1, second: 2 })

  // the next turn of the session: the graph's own checkpointer has the first one (written through)
  const next = await app.inject({ method: 'POST', url: '/v1/agents/durable/runs', payload: { input: 'again', sessionId } })
  t.equal(next.json().output, 'two after 5', 'the first turn\'s three messages, the new input, the first node\'s')
  const history = []
  for await (const tuple of own.list({ configurable: { thread_id: sessionId } })) history.push(tuple)
  t.ok(history.length > 4, 'the graph\'s own checkpointer has every checkpoint of both runs')
})

t.test('a graph without a checkpointer of its own interrupts and resumes on the run\'s', async (t) => {
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('refund', async () => {
      const decision = interrupt<{ action: string }, InterruptDecision>({ action: 'refund' })
      return { messages: [new AIMessage(decision.approved ? 'Refunded.' : 'Not refunded.')] }
    })
    .addEdge(START, 'refund')
    .addEdge('refund', END)
    .compile()
  keepAlive(t)
  const { app } = build(t, { agents: { refunds: langGraphAgent(graph, { resumable: true }) } })
  const answer = app.inject({ method: 'POST', url: '/v1/agents/refunds/runs', payload: { input: 'refund order 42' } })
  const approval = await eventually(async () => (await app.inject({ url: '/v1/approvals' })).json().approvals[0])
  t.match(approval, { action: 'refund', payload: { action: 'refund' } })
  t.equal((await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })).statusCode, 200)
  t.equal((await answer).json().output, 'Refunded.')
})

t.test('a graph that never checkpoints (checkpointer: false), an ephemeral run: resumable changes nothing for them', async (t) => {
  const { graph, executed } = twoNodes(() => false, false)
  const { app } = build(t, { agents: { never: langGraphAgent(graph, { resumable: true }) } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/never/runs', payload: { input: 'go', stream: true } })
  const events = parseSse(res.body)
  t.notOk(events.some((e) => e.event === 'checkpoint.saved'))
  t.match(events.at(-1), { event: 'run.completed', data: { output: 'two: go, one' } })
  t.same(executed, { first: 1, second: 1 })

  // an ephemeral run keeps no checkpoint: the graph runs without the run's checkpointer
  const { graph: plain } = twoNodes(() => false)
  const ephemeral = build(t, { agents: { durable: langGraphAgent(plain, { resumable: true }) } })
  const answer = await ephemeral.app.inject({ method: 'POST', url: '/v1/agents/durable/runs', payload: { input: 'go', store: false } })
  t.equal(answer.json().output, 'two: go, one')
})

t.test('the run\'s checkpointer: list and deleteThread go to the graph\'s own, or stay in the run without one', async (t) => {
  const saved: unknown[] = []
  // kept as a checkpoint store keeps it: as JSON
  const ctx = { checkpoint: async (state: unknown) => { saved.push(JSON.parse(JSON.stringify(state))) } } as unknown as RunContext
  const { graph } = twoNodes(() => false)
  const alone = await runCheckpointer(ctx, undefined)
  t.equal(alone.resumed, false)
  const config = { configurable: { thread_id: 'th', __pregel_checkpointer: alone } }
  await graph.invoke({ messages: [] }, config)
  const listed = []
  for await (const tuple of alone.list({ configurable: { thread_id: 'th' } })) listed.push(tuple)
  t.equal(listed.length, 1, 'without a checkpointer of its own, the run keeps only its last checkpoint')
  t.ok(saved.length > 3, 'each put and putWrites saved into the run')
  await alone.deleteThread('th')
  t.equal(await alone.getTuple({ configurable: { thread_id: 'th' } }), undefined)

  // the saved state, read back by a later attempt: the same last checkpoint
  const again = await runCheckpointer({ resume: { step: 1, state: saved.at(-1) } } as unknown as RunContext, undefined)
  t.equal(again.resumed, true)
  const tuple = await again.getTuple({ configurable: { thread_id: 'th' } })
  t.match(tuple?.checkpoint.channel_values, { messages: [{ content: 'one' }, { content: 'two: one' }] })
  const first = await runCheckpointer({ resume: { step: 1, state: saved[0] } } as unknown as RunContext, undefined)
  t.equal((await first.getTuple({ configurable: { thread_id: 'th' } }))?.parentConfig, undefined, 'the first checkpoint has no parent, after JSON too')
  t.equal((await runCheckpointer({ resume: { step: 1, state: { mine: true } } } as unknown as RunContext, undefined)).resumed, false, 'a checkpoint of another shape is not the graph\'s')

  const own = new MemorySaver()
  const layered = await runCheckpointer(ctx, own)
  await graph.invoke({ messages: [] }, { configurable: { thread_id: 'th2', __pregel_checkpointer: layered } })
  const history = []
  for await (const entry of layered.list({ configurable: { thread_id: 'th2' } })) history.push(entry)
  t.ok(history.length > 1, 'the history is the graph\'s own checkpointer\'s')
  await layered.deleteThread('th2')
  t.equal(await own.getTuple({ configurable: { thread_id: 'th2' } }), undefined, 'deleted from the graph\'s own too')
  t.same(await layered.getDeltaChannelHistory({ config: { configurable: { thread_id: 'th2' } }, channels: [] }), {})
})
