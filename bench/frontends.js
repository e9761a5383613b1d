// The front-end protocols (docs/front-ends.md): the same 100-delta ticker run streamed as the AI SDK UI message stream
// (POST /v1/agents/:name/chat), as AG-UI events (POST /v1/agents/:name/ag-ui) and as A2A SendStreamingMessage
// (POST /v1/a2a/:name), against the plain SSE stream of the run (POST /v1/agents/:name/runs), on one server build.
// Each request names its own chat, thread or context, as a new conversation would. The front ends' runs go on
// without their client (onDisconnect 'continue', which an approval needs): the targets compare them with the plain
// SSE stream of that same run, and the notes with the default, connection-bound one.
import { alternate, throughputRound } from './lib/harness.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, target } from './lib/report.js'
import { checkProjectedStream, checkSseRun } from './lib/checks.js'

export const name = 'frontends'
export const title = 'SSE run of 100 deltas as the AI SDK chat stream, AG-UI and A2A vs the plain SSE stream of the same run'

const DELTAS = 100
const JSON_SSE = { 'content-type': 'application/json', accept: 'text/event-stream' }

const requests = {
  sse: { path: '/v1/agents/ticker/runs', headers: JSON_SSE, body: JSON.stringify({ input: { deltas: DELTAS } }) },
  sseContinue: { path: '/v1/agents/ticker/runs', headers: JSON_SSE, body: JSON.stringify({ input: { deltas: DELTAS }, onDisconnect: 'continue' }) },
  chat: {
    path: '/v1/agents/ticker/chat',
    headers: JSON_SSE,
    body: JSON.stringify({ id: 'chat-[<id>]', trigger: 'submit-message', messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'go' }] }] })
  },
  agUi: {
    path: '/v1/agents/ticker/ag-ui',
    headers: JSON_SSE,
    body: JSON.stringify({ threadId: 'thread-[<id>]', runId: 'run-[<id>]', state: {}, messages: [{ id: 'u1', role: 'user', content: 'go' }], tools: [], context: [], forwardedProps: {} })
  },
  a2a: {
    path: '/v1/a2a/ticker',
    headers: { ...JSON_SSE, 'a2a-version': '1.0' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'SendStreamingMessage', params: { message: { messageId: 'm-[<id>]', role: 'ROLE_USER', parts: [{ text: 'go' }] } } })
  }
}

const checks = {
  'plain SSE': (url) => checkSseRun(url, requests.sse, DELTAS),
  'plain SSE, continue': (url) => checkSseRun(url, requests.sseContinue, DELTAS),
  'AI SDK chat': (url) => checkProjectedStream(url, requests.chat, DELTAS, '"type":"text-delta"', 'data: [DONE]\n\n'),
  'AG-UI': (url) => checkProjectedStream(url, requests.agUi, DELTAS, '"type":"TEXT_MESSAGE_CONTENT"', '"type":"RUN_FINISHED"'),
  A2A: (url) => checkProjectedStream(url, requests.a2a, DELTAS, '"text":"token "', 'TASK_STATE_COMPLETED')
}

export async function run ({ log }) {
  const spec = { kind: 'service', preset: { name: 'default' } }
  const load = (request) => ({ ...request, method: 'POST', connections: 50, idReplacement: true })
  const contenders = [
    { name: 'plain SSE', spec, request: load(requests.sse) },
    { name: 'plain SSE, continue', spec, request: load(requests.sseContinue) },
    { name: 'AI SDK chat', spec, request: load(requests.chat) },
    { name: 'AG-UI', spec, request: load(requests.agUi) },
    { name: 'A2A', spec, request: load(requests.a2a) }
  ]
  const results = await alternate(contenders, async (server, contender, round) => {
    if (round === 1) await checks[contender.name](server.url)
    return throughputRound(server, contender.request)
  }, { log })
  const rows = [
    ...metricRows(results, 'rps', { unit: 'streams/s', baseline: 'plain SSE' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'plain SSE' }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'plain SSE' })
  ]
  const byCpu = (contender, baseline = 'plain SSE, continue') => cpuRatio(rows, contender, baseline)
  return {
    title,
    rows,
    targets: ['AI SDK chat', 'AG-UI', 'A2A'].map((contender, i) =>
      target(`F${i + 1}`, `${contender} / plain SSE of the same (continue) run, by CPU time per stream`, byCpu(contender), '>=', 0.90)),
    notes: ['AI SDK chat', 'AG-UI', 'A2A', 'plain SSE, continue'].map((contender) =>
      `${contender} / plain SSE (default, connection-bound): by CPU ${byCpu(contender, 'plain SSE')?.toFixed(2)}, ` +
      `by streams/s ${rows.find((r) => r.contender === contender && r.metric === 'rps').ratio.toFixed(2)}`),
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
