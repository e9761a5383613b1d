// The AI SDK adapter: an aiSdkAgent streaming 100 text deltas from MockLanguageModelV4, one per tick, against
// the same 100 deltas yielded by a plain async generator agent (the ticker), both over SSE on the same server;
// and, as a reference, the same streamText() result read by a generator agent written by hand.
import { alternate, throughputRound } from './lib/harness.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, target } from './lib/report.js'
import { checkSseRun } from './lib/checks.js'

export const name = 'adapter'
export const title = 'SSE run of 100 deltas: AI SDK agent (mock model, fastify-agents/ai-sdk) vs a plain async generator agent'

const DELTAS = 100

function request (agent) {
  return {
    path: `/v1/agents/${agent}/runs`,
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ input: { deltas: DELTAS } }),
    connections: 50
  }
}

export async function run ({ log }) {
  // one server build for both: only the agent differs
  const spec = { kind: 'service', preset: { name: 'adapter' } }
  const contenders = [
    { name: 'plain generator', spec, request: request('ticker') },
    { name: 'AI SDK adapter', spec, request: request('ai-ticker') },
    // the same streamText() result read by a generator agent: the SDK's own cost, apart from the adapter
    { name: 'AI SDK by hand', spec, request: request('ai-by-hand') }
  ]
  const results = await alternate(contenders, async (server, contender, round) => {
    if (round === 1) await checkSseRun(server.url, contender.request, DELTAS)
    return throughputRound(server, contender.request)
  }, { log })
  const rows = [
    ...metricRows(results, 'rps', { unit: 'streams/s', baseline: 'plain generator' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'plain generator' }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'plain generator' })
  ]
  const byCpu = cpuRatio(rows, 'AI SDK adapter', 'plain generator')
  const streams = rows.find((r) => r.contender === 'AI SDK adapter' && r.metric === 'rps')
  return {
    title,
    rows,
    targets: [target('A', 'AI SDK adapter / plain generator, by CPU time per stream', byCpu, '>=', 0.90)],
    notes: [
      `by streams/s, AI SDK adapter / plain generator = ${streams.ratio.toFixed(2)}`,
      `the adapter against the same SDK stream read by hand, by CPU = ${cpuRatio(rows, 'AI SDK adapter', 'AI SDK by hand')?.toFixed(2)}`
    ],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
