// Agents as models (issue 28): the same 100-delta ticker run streamed as the Responses API (POST /v1/responses,
// `stream: true`) and as Chat Completions (POST /v1/chat/completions, `stream: true`), against the plain SSE stream of
// the run (POST /v1/agents/:name/runs), on one server build. A streamed response's run goes on without its client at
// an approval (onDisconnect 'continue', as the chat front ends' runs): its targets compare it with the plain SSE
// stream of that same run. A chat completion is an ephemeral, connection-bound run: its target compares it with the
// plain SSE stream of an ephemeral run (store: false), the note with the default one.
import { alternate, throughputRound } from './lib/harness.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, ratioSpread, target } from './lib/report.js'
import { checkProjectedStream, checkSseRun } from './lib/checks.js'

export const name = 'openai'
export const title = 'SSE run of 100 deltas as the Responses API and as Chat Completions vs the plain SSE stream of the same run'

const DELTAS = 100
const JSON_SSE = { 'content-type': 'application/json', accept: 'text/event-stream' }

const requests = {
  sse: { path: '/v1/agents/ticker/runs', headers: JSON_SSE, body: JSON.stringify({ input: { deltas: DELTAS } }) },
  sseContinue: { path: '/v1/agents/ticker/runs', headers: JSON_SSE, body: JSON.stringify({ input: { deltas: DELTAS }, onDisconnect: 'continue' }) },
  sseEphemeral: { path: '/v1/agents/ticker/runs', headers: JSON_SSE, body: JSON.stringify({ input: { deltas: DELTAS }, store: false }) },
  responses: {
    path: '/v1/responses',
    headers: { 'content-type': 'application/json' },
    // the ticker's input is the text here: it streams its default, 100 deltas
    body: JSON.stringify({ model: 'ticker', input: 'go', stream: true })
  },
  chat: {
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'ticker', messages: [{ role: 'user', content: 'go' }], stream: true })
  }
}

const checks = {
  'plain SSE': (url) => checkSseRun(url, requests.sse, DELTAS),
  'plain SSE, continue': (url) => checkSseRun(url, requests.sseContinue, DELTAS),
  'plain SSE, store: false': (url) => checkSseRun(url, requests.sseEphemeral, DELTAS),
  'Responses API': (url) => checkProjectedStream(url, requests.responses, DELTAS, 'event: response.output_text.delta\n', 'event: response.completed\n'),
  'Chat Completions': (url) => checkProjectedStream(url, requests.chat, DELTAS, '"delta":{"content":"token "}', 'data: [DONE]\n\n')
}

export async function run ({ log }) {
  const spec = { kind: 'service', preset: { name: 'default' } }
  const load = (request) => ({ ...request, method: 'POST', connections: 50 })
  const contenders = [
    { name: 'plain SSE', spec, request: load(requests.sse) },
    { name: 'plain SSE, continue', spec, request: load(requests.sseContinue) },
    { name: 'plain SSE, store: false', spec, request: load(requests.sseEphemeral) },
    { name: 'Responses API', spec, request: load(requests.responses) },
    { name: 'Chat Completions', spec, request: load(requests.chat) }
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
  // CPU per stream of the baseline over the contender's (higher is better), with the spread of the per-round ratios
  const cpuTarget = (id, contender, baseline, what) => {
    const cpuRows = metricRows({ [baseline]: results[baseline], [contender]: results[contender] }, 'cpuUsPerRequest', { unit: 'µs', baseline })
    const { min, max } = ratioSpread(cpuRows, contender, 'cpuUsPerRequest')
    const t = target(id, `${what} / plain SSE of the same run, by CPU time per stream (rounds ${(1 / max).toFixed(2)}-${(1 / min).toFixed(2)})`, cpuRatio(rows, contender, baseline), '>=', 0.85)
    return t
  }
  return {
    title,
    rows,
    targets: [
      cpuTarget('28.1', 'Responses API', 'plain SSE, continue', 'streamed /v1/responses (a continue run)'),
      cpuTarget('28.2', 'Chat Completions', 'plain SSE, store: false', 'streamed /v1/chat/completions (an ephemeral run)')
    ],
    notes: ['Responses API', 'Chat Completions'].map((contender) =>
      `${contender} / plain SSE (default: a session, connection-bound): by CPU ${cpuRatio(rows, contender, 'plain SSE')?.toFixed(2)}, ` +
      `by streams/s ${rows.find((r) => r.contender === contender && r.metric === 'rps').ratio.toFixed(2)}`),
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
