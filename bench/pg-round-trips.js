// Round trips to PostgreSQL per JSON run (issue 26), counted, not timed: every store on PostgreSQL, default options
// otherwise. `node bench/pg-round-trips.js [dir-of-a-build]` (a dir holding dist/index.js, as bench/compare.js takes;
// default: this checkout's build). Every query a pg client sends is one round trip (pg sends one at a time per
// connection, and waits for its answer); what the service's timers send meanwhile (lease renewals, polls) is counted
// over an idle stretch as long as the runs took, and taken off. BENCH_CONCURRENCY=50 sends the runs 50 at a time instead:
// what concurrent runs share (a group's statement on PostgreSQL, docs/stores.md "Round trips") is then one query for
// all of them, so the figure is statements per run under that load.
import { resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { jsonBody } from './lib/agents.js'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const RUNS = Number(process.env.BENCH_RUNS ?? 200)
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 1)

/** Counts every query sent by any pg client of this process, by its first words. */
export function countQueries () {
  const counts = new Map()
  const original = pg.Client.prototype.query
  pg.Client.prototype.query = function (config, ...rest) {
    const text = typeof config === 'string' ? config : config?.text ?? ''
    const kind = text.replace(/\s+/g, ' ').trim().slice(0, 60)
    counts.set(kind, (counts.get(kind) ?? 0) + 1)
    return original.call(this, config, ...rest)
  }
  return {
    total: () => [...counts.values()].reduce((a, b) => a + b, 0),
    snapshot: () => new Map(counts),
    restore: () => { pg.Client.prototype.query = original }
  }
}

export async function roundTrips (pkgDir, { runs = RUNS, concurrency = CONCURRENCY, log = console.log } = {}) {
  const pkg = pkgDir === undefined ? 'fastify-agents' : resolve(pkgDir, 'dist/index.js')
  const lib = await import(pkg)
  const schema = `fa_bench_rt_groupcommit_${process.pid}`
  const pool = new pg.Pool({ connectionString: PG_URL })
  const counter = countQueries()
  const stores = lib.postgresStores(pool, { schema })
  const service = lib.createAgentService({ agents: { echo: { async run (input) { return { output: input } } } }, logger: false, ...stores })
  const { url } = await service.listen({ port: 0, host: '127.0.0.1' })
  const body = jsonBody(1024)
  const run = async () => {
    const res = await fetch(`${url}/v1/agents/echo/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`)
    await res.arrayBuffer()
  }
  try {
    // the tables made, the pool's connections opened, the listeners listening
    for (let i = 0; i < 20; i++) await run()
    await sleep(300)
    const before = counter.snapshot()
    const t0 = performance.now()
    let sent = 0
    await Promise.all(Array.from({ length: concurrency }, async () => { while (sent++ < runs) await run() }))
    // what is written behind (the audit's group commit) is in by now
    await sleep(100)
    const took = performance.now() - t0
    const after = counter.snapshot()
    await sleep(took)
    const idle = counter.snapshot()
    const rows = []
    let perRun = 0
    for (const [kind, n] of after) {
      const during = n - (before.get(kind) ?? 0)
      const background = (idle.get(kind) ?? 0) - n
      const net = (during - background) / runs
      if (during === 0) continue
      perRun += net
      rows.push({ kind, perRun: Math.round(net * 100) / 100, background })
    }
    rows.sort((a, b) => b.perRun - a.perRun)
    for (const row of rows) log(`  ${row.perRun.toFixed(2).padStart(6)}  ${row.kind}${row.background > 0 ? `  (${row.background} while idle)` : ''}`)
    log(`round trips to PostgreSQL per JSON run: ${perRun.toFixed(2)} (${runs} runs, ${concurrency === 1 ? 'one after another' : `${concurrency} at a time`})`)
    return { perRun, rows }
  } finally {
    await service.close(0)
    // stores given a Pool are not closed by the service: closed here, their listeners' clients given back
    await Promise.all([...Object.values(stores).map((store) => store.close?.()), stores.idempotency.store.close()])
    await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
    counter.restore()
    await pool.end()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await roundTrips(process.argv[2])
