// A LangGraph graph that stops at interrupt() for a human's decision, served standalone. The chat model is
// LangChain's fake, so this runs offline with no API key; swap in a real one and nothing else changes.
// The session is the graph's thread (MemorySaver here): a second run with the same sessionId continues it.
//
//   npm run build && node examples/langgraph-interrupt.mjs     (PORT=3000 by default)
//
//   # 1. start a run and watch its events (it pauses at approval.requested)
//   curl -N localhost:3000/v1/agents/refunds/runs -H 'content-type: application/json' \
//        -d '{"input":"Refund order 42, it arrived broken","stream":true}'
//   # 2. in another terminal: the pending approvals (action "refund", payload: the interrupt's value)
//   curl localhost:3000/v1/approvals
//   # 3. decide; the graph resumes with the decision as interrupt()'s return value
//   curl localhost:3000/v1/approvals/<id> -H 'content-type: application/json' -d '{"approved":true,"comment":"ok"}'
import { AIMessage } from '@langchain/core/messages'
import { FakeListChatModel } from '@langchain/core/utils/testing'
import { END, interrupt, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph'
import { createAgentService } from '../dist/index.js'
import { langGraphAgent } from '../dist/adapters/langchain.js'

const model = new FakeListChatModel({ responses: ['Sorry about that: a colleague has to approve the refund. '], sleep: 20 })

const graph = new StateGraph(MessagesAnnotation)
  .addNode('answer', async (state) => ({ messages: [await model.invoke(state.messages)] }))
  .addNode('refund', async (state) => {
    const orderId = /\d+/.exec(state.messages.findLast((m) => m.type === 'human')?.text ?? '')?.[0] ?? 'unknown'
    // The adapter turns this into a service approval and resumes the graph with the decision.
    const decision = interrupt({ action: 'refund', orderId, amount: 30 })
    return {
      messages: [new AIMessage(decision.approved
        ? `Order ${orderId} is refunded (approved by ${decision.decidedBy ?? 'a colleague'}).`
        : `The refund of order ${orderId} was not approved (${decision.status}).`)]
    }
  })
  .addEdge(START, 'answer')
  .addEdge('answer', 'refund')
  .addEdge('refund', END)
  .compile({ checkpointer: new MemorySaver() })

const refunds = langGraphAgent(graph, { description: 'Refunds orders, with a human approving each refund' })

const service = createAgentService({ agents: { refunds }, host: '127.0.0.1' })
const { url } = await service.listen({ port: Number(process.env.PORT ?? 3000) })
console.log(`refunds agent on ${url}`)
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => { service.close(5_000).then(() => process.exit(0)) })
