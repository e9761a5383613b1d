// docs/operations.md: the cost of a Prometheus scrape ({adminPrefix}/metrics) once 10,000 runs are recorded, in one
// process (app.inject, no sockets): 10 agents, runs spread over them (one in ten failing), then 200 scrapes timed
// one by one; /admin/stats, the JSON figures, timed the same way for reference.
import { performance } from 'node:perf_hooks'
import { summary } from './lib/harness.js'

export const name = 'metrics'
export const title = 'A metrics scrape at 10,000 recorded runs (10 agents), against /admin/stats'

const RUNS = Number(process.env.BENCH_METRICS_RUNS ?? 10_000)
const SCRAPES = 200

async function timed (app, url, times) {
  const values = []
  let bytes = 0
  for (let i = 0; i < times; i++) {
    const t0 = performance.now()
    const res = await app.inject({ method: 'GET', url })
    values.push(performance.now() - t0)
    if (res.statusCode !== 200) throw new Error(`${url}: ${res.statusCode}`)
    bytes = res.body.length
  }
  return { ...summary(values), bytes }
}

export async function run ({ log }) {
  const { createAgentService } = await import('fastify-agents')
  const agents = {}
  for (let i = 0; i < 10; i++) {
    agents[`agent-${i}`] = {
      async run (input) {
        if (input % 10 === 9) throw new Error('no')
        return { output: input, usage: { inputTokens: 10, outputTokens: 20 } }
      }
    }
  }
  const service = createAgentService({ logger: false, agents, adminApi: { enabled: true } })
  const { app } = service
  await app.ready()
  try {
    const t0 = performance.now()
    for (let i = 0; i < RUNS; i++) await app.inject({ method: 'POST', url: `/v1/agents/agent-${i % 10}/runs`, payload: { input: i, store: false } })
    log(`  ${RUNS} runs recorded in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    await timed(app, '/admin/metrics', 20)
    const metrics = await timed(app, '/admin/metrics', SCRAPES)
    const stats = await timed(app, '/admin/stats', SCRAPES)
    const body = (await app.inject({ method: 'GET', url: '/admin/metrics' })).body
    const total = body.split('\n').filter((l) => l.startsWith('fastify_agents_runs_total')).reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0)
    if (total !== RUNS) throw new Error(`fastify_agents_runs_total adds up to ${total}, not ${RUNS}`)
    const row = (contender, figures) => ({ contender, metric: 'time per request', unit: 'ms', median: figures.median, min: figures.min, max: figures.max })
    return {
      title,
      rows: [row('GET /admin/metrics', metrics), row('GET /admin/stats', stats)],
      targets: [],
      notes: [
        `the scrape is ${(metrics.bytes / 1024).toFixed(1)} KB (${body.split('\n').filter((l) => l !== '' && !l.startsWith('#')).length} samples, prom-client's process metrics included); /admin/stats ${(stats.bytes / 1024).toFixed(1)} KB`,
        `p99 of ${SCRAPES} scrapes: ${[...metrics.values].sort((a, b) => a - b)[Math.ceil(SCRAPES * 0.99) - 1].toFixed(2)} ms; the counters add up to the ${RUNS} runs`
      ]
    }
  } finally {
    await service.close(0)
  }
}
