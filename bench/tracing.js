// docs/operations.md: what tracing costs a JSON run. The same runs against this build without an OpenTelemetry SDK,
// with one (BasicTracerProvider, an in-memory exporter emptied every second, an AsyncLocalStorage context
// manager, as a host's setup would have), and, when BENCH_BASELINE names another build's dist/index.js (built
// from a commit before tracing, as bench/compare.js describes), that build: the cost of the tracing code itself.
import { resolve } from 'node:path'
import { alternate, throughputRound } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'
import { checkEcho } from './lib/checks.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, target } from './lib/report.js'

export const name = 'tracing'
export const title = 'JSON run: no OpenTelemetry SDK / an SDK with an in-memory exporter (and the build before tracing)'

export async function run ({ log }) {
  const request = { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }, body: jsonBody(1024), connections: 50 }
  const baseline = process.env.BENCH_BASELINE
  const contenders = [
    ...(baseline === undefined ? [] : [{ name: 'before tracing', spec: { kind: 'service', preset: { name: 'default' }, pkg: resolve(baseline) } }]),
    { name: 'no SDK', spec: { kind: 'service', preset: { name: 'default' } } },
    { name: 'SDK, in-memory exporter', spec: { kind: 'service', preset: { name: 'default' }, tracing: 'sdk' } }
  ]
  const results = await alternate(contenders, async (server, contender, round) => {
    if (round === 1) await checkEcho(server.url, request)
    return throughputRound(server, request)
  }, { log })

  const reference = baseline === undefined ? 'no SDK' : 'before tracing'
  const rows = [
    ...metricRows(results, 'rps', { unit: 'req/s', baseline: reference }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: reference })
  ]
  const rps = (contender) => rows.find((r) => r.contender === contender && r.metric === 'rps')
  const sdkVsNone = rps('SDK, in-memory exporter').median / rps('no SDK').median
  return {
    title,
    rows,
    targets: [
      target('tracing-1', 'no SDK / the build before tracing, req/s', baseline === undefined ? null : rps('no SDK').ratio, '>=', 0.99,
        baseline === undefined ? 'set BENCH_BASELINE to the dist/index.js of a build before tracing' : undefined),
      target('tracing-2', 'SDK with an in-memory exporter / no SDK, req/s', sdkVsNone, '>=', 0.90)
    ],
    notes: [
      `by CPU time per request (as a throughput ratio): SDK / no SDK = ${cpuRatio(rows, 'SDK, in-memory exporter', 'no SDK')?.toFixed(2)}` +
        (baseline === undefined ? '' : `, no SDK / before tracing = ${cpuRatio(rows, 'no SDK', 'before tracing')?.toFixed(2)}`)
    ],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
