// npm run bench:peers: fastify-agents against the systems a user would pick instead, Mastra (its Hono
// server) and LangGraph's JS API server (in-memory mode), each serving the same JSON run, the same
// 100-delta stream and idle streams. Servers on core 0, load on core 1, alternated round by round
// (A B C A B C ...) by bench/lib/harness.js; ratios against ours. Figures in bench/peers/results.json,
// how each peer is set up and what it does per request in bench/README.md ("Peers").
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import { fileURLToPath } from 'node:url'
import { alternate, config, cpuMeter, load, median, pinLoadGenerator, sleep } from '../lib/harness.js'
import { jsonBody } from '../lib/agents.js'
import { openMany as openIdle } from '../sse-idle.js'

const HERE = fileURLToPath(new URL('.', import.meta.url))
const IDLE_STREAMS = Number(process.env.BENCH_PEERS_IDLE_STREAMS ?? 2_000)
// LangGraph's queue scans every run for each worker's poll: 2,000 idle runs take it ~10 minutes to start
const LANGGRAPH_IDLE_STREAMS = Math.min(IDLE_STREAMS, Number(process.env.BENCH_PEERS_LANGGRAPH_IDLE_STREAMS ?? 500))
const IDLE_ROUNDS = Number(process.env.BENCH_PEERS_IDLE_ROUNDS ?? Math.min(3, config.rounds))
const PHASES = ['json', 'stream', 'idle']
const DELTAS = 100
const OURS = 'fastify-agents'

const json = { 'content-type': 'application/json' }
const sse = { 'content-type': 'application/json', accept: 'text/event-stream' }
const body = jsonBody(1024)
const input = JSON.parse(body).input

/**
 * Each contender's three requests, what marks a delta (`delta`) and the first event of an idle stream
 * (`started`) in its answer, and about how many JSON runs and streams it serves per second here (`rate`):
 * a round is a fixed number of requests, about `BENCH_DURATION` seconds' worth, so that no request is
 * cut off at its end (a peer's stream takes seconds under load).
 */
const contenders = [
  {
    name: OURS,
    spec: { kind: 'service', preset: { name: 'default' } },
    json: { path: '/v1/agents/echo/runs', headers: json, body },
    stream: { path: '/v1/agents/ticker/runs', headers: sse, body: JSON.stringify({ input: { deltas: DELTAS } }) },
    idle: { path: '/v1/agents/idle/runs', headers: sse, body: JSON.stringify({ input: 'idle' }) },
    delta: 'event: message.delta\n',
    started: 'event: run.started\n',
    rate: { json: 4_000, stream: 350 }
  },
  {
    // ours with the AI SDK adapter over the same mock model as Mastra's (bench/lib/ai-sdk-agent.js): the
    // model's side of a stream priced alike; streams only
    name: 'fastify-agents + AI SDK',
    phases: ['stream'],
    spec: { kind: 'service', preset: { name: 'adapter' } },
    stream: { path: '/v1/agents/ai-ticker/runs', headers: sse, body: JSON.stringify({ input: { deltas: DELTAS } }) },
    delta: 'event: message.delta\n',
    rate: { stream: 40 }
  },
  {
    name: 'Mastra',
    spec: {},
    startOptions: { script: HERE + 'mastra.js' },
    // the same 1 KB body, as the user's message; the mock model answers with it
    json: { path: '/api/agents/echo/generate', headers: json, body: JSON.stringify({ messages: [{ role: 'user', content: body }] }) },
    stream: { path: '/api/agents/ticker/stream', headers: json, body: JSON.stringify({ messages: [{ role: 'user', content: 'go' }] }) },
    idle: { path: '/api/agents/idle/stream', headers: json, body: JSON.stringify({ messages: [{ role: 'user', content: 'idle' }] }) },
    delta: '"type":"text-delta"',
    started: '"type":"start"',
    rate: { json: 40, stream: 20 }
  },
  {
    name: 'LangGraph JS API',
    // one worker per connection of the load, so that no run waits for a worker (the CLI's default is 10)
    spec: { workers: 50 },
    // a worker per idle run; a stateless run goes on when its client leaves (only a thread's run is
    // cancelled on disconnect): the warm-up's idle runs keep theirs
    idleSpec: { workers: LANGGRAPH_IDLE_STREAMS + 200 },
    idleStreams: LANGGRAPH_IDLE_STREAMS,
    startOptions: { script: HERE + 'langgraph.js' },
    json: { path: '/runs/wait', headers: json, body: JSON.stringify({ assistant_id: 'echo', input: { input } }) },
    // on_disconnect: the stream's reader stops when its client leaves (ours and Mastra's do)
    stream: { path: '/runs/stream', headers: json, body: JSON.stringify({ assistant_id: 'ticker', input: { input: 'go' }, stream_mode: ['custom'], on_disconnect: 'cancel' }) },
    idle: { path: '/runs/stream', headers: json, body: JSON.stringify({ assistant_id: 'idle', input: { input: 'idle' }, stream_mode: ['custom'], on_disconnect: 'cancel' }) },
    delta: 'event: custom\n',
    started: 'event: metadata\n',
    rate: { json: 50, stream: 15 }
  }
]

if (installPeers() && pinLoadGenerator()) await main()

/** npm ci in bench/peers when its node_modules is missing or older than its lockfile. */
function installPeers () {
  if (process.env.BENCH_PINNED === '1') return true
  const installed = HERE + 'node_modules/.package-lock.json'
  if (existsSync(installed) && statSync(installed).mtimeMs >= statSync(HERE + 'package-lock.json').mtimeMs) return true
  console.log('installing the peers in bench/peers (npm ci)')
  const result = spawnSync('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts'], { cwd: HERE, stdio: 'inherit' })
  if (result.status !== 0) {
    process.exitCode = result.status ?? 1
    return false
  }
  return true
}

async function main () {
  const phases = process.argv.slice(2).length > 0 ? process.argv.slice(2) : PHASES
  const unknown = phases.filter((p) => !PHASES.includes(p))
  if (unknown.length > 0) throw new Error(`unknown phase ${unknown.join(', ')}; one of ${PHASES.join(', ')}`)
  const started = Date.now()
  const log = (line) => console.log(line)
  console.log(`fastify-agents against its peers (${config.rounds} rounds, ${config.warmup} s warm-up, ${config.duration} s measured; idle: ${IDLE_ROUNDS} rounds of ${IDLE_STREAMS} streams, LangGraph ${LANGGRAPH_IDLE_STREAMS}; servers on core 0, load on core 1)`)
  // phases measured alone replace theirs in the last results.json and keep the others
  const raw = phases.length < PHASES.length && existsSync(HERE + 'results.json') ? JSON.parse(readFileSync(HERE + 'results.json', 'utf8')).raw : {}

  if (phases.includes('json')) {
    console.log('\n# JSON run: 1 KB JSON body, 50 connections')
    raw.json = await alternate(contenders.filter(inPhase('json')), async (server, contender, round) => {
      if (round === 1) await checkJson(server.url, contender)
      return countedRound(server, { ...contender.json, method: 'POST', connections: 50 }, contender.rate.json)
    }, { log })
    save(started, raw)
  }

  if (phases.includes('stream')) {
    console.log(`\n# SSE run of ${DELTAS} deltas, one per tick, 50 connections`)
    raw.stream = await alternate(contenders.filter(inPhase('stream')), async (server, contender, round) => {
      if (round === 1) await checkStream(server.url, contender)
      return countedRound(server, { ...contender.stream, method: 'POST', connections: 50 }, contender.rate.stream)
    }, { log })
    save(started, raw)
  }

  if (phases.includes('idle')) {
    console.log(`\n# idle streams: JS heap per stream after GC`)
    const idleContenders = contenders.filter(inPhase('idle')).map((c) => ({ ...c, spec: c.idleSpec ?? c.spec }))
    raw.idle = await alternate(idleContenders, (server, contender) => measureIdle(server, contender), { rounds: IDLE_ROUNDS, log: () => {} })
  }

  const report = save(started, raw)
  printTable(report.measures)
  for (const [what, results] of Object.entries(raw)) {
    for (const [name, rounds] of Object.entries(results)) {
      rounds.forEach((r, i) => {
        const failed = (r.errors ?? 0) + (r.timeouts ?? 0) + (r.non2xx ?? 0)
        if (failed > 0) console.log(`${what}, ${name}, round ${i + 1}: ${failed} requests failed or timed out${r.firstError ? ` (${r.firstError})` : ''}`)
      })
    }
  }
  console.log(`\n${report.seconds} s; results in bench/peers/results.json`)
}

function inPhase (phase) {
  return (contender) => contender.phases === undefined || contender.phases.includes(phase)
}

/** Writes what has been measured so far to bench/peers/results.json. */
function save (started, raw) {
  const measures = [
    { measure: 'JSON run, CPU per request', unit: 'µs', phase: 'json', pick: (r) => r.cpuUsPerRequest },
    { measure: 'JSON run, requests/s', unit: '/s', phase: 'json', pick: (r) => r.rps },
    { measure: 'JSON run, p99', unit: 'ms', phase: 'json', pick: (r) => r.p99 },
    { measure: `SSE run of ${DELTAS} deltas, CPU per stream`, unit: 'µs', phase: 'stream', pick: (r) => r.cpuUsPerRequest },
    { measure: `SSE run of ${DELTAS} deltas, streams/s`, unit: '/s', phase: 'stream', pick: (r) => r.rps },
    { measure: 'heap per idle stream', unit: 'KB', phase: 'idle', pick: (r) => r.perStreamKB }
  ].filter((m) => raw[m.phase] !== undefined).map((m) => summarise({ ...m, results: raw[m.phase] }))
  const report = {
    startedAt: new Date(started).toISOString(),
    commit: gitCommit(),
    node: process.version,
    cpus: os.cpus().map((c) => c.model).filter((m, i, all) => all.indexOf(m) === i),
    config: { ...config, idleRounds: IDLE_ROUNDS, idleStreams: IDLE_STREAMS, langGraphIdleStreams: LANGGRAPH_IDLE_STREAMS },
    versions: peerVersions(),
    measures,
    // the share of the machine other processes used in each load round
    noise: Object.fromEntries(contenders.map((c) => [c.name, [...raw.json?.[c.name] ?? [], ...raw.stream?.[c.name] ?? []].map((r) => round2(r.foreignCpu))])),
    raw,
    seconds: Math.round((Date.now() - started) / 1000)
  }
  writeFileSync(HERE + 'results.json', JSON.stringify(report, null, 2) + '\n')
  return report
}

/**
 * A warm-up, then `rate` × BENCH_DURATION requests (at least 100) with the server's CPU time counted. A
 * peer's 50 streams at once take several seconds each on a shared core: 60 s before a request times out.
 */
async function countedRound (server, request, rate) {
  request = { ...request, timeout: 60 }
  const warmup = await load({ ...request, url: server.url, amount: Math.max(50, Math.round(rate * config.warmup)) })
  const cpu = cpuMeter([server.pid])
  const result = await load({ ...request, url: server.url, amount: Math.max(100, Math.round(rate * config.duration)) })
  Object.assign(result, cpu.stop(result.ok))
  result.warmupOk = warmup.ok
  return result
}

/** Medians over the rounds and, for each peer, the ratio to ours: of the medians, and its lowest and highest per round. */
function summarise ({ measure, unit, phase, results, pick }) {
  const ours = results[OURS].map(pick)
  const contendersOut = {}
  for (const [name, rounds] of Object.entries(results)) {
    const values = rounds.map(pick)
    const row = { median: median(values), min: Math.min(...values), max: Math.max(...values), values }
    if (name !== OURS) {
      const perRound = values.map((v, i) => v / ours[i])
      row.ratio = row.median / median(ours)
      row.ratioRange = [Math.min(...perRound), Math.max(...perRound)]
    }
    contendersOut[name] = row
  }
  return { measure, unit, phase, contenders: contendersOut }
}

function printTable (measures) {
  const names = contenders.map((c) => c.name).filter((name) => measures.some((m) => m.contenders[name] !== undefined))
  const fmt = (n, unit) => unit === 'KB' || unit === 'ms' ? n.toFixed(1) : Math.round(n).toLocaleString('en-US')
  const ratio = (n) => n >= 10 ? Math.round(n).toString() : n.toFixed(2)
  console.log(`\n| measure | ${names.join(' | ')} |`)
  console.log(`|---|${names.map(() => '---').join('|')}|`)
  for (const m of measures) {
    const cells = names.map((name) => {
      const r = m.contenders[name]
      if (r === undefined) return '-'
      const value = `${fmt(r.median, m.unit)} ${m.unit} (${fmt(r.min, m.unit)}–${fmt(r.max, m.unit)})`
      return r.ratio === undefined ? value : `${value}, **${ratio(r.ratio)}×** (${ratio(r.ratioRange[0])}–${ratio(r.ratioRange[1])})`
    })
    console.log(`| ${m.measure} | ${cells.join(' | ')} |`)
  }
}

// Correctness first: a fast wrong answer is not a result.
async function checkJson (url, contender) {
  const response = await fetch(url + contender.json.path, { method: 'POST', headers: contender.json.headers, body: contender.json.body })
  const text = await response.text()
  const echoed = contender.name === 'Mastra' ? JSON.parse(text).text === body : JSON.stringify(JSON.parse(text).output) === JSON.stringify(input)
  if (response.status !== 200 || !echoed) throw new Error(`${contender.name} JSON check: ${response.status} ${text.slice(0, 300)}`)
}

async function checkStream (url, contender) {
  const response = await fetch(url + contender.stream.path, { method: 'POST', headers: contender.stream.headers, body: contender.stream.body })
  const text = await response.text()
  const deltas = text.split(contender.delta).length - 1
  if (response.status !== 200 || deltas !== DELTAS) throw new Error(`${contender.name} stream check: ${response.status}, ${deltas} deltas`)
}

/** One stream over a raw socket; resolves once its first event (`contender.started`) arrived. */
function openStream (port, contender) {
  return new Promise((resolve, reject) => {
    const { path, headers, body } = contender.idle
    const socket = net.connect(port, '127.0.0.1')
    let received = ''
    const timer = setTimeout(() => { socket.destroy(); reject(new Error('no first event within 60 s')) }, 60_000)
    socket.setEncoding('utf8')
    socket.on('error', (err) => { clearTimeout(timer); reject(err) })
    socket.on('data', function first (chunk) {
      received += chunk
      if (!received.startsWith('HTTP/1.1 200')) {
        if (received.includes('\r\n')) { clearTimeout(timer); socket.destroy(); reject(new Error(received.split('\r\n', 1)[0])) }
        return
      }
      if (!received.includes(contender.started)) return
      clearTimeout(timer)
      socket.off('data', first)
      socket.on('data', () => {})
      resolve(socket)
    })
    const head = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')
    socket.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${head}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  })
}

/** The idle scenario's opener, 100 at a time, with this peer's request. */
async function openMany (port, contender, count) {
  const { streams: sockets, errors } = await openIdle(port, count, (p) => openStream(p, contender), 100)
  return { sockets, errors }
}

/**
 * Warm-up (100 streams opened and closed), the heap after full GCs, then `IDLE_STREAMS` streams held open
 * and the heap again: the difference per stream.
 */
async function measureIdle (server, contender) {
  const warm = await openMany(server.port, contender, 100)
  if (warm.errors.length > 0) throw new Error(`${contender.name}: warm-up streams failed: ${warm.errors[0]}`)
  for (const socket of warm.sockets) socket.destroy()
  await sleep(2_000)
  const baseline = await server.call('heap')
  const t0 = Date.now()
  const { sockets, errors } = await openMany(server.port, contender, contender.idleStreams ?? IDLE_STREAMS)
  const openSeconds = (Date.now() - t0) / 1000
  await sleep(1_000)
  const open = await server.call('heap', 120_000)
  for (const socket of sockets) socket.destroy()
  const perStreamKB = (open.heapUsed - baseline.heapUsed) / sockets.length / 1024
  const MB = (bytes) => (bytes / 1024 / 1024).toFixed(1)
  console.log(`  ${contender.name}: ${sockets.length} streams open in ${openSeconds.toFixed(1)} s (${errors.length} failed), heap ${MB(baseline.heapUsed)} -> ${MB(open.heapUsed)} MB = ${perStreamKB.toFixed(1)} KB per stream`)
  return { perStreamKB, streams: sockets.length, errors: errors.length, firstError: errors[0], openSeconds, heap: { baseline, open } }
}

function peerVersions () {
  const version = (name) => JSON.parse(readFileSync(`${HERE}node_modules/${name}/package.json`, 'utf8')).version
  return Object.fromEntries(['@mastra/core', '@mastra/hono', '@mastra/server', '@langchain/langgraph-api', '@langchain/langgraph', 'ai', 'hono'].map((n) => [n, version(n)]))
}

function gitCommit () {
  return spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim() || null
}

function round2 (n) {
  return n === null ? null : Math.round(n * 100) / 100
}
