// Issue 19's idle target: 10,000 concurrent idle SSE runs held open by one server process (their records and event
// logs on the memory run store), with heartbeats: no errors, at most 12 KB of JS heap per stream after GC in all and
// at most 6 KB over a node:http stream's own, and nothing of a stream left once they close.
// Each run creates its own session (the default when no sessionId is sent); the client deletes those
// sessions after closing the streams, so that what is left is what the streams themselves leaked.
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startServer, sleep } from './lib/harness.js'
import { target } from './lib/report.js'
import { countServerObjects } from './lib/heap.js'

export const name = 'sse-idle'
export const title = '10,000 idle SSE runs with heartbeats: heap per stream, back to baseline (issue 19)'

const STREAMS = Number(process.env.BENCH_SSE_STREAMS ?? 10_000)
const HEARTBEAT_MS = 15_000
const OPENING = 250 // streams being opened at once
const BODY = JSON.stringify({ input: 'idle' })

/** One idle SSE run over a raw socket: resolves once run.started arrived, counts `: ping` comments. */
export function openStream (port) {
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

/** Opens `count` streams, `opening` at a time, with `open(port)` (bench/peers opens its peers' streams with it). */
export async function openMany (port, count, open = openStream, opening = OPENING) {
  const streams = []
  const errors = []
  let next = 0
  async function worker () {
    while (next < count) {
      next++
      try {
        streams.push(await open(port))
      } catch (err) {
        errors.push(err.message)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(opening, count) }, worker))
  return { streams, errors }
}

export async function closeAll (server, streams) {
  for (const s of streams) s.socket.destroy()
  const deadline = Date.now() + 30_000
  for (;;) {
    const stats = await server.call('stats')
    if (stats.runs === 0 && stats.streams === 0) return true
    if (Date.now() > deadline) return false
    await sleep(100)
  }
}

export async function deleteSessions (url, streams) {
  // its own keep-alive agent, destroyed at the end: no client connection outlives the phase
  const agent = new http.Agent({ keepAlive: true, maxSockets: 50 })
  const remove = (sessionId) => new Promise((resolve) => {
    const request = http.request(`${url}/v1/sessions/${sessionId}`, { method: 'DELETE', agent }, (response) => {
      response.resume()
      response.on('end', () => resolve(response.statusCode === 204))
    })
    request.on('error', () => resolve(false))
    request.end()
  })
  let next = 0
  let failed = 0
  async function worker () {
    while (next < streams.length) {
      if (!await remove(streams[next++].sessionId)) failed++
    }
  }
  await Promise.all(Array.from({ length: 50 }, worker))
  agent.destroy()
  return failed
}

const KB = 1024
const MB = 1024 * 1024

// What one open stream holds; after close, none of them may be left over the baseline.
const STREAM_OBJECTS = ['IncomingMessage', 'ServerResponse', 'Socket', 'Reply', 'Request', 'RequestContext', 'AgentRun', 'SseStream', 'AbortController']

/**
 * Opens `count` idle streams on a fresh server and measures the heap (after full GCs) before, while they
 * are open and after they closed. `heartbeat`: also wait for every stream's first `: ping`.
 */
export async function measureIdle (spec, count, { heartbeat, sessions, log }) {
  const server = await startServer(spec)
  try {
    // Warm-up: the same operations on a few streams, so that the baseline holds the compiled code and the
    // lazily built state, and the 500-entry audit ring is already full.
    const warm = await openMany(server.port, 300)
    if (warm.errors.length > 0) throw new Error(`warm-up streams failed: ${warm.errors[0]}`)
    await closeAll(server, warm.streams)
    if (sessions) await deleteSessions(server.url, warm.streams)
    await sleep(200)
    const baseline = await server.call('heap')
    const snapshot = join(tmpdir(), `fastify-agents-bench-${process.pid}.heapsnapshot`)
    const objectsBefore = await countServerObjects(server, snapshot, STREAM_OBJECTS)

    const t0 = Date.now()
    const { streams, errors } = await openMany(server.port, count)
    const openSeconds = (Date.now() - t0) / 1000
    const held = await server.call('stats')
    const open = await server.call('heap')
    const perStream = (open.heapUsed - baseline.heapUsed) / streams.length
    log(`  ${spec.kind}: ${streams.length} streams open in ${openSeconds.toFixed(1)} s (${errors.length} failed), server holds ${held.streams}; heap ${(baseline.heapUsed / MB).toFixed(1)} -> ${(open.heapUsed / MB).toFixed(1)} MB = ${(perStream / KB).toFixed(2)} KB per stream`)

    let withoutPing = 0
    if (heartbeat) {
      // the first heartbeat comes 15 s after the first stream opened (the timer runs while any stream is open)
      const pingDeadline = t0 + 2 * HEARTBEAT_MS + 2_000
      while (streams.some((s) => s.pings === 0) && Date.now() < pingDeadline) await sleep(250)
      withoutPing = streams.filter((s) => s.pings === 0).length
    }
    const streamErrors = streams.filter((s) => s.error !== null || s.closedByServer).length
    if (heartbeat) log(`  after ${((Date.now() - t0) / 1000).toFixed(1)} s: ${streams.length - withoutPing} streams had a heartbeat, ${streamErrors} errored or were closed by the server`)

    const drained = await closeAll(server, streams)
    const undeleted = sessions ? await deleteSessions(server.url, streams) : 0
    await sleep(200)
    const after = await server.call('heap')
    const retained = after.heapUsed - baseline.heapUsed
    const objectsAfter = await countServerObjects(server, snapshot, STREAM_OBJECTS)
    const leftOver = Object.fromEntries(STREAM_OBJECTS.map((name) => [name, objectsAfter[name] - objectsBefore[name]]).filter(([, n]) => n !== 0))
    const leftOverCount = Object.values(leftOver).reduce((sum, n) => sum + Math.max(0, n), 0)
    log(`  closed: heap ${(after.heapUsed / MB).toFixed(1)} MB (${(retained / KB).toFixed(0)} KB over the baseline: compiled code, pooled parsers), stream objects left: ${leftOverCount === 0 ? 'none' : JSON.stringify(leftOver)}`)
    return {
      perStreamKB: perStream / KB,
      retainedKB: retained / KB,
      retainedShare: retained / Math.max(1, open.heapUsed - baseline.heapUsed),
      leftOver,
      leftOverCount,
      rssPerStreamKB: (open.rss - baseline.rss) / streams.length / KB,
      openSeconds,
      failures: errors.length + streamErrors + withoutPing + undeleted + (drained ? 0 : 1) + (held.streams === count ? 0 : 1),
      openErrors: errors.slice(0, 5),
      heap: { baseline, open, after }
    }
  } finally {
    await server.stop()
  }
}

export async function run ({ log }) {
  const refCount = Math.min(STREAMS, Number(process.env.BENCH_SSE_REFERENCE_STREAMS ?? 2_000))
  const results = {
    'node:http SSE': await measureIdle({ kind: 'raw-sse' }, refCount, { heartbeat: false, sessions: false, log }),
    'bare fastify SSE': await measureIdle({ kind: 'bare-fastify' }, refCount, { heartbeat: false, sessions: false, log }),
    service: await measureIdle({ kind: 'service', preset: { name: 'default' } }, STREAMS, { heartbeat: true, sessions: true, log })
  }
  const rows = []
  for (const [contender, r] of Object.entries(results)) {
    const row = (metric, unit, value) => ({ contender, metric, unit, median: value, min: value, max: value })
    rows.push(row('heap per open stream', 'KB', r.perStreamKB))
    rows.push(row('heap retained after close', 'KB', r.retainedKB))
    rows.push(row('rss per open stream', 'KB', r.rssPerStreamKB))
  }
  const raw = results['node:http SSE'].perStreamKB
  for (const r of rows) if (r.metric === 'heap per open stream' && r.contender !== 'node:http SSE') Object.assign(r, { ratio: r.median / raw, baseline: 'node:http SSE' })
  const service = results.service
  return {
    title,
    rows,
    targets: [
      target('19.idle-held', `${STREAMS} idle streams held, each with a heartbeat, no errors (failures)`, service.failures, '<=', 0),
      target('19.idle-heap', 'JS heap per stream after GC, in all (KB)', service.perStreamKB, '<=', 12),
      target('19.idle-over', `JS heap per stream over a node:http stream's own (KB; node:http: ${raw.toFixed(2)})`, service.perStreamKB - raw, '<=', 6),
      target('19.idle-left', 'objects of a stream (request, reply, socket, context, run, SSE stream) left after close', service.leftOverCount, '<=', 0)
    ],
    notes: [
      `references measured with ${refCount} streams, the service with ${STREAMS}; each run creates a session, deleted by the client after close`,
      `heap left over the baseline after close: ${service.retainedKB.toFixed(0)} KB (${(100 * service.retainedShare).toFixed(1)}% of what the open streams held; node:http: ${results['node:http SSE'].retainedKB.toFixed(0)} KB)`
    ],
    results
  }
}
