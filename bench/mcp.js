// MCP (issue 27): a tools/call of the 100-delta ticker on /v1/mcp with a progress token (each delta a
// notifications/progress on the response's stream, then the result), against the plain SSE stream of the same run
// (POST /v1/agents/:name/runs: a connection-bound run with a session, as a tools/call's), on one server build. The
// server is stateless: each POST is a whole exchange, no initialize needed first.
import { alternate, throughputRound } from './lib/harness.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, ratioSpread, target } from './lib/report.js'
import { checkSseRun } from './lib/checks.js'

export const name = 'mcp'
export const title = 'a tools/call of the 100-delta agent with progress notifications on /v1/mcp vs the plain SSE stream of the same run'

const DELTAS = 100

const requests = {
  sse: {
    path: '/v1/agents/ticker/runs',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ input: { deltas: DELTAS } })
  },
  mcp: {
    path: '/v1/mcp',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'ticker', arguments: { input: { deltas: DELTAS } }, _meta: { progressToken: 1 } }
    })
  }
}

/** One call, read whole: its progress notifications and its result, counted (a fast wrong answer is not a result). */
async function checkCall (url) {
  const { path, headers, body } = requests.mcp
  const response = await fetch(url + path, { method: 'POST', headers, body })
  const text = await response.text()
  const progress = text.split('"method":"notifications/progress"').length - 1
  const ok = response.status === 200 && progress === DELTAS && text.includes('"isError":false') && text.includes('"id":1')
  if (!ok) throw new Error(`MCP check: status ${response.status}, ${progress} progress notifications: ${text.slice(-300)}`)
}

const checks = {
  'plain SSE': (url) => checkSseRun(url, requests.sse, DELTAS),
  'MCP tools/call': checkCall
}

export async function run ({ log }) {
  const spec = { kind: 'service', preset: { name: 'default' } }
  const load = (request) => ({ ...request, method: 'POST', connections: 50 })
  const contenders = [
    { name: 'plain SSE', spec, request: load(requests.sse) },
    { name: 'MCP tools/call', spec, request: load(requests.mcp) }
  ]
  const results = await alternate(contenders, async (server, contender, round) => {
    if (round === 1) await checks[contender.name](server.url)
    return throughputRound(server, contender.request)
  }, { log })
  const rows = [
    ...metricRows(results, 'rps', { unit: 'calls/s', baseline: 'plain SSE' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'plain SSE' }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'plain SSE' })
  ]
  const { min, max } = ratioSpread(rows, 'MCP tools/call', 'cpuUsPerRequest')
  return {
    title,
    rows,
    targets: [
      target('27.1', `tools/call with progress / plain SSE of the same run, by CPU time per call (rounds ${(1 / max).toFixed(2)}-${(1 / min).toFixed(2)})`,
        cpuRatio(rows, 'MCP tools/call', 'plain SSE'), '>=', 0.85)
    ],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
