// The graphs LangGraph's API server hosts (./langgraph.js): one node each. `echo` answers with its input,
// `ticker` writes 100 custom stream chunks of 'token ', one per event-loop tick, `idle` waits for its
// run to be cancelled.
import { Annotation, StateGraph, START, END } from '@langchain/langgraph'
import { DELTAS } from './model.js'

const tick = () => new Promise((resolve) => setImmediate(resolve))

const State = Annotation.Root({
  input: Annotation(),
  output: Annotation()
})

function oneNode (name, node) {
  return new StateGraph(State).addNode(name, node).addEdge(START, name).addEdge(name, END).compile()
}

// the input is cleared, so that the answer carries the text once, as ours does
export const echo = oneNode('echo', (state) => ({ input: null, output: state.input }))

export const ticker = oneNode('ticker', async (_state, config) => {
  let text = ''
  for (let i = 0; i < DELTAS; i++) {
    await tick()
    text += 'token '
    config.writer('token ')
  }
  return { input: null, output: text }
})

export const idle = oneNode('idle', (_state, config) => new Promise((resolve, reject) => {
  config.signal.addEventListener('abort', () => reject(config.signal.reason), { once: true })
}))
