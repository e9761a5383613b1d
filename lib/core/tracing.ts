import type { Context, ProxyTracerProvider, Span, Tracer, TracerProvider } from '@opentelemetry/api'
import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'
import type { TraceContext } from './types.js'
import { packageVersion } from './version.js'

type Api = typeof import('@opentelemetry/api')
// The API, required on the first run rather than imported with the package (bench/import.js); its state is global
// (a registry on globalThis, shared by every copy of it), so the host's SDK is seen however either of them loaded it.
// With it, the API's own no-op provider, as a fresh proxy reports it: while the global proxy still delegates to it,
// no SDK is registered and a run makes no span, no context and no attribute at all.
let loaded: { api: Api, noopProvider: TracerProvider } | null = null
function otel (): { api: Api, noopProvider: TracerProvider } {
  if (loaded !== null) return loaded
  const api = createRequire(import.meta.url)('@opentelemetry/api') as Api
  loaded = { api, noopProvider: new api.ProxyTracerProvider().getDelegate() }
  return loaded
}

// the tracer of the provider last seen: trace.getTracer() per run would check the API's version each time
let cached: { provider: TracerProvider, tracer: Tracer } | null = null

/** The host's SDK's tracer, or null without one (read per run: a provider may be registered after start). */
function currentTracer (): Tracer | null {
  // the API's global is always its proxy, delegating to the registered provider (or to the no-op one)
  const { api, noopProvider } = otel()
  const provider = (api.trace.getTracerProvider() as ProxyTracerProvider).getDelegate()
  if (provider === noopProvider) return null
  if (cached?.provider !== provider) cached = { provider, tracer: provider.getTracer('fastify-agents', packageVersion) }
  return cached.tracer
}

/** Loads the API now (the core plugin, as the service starts): the first run does not pay for it, nor the import. */
export function prepareTracing (): void {
  otel()
}

/** Whether the host registered an OpenTelemetry SDK. */
export function tracingEnabled (): boolean {
  return currentTracer() !== null
}

/** What a span needs of its run; an AgentRun fits. */
export interface TracedRun {
  readonly runId: string
  readonly agentName: string
  readonly sessionId: string | null
  readonly options: { readonly trace: TraceContext }
}

/** The outcome a span ends with (a RunOutcome fits). */
export type TracedOutcome =
  | { status: 'completed', result: { usage: { inputTokens: number, outputTokens: number } } }
  | { status: 'failed', code: string, message: string }
  | { status: 'detached', code: string, message: string }

/**
 * The parent of a run's span: the active span of the same trace if the host has one (its HTTP server span), else
 * the incoming traceparent, so that the span's trace id is the run's `traceId`. A
 * trace the service started itself has no parent span: a remote one with a fresh id stands in, since the API
 * offers no other way to give a root span a trace id of our choosing.
 */
function parentContext (traceContext: TraceContext): Context {
  const { context, createTraceState, trace } = otel().api
  // the host's own server span for this request (its HTTP instrumentation), a child of the same traceparent
  const active = context.active()
  if (trace.getSpanContext(active)?.traceId === traceContext.traceId) return active
  return trace.setSpanContext(active, {
    traceId: traceContext.traceId,
    spanId: traceContext.parentSpanId ?? randomBytes(8).toString('hex'),
    // an absent or unparsable flag field: sampled, as a trace the service starts itself is
    traceFlags: traceContext.traceFlags === undefined ? 1 : Number.parseInt(traceContext.traceFlags, 16),
    isRemote: true,
    ...(traceContext.traceState === undefined ? {} : { traceState: createTraceState(traceContext.traceState) })
  })
}

/**
 * A run's span (`invoke_agent <agent>`, GenAI semantic conventions), its `execute_tool` children and its events.
 * Made only with an SDK registered (`startRunTrace` returns null otherwise); a span the sampler drops records nothing.
 */
export class RunTrace {
  readonly span: Span
  /** the context the agent runs in: its own spans nest under the run's */
  readonly context: Context
  readonly #recording: boolean
  readonly #tracer: Tracer
  #tools: Map<string, Span> | null = null

  constructor (run: TracedRun, tracer: Tracer) {
    this.#tracer = tracer
    const parent = parentContext(run.options.trace)
    this.span = this.#tracer.startSpan(`invoke_agent ${run.agentName}`, {
      kind: otel().api.SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.name': run.agentName,
        'fastify_agents.run_id': run.runId,
        ...(run.sessionId === null ? {} : { 'gen_ai.conversation.id': run.sessionId })
      }
    }, parent)
    this.context = otel().api.trace.setSpan(parent, this.span)
    this.#recording = this.span.isRecording()
  }

  /** Runs `fn` in the run span's context (the agent's code: a span it starts nests under the run's). */
  within<T> (fn: () => T): T {
    return otel().api.context.with(this.context, fn)
  }

  /** Every event of the run, as it is emitted: tool calls open and close child spans, approvals and checkpoints are span events. */
  event (type: string, data: unknown): void {
    if (!this.#recording) return
    switch (type) {
      case 'tool.call': {
        const { toolCallId, name } = data as { toolCallId: string, name: string }
        const span = this.#tracer.startSpan(`execute_tool ${name}`, {
          kind: otel().api.SpanKind.INTERNAL,
          attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': name, 'gen_ai.tool.call.id': toolCallId }
        }, this.context)
        this.#tools ??= new Map()
        this.#tools.get(toolCallId)?.end()
        this.#tools.set(toolCallId, span)
        return
      }
      case 'tool.result': {
        const { toolCallId, isError } = data as { toolCallId: string, isError: boolean }
        const span = this.#tools?.get(toolCallId)
        if (span === undefined) return
        this.#tools!.delete(toolCallId)
        if (isError) span.setStatus({ code: otel().api.SpanStatusCode.ERROR })
        span.end()
        return
      }
      case 'approval.requested':
      case 'approval.decided': {
        const { approval } = data as { approval: { id: string, action: string, status: string } }
        this.span.addEvent(type, { 'fastify_agents.approval.id': approval.id, 'fastify_agents.approval.action': approval.action, 'fastify_agents.approval.status': approval.status })
        return
      }
      case 'checkpoint.saved':
        this.span.addEvent(type, { 'fastify_agents.checkpoint.step': (data as { step: number }).step })
    }
  }

  /** Ends the span (and any tool span left open) as the run settles here. */
  end (outcome: TracedOutcome): void {
    if (this.#tools !== null) for (const span of this.#tools.values()) span.end()
    this.#tools = null
    if (outcome.status === 'completed') {
      const { usage } = outcome.result
      this.span.setAttributes({ 'gen_ai.usage.input_tokens': usage.inputTokens, 'gen_ai.usage.output_tokens': usage.outputTokens })
    } else if (outcome.status === 'failed') {
      this.span.setAttribute('error.type', outcome.code)
      this.span.setStatus({ code: otel().api.SpanStatusCode.ERROR, message: outcome.message })
    } else {
      // the run goes on on another instance, under a span of its own there
      this.span.addEvent('run.detached', { 'fastify_agents.detach.code': outcome.code })
    }
    this.span.end()
  }
}

/** The run's trace, or null without an SDK (then nothing about tracing costs a run anything). */
export function startRunTrace (run: TracedRun): RunTrace | null {
  const tracer = currentTracer()
  return tracer === null ? null : new RunTrace(run, tracer)
}
