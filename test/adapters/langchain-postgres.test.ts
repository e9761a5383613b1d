// A LangGraph interrupt is a service approval, so it can be decided on any instance that shares the approval
// store: two services on one PostgreSQL schema, the graph waiting on A, the decision posted to B.
import t from 'tap'
import { AIMessage } from '@langchain/core/messages'
import { END, interrupt, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph'
import { langGraphAgent } from '../../adapters/langchain.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import type { StoreSet } from '../../lib/stores/types.js'
import { build, closeStores, listen } from '../helper.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { openSse } from '../helpers/streams.js'

function storesOn (schema: string): Required<StoreSet> {
  return postgresStores({ connectionString: pgUrl(), schema })
}

/** A graph that asks before it refunds; `resumed` counts how often the refund node ran past its interrupt. */
function refundGraph () {
  const seen: Array<{ approved: boolean, decidedBy?: string | null }> = []
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('refund', async () => {
      const decision = interrupt({ action: 'refund', orderId: 42, amount: 30 }) as { approved: boolean, decidedBy?: string | null }
      seen.push(decision)
      return { messages: [new AIMessage(decision.approved ? `Refunded, approved by ${decision.decidedBy}.` : 'Not refunded.')] }
    })
    .addEdge(START, 'refund')
    .addEdge('refund', END)
    .compile({ checkpointer: new MemorySaver() })
  return { graph, seen }
}

if (await requirePg(t)) {
  t.test('an interrupt on instance A, approved on instance B: the graph on A resumes with the decision', async (t) => {
    const schema = withPgSchema(t)
    const storesA = storesOn(schema)
    const storesB = storesOn(schema)
    const { graph, seen } = refundGraph()
    const a = await listen(t, { agents: { refunds: langGraphAgent(graph) }, ...storesA })
    // B serves the same agent name but never runs it: it only decides
    const b = build(t, { agents: { refunds: langGraphAgent(refundGraph().graph) }, ...storesB })
    t.teardown(() => closeStores([storesA, storesB]))

    const stream = await openSse(a.url, '/v1/agents/refunds/runs', { input: 'Refund order 42' })
    const approval = (await stream.next('approval.requested')).data.approval
    t.match(approval, { agent: 'refunds', action: 'refund', payload: { action: 'refund', orderId: 42, amount: 30 }, status: 'pending' })

    const listed = (await b.app.inject({ method: 'GET', url: '/v1/approvals?agent=refunds' })).json().approvals
    t.same(listed.map((x: { id: string }) => x.id), [approval.id], 'B sees the interrupt A stored')
    const decided = await b.app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, decidedBy: 'finance' } })
    t.equal(decided.statusCode, 200)
    const at = Date.now()
    t.match((await stream.next('approval.decided')).data.approval, { id: approval.id, status: 'approved', decision: { decidedBy: 'finance' } })
    const wokeAfterMs = Date.now() - at
    t.ok(wokeAfterMs < 1_000, `A woke after ${wokeAfterMs} ms`)

    const completed = await stream.next('run.completed')
    t.equal(completed.data.output, 'Refunded, approved by finance.')
    t.same(seen, [{ approved: true, comment: null, decidedBy: 'finance', status: 'approved', payload: { action: 'refund', orderId: 42, amount: 30 }, edited: false }], 'interrupt() returned B\'s decision, once')
    t.same(stream.events.map((e) => e.event), ['run.started', 'approval.requested', 'approval.decided', 'message.delta', 'run.completed'])

    const late = await a.service.app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: false } })
    t.equal(late.json().code, 'APPROVAL_ALREADY_DECIDED', 'the compare-and-set holds across instances')
  })
}
