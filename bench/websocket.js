// Issue 19's WebSocket target: 1,000 WebSocket connections, each running 20-delta runs back to back over /v1/ws:
// runs/s (at least 0.85 of the reference fed by the same async generator) and the p99 of a run (run.start sent ->
// run.completed received). A `ws` server speaking the same protocol
// without the service (no validation, sessions, audit) is the reference; fed by the same async generator as the
// service's ticker agent, a second one prices the generator protocol apart from the service.
import WebSocket from 'ws'
import { alternate, config, cpuMeter } from './lib/harness.js'
import { metricRows, noiseOf, ratioSpread, target } from './lib/report.js'
import { percentile } from './lib/harness.js'

export const name = 'websocket'
export const title = 'WebSocket: 1,000 connections x 20-delta runs, runs/s and p99 (issue 19)'

const CONNECTIONS = Number(process.env.BENCH_WS_CONNECTIONS ?? 1000)
const DELTAS = 20

function connect (url) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url)
    socket.once('open', () => resolve(socket))
    socket.once('error', reject)
    socket.once('unexpected-response', (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)))
  })
}

/** Opens the connections, then runs back to back on each for `seconds`; counts only runs that started and ended inside. */
async function drive (url, seconds, record) {
  const sockets = []
  let next = 0
  async function opener () {
    while (next < CONNECTIONS) {
      next++
      sockets.push(await connect(url))
    }
  }
  await Promise.all(Array.from({ length: 100 }, opener))

  const stats = { runs: 0, failed: 0, errors: 0, latencies: [] }
  let stopping = false
  const loops = sockets.map((socket, i) => new Promise((resolve) => {
    let ref = 0
    let startedAt = 0
    let deltas = 0
    const start = () => {
      if (stopping) return resolve()
      ref++
      deltas = 0
      startedAt = performance.now()
      socket.send(JSON.stringify({ type: 'run.start', ref: `${i}-${ref}`, agent: 'ticker', input: { deltas: DELTAS } }))
    }
    socket.on('message', (raw) => {
      const message = JSON.parse(raw.toString())
      if (message.type === 'message.delta') deltas++
      else if (message.type === 'run.completed') {
        if (record.on && deltas === DELTAS) {
          stats.runs++
          stats.latencies.push(performance.now() - startedAt)
        } else if (deltas !== DELTAS) stats.failed++
        start()
      } else if (message.type === 'run.failed' || message.type === 'error') {
        stats.failed++
        start()
      }
    })
    socket.on('error', () => { stats.errors++; resolve() })
    socket.on('close', resolve)
    start()
  }))

  await new Promise((resolve) => setTimeout(resolve, config.warmup * 1000))
  record.on = true
  const t0 = performance.now()
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000))
  record.on = false
  const elapsed = (performance.now() - t0) / 1000
  stopping = true
  await Promise.race([Promise.all(loops), new Promise((resolve) => setTimeout(resolve, 10_000))])
  for (const socket of sockets) socket.terminate()
  stats.latencies.sort((a, b) => a - b)
  return {
    rps: stats.runs / elapsed,
    p50: percentile(stats.latencies, 50),
    p99: percentile(stats.latencies, 99),
    failed: stats.failed,
    errors: stats.errors
  }
}

export async function run ({ log }) {
  const contenders = [
    { name: 'ws reference', spec: { kind: 'raw-ws' } },
    // the same server taking its deltas from the agent's async generator: the generator protocol's own cost
    { name: 'ws reference + generator', spec: { kind: 'raw-ws', generator: true } },
    { name: 'service /v1/ws', spec: { kind: 'service', preset: { name: 'websocket' } } }
  ]
  let pending = null
  const results = await alternate(contenders, async (server, contender) => {
    const url = `ws://127.0.0.1:${server.port}/v1/ws`
    if (contender.name === 'service /v1/ws') {
      if (pending === null) {
        try {
          const probe = await connect(url)
          probe.terminate()
          pending = false
        } catch (err) {
          pending = `/v1/ws not available (${err.message}): the websocket option is not implemented yet`
        }
      }
      if (pending !== false) return { rps: NaN, p50: NaN, p99: NaN, failed: 0, errors: 0 }
    }
    const cpu = cpuMeter([server.pid])
    const result = await drive(url, config.duration, { on: false })
    const { foreignCpu, serverCpu } = cpu.stop(0)
    return Object.assign(result, { foreignCpu, serverCpu })
  }, { log })

  const rows = [
    ...metricRows(results, 'rps', { unit: 'runs/s', baseline: 'ws reference' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'ws reference' })
  ]
  const failures = Object.values(results).flat().reduce((sum, r) => sum + r.failed + r.errors, 0)
  const generator = pending === false ? ratioSpread(metricRows(results, 'rps', { unit: 'runs/s', baseline: 'ws reference + generator' }), 'service /v1/ws', 'rps') : null
  const direct = pending === false ? ratioSpread(rows, 'service /v1/ws', 'rps') : null
  return {
    title,
    rows: pending === false ? rows : rows.filter((r) => r.contender !== 'service /v1/ws'),
    targets: [
      target('19.ws', `runs/s / a ws server fed by the same async generator, ${CONNECTIONS} connections (${generator?.text})`, generator?.ratio, '>=', 0.85, pending === false ? undefined : pending)
    ],
    notes: pending === false ? [`runs/s / the ws reference sending its frames without a generator: ${direct.ratio.toFixed(2)} (${direct.text})`] : [],
    noise: noiseOf(results),
    errors: failures
  }
}
