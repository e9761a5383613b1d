// CPU profile of a bench server under load: `node bench/profile.js [preset]` (after `npm run build`),
// or `node bench/profile.js <file.cpuprofile>` to summarise one taken earlier; `node bench/profile.js
// [preset] --alloc` samples allocations instead (bytes allocated per request, by the function allocating).
//   preset: default (JSON echo run, the default), ephemeral (the same with `store: false`), full, sqlite (the default with the SQLite audit store, in
//   a file under /tmp), sse (100-delta SSE run), bare (bare Fastify), or
//   bare-schemas (bare Fastify validating and serializing with the service's schemas), raw-sse (the
//   node:http SSE reference), raw-sse-generator (the same, fed by the ticker agent's generator), sse-continue (the sse
//   run with onDisconnect 'continue'), sse-sqlite, sse-postgres, sse-redis (the sse run with its log in SQLite, PostgreSQL, Redis), all-postgres (the JSON run with every store on PostgreSQL), responses and chat-completions (the ticker streamed as /v1/responses and
//   /v1/chat/completions), mcp (a tools/call of the ticker with progress on /v1/mcp), handwritten
//   (the contract's work for a JSON run written by hand on bare Fastify: bench/presets.js)
// Starts the server pinned to core 0, warms it up, then profiles it (the inspector's CPU profiler, as
// --cpu-prof uses, but only over the measured window) while loading it from core 1 for BENCH_DURATION
// seconds (default 10), and prints the self time by function and by package. The .cpuprofile is kept in
// bench/profiles/ (*.cpuprofile is gitignored) for chrome://inspect or speedscope.
import { mkdirSync, readFileSync, rmSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { join, relative } from 'node:path'
import { load, pinLoadGenerator, startServer } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const DIR = fileURLToPath(new URL('./profiles/', import.meta.url))

const presets = {
  default: { spec: { kind: 'service', preset: { name: 'default' } }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } },
  ephemeral: { spec: { kind: 'service', preset: { name: 'default' } }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...JSON.parse(jsonBody(1024)), store: false }) } },
  full: {
    spec: { kind: 'service', preset: { name: 'full', apiKey: 'bench-key-0123456789abcdef', adminToken: 'bench-admin-token-0123456789' } },
    request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json', 'x-api-key': 'bench-key-0123456789abcdef' }, body: jsonBody(1024) }
  },
  sqlite: { spec: { kind: 'service', preset: { name: 'sqlite', file: `/tmp/fastify-agents-profile-${process.pid}.db` } }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } },
  sse: { spec: { kind: 'service', preset: { name: 'default' } }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }) } },
  // the sse run with its record and log in SQLite (issue 26)
  'sse-sqlite': { spec: { kind: 'service', preset: { name: 'runs-sqlite', file: `/tmp/fastify-agents-profile-runs-${process.pid}.db` } }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }) } },
  // the same with its log in PostgreSQL / Redis (a schema / prefix of the profile's own, left behind: drop it after)
  'sse-postgres': { spec: { kind: 'service', preset: { name: 'runs-postgres', url: process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test', schema: `fa_profile_runs_${process.pid}` } }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }) } },
  'sse-redis': { spec: { kind: 'service', preset: { name: 'runs-redis', url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: `fa-profile-runs-${process.pid}:` } }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }) } },
  // a JSON run with every store on PostgreSQL (issue 26; a schema of the profile's own, left behind: drop it after)
  'all-postgres': { spec: { kind: 'service', preset: { name: 'all-postgres', url: process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test', schema: `fa_profile_all_${process.pid}` } }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } },
  'sse-continue': { spec: { kind: 'service', preset: { name: 'default' } }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 }, onDisconnect: 'continue' }) } },
  responses: { spec: { kind: 'service', preset: { name: 'default' } }, request: { path: '/v1/responses', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'ticker', input: 'go', stream: true }) } },
  mcp: {
    spec: { kind: 'service', preset: { name: 'default' } },
    request: {
      path: '/v1/mcp',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'ticker', arguments: { input: { deltas: 100 } }, _meta: { progressToken: 1 } } })
    }
  },
  'chat-completions': { spec: { kind: 'service', preset: { name: 'default' } }, request: { path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'ticker', messages: [{ role: 'user', content: 'go' }], stream: true }) } },
  'bare-schemas': { spec: { kind: 'bare-fastify', schemas: true }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } },
  'raw-sse': { spec: { kind: 'raw-sse' }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }) } },
  'raw-sse-generator': { spec: { kind: 'raw-sse', generator: true }, request: { path: '/v1/agents/ticker/runs', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: 100 } }) } },
  'null-stores': { spec: { kind: 'service', preset: { name: 'null-stores' } }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } },
  handwritten: { spec: { kind: 'handwritten' }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } },
  bare: { spec: { kind: 'bare-fastify' }, request: { path: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: jsonBody(1024) } }
}

if (pinLoadGenerator()) await main()

async function main () {
  const name = process.argv[2] ?? 'default'
  // `node bench/profile.js some.cpuprofile`: summarise a profile taken earlier
  if (name.endsWith('.cpuprofile')) return summarise(name, Number(process.env.PROFILE_TOP ?? 40))
  const preset = presets[name]
  if (preset === undefined) throw new Error(`unknown preset ${name}; one of ${Object.keys(presets).join(', ')}`)
  const seconds = Number(process.env.BENCH_DURATION ?? 10)
  mkdirSync(DIR, { recursive: true })
  if (process.argv.includes('--alloc')) return allocations(name, preset, seconds)
  const file = join(DIR, `${name}-${Date.now()}.cpuprofile`)
  const result = await underLoad(preset, seconds, 'profile-start', 'profile-stop', file)
  console.log(`${name}: ${result.rps.toFixed(0)} req/s, p99 ${result.p99.toFixed(2)} ms, ${result.non2xx + result.errors} failed, ${result.ok} requests profiled`)
  summarise(file, Number(process.env.PROFILE_TOP ?? 40))
}

function place (callFrame) {
  const url = callFrame.url
  if (url === '') return '(native)'
  if (url.startsWith('node:')) return url
  const path = url.startsWith('file://') ? fileURLToPath(url) : url
  const nm = path.lastIndexOf('node_modules/')
  if (nm !== -1) {
    const rest = path.slice(nm + 13).split('/')
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]
  }
  return relative(ROOT, path)
}

function summarise (file, top) {
  const profile = JSON.parse(readFileSync(file, 'utf8'))
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const selfTicks = new Map()
  for (const id of profile.samples) selfTicks.set(id, (selfTicks.get(id) ?? 0) + 1)
  const total = profile.samples.length
  const parent = new Map()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)

  const bySelf = new Map()
  const byPackage = new Map()
  const inclusive = new Map()
  for (const [id, ticks] of selfTicks) {
    const node = byId.get(id)
    const cf = node.callFrame
    const key = `${cf.functionName || '(anonymous)'} ${place(cf)}${cf.url && !cf.url.startsWith('node:') ? `:${cf.lineNumber + 1}` : ''}`
    bySelf.set(key, (bySelf.get(key) ?? 0) + ticks)
    const pkg = place(cf).startsWith('dist/') ? place(cf) : place(cf).startsWith('node:') ? 'node internals' : place(cf)
    byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + ticks)
    // inclusive time per function: each function counted once per sample even when recursive
    const seen = new Set()
    for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur).callFrame
      const k = `${f.functionName || '(anonymous)'} ${place(f)}${f.url && !f.url.startsWith('node:') ? `:${f.lineNumber + 1}` : ''}`
      if (seen.has(k)) continue
      seen.add(k)
      inclusive.set(k, (inclusive.get(k) ?? 0) + ticks)
    }
  }
  const pct = (n) => `${((100 * n) / total).toFixed(1).padStart(5)}%`
  const print = (title, map, n) => {
    console.log(`\n${title}`)
    for (const [k, v] of [...map].sort((a, b) => b[1] - a[1]).slice(0, n)) console.log(`${pct(v)}  ${k}`)
  }
  print('self time by package / file', byPackage, 30)
  print('self time by function', bySelf, top)
  const ours = new Map([...inclusive].filter(([k]) => k.includes(' dist/') || k.includes(' bench/')))
  print('inclusive time, our functions', ours, top)
  console.log(`\n${total} samples; ${file}`)
}

/**
 * Starts the preset's server, warms it up outside the measured window (what is left is the steady state),
 * then has it `start` a profiler, loads it for `seconds` and has it `stop` into `file`.
 */
async function underLoad (preset, seconds, start, stop, file) {
  const server = await startServer(preset.spec)
  try {
    await load({ ...preset.request, method: 'POST', url: server.url, duration: 3, connections: 50 })
    await server.call(start)
    const result = await load({ ...preset.request, method: 'POST', url: server.url, duration: seconds, connections: 50 })
    await server.call(stop, 60_000, file)
    return result
  } finally {
    await server.stop()
    if (preset.spec.preset?.file !== undefined) for (const suffix of ['', '-wal', '-shm']) rmSync(preset.spec.preset.file + suffix, { force: true })
  }
}

/** The sampling heap profiler over the measured window, counting what young GCs collect too. */
async function allocations (name, preset, seconds) {
  const file = join(DIR, `${name}-${Date.now()}.heapprofile`)
  const result = await underLoad(preset, seconds, 'alloc-start', 'alloc-stop', file)
  const bySite = new Map()
  const walk = (node) => {
    const cf = node.callFrame
    const key = `${cf.functionName || '(anonymous)'} ${place(cf)}${cf.url && !cf.url.startsWith('node:') ? `:${cf.lineNumber + 1}` : ''}`
    if (node.selfSize > 0) bySite.set(key, (bySite.get(key) ?? 0) + node.selfSize)
    for (const child of node.children) walk(child)
  }
  walk(JSON.parse(readFileSync(file, 'utf8')).head)
  let total = 0
  for (const bytes of bySite.values()) total += bytes
  console.log(`${name}: ${result.ok} requests, ${(total / result.ok).toFixed(0)} bytes allocated per request (sampled), by function:`)
  const top = Number(process.env.PROFILE_TOP ?? 40)
  for (const [key, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(bytes / result.ok).toFixed(0).padStart(7)} B  ${key}`)
  console.log(`\n${file}`)
}
