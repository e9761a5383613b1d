// Target 4: 10,000 concurrent idle SSE runs held open by one server process, with heartbeats: no errors,
// at most 8 KB of JS heap per stream after GC, and the heap back to its baseline once they close.
// Each run creates its own session (the default when no sessionId is sent); the client deletes those
// sessions after closing the streams, so that what is left is what the streams themselves leaked.
import net from 'node:net'
import { startServer, sleep } from './lib/harness.js'
import { target } from './lib/report.js'

export const name = 'sse-idle'
export const title = '10,000 idle SSE runs with heartbeats: heap per stream, back to baseline (target 4)'

const STREAMS = Number(process.env.BENCH_SSE_STREAMS ?? 10_000)
const HEARTBEAT_MS = 15_000
const OPENING = 250 // streams being opened at once
const BODY = JSON.stringify({ input: 'idle' })

/** One idle SSE run over a raw socket: resolves once run.started arrived, counts `: ping` comments. */
function openStream (port) {
  return new Promise((resolve, reject) => {
    const stream = { socket: null, sessionId: null, pings: 0, error: null, closedByServer: false }
    const socket = net.connect(port, '127.0.0.1')
    stream.socket = socket
    let head = ''
    let started = false
    const timer = setTimeout(() => fail(new Error('no run.started within 30 s')), 30_000)
    function fail (err) {
      clearTimeout(timer)
      stream.error = err
      socket.destroy()
      reject(err)
    }
    socket.setEncoding('utf8')
    socket.on('error', (err) => { if (!started) fail(err); else stream.error = err })
    socket.on('end', () => { stream.closedByServer = true })
    socket.on('data', (chunk) => {
      if (started) {
        if (chunk.includes(': ping')) stream.pings++
        return
      }
      head += chunk
      if (!head.startsWith('HTTP/1.1 200')) {
        if (head.includes('\r\n')) fail(new Error(`status line ${head.split('\r\n', 1)[0]}`))
        return
      }
      const at = head.indexOf('event: run.started\ndata: ')
      if (at === -1) return
      const end = head.indexOf('\n', at + 26)
      if (end === -1) return
      started = true
      clearTimeout(timer)
      stream.sessionId = JSON.parse(head.slice(at + 25, end)).sessionId
      head = ''
      resolve(stream)
    })
    socket.write(`POST /v1/agents/idle/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`)
  })
}

async function openMany (port, count) {
  const streams = []
  const errors = []
  let next = 0
  async function worker () {
    while (next < count) {
      next++
      try {
        streams.push(await openStream(port))
      } catch (err) {
        errors.push(err.message)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(OPENING, count) }, worker))
  return { streams, errors }
}

async function closeAll (server, streams) {
  for (const s of streams) s.socket.destroy()
  const deadline = Date.now() + 30_000
  for (;;) {
    const stats = await server.call('stats')
    if (stats.runs === 0 && stats.streams === 0) return true
    if (Date.now() > deadline) return false
    await sleep(100)
  }
}

async function deleteSessions (url, streams) {
  let next = 0
  let failed = 0
  async function worker () {
    while (next < streams.length) {
      const stream = streams[next++]
      const response = await fetch(`${url}/v1/sessions/${stream.sessionId}`, { method: 'DELETE' })
      await response.arrayBuffer()
      if (response.status !== 204) failed++
    }
  }
  await Promise.all(Array.from({ length: 50 }, worker))
  return failed
}

const KB = 1024
const MB = 1024 * 1024

export async function run ({ log }) {
  const server = await startServer({ kind: 'service', preset: { name: 'default' } })
  try {
    // Warm-up: the same operations on a few streams, so the baseline includes compiled code and lazy state.
    const warm = await openMany(server.port, 200)
    if (warm.errors.length > 0) throw new Error(`warm-up streams failed: ${warm.errors[0]}`)
    await closeAll(server, warm.streams)
    await deleteSessions(server.url, warm.streams)
    await sleep(200)
    const baseline = await server.call('heap')
    log(`  baseline heap ${(baseline.heapUsed / MB).toFixed(1)} MB, rss ${(baseline.rss / MB).toFixed(1)} MB`)

    const t0 = Date.now()
    const { streams, errors } = await openMany(server.port, STREAMS)
    const openSeconds = (Date.now() - t0) / 1000
    const held = await server.call('stats')
    const open = await server.call('heap')
    const perStream = (open.heapUsed - baseline.heapUsed) / streams.length
    log(`  ${streams.length} streams open in ${openSeconds.toFixed(1)} s (${errors.length} failed); server holds ${held.runs} runs, ${held.streams} streams; heap ${(open.heapUsed / MB).toFixed(1)} MB = ${(perStream / KB).toFixed(2)} KB per stream`)

    // Every stream must see a heartbeat: the first comes 15 s after the first stream opened.
    const pingDeadline = t0 + 2 * HEARTBEAT_MS + 2_000
    while (streams.some((s) => s.pings === 0) && Date.now() < pingDeadline) await sleep(250)
    const withoutPing = streams.filter((s) => s.pings === 0).length
    const streamErrors = streams.filter((s) => s.error !== null || s.closedByServer).length
    log(`  after ${((Date.now() - t0) / 1000).toFixed(1)} s: ${streams.length - withoutPing} streams had a heartbeat, ${streamErrors} errored or were closed by the server`)

    const drained = await closeAll(server, streams)
    const undeleted = await deleteSessions(server.url, streams)
    await sleep(200)
    const after = await server.call('heap')
    const retained = after.heapUsed - baseline.heapUsed
    log(`  closed: heap ${(after.heapUsed / MB).toFixed(1)} MB (${(retained / MB).toFixed(2)} MB over the baseline), rss ${(after.rss / MB).toFixed(1)} MB`)

    const failures = errors.length + streamErrors + withoutPing + undeleted + (drained ? 0 : 1) +
      (held.runs === streams.length ? 0 : 1)
    // "Back to baseline": what stays after close is under 1% of what the open streams held.
    const backToBaseline = retained <= 0.01 * (open.heapUsed - baseline.heapUsed)
    const rows = [
      { contender: 'service', metric: 'heap per open stream', unit: 'KB', median: perStream / KB, min: perStream / KB, max: perStream / KB },
      { contender: 'service', metric: 'heap retained after close', unit: 'KB', median: retained / KB, min: retained / KB, max: retained / KB },
      { contender: 'service', metric: 'rss per open stream', unit: 'KB', median: (open.rss - baseline.rss) / streams.length / KB, min: NaN, max: NaN },
      { contender: 'service', metric: 'seconds to open all', unit: 's', median: openSeconds, min: NaN, max: NaN }
    ]
    return {
      title,
      rows,
      targets: [
        target('4a', `${STREAMS} idle streams held, each with a heartbeat, no errors (failures)`, failures, '<=', 0),
        target('4b', 'JS heap per stream after GC (KB)', perStream / KB, '<=', 8),
        target('4c', 'heap retained after close / heap of the open streams', retained / Math.max(1, open.heapUsed - baseline.heapUsed), '<=', 0.01)
      ],
      heap: { baseline, open, after },
      streams: streams.length,
      openErrors: errors.slice(0, 5),
      backToBaseline
    }
  } finally {
    await server.stop()
  }
}
