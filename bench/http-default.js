// Issue 19's JSON targets: POST /v1/agents/echo/runs with the default options (request context, validation,
// memory audit ring, stats, memory sessions, the run's record and event log on the memory run store), and the
// same run with `store: false` (no session, its record and log dropped at its end), against a bare Fastify route
// doing the same echo, by CPU time per request and p99; raw node:http and the contract's work written by hand
// for reference. 1 KB JSON body, 50 connections.
import { alternate, throughputRound } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'
import { errorsOf, metricRows, noiseOf, ratioSpread, target } from './lib/report.js'
import { checkEcho } from './lib/checks.js'

export const name = 'http-default'
export const title = 'JSON run, defaults and store: false, vs bare Fastify (issue 19)'

const BARE = 'bare fastify'
const DEFAULTS = 'service (defaults)'
const EPHEMERAL = 'service (store: false)'

export async function run ({ log }) {
  const request = { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json' }, body: jsonBody(1024), connections: 50 }
  const ephemeral = { ...request, body: JSON.stringify({ ...JSON.parse(request.body), store: false }) }
  const contenders = [
    { name: 'node:http', spec: { kind: 'raw-http' } },
    { name: BARE, spec: { kind: 'bare-fastify' } },
    // reference: the contract's work for a JSON run written by hand (ids, a session kept with its messages, an
    // audit entry kept) on bare Fastify: what that work costs on its own
    { name: 'hand-written', spec: { kind: 'handwritten' } },
    { name: DEFAULTS, spec: { kind: 'service', preset: { name: 'default' } } },
    // the same server build and options; the request body asks for an ephemeral run
    { name: EPHEMERAL, spec: { kind: 'service', preset: { name: 'default' } }, request: ephemeral }
  ]
  const results = await alternate(contenders, async (server, contender, round) => {
    const asked = contender.request ?? request
    if (round === 1) await checkEcho(server.url, asked)
    return throughputRound(server, asked)
  }, { log })

  const rows = [
    ...metricRows(results, 'rps', { unit: 'req/s', baseline: BARE }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: BARE }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: BARE })
  ]
  const cpuEphemeral = ratioSpread(rows, EPHEMERAL, 'cpuUsPerRequest')
  const cpuDefaults = ratioSpread(rows, DEFAULTS, 'cpuUsPerRequest')
  const p99Defaults = ratioSpread(rows, DEFAULTS, 'p99')
  const p99Ephemeral = ratioSpread(rows, EPHEMERAL, 'p99')
  return {
    title,
    rows,
    targets: [
      target('19.json-ephemeral', `store: false, CPU per request / bare Fastify's (${cpuEphemeral.text})`, cpuEphemeral.ratio, '<=', 1.3),
      target('19.json-defaults', `defaults, CPU per request / bare Fastify's (${cpuDefaults.text})`, cpuDefaults.ratio, '<=', 1.6),
      target('19.json-p99', `defaults, p99 at 50 connections / bare Fastify's (${p99Defaults.text})`, p99Defaults.ratio, '<=', 1.5)
    ],
    notes: [
      `p99 with store: false / bare Fastify's: ${p99Ephemeral.ratio.toFixed(2)} (${p99Ephemeral.text})`,
      `CPU per request / bare Fastify's: node:http ${ratioSpread(rows, 'node:http', 'cpuUsPerRequest').ratio.toFixed(2)}, the contract's work by hand ${ratioSpread(rows, 'hand-written', 'cpuUsPerRequest').ratio.toFixed(2)}`
    ],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
