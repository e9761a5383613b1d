import t from 'tap'
import { AuditWriter } from '../../../lib/audit/writer.js'
import { Histogram } from '../../../lib/core/histogram.js'
import { buildSharedSerializer } from '../../../lib/core/serializers.js'
import { SseHeartbeat, SseStream } from '../../../lib/runs/sse.js'
import type { AuditEntry, AuditStore } from '../../../lib/stores/types.js'
import { build, eventually, listen, sleep } from '../../helper.js'
import type { Agent } from '../../../lib/core/types.js'

t.test('histogram percentiles stay within the bucket width', async (t) => {
  const h = new Histogram()
  t.same(h.summary(), { p50: 0, p95: 0, p99: 0 }, 'empty')
  for (let i = 1; i <= 1000; i++) h.record(i)
  t.equal(h.count, 1000)
  const { p50, p95, p99 } = h.summary()
  t.ok(p50 >= 500 && p50 <= 500 * 1.05, `p50 ${p50}`)
  t.ok(p95 >= 950 && p95 <= 950 * 1.05, `p95 ${p95}`)
  t.ok(p99 >= 990 && p99 <= 990 * 1.05, `p99 ${p99}`)
  const edges = new Histogram()
  edges.record(0)
  edges.record(1e12)
  t.equal(edges.percentile(50), 0.05, 'tiny values land in the first bucket')
  t.ok(edges.percentile(100) >= 3_600_000, 'huge values land in the last bucket')
})

t.test('a response schema is compiled once per process, unless an app has shared schemas or serializer options of its own', async (t) => {
  const schema = { type: 'object', properties: { a: { type: 'integer' } } }
  const route = { schema, method: 'GET', url: '/x', httpStatus: '200' }
  const first = buildSharedSerializer({}, {})(route)
  t.equal(first({ a: 1, b: 2 }), '{"a":1}', 'fast-json-stringify\'s serializer of the schema')
  t.equal(buildSharedSerializer(undefined, undefined)(route), first, 'another service: the same serializer')
  t.not(buildSharedSerializer({}, {})({ ...route, schema: { ...schema } }), first, 'another object: compiled anew')
  const shared = { shared: { $id: 'shared', type: 'string' } }
  const withRef = buildSharedSerializer(shared, {})({ ...route, schema: { type: 'object', properties: { s: { $ref: 'shared#' } } } })
  t.equal(withRef({ s: 'x' }), '{"s":"x"}', 'an app\'s shared schemas: its own serializer, resolving them')
  t.not(buildSharedSerializer(shared, {})(route), first)
  t.not(buildSharedSerializer({}, { rounding: 'ceil' })(route), first, 'serializer options: its own')
})

t.test('the audit writer batches, keeps order, and counts what a failing store loses', async (t) => {
  const batches: AuditEntry[][] = []
  let failNext = false
  const store = {
    append: async (entries: readonly AuditEntry[]) => {
      if (failNext) { failNext = false; throw new Error('disk full') }
      batches.push([...entries])
    }
  } as unknown as AuditStore
  const errors: unknown[] = []
  const log = { error: (obj: unknown) => errors.push(obj) } as never
  let lost = 0
  const writer = new AuditWriter(store, log, (count) => { lost += count })
  const entry = (id: string): AuditEntry => ({ id } as AuditEntry)
  writer.write(entry('a'))
  writer.write(entry('b'))
  t.same(batches, [], 'nothing is written on the response path')
  await writer.flush()
  t.same(batches.map((b) => b.map((e) => e.id)), [['a', 'b']], 'one batch, in order')
  failNext = true
  writer.write(entry('c'))
  await writer.flush()
  t.equal(lost, 1)
  t.match(errors[0], { entries: 1, err: { message: 'disk full' } })
  writer.write(entry('d'))
  await sleep(5)
  await writer.flush()
  t.same(batches.at(-1)!.map((e) => e.id), ['d'], 'the writer goes on after a failure')
  await writer.flush()
})

t.test('a failing audit store never fails a response', async (t) => {
  const auditStore = { append: async () => { throw new Error('down') }, query: async () => ({ entries: [], nextCursor: null }), count: async () => 0 }
  const service = build(t, { auditStore })
  const res = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })
  t.equal(res.statusCode, 200)
  await service.app.agentService.audit.flush()
  t.equal(service.app.agentService.stats.auditFailures, 1)
})

t.test('one audit entry per request, SSE included, with the service\'s own id', async (t) => {
  const entries: AuditEntry[] = []
  const auditStore = { append: async (batch: readonly AuditEntry[]) => { entries.push(...batch) }, query: async () => ({ entries: [], nextCursor: null }), count: async () => entries.length }
  const service = build(t, { auditStore })
  const app = service.app
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 }, headers: { 'x-request-id': 'same' } })
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true }, headers: { 'x-request-id': 'same', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } })
  await app.inject({ method: 'GET', url: '/nowhere', headers: { 'x-request-id': 'same' } })
  await app.agentService.audit.flush()
  t.equal(entries.length, 3, 'exactly one entry per request')
  t.equal(new Set(entries.map((e) => e.id)).size, 3, 'a repeated client id neither overwrites nor hides an entry')
  t.ok(entries.every((e) => e.requestId === 'same'))
  t.match(entries[0], { method: 'POST', route: '/v1/agents/:name/runs', url: '/v1/agents/echo/runs', status: 200, principal: 'anonymous', ip: String, agent: 'echo', runId: String, sessionId: String, durationMs: Number, at: String })
  t.match(entries[1], { status: 200, agent: 'echo', traceId: '4bf92f3577b34da6a3ce929d0e0e4736' })
  t.match(entries[2], { status: 404, route: '' })
  t.equal(entries[2]!.agent, undefined)
})

t.test('stats count runs, tokens and outcomes', async (t) => {
  const agents: Record<string, Agent> = {
    echo: { async run () { return { output: 1, usage: { inputTokens: 10, outputTokens: 5 } } } },
    boom: { async run () { throw new Error('x') } },
    streamfail: { async * run () { yield 'a'; throw new Error('x') } },
    stuck: { run: () => new Promise(() => {}) }
  }
  const service = build(t, { agents, requestTimeoutMs: 50 })
  const app = service.app
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true } })
  await app.inject({ method: 'POST', url: '/v1/agents/boom/runs', payload: { input: 1 } })
  await app.inject({ method: 'POST', url: '/v1/agents/streamfail/runs', payload: { input: 1, stream: true } })
  await app.inject({ method: 'POST', url: '/v1/agents/stuck/runs', payload: { input: 1 } })
  await app.inject({ method: 'GET', url: '/v1/agents/none' })
  const stats = app.agentService.stats.snapshot()
  t.match(stats, {
    requests: { total: 6, byStatus: { '2xx': 3, '3xx': 0, '4xx': 1, '5xx': 2 } },
    errors: 3,
    runs: { started: 5, completed: 2, failed: 3, timedOut: 1, inFlight: 0 },
    tokens: { input: 20, output: 10, total: 30 }
  })
  t.match(stats.agents.echo, { runs: 2, completed: 2, failed: 0, tokens: { input: 20, output: 10, total: 30 } })
  t.match(stats.agents.stuck, { runs: 1, failed: 1 })
  t.ok(stats.latencyMs.p99 >= stats.latencyMs.p50)
})

t.test('SSE heartbeat: one timer for every stream, a ": ping" comment each interval', async (t) => {
  const beat = new SseHeartbeat(30)
  const { url } = await listen(t, {
    agents: {
      quiet: {
        async * run (_input, ctx) {
          await new Promise((resolve) => setTimeout(resolve, 100))
          yield ctx.runId
        }
      }
    }
  })
  t.equal(beat.size, 0)
  const res = await fetch(`${url}/v1/agents/quiet/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: 1, stream: true }) })
  t.equal(res.status, 200)
  await res.text()
  // the service's own heartbeat runs every 15 s; a stream and a short interval are checked directly
  const writes: string[] = []
  const raw = { writeHead: () => {}, on: () => {}, write: (s: string) => { writes.push(s); return true }, end: () => { raw.writableEnded = true }, writableEnded: false }
  const stream = new SseStream(raw as never, {})
  beat.add(stream)
  beat.add(stream)
  t.equal(beat.size, 1)
  t.ok(await eventually(() => writes.filter((w) => w === ': ping\n\n').length >= 2, 5_000), `pinged (${writes.length})`)
  beat.delete(stream)
  t.equal(beat.size, 0)
  const before = writes.length
  await sleep(60)
  t.equal(writes.length, before, 'no stream, no timer')
  stream.end()
  stream.send({ seq: 1, type: 'x', json: 'null' })
  t.equal(stream.write('late'), true, 'a write after the end is dropped')
  stream.comment('late')
  stream.end()
  t.equal(writes.length, before, 'nothing is written after the end')
})

t.test('SSE heartbeat: a stream whose socket took nothing of what waits for it in a whole interval is cut', async (t) => {
  const beat = new SseHeartbeat(20)
  let bytesWritten = 0
  let writableLength = 0
  let destroyed = false
  const raw = {
    writeHead: () => {}, on: () => {}, write: () => true, end: () => {}, writableEnded: false,
    destroy: () => { destroyed = true },
    get writableLength () { return writableLength },
    socket: { get bytesWritten () { return bytesWritten } }
  }
  const stream = new SseStream(raw as never, {})
  // counted beats, and a socket that takes some of what waits before each one while `taking` says so
  let beats = 0
  let taking = false
  const beatStream = stream.beat.bind(stream)
  stream.beat = () => {
    beats++
    if (taking) bytesWritten += 10
    beatStream()
  }
  beat.add(stream)
  await eventually(() => beats >= 3, 5_000)
  t.notOk(destroyed, 'nothing waits: pings go on')
  writableLength = 1000
  taking = true
  const from = beats
  await eventually(() => beats >= from + 3, 5_000)
  t.notOk(destroyed, 'the socket is taking what waits')
  taking = false
  t.ok(await eventually(() => destroyed, 5_000), 'a socket that took nothing for an interval is cut')
  beat.delete(stream)
  const socketless = new SseStream({ ...raw, socket: null, writableLength: 5, destroy: () => { destroyed = true } } as never, {})
  destroyed = false
  beat.add(socketless)
  // two beats at the least (timers run late on a loaded machine)
  t.ok(await eventually(() => destroyed, 5_000), 'a response without a socket any more is cut too')
  beat.delete(socketless)
  // a response that ended while its stream was still on the heartbeat: nothing is written to it, nothing cut
  let written = 0
  const ended = new SseStream({ ...raw, writableEnded: true, write: () => { written++; return true }, destroy: () => { destroyed = true } } as never, {})
  destroyed = false
  const beatOnce = ended.beat.bind(ended)
  beats = 0
  ended.beat = () => { beats++; beatOnce() }
  beat.add(ended)
  await eventually(() => beats >= 2, 5_000)
  beat.delete(ended)
  t.same({ written, destroyed }, { written: 0, destroyed: false }, 'an ended response gets no ping')
})

t.test('the core purges expired runs in bounded batches, and logs a purge that fails', async (t) => {
  const { app } = build(t)
  await app.ready()
  const store = app.agentService.settings.runStore
  const batches: number[] = []
  let fail = false
  let purging = 0
  let most = 0
  store.purge = async (_now, batch) => {
    batches.push(batch)
    purging++
    most = Math.max(most, purging)
    try {
      if (fail) throw new Error('store down')
      // six of the purge's 5 ms intervals
      await sleep(30)
      return 0
    } finally {
      purging--
    }
  }
  const warnings: unknown[] = []
  app.agentService.stopPurging()
  app.agentService.startPurging({ warn: (o: unknown) => warnings.push(o) } as never, 5)
  await eventually(() => batches.length >= 3, 5_000)
  t.equal(most, 1, `one purge at a time (${batches.length})`)
  t.equal(batches[0], 1000)
  fail = true
  // the next purge after the store fails is logged (however long a loaded machine takes to get to it)
  await eventually(() => warnings.length >= 1, 5_000)
  t.ok(warnings.length >= 1)
  app.agentService.stopPurging()
  app.agentService.stopPurging()
})

t.test('the audit writer\'s group commit: one append in flight, what arrives meanwhile goes in the next, commits resolve with their batch', async (t) => {
  const batches: string[][] = []
  let open: () => void = () => {}
  let gate: Promise<void> | null = null
  let fail = false
  const store = {
    append: async (entries: readonly AuditEntry[]) => {
      batches.push(entries.map((e) => e.id))
      if (gate !== null) await gate
      if (fail) throw new Error('down')
    }
  } as unknown as AuditStore
  let lost = 0
  const writer = new AuditWriter(store, { error () {} } as never, (count) => { lost += count })
  await writer.flush()
  t.pass('an idle writer flushes at once')
  gate = new Promise((resolve) => { open = resolve })
  const committed: string[] = []
  const a = writer.commit({ id: 'a' } as AuditEntry).then(() => committed.push('a'))
  await sleep(5)
  t.same(batches, [['a']], 'in flight')
  const b = writer.commit({ id: 'b' } as AuditEntry).then(() => committed.push('b'))
  writer.write({ id: 'behind' } as AuditEntry)
  const c = writer.commit({ id: 'c' } as AuditEntry).then(() => committed.push('c'))
  await sleep(5)
  t.same(batches, [['a']], 'nothing more while one append is in flight')
  t.same(committed, [])
  const flushed = writer.flush()
  gate = null
  open()
  await Promise.all([a, b, c, flushed])
  t.same(batches, [['a'], ['b', 'behind', 'c']], 'the next batch holds what arrived meanwhile')
  t.same(committed, ['a', 'b', 'c'])
  fail = true
  await writer.commit({ id: 'd' } as AuditEntry)
  t.equal(lost, 1, 'a failed batch is counted; its commits resolve all the same')
})

t.test('a POST is answered once its audit entry is in the store; a GET is not held', async (t) => {
  const entries: AuditEntry[] = []
  let open: () => void = () => {}
  let gate: Promise<void> | null = null
  const auditStore = {
    append: async (batch: readonly AuditEntry[]) => { if (gate !== null) await gate; entries.push(...batch) },
    query: async () => ({ entries: [], nextCursor: null }),
    count: async () => entries.length
  }
  const service = build(t, { auditStore })
  await service.app.ready()
  gate = new Promise((resolve) => { open = resolve })
  let answered = false
  const post = service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } }).then((res) => { answered = true; return res })
  const get = await service.app.inject({ method: 'GET', url: '/v1/agents' })
  t.equal(get.statusCode, 200, 'a GET is answered while the store is held')
  await sleep(50)
  t.notOk(answered, 'the POST waits for its entry')
  t.equal(entries.length, 0)
  gate = null
  open()
  const res = await post
  t.equal(res.statusCode, 200)
  t.ok(entries.some((e) => e.requestId === res.headers['x-request-id'] && e.method === 'POST'), 'its entry is in the store when the answer arrives')

  // a stream: its terminal event goes out after the entry
  gate = new Promise((resolve) => { open = resolve })
  const before = entries.length
  let streamed = ''
  const stream = service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true } }).then((res) => { streamed = res.body; return res })
  await sleep(50)
  t.equal(streamed, '', 'the stream has not ended')
  gate = null
  open()
  const sse = await stream
  t.match(sse.body, /run\.completed/)
  t.ok(entries.slice(before).some((e) => e.requestId === sse.headers['x-request-id']))
})

t.test('a request\'s entry is committed once, however many times it is asked for; the memory ring is written behind', async (t) => {
  const entries: AuditEntry[] = []
  const auditStore = { append: async (batch: readonly AuditEntry[]) => { entries.push(...batch) }, query: async () => ({ entries: [], nextCursor: null }), count: async () => entries.length }
  const service = build(t, { auditStore })
  const app = service.app
  // a route of the app's own that commits before answering, then the audit hook asks again
  app.post('/twice', async (request) => {
    await app.agentService.audit.commit(request, 200)
    return { ok: true }
  })
  t.equal((await app.inject({ method: 'POST', url: '/twice' })).statusCode, 200)
  t.equal(app.agentService.audit.durable, true)
  await app.agentService.audit.flush()
  t.equal(entries.length, 1)
  const memory = build(t)
  await memory.app.ready()
  t.equal(memory.app.agentService.audit.durable, false, 'the default memory ring')
})
