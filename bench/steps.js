// Durable steps (issue 29, docs/durable-agents.md) on PostgreSQL: what the journal costs. In one process, one service
// with every store on PostgreSQL (a fresh schema), CPU of this process measured with process.cpuUsage:
//  - a JSON run of 20 `ctx.step` calls, each returning 1 KB, against the same run making 20 plain function calls
//    (target: CPU per run ≤ 1.5×), the two contenders alternating batch by batch. Each step waits for its event to be
//    stored, and a group commit holds one event per run: the steps of runs going at once share statements, those of a
//    lone run do not. So it is measured with 32 runs at a time (the target), 8, and 1 (for the record);
//  - the replay of 20 journaled steps: a run that failed after its 20 steps, resumed (`resumeRunId`), against the same
//    run without steps resumed; the difference of their CPU per resumed run is the replay's (target ≤ 5 ms).
// `npm run bench -- steps` (it builds dist/ first), or `node bench/steps.js` after `npm run build`.
import { fileURLToPath } from 'node:url'
import { dropSchemas } from './lib/pg.js'
import { target } from './lib/report.js'

export const name = 'steps'
export const title = 'Durable steps on PostgreSQL: 20 journaled steps of 1 KB vs 20 plain calls; the replay of 20 steps on resume'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const STEPS = 20
const KB = { data: 'x'.repeat(1000) }
const ROUNDS = Number(process.env.STEPS_ROUNDS ?? 5)
const BATCH = Number(process.env.STEPS_BATCH ?? 200)
/** runs at a time: the target's, then the others measured for the record (the last with a quarter of the runs) */
const CONCURRENCY = (process.env.STEPS_CONCURRENCY ?? '32,8,1').split(',').map(Number)
const RESUMES = Number(process.env.STEPS_RESUMES ?? 40)

/** The same agent in two shapes: its 20 calls journaled as steps, or plain. `fail` ends it with an error after them. */
function agent (stepped) {
  return {
    async run (input, ctx) {
      if (input.fail) await ctx.checkpoint({ at: 'start' })
      let size = 0
      for (let i = 0; i < STEPS; i++) {
        const out = stepped ? await ctx.step('fetch', async () => KB) : await (async () => KB)()
        size += out.data.length
      }
      if (input.fail) throw new Error('fails after its steps')
      return { output: size }
    }
  }
}

const cpuMs = (since) => {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / 1000
}
const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)]
const spread = (values) => ({ median: median(values), min: Math.min(...values), max: Math.max(...values), values })

/** `count` JSON runs of `agentName`, `concurrency` at a time: the process's CPU per run (ms). */
async function batch (app, agentName, count, concurrency) {
  let next = 0
  const cpu = process.cpuUsage()
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < count) {
      next++
      const res = await app.inject({ method: 'POST', url: `/v1/agents/${agentName}/runs`, payload: { input: { fail: false } } })
      if (res.statusCode !== 200) throw new Error(`${agentName}: ${res.statusCode} ${res.body}`)
    }
  }))
  return cpuMs(cpu) / count
}

/** Failed runs to resume, then each resumed one by one: the CPU of each resumed run (ms), the median of the lot. */
async function resumes (app, agentName, count) {
  const ids = []
  for (let i = 0; i < count; i++) {
    const res = await app.inject({ method: 'POST', url: `/v1/agents/${agentName}/runs`, payload: { input: { fail: true }, stream: true } })
    ids.push(/"runId":"([^"]+)"/.exec(res.body)[1])
  }
  const each = []
  for (const runId of ids) {
    const cpu = process.cpuUsage()
    const res = await app.inject({ method: 'POST', url: `/v1/agents/${agentName}/runs`, payload: { input: { fail: false }, resumeRunId: runId } })
    if (res.statusCode !== 200) throw new Error(`${agentName} resume: ${res.statusCode} ${res.body}`)
    each.push(cpuMs(cpu))
  }
  return median(each)
}

export async function run ({ log = console.log } = {}) {
  const { createAgentService, postgresStores } = await import('fastify-agents')
  const schema = `fa_bench_steps_${process.pid}`
  const service = createAgentService({
    logger: false,
    exposeErrors: true,
    agents: { stepped: agent(true), plain: agent(false) },
    ...postgresStores({ connectionString: PG_URL, max: 10 }, { schema })
  })
  try {
    await service.app.ready()
    const { app } = service
    const sizeAt = (concurrency) => concurrency === CONCURRENCY[0] ? BATCH : Math.max(concurrency, Math.round(BATCH / (concurrency === 1 ? 4 : 1)))
    log(`warm-up (${BATCH} runs of each)`)
    await batch(app, 'plain', BATCH, CONCURRENCY[0])
    await batch(app, 'stepped', BATCH, CONCURRENCY[0])
    const runs = Object.fromEntries(CONCURRENCY.map((c) => [c, { plain: [], stepped: [] }]))
    const replays = { plain: [], stepped: [] }
    for (let round = 1; round <= ROUNDS; round++) {
      for (const c of CONCURRENCY) for (const contender of ['plain', 'stepped']) runs[c][contender].push(await batch(app, contender, sizeAt(c), c))
      for (const contender of ['plain', 'stepped']) replays[contender].push(await resumes(app, contender, RESUMES))
      log(`round ${round}: CPU per run, plain / stepped: ${CONCURRENCY.map((c) => `${c} at a time ${runs[c].plain.at(-1).toFixed(2)} / ${runs[c].stepped.at(-1).toFixed(2)} ms`).join('; ')}; ` +
        `per resumed run ${replays.plain.at(-1).toFixed(2)} / ${replays.stepped.at(-1).toFixed(2)} ms`)
    }
    const rows = []
    const ratioAt = {}
    for (const c of CONCURRENCY) {
      const { plain, stepped } = runs[c]
      const ratios = stepped.map((v, i) => v / plain[i])
      ratioAt[c] = { ratio: median(stepped) / median(plain), ratios }
      rows.push({ contender: `plain, ${c} at a time`, metric: 'CPU per run', unit: 'ms', ...spread(plain) })
      rows.push({ contender: `stepped, ${c} at a time`, metric: 'CPU per run', unit: 'ms', ...spread(stepped), baseline: `plain, ${c} at a time`, ratio: ratioAt[c].ratio, ratioRange: [Math.min(...ratios), Math.max(...ratios)] })
    }
    const replay = replays.stepped.map((v, i) => v - replays.plain[i])
    const replayMs = median(replays.stepped) - median(replays.plain)
    rows.push({ contender: 'plain', metric: 'CPU per resumed run', unit: 'ms', ...spread(replays.plain) })
    rows.push({ contender: 'stepped', metric: 'CPU per resumed run', unit: 'ms', ...spread(replays.stepped) })
    return {
      title,
      rows,
      targets: [
        target('29a', `CPU per run of ${STEPS} steps of 1 KB / the same run with plain calls, ${CONCURRENCY[0]} runs at a time, all stores on PostgreSQL`, ratioAt[CONCURRENCY[0]].ratio, '<=', 1.5),
        target('29b', `service CPU of the replay of ${STEPS} journaled steps on resume (ms)`, replayMs, '<=', 5)
      ],
      notes: [
        `${ROUNDS} rounds of ${BATCH} runs per contender (${Math.round(BATCH / 4)} one at a time); stepped/plain per round: ` +
          CONCURRENCY.map((c) => `${c} at a time ${ratioAt[c].ratios.map((r) => r.toFixed(2)).join(', ')}`).join('; '),
        `replay = CPU per resumed stepped run − per resumed plain run (median of ${RESUMES} each, one at a time), per round ${replay.map((r) => r.toFixed(2)).join(', ')} ms`
      ],
      errors: 0
    }
  } finally {
    await service.close(0)
    await dropSchemas(PG_URL, [schema])
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { printScenario } = await import('./lib/report.js')
  printScenario(name, await run())
}
