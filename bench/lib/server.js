// One bench server, run as a child process pinned to core 0 by bench/lib/harness.js.
// argv[2] is a JSON spec { kind, preset?, pkg? } (pkg: the path of another build's dist/index.js, to
// compare two builds in one run). Talks to the harness over IPC:
//   -> { type: 'ready', port }           once listening on 127.0.0.1
//   <- { id, type: 'heap' }              -> { id, result: process.memoryUsage() after two full GCs }
//   <- { id, type: 'stats' }             -> { id, result: { runs, streams } } (service only)
//   <- { id, type: 'stop' }              -> { id, result: { auditCount? } }, then exits
//   <- { id, type: 'profile-start' }     starts the CPU profiler (bench/profile.js)
//   <- { id, type: 'profile-stop', arg } writes the .cpuprofile to the path `arg`
//   <- { id, type: 'snapshot', arg }     writes a heap snapshot to the path `arg` (after a full GC)
import http from 'node:http'
import { randomUUID } from 'node:crypto'
import Fastify from 'fastify'
import { writeFileSync } from 'node:fs'
import v8 from 'node:v8'
import { PerformanceObserver, constants } from 'node:perf_hooks'
import { Session } from 'node:inspector/promises'
import { WebSocketServer } from 'ws'
import { benchAgents } from './agents.js'

const spec = JSON.parse(process.argv[2])

// Time spent in garbage collection, by kind (minor = scavenge, major = mark-compact), for the 'gc' call.
const gcTime = { minor: 0, major: 0, other: 0, count: 0 }
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = entry.detail?.kind
    gcTime.count++
    gcTime[kind === constants.NODE_PERFORMANCE_GC_MINOR ? 'minor' : kind === constants.NODE_PERFORMANCE_GC_MAJOR ? 'major' : 'other'] += entry.duration
  }
}).observe({ entryTypes: ['gc'] })

// The same result shape (and about the same bytes) as the service's JSON run result, with no logic.
const RUN_ID = randomUUID()
const SESSION_ID = randomUUID()
const REQUEST_ID = randomUUID()
const TRACE_ID = 'f'.repeat(32)
function echoResult (input) {
  return {
    runId: RUN_ID,
    agent: 'echo',
    sessionId: SESSION_ID,
    status: 'completed',
    output: input,
    usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 },
    finishReason: 'stop',
    requestId: REQUEST_ID,
    traceId: TRACE_ID
  }
}

const tick = () => new Promise((resolve) => setImmediate(resolve))

function readBody (req) {
  return new Promise((resolve, reject) => {
    const chunks = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    req.on('error', reject)
  })
}

const sseEvent = (seq, type, data) => `id: ${seq}\nevent: ${type}\ndata: ${JSON.stringify(data)}\n\n`

/** node:http echo: parse the JSON body, answer the result shape. */
function rawHttp () {
  return http.createServer(async (req, res) => {
    const body = JSON.parse(await readBody(req))
    const payload = JSON.stringify(echoResult(body.input))
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(payload) })
    res.end(payload)
  })
}

/** node:http SSE: the service's event sequence for a ticker run, one delta per tick. */
function rawSse () {
  return http.createServer(async (req, res) => {
    const body = JSON.parse(await readBody(req))
    const deltas = body.input?.deltas ?? 100
    let open = true
    res.on('close', () => { open = false })
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
    let seq = 0
    res.write(sseEvent(++seq, 'run.started', { runId: RUN_ID, agent: 'ticker', sessionId: SESSION_ID, requestId: REQUEST_ID, traceId: TRACE_ID }))
    if (req.url === '/v1/agents/idle/runs') return holdIdle(res)
    let text = ''
    if (spec.generator === true) {
      // the deltas from the bench's ticker agent, as the service gets them: prices the generator protocol
      for await (const delta of benchAgents.ticker.run({ deltas })) {
        if (!open) return
        text += delta
        res.write(sseEvent(++seq, 'message.delta', { text: delta }))
      }
    } else {
      for (let i = 0; i < deltas && open; i++) {
        await tick()
        text += 'token '
        res.write(sseEvent(++seq, 'message.delta', { text: 'token ' }))
      }
    }
    if (!open) return
    res.end(sseEvent(++seq, 'run.completed', { ...echoResult(text), agent: 'ticker' }))
  })
}

// Idle streams get the service's heartbeat: one interval for all, a `: ping` comment every 15 s.
const idleStreams = new Set()
setInterval(() => { for (const res of idleStreams) res.write(': ping\n\n') }, 15_000).unref()
function holdIdle (res) {
  idleStreams.add(res)
  res.on('close', () => idleStreams.delete(res))
}

/** A `ws` server speaking the run protocol of /v1/ws for ticker runs (no validation, no sessions). */
function rawWs () {
  const server = http.createServer((_req, res) => { res.writeHead(404).end() })
  const wss = new WebSocketServer({ server, path: '/v1/ws' })
  wss.on('connection', (socket) => {
    socket.on('message', async (raw) => {
      const message = JSON.parse(raw.toString())
      const runId = randomUUID()
      let seq = 0
      const send = (type, data) => socket.send(JSON.stringify({ type, runId, ref: message.ref, seq: ++seq, data }))
      send('run.started', { runId, agent: message.agent, sessionId: SESSION_ID, requestId: REQUEST_ID, traceId: TRACE_ID })
      const deltas = message.input?.deltas ?? 20
      let text = ''
      if (spec.generator === true) {
        // the deltas from the bench's ticker agent, as the service gets them: prices the generator protocol
        for await (const delta of benchAgents.ticker.run({ deltas })) {
          if (socket.readyState !== socket.OPEN) return
          text += delta
          send('message.delta', { text: delta })
        }
      } else {
        for (let i = 0; i < deltas; i++) {
          await tick()
          if (socket.readyState !== socket.OPEN) return
          text += 'token '
          send('message.delta', { text: 'token ' })
        }
      }
      send('run.completed', { ...echoResult(text), runId, agent: message.agent })
    })
  })
  return server
}

/** Fastify with one route, no schema, no hooks: what "bare Fastify" means in the tables. */
async function bareFastify () {
  const app = Fastify({ logger: false })
  // no-op hooks, to price a hook of each kind (spec.hooks: ['onRequest', 'onSend', 'onResponse', ...])
  for (const hook of spec.hooks ?? []) {
    app.addHook(hook, hook === 'onSend' ? (_req, _reply, payload, done) => done(null, payload) : (_req, _reply, done) => done())
  }
  if (spec.schemas === true) {
    // the service's own schemas for this route: prices validation and serialization alone
    const { schemas } = await import(spec.pkg ?? 'fastify-agents')
    app.post('/v1/agents/:name/runs', {
      schema: { params: schemas.AgentParams, body: schemas.RunRequest, response: { 200: { content: { 'application/json': { schema: schemas.RunResult } } } } }
    }, async (request) => echoResult(request.body.input))
  } else {
    // spec.spinUs: that many µs of pure CPU per request, to see what a µs of work costs in req/s here
    const spin = (spec.spinUs ?? 0) / 1000
    app.post('/v1/agents/:name/runs', async (request) => {
      if (spin > 0) for (const end = performance.now() + spin; performance.now() < end;);
      return echoResult(request.body.input)
    })
  }
  // an idle SSE stream through a hijacked reply, the way the service streams
  app.post('/v1/agents/idle/runs', async (request, reply) => {
    reply.hijack()
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
    reply.raw.write(sseEvent(1, 'run.started', { runId: RUN_ID, agent: 'idle', sessionId: SESSION_ID, requestId: REQUEST_ID, traceId: TRACE_ID }))
    holdIdle(reply.raw)
  })
  return app
}

async function serviceOptions (preset) {
  const lib = await import(spec.pkg ?? 'fastify-agents')
  switch (preset.name) {
    case 'default': return {}
    // sessions expire after a second, so the memory session store stops growing during a round
    case 'short-sessions': return { sessionTtlMs: 1000 }
    // the memory session store with another bound than its default
    case 'max-sessions': return { sessionStore: new lib.MemorySessionStore({ maxSessions: preset.maxSessions }) }
    case 'full': return {
      auth: { strategy: 'api-key', keys: [preset.apiKey] },
      rateLimit: { maxRequests: 1_000_000_000, intervalMs: 60_000 },
      idempotency: {},
      adminApi: { enabled: true, bearerToken: preset.adminToken }
    }
    // one feature of 'full' at a time, to price each
    case 'auth': return { auth: { strategy: 'api-key', keys: [preset.apiKey] } }
    case 'rate-limit': return { rateLimit: { maxRequests: 1_000_000_000, intervalMs: 60_000 } }
    case 'idempotency': return { idempotency: {} }
    case 'admin': return { adminApi: { enabled: true, bearerToken: preset.adminToken } }
    case 'sqlite': return { auditStore: new lib.SqliteAuditStore(preset.file) }
    case 'postgres': return { auditStore: new lib.PostgresAuditStore(preset.url, { schema: preset.schema }) }
    case 'websocket': return { websocket: true }
    // the AI SDK adapter beside the plain agents (bench/adapter.js)
    case 'adapter': return { agents: { ...benchAgents, ...await (await import('./ai-sdk-agent.js')).aiSdkAgents(spec.pkg) } }
    // stores that do nothing: price the session store and the audit log alone
    case 'no-sessions': return { sessionStore: nullSessionStore() }
    case 'null-stores': return { sessionStore: nullSessionStore(), auditStore: nullAuditStore() }
    case 'no-audit': return { auditStore: nullAuditStore() }
    // the run's record and event log (bench/run-log.js): none at all, or each backend
    case 'no-log': return { runStore: nullRunStore() }
    case 'runs-sqlite': return { runStore: lib.sqliteStores(preset.file).runStore }
    case 'runs-postgres': return { runStore: lib.postgresStores(preset.url, { schema: preset.schema }).runStore }
    case 'runs-redis': return { runStore: lib.redisStores(preset.url, { prefix: preset.prefix }).runStore }
    // every store on PostgreSQL (issue 26's JSON run)
    case 'all-postgres': return lib.postgresStores(preset.url, { schema: preset.schema })
    default: throw new Error(`unknown preset ${preset.name}`)
  }
}

function nullAuditStore () {
  return { append: async () => {}, query: async () => ({ entries: [], nextCursor: null }), count: async () => 0, close: async () => {} }
}

/** A run store that keeps nothing: what a run costs without its record and event log. */
function nullRunStore () {
  const none = async () => null
  return {
    create: async () => ({ outcome: 'created' }),
    reopen: async () => ({ outcome: 'not_found' }),
    start: async () => ({ outcome: 'gone' }),
    append: async () => {},
    // ended as asked: the run's terminal event is sent
    finish: async (_runId, _events, end) => ({ status: end.status }),
    get: none,
    spec: none,
    events: async () => [],
    cancel: async () => ({ outcome: 'not_found' }),
    watch: () => () => {},
    watchSession: () => () => {},
    listBySession: async () => ({ runs: [], nextCursor: null }),
    list: async () => ({ runs: [], nextCursor: null }),
    purge: async () => 0,
    delete: async () => false,
    claim: async () => [],
    renew: async (_owner, runIds) => [...runIds],
    lapsed: async () => [],
    requeue: async () => null,
    abandon: async () => null,
    watchQueue: () => () => {},
    close: async () => {}
  }
}

function nullSessionStore () {
  const record = (id) => ({ id, agent: null, principal: 'anonymous', createdAt: '', lastActiveAt: '', turns: 0, metadata: {} })
  return {
    create: async (session) => record(session.id),
    get: async (id) => ({ ...record(id), messages: [] }),
    appendTurn: async () => true,
    touch: async () => true,
    delete: async () => true,
    list: async () => ({ sessions: [], nextCursor: null }),
    listByPrincipal: async () => ({ sessions: [], nextCursor: null }),
    close: async () => {}
  }
}

let stop
let profiler
let stats = () => ({ runs: idleStreams.size, streams: idleStreams.size })

/**
 * spec.tracing 'sdk': an OpenTelemetry SDK as a host registers one (bench/tracing.js): a BasicTracerProvider whose
 * in-memory exporter is emptied every second, and an AsyncLocalStorage context manager.
 */
async function registerTracing () {
  const { AsyncLocalStorage } = await import('node:async_hooks')
  const { ROOT_CONTEXT, context, trace } = await import('@opentelemetry/api')
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = await import('@opentelemetry/sdk-trace-base')
  const storage = new AsyncLocalStorage()
  context.setGlobalContextManager({
    active: () => storage.getStore() ?? ROOT_CONTEXT,
    with: (ctx, fn, thisArg, ...args) => storage.run(ctx, () => fn.apply(thisArg, args)),
    bind: (_ctx, target) => target,
    enable () { return this },
    disable () { return this }
  })
  const exporter = new InMemorySpanExporter()
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }))
  setInterval(() => exporter.reset(), 1000).unref()
}

if (spec.tracing === 'sdk') await registerTracing()

if (spec.kind === 'service') {
  const { createAgentService } = await import(spec.pkg ?? 'fastify-agents')
  const options = await serviceOptions(spec.preset ?? { name: 'default' })
  const service = createAgentService({ agents: benchAgents, logger: false, ...options })
  const { port } = await service.listen({ port: 0, host: '127.0.0.1' })
  const state = service.app.agentService
  stats = () => ({ runs: state.runs.size, streams: state.heartbeat.size })
  stop = async () => {
    const result = {}
    // Counted before close(), which closes a store that opened its own connection: every request answered by
    // now has its entry committed already (docs/stores.md), so the count covers every acknowledged one.
    if (options.auditStore !== undefined) result.auditCount = await options.auditStore.count()
    await service.close(0)
    await options.auditStore?.close()
    return result
  }
  process.send({ type: 'ready', port })
} else if (spec.kind === 'naive') {
  // The calibration point ("naively ≈ 0.65 of bare Fastify" on its reference machine): Fastify +
  // CORS + rate limit + a request-id hook + TypeBox validation, doing the same echo.
  const app = Fastify({ logger: false })
  const { schemas } = await import(spec.pkg ?? 'fastify-agents')
  await app.register((await import('@fastify/cors')).default, { origin: '*' })
  await app.register((await import('@fastify/rate-limit')).default, { max: 1_000_000_000, timeWindow: 60_000 })
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.headers['x-request-id'] ?? randomUUID())
    done()
  })
  app.post('/v1/agents/:name/runs', {
    schema: { params: schemas.AgentParams, body: schemas.RunRequest, response: { 200: schemas.RunResult } }
  }, async (request) => echoResult(request.body.input))
  await app.listen({ port: 0, host: '127.0.0.1' })
  stop = async () => { await app.close(); return {} }
  process.send({ type: 'ready', port: app.server.address().port })
} else if (spec.kind === 'handwritten') {
  // What a JSON run must do by the contract, written by hand in the plainest way: an id on every response,
  // a session kept per run (its input and output, in a Map bounded like the memory store), an audit entry
  // kept in a ring of 500. Prices that work apart from how the service does it. spec.without: a list of
  // 'sessions' and 'audit' to leave out.
  const without = new Set(spec.without ?? [])
  const app = Fastify({ logger: false })
  const { schemas } = await import(spec.pkg ?? 'fastify-agents')
  const sessions = new Map()
  const sessionIds = new Array(10_000)
  let sessionCount = 0
  const audit = new Array(500)
  let auditCount = 0
  app.decorateRequest('ctx', null)
  app.addHook('onRequest', (request, reply, done) => {
    const id = randomUUID()
    request.ctx = { id, started: performance.now(), agent: undefined, runId: undefined, sessionId: undefined }
    reply.header('x-request-id', id)
    done()
  })
  if (!without.has('audit')) {
    app.addHook('onResponse', (request, reply, done) => {
      const c = request.ctx
      audit[auditCount++ % audit.length] = {
        id: randomUUID(), at: new Date().toISOString(), requestId: c.id, method: request.method, route: '/v1/agents/:name/runs', url: request.url,
        status: reply.statusCode, durationMs: performance.now() - c.started, principal: 'anonymous', ip: request.ip, agent: c.agent, runId: c.runId, sessionId: c.sessionId
      }
      done()
    })
  }
  app.post('/v1/agents/:name/runs', {
    schema: { params: schemas.AgentParams, body: schemas.RunRequest, response: { 200: schemas.RunResult } }
  }, async (request) => {
    const c = request.ctx
    c.agent = request.params.name
    c.runId = randomUUID()
    c.sessionId = randomUUID()
    const input = request.body.input
    const result = await benchAgents.echo.run(input)
    if (!without.has('sessions')) {
      const at = new Date().toISOString()
      sessions.set(c.sessionId, { id: c.sessionId, createdAt: at, messages: [{ role: 'user', content: input, runId: c.runId, at }, { role: 'assistant', content: result.output, runId: c.runId, at }] })
      const oldest = sessionIds[sessionCount % sessionIds.length]
      if (oldest !== undefined) sessions.delete(oldest)
      sessionIds[sessionCount++ % sessionIds.length] = c.sessionId
    }
    return { runId: c.runId, agent: c.agent, sessionId: c.sessionId, status: 'completed', output: result.output, usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 }, finishReason: 'stop', requestId: c.id, traceId: TRACE_ID }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  stop = async () => { await app.close(); return {} }
  process.send({ type: 'ready', port: app.server.address().port })
} else if (spec.kind === 'bare-fastify') {
  const app = await bareFastify()
  await app.listen({ port: 0, host: '127.0.0.1' })
  stop = async () => { await app.close(); return {} }
  process.send({ type: 'ready', port: app.server.address().port })
} else {
  const makers = { 'raw-http': rawHttp, 'raw-sse': rawSse, 'raw-ws': rawWs }
  const server = makers[spec.kind]()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  stop = async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
    return {}
  }
  process.send({ type: 'ready', port: server.address().port })
}

process.on('message', async (message) => {
  let result
  try {
    if (message.type === 'heap') {
      globalThis.gc()
      await tick()
      globalThis.gc()
      result = process.memoryUsage()
    } else if (message.type === 'profile-start') {
      profiler = new Session()
      profiler.connect()
      await profiler.post('Profiler.enable')
      await profiler.post('Profiler.setSamplingInterval', { interval: 500 })
      await profiler.post('Profiler.start')
    } else if (message.type === 'alloc-start') {
      profiler = new Session()
      profiler.connect()
      await profiler.post('HeapProfiler.enable')
      await profiler.post('HeapProfiler.startSampling', { samplingInterval: 256, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true })
    } else if (message.type === 'alloc-stop') {
      const { profile } = await profiler.post('HeapProfiler.stopSampling')
      profiler.disconnect()
      writeFileSync(message.arg, JSON.stringify(profile))
    } else if (message.type === 'profile-stop') {
      const { profile } = await profiler.post('Profiler.stop')
      profiler.disconnect()
      writeFileSync(message.arg, JSON.stringify(profile))
    } else if (message.type === 'snapshot') {
      globalThis.gc()
      v8.writeHeapSnapshot(message.arg)
    } else if (message.type === 'gc') {
      result = { ...gcTime, newSpace: v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size }
    } else if (message.type === 'stats') {
      result = stats()
    } else if (message.type === 'stop') {
      result = await stop()
    }
    reply({ id: message.id, result }, message.type === 'stop')
  } catch (err) {
    reply({ id: message.id, error: String(err?.stack ?? err) }, message.type === 'stop')
  }
})

function reply (message, exit) {
  process.send(message, () => { if (exit) process.exit(0) })
}
