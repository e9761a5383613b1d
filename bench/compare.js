// Two builds of the package, A/B, in one run: `node bench/compare.js <dir-a> <dir-b> [json|ephemeral|full|sse|sse-sqlite|sse-postgres|json-postgres|idle ...]`
// Each dir holds a built package (dir/dist/index.js), e.g. `git archive <commit> | tar -x -C /tmp/a`,
// `ln -s $PWD/node_modules /tmp/a/`, `(cd /tmp/a && npx tsc -p tsconfig.build.json)`.
// The three servers (bare Fastify, or node:http for SSE; A; B) stay up and get short bursts in turn (BENCH_BURSTS, default 12,
// of BENCH_BURST seconds, default 1): on a machine shared with other work, CPU time per request compared
// burst by burst is steadier than throughput. Heap per idle stream is measured once per build.
import { rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { dropSchemas } from './lib/pg.js'
import { config, cpuMeter, load, pinLoadGenerator, startServer } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'
import { metricRows, printScenario } from './lib/report.js'
import { measureIdle } from './sse-idle.js'

const API_KEY = 'bench-key-0123456789abcdef'
const workloads = {
  json: { preset: { name: 'default' }, request: { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json' }, body: jsonBody(1024), connections: 50 } },
  full: {
    preset: { name: 'full', apiKey: API_KEY, adminToken: 'bench-admin-token-0123456789' },
    request: { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': API_KEY }, body: jsonBody(1024), connections: 50 }
  },
  // the same run with `store: false`: no session, its record and log dropped at its end
  ephemeral: { preset: { name: 'default' }, request: { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...JSON.parse(jsonBody(1024)), store: false }), connections: 50 } },
  sse: { preset: { name: 'default' }, request: { path: '/v1/agents/ticker/runs', method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }), connections: 50 } }
}
// the SSE run with its record and log in SQLite: a file of each build's own
workloads['sse-sqlite'] = { preset: (build) => ({ name: 'runs-sqlite', file: join(tmpdir(), `fa-compare-${build}-${process.pid}.db`) }), request: workloads.sse.request }
// the SSE run with its log in PostgreSQL, and the JSON run with every store on PostgreSQL: a schema of each build's
// own, dropped at the end (as the SQLite files are removed)
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
workloads['sse-postgres'] = { preset: (build) => ({ name: 'runs-postgres', url: PG_URL, schema: `fa_compare_sse_${build}_${process.pid}` }), request: workloads.sse.request }
workloads['json-postgres'] = { preset: (build) => ({ name: 'all-postgres', url: PG_URL, schema: `fa_compare_json_${build}_${process.pid}` }), request: workloads.json.request }

const BURSTS = Number(process.env.BENCH_BURSTS ?? 12)
const BURST = Number(process.env.BENCH_BURST ?? 1)

/** Starts every contender once, warms each up, then loads them in turn, burst after burst. */
async function interleave (contenders, request) {
  const servers = []
  try {
    for (const c of contenders) servers.push(await startServer(c.spec))
    for (const server of servers) await load({ ...request, url: server.url, duration: config.warmup })
    const results = Object.fromEntries(contenders.map((c) => [c.name, []]))
    for (let burst = 0; burst < BURSTS; burst++) {
      for (const [i, c] of contenders.entries()) {
        const cpu = cpuMeter([servers[i].pid])
        const result = await load({ ...request, url: servers[i].url, duration: BURST })
        Object.assign(result, cpu.stop(result.ok))
        results[c.name].push(result)
      }
    }
    for (const c of contenders) {
      const cpu = results[c.name].map((r) => r.cpuUsPerRequest).sort((a, b) => a - b)
      console.log(`  ${c.name}: CPU/req per burst ${cpu.map((v) => v.toFixed(0)).join(' ')} µs`)
    }
    return results
  } finally {
    for (const server of servers) await server.stop()
  }
}

if (pinLoadGenerator()) await main()

async function main () {
  const [a, b, ...names] = process.argv.slice(2)
  if (a === undefined || b === undefined) throw new Error('usage: node bench/compare.js <dir-a> <dir-b> [json|ephemeral|full|sse|sse-sqlite|idle ...]')
  const pkg = (dir) => resolve(dir, 'dist/index.js')
  const labels = { A: `A ${a}`, B: `B ${b}` }
  console.log(`${labels.A} vs ${labels.B}: ${BURSTS} bursts of ${BURST} s each, after ${config.warmup} s of warm-up`)
  for (const name of names.length > 0 ? names : ['json', 'sse', 'idle']) {
    if (name === 'idle') {
      const count = Number(process.env.BENCH_SSE_STREAMS ?? 2000)
      const log = (line) => console.log(line)
      const ra = await measureIdle({ kind: 'service', preset: { name: 'default' }, pkg: pkg(a) }, count, { heartbeat: false, sessions: true, log })
      const rb = await measureIdle({ kind: 'service', preset: { name: 'default' }, pkg: pkg(b) }, count, { heartbeat: false, sessions: true, log })
      console.log(`\n## idle: heap per open stream A ${ra.perStreamKB.toFixed(2)} KB, B ${rb.perStreamKB.toFixed(2)} KB (B/A ${(rb.perStreamKB / ra.perStreamKB).toFixed(2)})`)
      continue
    }
    const workload = workloads[name]
    const contenders = [
      name.startsWith('sse') ? { name: 'node:http SSE', spec: { kind: 'raw-sse' } } : { name: 'bare fastify', spec: { kind: 'bare-fastify' } },
      { name: 'A', spec: { kind: 'service', preset: presetOf(workload, 'a'), pkg: pkg(a) } },
      { name: 'B', spec: { kind: 'service', preset: presetOf(workload, 'b'), pkg: pkg(b) } }
    ]
    let results
    try {
      results = await interleave(contenders, workload.request)
    } finally {
      await dropMade([presetOf(workload, 'a'), presetOf(workload, 'b')])
    }
    const rows = [
      ...metricRows(results, 'rps', { unit: 'req/s', baseline: 'A' }),
      ...metricRows(results, 'p99', { unit: 'ms', baseline: 'A' }),
      ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'A' })
    ]
    printScenario(name, { title: `${labels.B} against ${labels.A}`, rows, targets: [] })
  }
}

/** The schemas and SQLite files the builds' presets made. */
async function dropMade (presets) {
  for (const preset of presets) {
    if (preset.file !== undefined) for (const suffix of ['', '-wal', '-shm']) rmSync(preset.file + suffix, { force: true })
  }
  await dropSchemas(PG_URL, presets.flatMap((preset) => preset.schema === undefined ? [] : [preset.schema]))
}

function presetOf (workload, build) {
  return typeof workload.preset === 'function' ? workload.preset(build) : workload.preset
}
