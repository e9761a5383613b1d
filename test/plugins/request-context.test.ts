import t from 'tap'
import type { InjectOptions } from 'fastify'
import { build, listen, parseSse } from '../helper.js'
import type { Agent } from '../../lib/core/types.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const VALID = `00-${TRACE_ID}-00f067aa0ba902b7-01`

const boom: Agent = { async run () { throw new Error('kaboom') } }
const stuck: Agent = { run: () => new Promise(() => {}) }

t.test('X-Request-ID on every status', async (t) => {
  const { app } = build(t, { agents: { echo: { run: async (i) => ({ output: i }) }, boom, stuck }, requestTimeoutMs: 50, bodyLimit: 100 })
  const cases: Array<[number, InjectOptions]> = [
    [200, { method: 'GET', url: '/v1/agents' }],
    [400, { method: 'POST', url: '/v1/agents/echo/runs', payload: {} }],
    [404, { method: 'GET', url: '/nowhere' }],
    [404, { method: 'GET', url: '/v1/nowhere' }],
    [405, { method: 'PUT', url: '/v1/agents' }],
    [413, { method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'x'.repeat(200) } }],
    [415, { method: 'POST', url: '/v1/agents/echo/runs', payload: 'input', headers: { 'content-type': 'text/plain' } }],
    [500, { method: 'POST', url: '/v1/agents/boom/runs', payload: { input: 1 } }],
    [504, { method: 'POST', url: '/v1/agents/stuck/runs', payload: { input: 1 } }]
  ]
  for (const [status, request] of cases) {
    const res = await app.inject(request)
    t.equal(res.statusCode, status, `${request.method} ${request.url}`)
    t.match(res.headers['x-request-id'], UUID, `${status} has an X-Request-ID`)
    if (status >= 400) t.equal(res.json().requestId, res.headers['x-request-id'], `${status} body names the same id`)
  }
})

t.test('X-Request-ID on an SSE stream (hijacked reply)', async (t) => {
  const { app } = build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 }, headers: { accept: 'text/event-stream', 'x-request-id': 'sse-id-1' } })
  t.equal(res.headers['x-request-id'], 'sse-id-1')
  t.match(res.headers['content-type'], /^text\/event-stream/)
  t.equal(parseSse(res.body)[0]!.data.requestId, 'sse-id-1')
})

t.test('an incoming id is reused only when valid', async (t) => {
  const { app } = build(t)
  const reused = ['abc', 'A.b_c:d-1', 'x'.repeat(128), 'req:2026-11-21T12:00:00.000Z']
  for (const id of reused) {
    const res = await app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-request-id': id } })
    t.equal(res.headers['x-request-id'], id, `reused: ${id.slice(0, 20)}`)
  }
  const replaced = ['', 'x'.repeat(129), 'has space', 'semi;colon', 'ünicode', 'a/b', '<script>']
  for (const id of replaced) {
    const res = await app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-request-id': id } })
    t.match(res.headers['x-request-id'], UUID, `replaced: ${JSON.stringify(id.slice(0, 20))}`)
  }
  const twice = await app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-request-id': ['a', 'b'] } })
  t.match(twice.headers['x-request-id'], UUID, 'a repeated header is replaced')
})

t.test('a valid traceparent is continued; its trace reaches the agent', async (t) => {
  let seen: unknown
  const { app } = build(t, { agents: { probe: { async run (_input, ctx) { seen = ctx.trace; return { output: 1 } } } } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/probe/runs', payload: { input: 1 }, headers: { traceparent: VALID, tracestate: 'vendor=abc' } })
  t.equal(res.json().traceId, TRACE_ID)
  t.same(seen, { traceId: TRACE_ID, parentSpanId: '00f067aa0ba902b7', traceFlags: '01', traceState: 'vendor=abc' })
  const error = await app.inject({ method: 'GET', url: '/v1/agents/nope', headers: { traceparent: VALID } })
  t.equal(error.json().traceId, TRACE_ID, 'error bodies carry the trace id')
})

t.test('every invalid traceparent form is ignored and a new trace started', async (t) => {
  const seen: unknown[] = []
  const { app } = build(t, { agents: { probe: { async run (_input, ctx) { seen.push(ctx.trace); return { output: 1 } } } } })
  const invalid = [
    `ff-${TRACE_ID}-00f067aa0ba902b7-01`, // version ff
    `01-${TRACE_ID}-00f067aa0ba902b7-01`, // a version this level does not know
    `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`, // all-zero trace id
    `00-${TRACE_ID}-${'0'.repeat(16)}-01`, // all-zero span id
    `00-${TRACE_ID.toUpperCase()}-00f067aa0ba902b7-01`, // upper-case hex
    `00-${TRACE_ID}-00F067AA0BA902B7-01`,
    `00-${TRACE_ID.slice(1)}-00f067aa0ba902b7-01`, // short trace id
    `00-${TRACE_ID}0-00f067aa0ba902b7-01`, // long trace id
    `00-${TRACE_ID}-00f067aa0ba902b-01`, // short span id
    `00-${TRACE_ID}-00f067aa0ba902b7-1`, // short flags
    `00-${TRACE_ID}-00f067aa0ba902b7-01-extra`,
    `00-${TRACE_ID}-00f067aa0ba902b7`,
    ` ${VALID}`,
    `00_${TRACE_ID}_00f067aa0ba902b7_01`,
    `00-${TRACE_ID.replace('4', 'g')}-00f067aa0ba902b7-01`,
    ''
  ]
  for (const traceparent of invalid) {
    const res = await app.inject({ method: 'POST', url: '/v1/agents/probe/runs', payload: { input: 1 }, headers: { traceparent, tracestate: 'vendor=abc' } })
    const traceId = res.json().traceId as string
    t.match(traceId, /^[0-9a-f]{32}$/, `${JSON.stringify(traceparent)}: a new trace id`)
    t.not(traceId, TRACE_ID)
    t.same(seen.at(-1), { traceId }, 'no parent span, flags or tracestate from an invalid header')
  }
})

t.test('tracestate is dropped when oversized', async (t) => {
  let seen: { traceState?: string } | undefined
  const { app } = build(t, { agents: { probe: { async run (_input, ctx) { seen = ctx.trace; return { output: 1 } } } } })
  await app.inject({ method: 'POST', url: '/v1/agents/probe/runs', payload: { input: 1 }, headers: { traceparent: VALID, tracestate: 'a=' + 'b'.repeat(600) } })
  t.equal(seen?.traceState, undefined)
})

t.test('traceId in SSE run.started and run.completed', async (t) => {
  const { app } = build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true }, headers: { traceparent: VALID } })
  const events = parseSse(res.body)
  t.equal(events[0]!.data.traceId, TRACE_ID)
  t.equal(events.at(-1)!.event, 'run.completed')
  t.equal(events.at(-1)!.data.traceId, TRACE_ID)
})

t.test('X-Request-ID on a real socket, including a hijacked stream', async (t) => {
  const { url } = await listen(t)
  const res = await fetch(`${url}/v1/agents/echo/runs`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'x-request-id': 'socket-1' }, body: JSON.stringify({ input: 'x' }) })
  t.equal(res.headers.get('x-request-id'), 'socket-1')
  t.equal(res.headers.get('cache-control'), 'no-cache')
  t.equal(res.headers.get('x-accel-buffering'), 'no')
  t.equal(parseSse(await res.text()).at(-1)!.event, 'run.completed')
})

t.test('requestContextPlugin on its own: ids, traces and access_token redaction, without the service core', async (t) => {
  const Fastify = (await import('fastify')).default
  const { requestContextPlugin } = await import('../../plugins/request-context.js')
  const { requestContextOf } = await import('../../lib/core/request-context.js')
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(requestContextPlugin)
  app.get('/where', async (request) => ({ url: request.url, requestId: requestContextOf(request).requestId }))
  const res = await app.inject({ method: 'GET', url: '/where?access_token=secret&x=1', headers: { 'x-request-id': 'alone-1' } })
  t.equal(res.statusCode, 200, 'no drain check to make without the core')
  t.equal(res.headers['x-request-id'], 'alone-1')
  t.same(res.json(), { url: '/where?access_token=[REDACTED]&x=1', requestId: 'alone-1' })
})

t.test('reading the context of a request the plugin never saw throws, naming what to register', async (t) => {
  const { requestContextOf } = await import('../../lib/core/request-context.js')
  const request = { agentsContext: null, method: 'GET', url: '/mine' } as unknown as Parameters<typeof requestContextOf>[0]
  t.throws(() => requestContextOf(request), /GET \/mine has no request context: register requestContextPlugin/)
})
