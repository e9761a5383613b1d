// Issue 29 (bench/README.md, "Durable steps: urgent appends"): the PostgreSQL run store alone, two builds in one process,
// `node bench/steps-append-ab.js <dir-a>/dist <dir-b>/dist [runs at a time, default 32] [rounds, default 20]` (absolute
// dist paths, both built): `conc` runs each append 20 events of 1 KB one after the other, each waiting for the last
// (as durable steps do, passing `urgent`, which a build without it ignores); rounds alternate between the builds and
// the CPU of this process per append is compared round by round. Schemas fa_pgsteps_ab_* of its own, dropped after.
import { dropSchemas } from './lib/pg.js'
const [dirA, dirB, concArg = '32', roundsArg = '20'] = process.argv.slice(2)
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const data = (i) => `{"name":"fetch","index":${i},"output":{"data":"${'x'.repeat(1000)}"}}`
let ids = 0
async function contender (dir, tag) {
  const { PostgresRunStore } = await import(`${dir}/lib/stores/postgres-runs.js`)
  const schema = `fa_pgsteps_ab_${tag}_${process.pid}`
  const store = new PostgresRunStore({ connectionString: PG_URL, max: 10 }, { schema })
  async function round (conc) {
    const runIds = []
    for (let i = 0; i < conc; i++) {
      const now = new Date().toISOString(); const runId = `ab-${process.pid}-${++ids}`
      await store.create({ record: { runId, agent: 'a', sessionId: null, principal: 'p', status: 'running', background: false, attempt: 1, lastSeq: 0, createdAt: now, startedAt: now, requestId: 'r', traceId: 'a'.repeat(32) }, spec: { input: null }, ephemeral: false, detachable: false, lease: { owner: 'me', until: Date.now() + 3600_000 } }, { exclusive: false })
      runIds.push(runId)
    }
    const cpu = process.cpuUsage(); const t = performance.now()
    await Promise.all(runIds.map(async (runId) => { for (let i = 1; i <= 20; i++) await store.append(runId, [{ seq: i, type: 'step.completed', data: data(i) }], 'me', true) }))
    const u = process.cpuUsage(cpu)
    return { us: (u.user + u.system) / (conc * 20), wall: (performance.now() - t) / 20 }
  }
  return { dir, store, schema, round, res: [] }
}
const cs = [await contender(dirA, 'a'), await contender(dirB, 'b')]
for (const c of cs) await c.round(Number(concArg))
for (let r = 0; r < Number(roundsArg); r++) for (const c of (r % 2 ? cs.slice().reverse() : cs)) c.res.push(await c.round(Number(concArg)))
const med = (v) => v.slice().sort((a, b) => a - b)[v.length >> 1]
for (const c of cs) console.log(c.dir, `CPU per append µs median ${med(c.res.map((r) => r.us)).toFixed(1)}, wall per wave ${med(c.res.map((r) => r.wall)).toFixed(1)} ms, groups ${c.store.groupWrites}`)
const ratios = cs[1].res.map((r, i) => r.us / cs[0].res[i].us)
console.log(`B/A per round: median ${med(ratios).toFixed(2)} (${ratios.map((r) => r.toFixed(2)).join(' ')})`)
for (const c of cs) await c.store.close()
await dropSchemas(PG_URL, cs.map((c) => c.schema))
