import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { documentAnswer } from '../lib/frontends/document.js'
import { AgentNotFoundError, ClientClosedError, runFailureError } from '../lib/core/errors.js'
import { requestContextOf } from '../lib/core/request-context.js'
import type { Agent } from '../lib/core/types.js'
import type { AgentRun } from '../lib/runs/run.js'
import { SseRun } from '../lib/runs/sse.js'
import { prepareRun, queueRun } from '../lib/runs/start.js'
import { AgentInfo, AgentList, AgentParams } from '../schemas/agents.js'
import { errorResponses } from '../schemas/common.js'
import { QueuedRun, ReplayRunRequest, RunParams, RunRequest, RunResult as RunResultSchema, SseStreamDescription } from '../schemas/runs.js'
import { resolveReplay } from '../lib/runs/rewind.js'
import type { RunReplay } from '../lib/stores/types.js'
import { routePluginScope } from '../lib/service/composition.js'

export type AgentsPluginOptions = Record<never, never>

function infoOf (name: string, agent: Agent): AgentInfo {
  return { name, description: agent.description ?? '', metadata: agent.metadata ?? {} }
}

/**
 * The document shows both media types of a run's 200. The route itself declares only the JSON one: with a
 * per-media-type response, Fastify parses the Content-Type of every answer to pick its serializer (an SSE
 * answer is a hijacked reply, which Fastify never serializes).
 */
const documentRunResponse = documentAnswer({ description: 'The run result, or the run as an event stream', json: RunResultSchema, stream: SseStreamDescription })

const RESPONSE_RUN = Symbol('fastify-agents.run')
type RunResponse = ServerResponse & { [RESPONSE_RUN]: AgentRun }

/** A client that closes before its JSON run answered aborts the run (one listener for all: no closure per run). */
function abortRunOnClose (this: RunResponse): void {
  const run = this[RESPONSE_RUN]
  if (!this.writableFinished && run.options.onDisconnect === 'cancel') run.abort('CANCELLED')
}

/** Aborted when the response closes before it is sent (the client left). */
function closeSignal (raw: ServerResponse): AbortSignal {
  const controller = new AbortController()
  raw.once('close', () => { if (!raw.writableFinished) controller.abort(new ClientClosedError('The client went away')) })
  return controller.signal
}

/** The path under which the runs routes sit beside this plugin's (`/v1`). */
function prefixOf (prefix: string): string {
  return prefix.endsWith('/') ? prefix.slice(0, -1) : prefix
}

function wantsStream (request: FastifyRequest, stream: boolean | undefined): boolean {
  if (stream !== undefined) return stream
  return request.headers.accept?.includes('text/event-stream') === true
}

const agents: FastifyPluginAsyncTypebox<AgentsPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'agentsPlugin')
  const service = fastify.agentService
  const { settings } = service
  const list = { agents: [...settings.agents].map(([name, agent]) => infoOf(name, agent)) }

  fastify.get('/agents', {
    config: { access: 'run' },
    schema: { operationId: 'listAgents', summary: 'List agents', tags: ['agents'], response: { 200: AgentList, ...errorResponses(400, 401, 403, 429, 503) } }
  }, async () => list)

  fastify.get('/agents/:name', {
    config: { access: 'run' },
    schema: { operationId: 'getAgent', summary: 'Get one agent', tags: ['agents'], params: AgentParams, response: { 200: AgentInfo, ...errorResponses(400, 401, 403, 404, 429, 503) } }
  }, async (request) => {
    const agent = settings.agents.get(request.params.name)
    if (agent === undefined) throw new AgentNotFoundError(request.params.name)
    return infoOf(request.params.name, agent)
  })

  fastify.post('/agents/:name/runs', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', idempotency: true, swaggerTransform: documentRunResponse },
    schema: {
      operationId: 'runAgent',
      summary: 'Run an agent',
      description: 'Answers JSON, or Server-Sent Events with `Accept: text/event-stream` or `"stream": true`.',
      tags: ['agents'],
      params: AgentParams,
      body: RunRequest,
      response: {
        200: RunResultSchema,
        202: QueuedRun,
        ...errorResponses(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503, 504)
      }
    }
  }, async (request, reply) => answerRun(request, reply, request.params.name, request.body))

  fastify.post('/runs/:runId/replay', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', idempotency: true, swaggerTransform: documentRunResponse },
    schema: {
      operationId: 'replayRun',
      summary: 'Replay an ended run from its checkpoint, in a fork of its session',
      description: 'A new run of the same agent in a fork of the run\'s session taken before it, starting from the run\'s ' +
        'checkpoint (`state` replaces its state) with the completed steps of its journal given back, answered as a run ' +
        'request is (JSON, SSE, or 202 with `background`). A run in progress: 409 `RUN_IN_PROGRESS`; one without a ' +
        'checkpoint (completed, or it saved none): 409 `NO_CHECKPOINT`.',
      tags: ['runs'],
      params: RunParams,
      body: ReplayRunRequest,
      response: {
        200: RunResultSchema,
        202: QueuedRun,
        ...errorResponses(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503, 504)
      }
    },
    preValidation: async (request) => { request.body ??= {} }
  }, async (request, reply) => {
    const { input: given, state, ...options } = request.body
    const replayed = await resolveReplay(service, request.params.runId, requestContextOf(request).principal, {
      ...('input' in request.body ? { input: given } : {}), ...('state' in request.body ? { state } : {})
    })
    return answerRun(request, reply, replayed.agent, { ...options, input: replayed.input, sessionId: replayed.sessionId }, replayed.replay)
  })

  /** A run request answered: 202 for a background run, else the run's result as JSON or its events as SSE. */
  async function answerRun (request: FastifyRequest, reply: FastifyReply, agent: string, body: RunRequest, replay?: RunReplay): Promise<FastifyReply> {
    if (body.background === true) {
      const queued = await queueRun({ service, agent, request: body, caller: requestContextOf(request), log: request.log, auditedRequest: request, replay })
      const { runId, sessionId, requestId, traceId } = queued
      return reply.code(202).header('location', `${prefixOf(fastify.prefix)}/runs/${runId}`).send({ runId, sessionId, status: 'queued' as const, requestId, traceId })
    }
    const run = await prepareRun({
      service,
      agent,
      request: body,
      caller: requestContextOf(request),
      log: request.log,
      auditedRequest: request,
      // a run that may wait for its session stops waiting when its client leaves
      signal: body.multitask === 'enqueue' || body.multitask === 'interrupt' ? closeSignal(reply.raw) : undefined,
      replay
    })

    if (wantsStream(request, body.stream)) {
      run.listen(new SseRun(service, request, reply, run))
      run.start()
      return reply
    }

    // Stays after the run: abort() of a settled run does nothing, and once() + off() per request cost more
    // (a bound wrapper, a listener search) than a listener left on a response that is about to end.
    ;(reply.raw as RunResponse)[RESPONSE_RUN] = run
    reply.raw.on('close', abortRunOnClose)
    run.start()
    const outcome = await run.done
    // An answer sent while draining closes its kept-alive connection (a check here, where a run can outlast
    // the start of a drain, rather than an onSend hook on every response).
    if (service.drain.draining) void reply.header('connection', 'close')
    // the result as the run's log holds it, serialized once (a string payload skips the schema's serializer)
    if (outcome.status === 'completed') return (reply as FastifyReply).type('application/json; charset=utf-8').send(run.terminal!.json)
    throw runFailureError(outcome, run.agentName, run.options.timeoutMs, reply.raw.destroyed)
  }
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const agentsPlugin = fp(agents, { fastify: '5.x', name: 'fastify-agents-agents', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default agentsPlugin
