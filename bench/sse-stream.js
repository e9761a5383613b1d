// Target 3: a 100-delta run streamed as Server-Sent Events, one event per tick, against a node:http SSE
// endpoint writing the same events the same way. Throughput in complete streams per second.
import { alternate, throughputRound } from './lib/harness.js'
import { cpuRatio, errorsOf, medianOf, metricRows, noiseOf, target } from './lib/report.js'
import { checkSseRun } from './lib/checks.js'

export const name = 'sse-stream'
export const title = 'SSE run of 100 deltas, one per tick, vs node:http SSE (target 3)'

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
  const service = rows.find((r) => r.contender === 'service SSE' && r.metric === 'rps')
  return {
    title,
    rows,
    targets: [target('3', 'service SSE streams/s / node:http SSE', service.ratio, '>=', 0.90)],
    notes: [
      `by CPU time per stream, service / node:http = ${cpuRatio(rows, 'service SSE', 'node:http SSE')?.toFixed(2)}`,
      `against node:http fed by the same async generator: streams/s ${(service.median / medianOf(rows, 'node:http SSE + generator', 'rps')).toFixed(2)}, by CPU ${cpuRatio(rows, 'service SSE', 'node:http SSE + generator')?.toFixed(2)}`
    ],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
