// docs/operations.md: a run's OpenTelemetry span, checked with the SDK's in-memory exporter. Without an SDK nothing is made.
import t from 'tap'
import { ROOT_CONTEXT, SpanStatusCode, context, trace } from '@opentelemetry/api'
import { AlwaysOffSampler } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { startRunTrace, tracingEnabled } from '../../../lib/core/tracing.js'
import type { Agent } from '../../../lib/core/types.js'
import { build, eventually, listen, parseSse } from '../../helper.js'
import { registerTracing } from '../../helpers/otel.js'

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const PARENT_ID = '00f067aa0ba902b7'
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`

function named (spans: ReadableSpan[], name: string): ReadableSpan {
  const span = spans.find((s) => s.name === name)
  if (span === undefined) throw new Error(`no span ${name} among ${spans.map((s) => s.name).join(', ')}`)
  return span
}

const nested: Agent = {
  async run (input, ctx) {
    await new Promise((resolve) => setImmediate(resolve))
    // a span the agent (or the AI SDK it calls) makes, after an await: a child of the run's
    trace.getTracer('agent-code').startActiveSpan('chat model', (span) => span.end())
    await ctx.checkpoint({ step: 'one' })
    return { output: input, usage: { inputTokens: 3, outputTokens: 5 } }
  }
}

const tools: Agent = {
  async * run (_input, _ctx) {
    yield { type: 'tool.call', data: { toolCallId: 'c1', name: 'search', input: {} } }
    trace.getTracer('agent-code').startSpan('inside generator').end()
    yield { type: 'tool.result', data: { toolCallId: 'c1', name: 'search', output: 'ok', isError: false } }
    yield { type: 'tool.call', data: { toolCallId: 'c2', name: 'fetch', input: {} } }
    yield { type: 'tool.result', data: { toolCallId: 'c2', name: 'fetch', output: 'no', isError: true } }
    // a result with no call, a call made twice, a call never answered
    yield { type: 'tool.result', data: { toolCallId: 'zz', name: 'ghost', output: null, isError: false } }
    yield { type: 'tool.call', data: { toolCallId: 'c3', name: 'twice', input: {} } }
    yield { type: 'tool.call', data: { toolCallId: 'c3', name: 'twice', input: {} } }
    yield { type: 'tool.call', data: { toolCallId: 'c4', name: 'open', input: {} } }
    yield 'done'
  }
}

const failing: Agent = { async run () { throw new Error('boom') } }

const approver: Agent = {
  async run (_input, ctx) {
    const decision = await ctx.requestApproval({ action: 'send' })
    return { output: decision.approved }
  }
}

t.test('without an SDK no span is made and runs go as before', async (t) => {
  t.equal(tracingEnabled(), false)
  const { app } = build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: { traceparent: TRACEPARENT }, payload: { input: 'hi' } })
  t.equal(res.statusCode, 200)
  t.equal(res.json().traceId, TRACE_ID)
})

t.test('a JSON run: its span, parented on the traceparent, with the GenAI attributes and a nested agent span', async (t) => {
  const exporter = registerTracing(t)
  t.equal(tracingEnabled(), true)
  const { app } = build(t, { agents: { nested } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/nested/runs', headers: { traceparent: TRACEPARENT }, payload: { input: 'hi' } })
  t.equal(res.statusCode, 200)
  const body = res.json()
  const spans = exporter.getFinishedSpans()
  const run = named(spans, 'invoke_agent nested')
  t.equal(run.spanContext().traceId, body.traceId)
  t.equal(run.spanContext().traceId, TRACE_ID)
  t.equal(run.parentSpanContext?.spanId, PARENT_ID)
  t.same(run.attributes, {
    'gen_ai.operation.name': 'invoke_agent',
    'gen_ai.agent.name': 'nested',
    'gen_ai.conversation.id': body.sessionId,
    'fastify_agents.run_id': body.runId,
    'gen_ai.usage.input_tokens': 3,
    'gen_ai.usage.output_tokens': 5
  })
  t.equal(run.status.code, SpanStatusCode.UNSET)
  t.same(run.events.map((e) => [e.name, e.attributes]), [['checkpoint.saved', { 'fastify_agents.checkpoint.step': 1 }]])
  const child = named(spans, 'chat model')
  t.equal(child.parentSpanContext?.spanId, run.spanContext().spanId)
  t.equal(child.spanContext().traceId, TRACE_ID)
})

t.test('a run with no traceparent: its span carries the trace id the service started', async (t) => {
  const exporter = registerTracing(t)
  const { app } = build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'hi', store: false } })
  const run = named(exporter.getFinishedSpans(), 'invoke_agent echo')
  t.equal(run.spanContext().traceId, res.json().traceId)
  t.equal(run.attributes['gen_ai.conversation.id'], undefined, 'an ephemeral run has no session')
})

t.test('a streamed run: execute_tool spans per call/result pair, the generator body inside the run span', async (t) => {
  const exporter = registerTracing(t)
  const { app } = build(t, { agents: { tools } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/tools/runs', headers: { accept: 'text/event-stream', traceparent: TRACEPARENT }, payload: { input: 'x' } })
  t.equal(parseSse(res.body).at(-1)?.event, 'run.completed')
  const spans = exporter.getFinishedSpans()
  const run = named(spans, 'invoke_agent tools')
  const search = named(spans, 'execute_tool search')
  t.equal(search.parentSpanContext?.spanId, run.spanContext().spanId)
  t.same(search.attributes, { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'search', 'gen_ai.tool.call.id': 'c1' })
  t.equal(search.status.code, SpanStatusCode.UNSET)
  t.equal(named(spans, 'execute_tool fetch').status.code, SpanStatusCode.ERROR)
  t.equal(spans.filter((s) => s.name === 'execute_tool twice').length, 2)
  t.ok(named(spans, 'execute_tool open').ended, 'a call left open ends with the run')
  t.equal(spans.filter((s) => s.name === 'execute_tool ghost').length, 0)
  t.equal(named(spans, 'inside generator').parentSpanContext?.spanId, run.spanContext().spanId)
})

t.test('a failed run: error status and error.type', async (t) => {
  const exporter = registerTracing(t)
  const { app } = build(t, { agents: { failing } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/failing/runs', headers: { traceparent: TRACEPARENT }, payload: { input: 'x' } })
  t.equal(res.statusCode, 500)
  const run = named(exporter.getFinishedSpans(), 'invoke_agent failing')
  t.equal(run.status.code, SpanStatusCode.ERROR)
  t.equal(run.attributes['error.type'], 'AGENT_ERROR')
  t.equal(run.attributes['gen_ai.usage.input_tokens'], undefined)
})

t.test('approvals are span events', async (t) => {
  const exporter = registerTracing(t)
  const { app } = build(t, { agents: { approver } })
  const pending = app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: 'x' } })
  const approval = await eventually(async () => (await app.inject({ method: 'GET', url: '/v1/approvals' })).json().approvals[0])
  await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })
  t.equal((await pending).json().output, true)
  const run = named(exporter.getFinishedSpans(), 'invoke_agent approver')
  t.same(run.events.map((e) => [e.name, e.attributes?.['fastify_agents.approval.status']]), [['approval.requested', 'pending'], ['approval.decided', 'approved']])
  t.equal(run.events[0]!.attributes?.['fastify_agents.approval.id'], approval.id)
  t.equal(run.events[0]!.attributes?.['fastify_agents.approval.action'], 'send')
})

t.test('a span the sampler drops records nothing, and the run goes on', async (t) => {
  const exporter = registerTracing(t, new AlwaysOffSampler())
  const { app } = build(t, { agents: { tools } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/tools/runs', headers: { accept: 'text/event-stream' }, payload: { input: 'x' } })
  t.equal(parseSse(res.body).at(-1)?.event, 'run.completed')
  t.same(exporter.getFinishedSpans(), [])
})

t.test('a run detached here (handed to another instance) ends its span with an event; a traceState is kept', async (t) => {
  const exporter = registerTracing(t)
  const span = startRunTrace({ runId: 'r1', agentName: 'a', sessionId: null, options: { trace: { traceId: TRACE_ID, parentSpanId: PARENT_ID, traceFlags: '01', traceState: 'k=v' } } })!
  span.end({ status: 'detached', code: 'SHUTDOWN', message: 'handed off' })
  const [ended] = exporter.getFinishedSpans()
  t.same(ended!.events.map((e) => [e.name, e.attributes]), [['run.detached', { 'fastify_agents.detach.code': 'SHUTDOWN' }]])
  t.equal(ended!.parentSpanContext?.traceState?.get('k'), 'v')
})

t.test('with the host\'s own server span active (its HTTP instrumentation), the run span is its child', async (t) => {
  const exporter = registerTracing(t)
  const { service, url } = await listen(t)
  // what @opentelemetry/instrumentation-http does: the server's 'request' event runs in the server span's context
  const remote = trace.setSpanContext(ROOT_CONTEXT, { traceId: TRACE_ID, spanId: PARENT_ID, traceFlags: 1, isRemote: true })
  const server = trace.getTracer('host').startSpan('POST /v1/agents/:name/runs', {}, remote)
  const emit = service.app.server.emit.bind(service.app.server)
  service.app.server.emit = ((event: string, ...args: unknown[]) => event === 'request'
    ? context.with(trace.setSpan(remote, server), () => emit(event, ...args))
    : emit(event, ...args)) as typeof service.app.server.emit
  const res = await fetch(`${url}/v1/agents/echo/runs`, { method: 'POST', headers: { traceparent: TRACEPARENT, 'content-type': 'application/json' }, body: JSON.stringify({ input: 'hi' }) })
  server.end()
  const run = named(exporter.getFinishedSpans(), 'invoke_agent echo')
  t.equal(run.spanContext().traceId, ((await res.json()) as { traceId: string }).traceId)
  t.equal(run.parentSpanContext?.spanId, server.spanContext().spanId)
})

t.test('a run detached from the service ends its span with the detach event, once', async (t) => {
  const exporter = registerTracing(t)
  const waiting: Agent = { resumable: true, run: (_i, ctx) => new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))) }
  const { app } = build(t, { agents: { waiting } })
  await app.ready()
  app.agentService.worker.stopClaiming()
  const reply = app.inject({ method: 'POST', url: '/v1/agents/waiting/runs', payload: { input: null, onDisconnect: 'continue' } })
  const run = await eventually(() => app.agentService.runs.list()[0])
  t.equal(run.detach('SHUTDOWN'), true)
  t.equal(run.detach('SHUTDOWN'), false, 'a run detached once is settled')
  await reply
  const span = named(exporter.getFinishedSpans(), 'invoke_agent waiting')
  t.same(span.events.map((e) => e.name), ['run.detached'])
})
