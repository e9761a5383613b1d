// node bench/background.js [runs=2000] (after `npm run build`): background-run throughput of one instance against the
// same runs answered directly (docs/runs.md, issue 16's "measured"). In process (app.inject, memory stores, no
// sockets), so the figure is the pipeline's own cost: a JSON run answered at once vs a run queued (202), claimed by
// the worker and run with nobody connected. Rounds alternate; CPU per run and wall time per batch, medians of 5.
import { createAgentService } from '../dist/index.js'

const runs = Number(process.argv[2] ?? 2000)
const CONCURRENCY = 50
const agents = { echo: { async run (input) { return { output: input, usage: { inputTokens: 1, outputTokens: 1 } } } } }

async function batch (app, background) {
  const figures = app.agentService.stats.agentRuns('echo')
  const before = figures.completed
  const cpu = process.cpuUsage()
  const t0 = performance.now()
  for (let sent = 0; sent < runs; sent += CONCURRENCY) {
    const answers = await Promise.all(Array.from({ length: Math.min(CONCURRENCY, runs - sent) }, (_, i) =>
      app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: { n: sent + i }, background } })))
    for (const res of answers) {
      if (res.statusCode !== (background ? 202 : 200)) throw new Error(`${res.statusCode} ${res.body}`)
    }
  }
  // every queued run has run to its end (the service's own count: no store reads of the bench's own)
  while (figures.completed - before < runs) await new Promise((resolve) => setTimeout(resolve, 5))
  const used = process.cpuUsage(cpu)
  return { wallMs: performance.now() - t0, cpuUsPerRun: (used.user + used.system) / runs }
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
const service = createAgentService({ agents, logger: false, runConcurrency: 64 })
await service.app.ready()
const results = { direct: [], background: [] }
await batch(service.app, false)
await batch(service.app, true)
for (let round = 0; round < 5; round++) {
  results.direct.push(await batch(service.app, false))
  results.background.push(await batch(service.app, true))
}
await service.close(0)
const cpu = (kind) => median(results[kind].map((r) => r.cpuUsPerRun))
const wall = (kind) => median(results[kind].map((r) => r.wallMs))
console.log(`${runs} runs a round, ${CONCURRENCY} at once, medians of 5 rounds`)
console.log(`direct JSON runs:  ${cpu('direct').toFixed(0)} µs CPU per run, ${(runs / wall('direct') * 1000).toFixed(0)} runs/s`)
console.log(`background runs:   ${cpu('background').toFixed(0)} µs CPU per run, ${(runs / wall('background') * 1000).toFixed(0)} runs/s`)
console.log(`throughput ratio (background / direct): ${(wall('direct') / wall('background')).toFixed(2)}; CPU per run ratio: ${(cpu('background') / cpu('direct')).toFixed(2)}`)
