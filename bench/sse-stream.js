// Issue 19's SSE targets: a 100-delta run streamed as Server-Sent Events, one event per tick, with the full
// pipeline (its record and event log on the memory run store), against a node:http SSE endpoint writing the same
// events as they come and the same endpoint fed by the agent's async generator, by CPU time per stream.
import { alternate, throughputRound } from './lib/harness.js'
import { errorsOf, metricRows, noiseOf, ratioSpread, target } from './lib/report.js'
import { checkSseRun } from './lib/checks.js'

export const name = 'sse-stream'
export const title = 'SSE run of 100 deltas, one per tick, vs node:http SSE (issue 19)'

const DELTAS = 100

export async function run ({ log }) {
  const request = {
    path: '/v1/agents/ticker/runs',
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ input: { deltas: DELTAS } }),
    connections: 50
  }
  const contenders = [
    { name: 'node:http SSE', spec: { kind: 'raw-sse' } },
    // the same endpoint taking its deltas from the agent's async generator: what the generator protocol
    // itself costs, apart from the service
    { name: 'node:http SSE + generator', spec: { kind: 'raw-sse', generator: true } },
    { name: 'service SSE', spec: { kind: 'service', preset: { name: 'default' } } }
  ]
  const results = await alternate(contenders, async (server, _contender, round) => {
    if (round === 1) await checkSseRun(server.url, request, DELTAS)
    return throughputRound(server, request)
  }, { log })
  const rows = [
    ...metricRows(results, 'rps', { unit: 'streams/s', baseline: 'node:http SSE' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'node:http SSE' }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'node:http SSE' })
  ]
  const direct = ratioSpread(rows, 'service SSE', 'cpuUsPerRequest')
  const generator = ratioSpread(metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'node:http SSE + generator' }), 'service SSE', 'cpuUsPerRequest')
  const rps = ratioSpread(rows, 'service SSE', 'rps')
  return {
    title,
    rows,
    targets: [
      target('19.sse-generator', `CPU per stream / node:http fed by the same async generator (${generator.text})`, generator.ratio, '<=', 1.0),
      target('19.sse-direct', `CPU per stream / node:http writing the events directly (${direct.text})`, direct.ratio, '<=', 1.0)
    ],
    notes: [`streams/s, service / node:http writing directly: ${rps.ratio.toFixed(2)} (${rps.text})`],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
