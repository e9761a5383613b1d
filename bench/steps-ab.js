// Issue 29's 29a for two builds in one process (bench/README.md, "Durable steps: urgent appends"):
// `node bench/steps-ab.js <dir-a> <dir-b> [rounds, 4] [runs per batch, 200] [runs at a time, 32]` (absolute paths of two
// built trees): one service per build, every store on PostgreSQL (a schema each, dropped after), the agent of
// bench/steps.js with 20 steps of 1 KB or 20 plain calls; batches alternate between the builds, CPU per run of the process.
import { dropSchemas } from './lib/pg.js'
const [dirA, dirB, roundsArg = '4', batchArg = '200', concArg = '32'] = process.argv.slice(2)
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const KB = { data: 'x'.repeat(1000) }
const agent = (stepped) => ({ async run (input, ctx) { let size = 0; for (let i = 0; i < 20; i++) { const out = stepped ? await ctx.step('fetch', async () => KB) : await (async () => KB)(); size += out.data.length } return { output: size } } })
const med = (v) => v.slice().sort((a, b) => a - b)[v.length >> 1]
async function build (dir, tag) {
  const { createAgentService, postgresStores } = await import(`${dir}/dist/index.js`)
  const schema = `fa_pgsteps_sab_${tag}_${process.pid}`
  const service = createAgentService({ logger: false, exposeErrors: true, agents: { stepped: agent(true), plain: agent(false) }, ...postgresStores({ connectionString: PG_URL, max: 10 }, { schema }) })
  await service.app.ready()
  return { dir, service, schema, plain: [], stepped: [] }
}
async function batch (app, name, count, c) {
  let next = 0; const cpu = process.cpuUsage()
  await Promise.all(Array.from({ length: c }, async () => { while (next < count) { next++; const res = await app.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: {} } }); if (res.statusCode !== 200) throw new Error(res.body) } }))
  const u = process.cpuUsage(cpu); return (u.user + u.system) / 1000 / count
}
const bs = [await build(dirA, 'a'), await build(dirB, 'b')]
const [rounds, size, conc] = [Number(roundsArg), Number(batchArg), Number(concArg)]
for (const b of bs) { await batch(b.service.app, 'plain', size, conc); await batch(b.service.app, 'stepped', size, conc) }
for (let r = 0; r < rounds; r++) {
  for (const b of (r % 2 ? bs.slice().reverse() : bs)) for (const k of ['plain', 'stepped']) b[k].push(await batch(b.service.app, k, size, conc))
  console.log(`round ${r + 1}: ` + bs.map((b) => `${b.dir}: ${b.plain.at(-1).toFixed(2)} / ${b.stepped.at(-1).toFixed(2)} ms (${(b.stepped.at(-1) / b.plain.at(-1)).toFixed(2)})`).join('; '))
}
for (const b of bs) console.log(b.dir, `plain ${med(b.plain).toFixed(2)} ms, stepped ${med(b.stepped).toFixed(2)} ms, ratio ${(med(b.stepped) / med(b.plain)).toFixed(2)} (rounds ${b.stepped.map((s, i) => (s / b.plain[i]).toFixed(2)).join(' ')})`)
for (const b of bs) await b.service.close(0)
await dropSchemas(PG_URL, bs.map((b) => b.schema))
