// Issue 26's SQLite ratio for several builds in one run: `node bench/run-log-ab.js <dir> [<dir> ...]` (each dir a
// built package, as for bench/compare.js). Every build serves the 100-delta SSE run twice, its log in memory and in
// SQLite; all the servers stay up and get short bursts in turn (BENCH_BURSTS, default 12, of BENCH_BURST seconds,
// default 4), so that a loaded machine's swings fall on every contender alike. Prints, per build, the ratio of CPU per
// stream (memory / SQLite: the target's ≥ 0.80) of the medians, and the lowest and highest per-burst ratio.
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { rmSync } from 'node:fs'
import { config, cpuMeter, load, pinLoadGenerator, startServer } from './lib/harness.js'

const BURSTS = Number(process.env.BENCH_BURSTS ?? 12)
const BURST = Number(process.env.BENCH_BURST ?? 4)
const request = {
  path: '/v1/agents/ticker/runs',
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
  body: JSON.stringify({ input: { deltas: 100 } }),
  connections: 50
}

if (pinLoadGenerator()) await main()

async function main () {
  const dirs = process.argv.slice(2)
  if (dirs.length === 0) throw new Error('usage: node bench/run-log-ab.js <dir> [<dir> ...]')
  const files = []
  const contenders = []
  for (const [i, dir] of dirs.entries()) {
    const pkg = resolve(dir, 'dist/index.js')
    const file = join(tmpdir(), `fa-run-log-ab-${process.pid}-${i}.db`)
    files.push(file)
    contenders.push({ name: `memory ${dir}`, spec: { kind: 'service', preset: { name: 'default' }, pkg } })
    contenders.push({ name: `sqlite ${dir}`, spec: { kind: 'service', preset: { name: 'runs-sqlite', file }, pkg } })
  }
  console.log(`${contenders.length} servers, ${BURSTS} bursts of ${BURST} s each in turn, after ${config.warmup} s of warm-up`)
  const servers = []
  try {
    for (const c of contenders) servers.push(await startServer(c.spec))
    for (const server of servers) await load({ ...request, url: server.url, duration: config.warmup })
    const cpu = contenders.map(() => [])
    for (let burst = 0; burst < BURSTS; burst++) {
      for (const [i, server] of servers.entries()) {
        const meter = cpuMeter([server.pid])
        const result = await load({ ...request, url: server.url, duration: BURST })
        // a burst that ended no stream (a very loaded machine) tells nothing
        if (result.ok > 0) cpu[i].push(meter.stop(result.ok).cpuUsPerRequest)
        else cpu[i].push(null)
      }
    }
    const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)]
    for (const [i, dir] of dirs.entries()) {
      const both = cpu[2 * i].map((m, b) => [m, cpu[2 * i + 1][b]]).filter(([m, s]) => m !== null && s !== null)
      const memory = both.map(([m]) => m)
      const sqlite = both.map(([, s]) => s)
      const perBurst = both.map(([m, s]) => m / s)
      console.log(`${dir}: memory ${median(memory).toFixed(0)} µs, SQLite ${median(sqlite).toFixed(0)} µs CPU per stream; ` +
        `memory / SQLite ${(median(memory) / median(sqlite)).toFixed(2)} (bursts ${Math.min(...perBurst).toFixed(2)}-${Math.max(...perBurst).toFixed(2)}, ` +
        `median of bursts ${median(perBurst).toFixed(2)})`)
    }
  } finally {
    for (const server of servers) await server.stop()
    for (const file of files) for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true })
  }
}
