import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { SwaggerTransform } from '@fastify/swagger'
import { createRun } from '../lib/runs/start.js'
import { AgentError, AgentNotFoundError, AgentTimeoutError, ShutdownError } from '../lib/core/errors.js'
import type { AgentRun, RunEvent, RunListener, RunOutcome, RunResult } from '../lib/runs/run.js'
import { SseStream } from '../lib/runs/sse.js'
import type { Agent } from '../lib/core/types.js'
import { AgentInfo, AgentList, AgentParams } from '../schemas/agents.js'
import { errorResponses } from '../schemas/common.js'
import { RunRequest, RunResult as RunResultSchema, SseStreamDescription } from '../schemas/runs.js'
import type { AgentServiceState } from '../plugins/core.js'
import { auditRequest } from '../plugins/audit.js'
import { settleStreamedRun } from '../plugins/idempotency.js'
import { requestContextOf } from '../plugins/request-context.js'

export type AgentsPluginOptions = Record<never, never>

function infoOf (name: string, agent: Agent): AgentInfo {
  return { name, description: agent.description ?? '', metadata: agent.metadata ?? {} }
}

/** Thrown when the client went away before its JSON run finished; nobody reads the answer. */
class ClientClosedError extends Error {
  readonly statusCode = 499
  readonly code = 'CANCELLED'
}

function failureOf (outcome: Exclude<RunOutcome, { status: 'completed' }>, run: AgentRun): Error {
  switch (outcome.code) {
    case 'AGENT_TIMEOUT': return new AgentTimeoutError(run.agentName, run.options.timeoutMs)
    case 'SHUTDOWN': return new ShutdownError()
    case 'CANCELLED': return new ClientClosedError(outcome.message)
    default: return new AgentError(outcome.message)
  }
}

/**
 * The document shows both media types of a run's 200. The route itself declares only the JSON one: with a
 * per-media-type response, Fastify parses the Content-Type of every answer to pick its serializer (an SSE
 * answer is a hijacked reply, which Fastify never serializes).
 */
const documentRunResponse: SwaggerTransform = ({ schema, url }) => ({
  url,
  schema: {
    ...schema,
    response: {
      ...(schema.response as Record<string, unknown>),
      200: {
        description: 'The run result, or the run as an event stream',
        content: {
          'application/json': { schema: RunResultSchema },
          'text/event-stream': { schema: { type: 'string', description: SseStreamDescription } }
        }
      }
    }
  }
})

const RESPONSE_RUN = Symbol('fastify-agents.run')
type RunResponse = ServerResponse & { [RESPONSE_RUN]: AgentRun }

/** A client that closes before its JSON run answered aborts the run (one listener for all: no closure per run). */
function abortRunOnClose (this: RunResponse): void {
  if (!this.writableFinished) this[RESPONSE_RUN].abort('CANCELLED')
}

function wantsStream (request: FastifyRequest, stream: boolean | undefined): boolean {
  if (stream !== undefined) return stream
  return request.headers.accept?.includes('text/event-stream') === true
}

const SSE_RUN = Symbol('fastify-agents.sse-run')
type SseResponse = ServerResponse & { [SSE_RUN]: SseRun }

/** The client closing the stream aborts the run (one listener function for every stream). */
function onSseClose (this: SseResponse): void {
  this[SSE_RUN].closed()
}

/**
 * A run streamed as Server-Sent Events: the run's listener, the stream, and what happens at the end. An
 * object with methods rather than closures, and nothing awaiting the run: an idle stream (a model thinking,
 * an approval waiting) holds only this, its run and its session (the bench's heap per idle stream).
 */
class SseRun implements RunListener {
  readonly #state: AgentServiceState
  readonly #request: FastifyRequest
  readonly #run: AgentRun
  readonly #stream: SseStream
  // only the terminal event matters to idempotency: keeping every latest event would hold run.started
  // (and its data) for as long as an idle stream stays open
  #final: RunEvent | undefined

  constructor (state: AgentServiceState, request: FastifyRequest, reply: FastifyReply, run: AgentRun) {
    this.#state = state
    this.#request = request
    this.#run = run
    reply.hijack()
    // A hijacked reply skips Fastify's header handling: copy what the hooks set (X-Request-ID, CORS).
    this.#stream = new SseStream(reply.raw, reply.getHeaders() as Record<string, string>)
    state.heartbeat.add(this.#stream)
    const raw = reply.raw as SseResponse
    raw[SSE_RUN] = this
    raw.on('close', onSseClose)
  }

  runEvent (event: RunEvent): void {
    // The terminal event goes out with the end of the response (#end): one write less per stream, and a
    // client that has seen run.completed finds its idempotency record written.
    if (event.type === 'run.completed' || event.type === 'run.failed') this.#final = event
    else this.#stream.send(event)
  }

  runSettled (): void {
    this.#end().catch(
      // Nothing in #end is known to throw (the idempotency store's failures are caught and logged inside),
      // but nothing awaits it either: a rejection must not become an unhandled one.
      /* c8 ignore next */
      (err: unknown) => this.#request.log.error({ err }, 'could not end an SSE stream'))
  }

  closed (): void {
    this.#stream.closed()
    this.#run.abort('CANCELLED')
  }

  async #end (): Promise<void> {
    // an idempotency key's record is written before the stream ends: a retry after the end is a replay
    await settleStreamedRun(this.#request, this.#final)
    this.#state.heartbeat.delete(this.#stream)
    this.#stream.end(this.#final)
    auditRequest(this.#state, this.#request, 200)
  }
}

const agents: FastifyPluginAsyncTypebox<AgentsPluginOptions> = async (fastify) => {
  const state = fastify.agentService
  const { settings } = state
  const list = { agents: [...settings.agents].map(([name, agent]) => infoOf(name, agent)) }

  fastify.get('/agents', {
    config: { access: 'run' },
    schema: { summary: 'List agents', tags: ['agents'], response: { 200: AgentList, ...errorResponses(400, 401, 403, 429, 503) } }
  }, async () => list)

  fastify.get('/agents/:name', {
    config: { access: 'run' },
    schema: { summary: 'Get one agent', tags: ['agents'], params: AgentParams, response: { 200: AgentInfo, ...errorResponses(400, 401, 403, 404, 429, 503) } }
  }, async (request) => {
    const agent = settings.agents.get(request.params.name)
    if (agent === undefined) throw new AgentNotFoundError(request.params.name)
    return infoOf(request.params.name, agent)
  })

  fastify.post('/agents/:name/runs', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', idempotency: true, swaggerTransform: documentRunResponse },
    schema: {
      summary: 'Run an agent',
      description: 'Answers JSON, or Server-Sent Events with `Accept: text/event-stream` or `"stream": true`.',
      tags: ['agents'],
      params: AgentParams,
      body: RunRequest,
      response: {
        200: RunResultSchema,
        ...errorResponses(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503, 504)
      }
    }
  }, async (request, reply): Promise<RunResult | undefined> => {
    const context = requestContextOf(request)
    const body = request.body
    const streamed = wantsStream(request, body.stream)
    const run = await createRun(state, context, request.log, request.params.name, body, streamed, context)

    if (streamed) {
      run.listen(new SseRun(state, request, reply, run))
      run.start()
      return undefined
    }

    // Stays after the run: abort() of a settled run does nothing, and once() + off() per request cost more
    // (a bound wrapper, a listener search) than a listener left on a response that is about to end.
    ;(reply.raw as RunResponse)[RESPONSE_RUN] = run
    reply.raw.on('close', abortRunOnClose)
    run.start()
    const outcome = await run.done
    // An answer sent while draining closes its kept-alive connection (a check here, where a run can outlast
    // the start of a drain, rather than an onSend hook on every response).
    if (state.draining) void reply.header('connection', 'close')
    if (outcome.status === 'completed') return outcome.result
    throw failureOf(outcome, run)
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const agentsPlugin = fp(agents, { fastify: '5.x', name: 'fastify-agents-agents', dependencies: ['fastify-agents-core'], encapsulate: true })
export default agentsPlugin
