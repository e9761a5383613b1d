// Prices each feature on its own: `node bench/presets.js [contender ...]` (after `npm run build`).
// Every server (bare Fastify first, then each contender) stays up; they get short bursts in turn
// (BENCH_BURSTS, default 8, of BENCH_BURST s, default 1), and the table gives, per contender, the median
// CPU time per request, its excess over bare Fastify, req/s and their ratio, and the time spent in GC.
// Contenders:
//   a service preset of bench/lib/server.js: default short-sessions no-sessions no-audit null-stores auth
//     rate-limit idempotency admin full max-sessions-<n> (the memory session store bounded at n)
//   bare-schemas   bare Fastify validating and serializing with the service's schemas
//   bare-hooks     bare Fastify with no-op hooks (3 onRequest, onSend, onResponse)
//   naive          the calibration: Fastify + CORS + rate limit + request-id hook + TypeBox
//   handwritten    the contract's work for a JSON run, by hand: ids, a session and an audit entry kept;
//                  handwritten-without-sessions, -without-audit, -without-sessions-audit leave parts out
//   spin-<µs>      bare Fastify burning that many µs of CPU per request: what a µs costs on this machine
// BENCH_NODE_ARGS: extra node flags for every server (e.g. "--max-semi-space-size=64").
import { config, cpuMeter, load, median, pinLoadGenerator, startServer } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'

const API_KEY = 'bench-key-0123456789abcdef'
const BURSTS = Number(process.env.BENCH_BURSTS ?? 8)
const BURST = Number(process.env.BENCH_BURST ?? 1)
const DEFAULT_CONTENDERS = ['bare-schemas', 'naive', 'handwritten', 'default', 'no-sessions', 'null-stores', 'full']

function contender (name) {
  if (name === 'bare') return { kind: 'bare-fastify' }
  if (name === 'bare-schemas') return { kind: 'bare-fastify', schemas: true }
  if (name === 'bare-hooks') return { kind: 'bare-fastify', hooks: ['onRequest', 'onRequest', 'onRequest', 'onSend', 'onResponse'] }
  if (name === 'naive') return { kind: 'naive' }
  if (name.startsWith('spin-')) return { kind: 'bare-fastify', spinUs: Number(name.slice('spin-'.length)) }
  if (name.startsWith('handwritten')) {
    const without = name.startsWith('handwritten-without-') ? name.slice('handwritten-without-'.length).split('-') : []
    return { kind: 'handwritten', without }
  }
  const bounded = /^max-sessions-(\d+)$/.exec(name)
  if (bounded !== null) return { kind: 'service', preset: { name: 'max-sessions', maxSessions: Number(bounded[1]) } }
  return { kind: 'service', preset: { name, apiKey: API_KEY, adminToken: 'bench-admin-token-0123456789' } }
}

const gcMicros = (before, after) => (after.minor + after.major + after.other) - (before.minor + before.major + before.other)
const majorMicros = (before, after) => after.major - before.major

if (pinLoadGenerator()) await main()

async function main () {
  const names = ['bare', ...(process.argv.length > 2 ? process.argv.slice(2) : DEFAULT_CONTENDERS)]
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean)
  // the api key is sent to every contender: those without auth ignore it
  const request = { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': API_KEY }, body: jsonBody(1024), connections: 50 }
  const servers = []
  try {
    for (const name of names) servers.push(await startServer(contender(name), { nodeArgs }))
    for (const server of servers) await load({ ...request, url: server.url, duration: config.warmup })
    const figures = Object.fromEntries(names.map((name) => [name, { cpu: [], rps: [], gc: [], major: [] }]))
    for (let burst = 0; burst < BURSTS; burst++) {
      for (const [i, name] of names.entries()) {
        const meter = cpuMeter([servers[i].pid])
        const gc0 = await servers[i].call('gc')
        const result = await load({ ...request, url: servers[i].url, duration: BURST })
        const gc1 = await servers[i].call('gc')
        if (result.non2xx + result.errors > 0) throw new Error(`${name}: ${result.non2xx} non-2xx, ${result.errors} errors`)
        figures[name].cpu.push(meter.stop(result.ok).cpuUsPerRequest)
        figures[name].rps.push(result.rps)
        figures[name].gc.push(gcMicros(gc0, gc1) * 1000 / result.ok)
        figures[name].major.push(majorMicros(gc0, gc1) * 1000 / result.ok)
      }
    }
    const baseCpu = median(figures.bare.cpu)
    const baseRps = median(figures.bare.rps)
    console.log(`${BURSTS} bursts of ${BURST} s each, contenders in turn; medians`)
    console.log(`${'contender'.padEnd(30)} ${'CPU/req'.padStart(9)} ${'over bare'.padStart(10)} ${'req/s'.padStart(7)} ${'ratio'.padStart(6)} ${'GC/req'.padStart(8)} ${'major'.padStart(8)}`)
    for (const name of names) {
      const cpu = median(figures[name].cpu)
      const rps = median(figures[name].rps)
      console.log(`${name.padEnd(30)} ${cpu.toFixed(1).padStart(6)} µs ${('+' + (cpu - baseCpu).toFixed(1)).padStart(7)} µs ${rps.toFixed(0).padStart(7)} ${(rps / baseRps).toFixed(2).padStart(6)} ${median(figures[name].gc).toFixed(1).padStart(5)} µs ${median(figures[name].major).toFixed(1).padStart(5)} µs`)
    }
  } finally {
    for (const server of servers) await server.stop()
  }
}
