// Targets 1 and 7: POST /v1/agents/echo/runs with the default options (request context, validation,
// memory audit ring, stats, memory sessions) against a bare Fastify route doing the same echo, and
// raw node:http for reference. 1 KB JSON body, 50 connections.
import { alternate, throughputRound } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, target } from './lib/report.js'
import { checkEcho } from './lib/checks.js'

export const name = 'http-default'
export const title = 'JSON run, default options, vs bare Fastify (targets 1 and 7)'

export async function run ({ log }) {
  const request = { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json' }, body: jsonBody(1024), connections: 50 }
  const contenders = [
    { name: 'node:http', spec: { kind: 'raw-http' } },
    { name: 'bare fastify', spec: { kind: 'bare-fastify' } },
    // references: the calibration stack, and the contract's work for a JSON run written by hand
    // (ids, a session kept with its messages, an audit entry kept): what that work costs on its own
    { name: 'naive stack', spec: { kind: 'naive' } },
    { name: 'hand-written', spec: { kind: 'handwritten' } },
    { name: 'service (defaults)', spec: { kind: 'service', preset: { name: 'default' } } }
  ]
  const results = await alternate(contenders, async (server, contender, round) => {
    if (round === 1) await checkEcho(server.url, request)
    return throughputRound(server, request)
  }, { log })

  const rows = [
    ...metricRows(results, 'rps', { unit: 'req/s', baseline: 'bare fastify' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'bare fastify' }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'bare fastify' })
  ]
  const rps = rows.find((r) => r.contender === 'service (defaults)' && r.metric === 'rps')
  const p99 = rows.find((r) => r.contender === 'service (defaults)' && r.metric === 'p99')
  const raw = rows.find((r) => r.contender === 'bare fastify' && r.metric === 'rps')
  const rawNode = rows.find((r) => r.contender === 'node:http' && r.metric === 'rps')
  return {
    title,
    rows,
    targets: [
      target('1', 'defaults throughput / bare Fastify', rps.ratio, '>=', 0.75),
      target('7', 'defaults p99 / bare Fastify p99', p99.ratio, '<=', 2)
    ],
    notes: [
      `bare Fastify / node:http = ${(raw.median / rawNode.median).toFixed(2)} (issue's machine: 0.85)`,
      `by CPU time per request, defaults / bare Fastify = ${cpuRatio(rows, 'service (defaults)', 'bare fastify')?.toFixed(2)}`,
      `references / bare Fastify: naive stack ${ratioOf(rows, 'naive stack')} (issue's machine: 0.65), the contract's work by hand ${ratioOf(rows, 'hand-written')}`
    ],
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}


function ratioOf (rows, contender) {
  return rows.find((r) => r.contender === contender && r.metric === 'rps').ratio.toFixed(2)
}
