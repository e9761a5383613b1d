import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { documentAnswer } from '../document.js'
import { AgentNotFoundError } from '../../core/errors.js'
import type { Agent } from '../../core/types.js'
import { ServiceRunPort, loadA2a } from './run-port.js'
import type { A2aLoader, A2aModule } from './run-port.js'
import { writeFrames } from '../stream.js'
import type { A2ACardOptions } from './protocol.js'
import { A2AAgentCard, A2AJsonRpcRequest, A2AJsonRpcResponse, A2AParams, A2AStreamDescription } from '../../../schemas/a2a.js'
import { errorResponses } from '../../../schemas/common.js'
import { routePluginScope } from '../../service/composition.js'

export type A2APluginOptions = Record<never, never>

const CARD_PATH = '/.well-known/agent-card.json'

/** Both media types of the endpoint's 200 in the document (the route sends JSON text or a hijacked stream). */
const documentJsonRpc = documentAnswer({
  description: 'A JSON-RPC response, or (SendStreamingMessage, SubscribeToTask, message/stream, tasks/resubscribe) a stream of them',
  json: A2AJsonRpcResponse,
  stream: A2AStreamDescription
})

function versionOf (request: FastifyRequest): string | undefined {
  const version = request.headers['a2a-version']
  return typeof version === 'string' ? version : undefined
}

/**
 * `/a2a/:name`: each agent as an A2A agent (docs/front-ends.md), on @a2a-js/sdk's own JSON-RPC handlers (v1.0 and v0.3
 * method names) over the run pipeline: a task is a run, its context a session. The SDK is an optional peer, loaded
 * by the first request here (501 A2A_UNAVAILABLE without it).
 */
const a2a: FastifyPluginAsyncTypebox<A2APluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'a2aPlugin')
  const service = fastify.agentService
  const { settings } = service
  // a service's own loader (tests), else the module the process loads once
  const injected = settings.injected.a2aLoader as A2aLoader | undefined
  const load = (): Promise<A2aModule> => loadA2a(injected)

  function agentOf (name: string): Agent {
    const agent = settings.agents.get(name)
    if (agent === undefined) throw new AgentNotFoundError(name)
    return agent
  }

  /** The card's endpoint is where the client reached us (behind a proxy: with `trustProxy`, its host and protocol). */
  function cardOptions (request: FastifyRequest, name: string, agent: Agent, path: string): A2ACardOptions {
    return { name, description: agent.description ?? '', url: `${request.protocol}://${request.host}${path}`, bearerAuth: settings.auth !== null }
  }

  fastify.get('/a2a/:name' + CARD_PATH, {
    config: { access: 'run' },
    schema: {
      operationId: 'getA2aAgentCard',
      summary: 'An agent\'s A2A agent card',
      description: 'The v1.0 card with `A2A-Version: 1.0`, else the v0.3 card; both name the JSON-RPC endpoint `/v1/a2a/:name`.',
      tags: ['front ends'],
      params: A2AParams,
      response: { 200: A2AAgentCard, ...errorResponses(400, 401, 403, 404, 429, 500, 501, 503) }
    }
  }, async (request, reply) => {
    const name = request.params.name
    const agent = agentOf(name)
    service.audit.note(request, { agent: name })
    const { a2aAgentCardDocument } = await load()
    const path = request.url.split('?', 1)[0]!.slice(0, -CARD_PATH.length)
    void reply.header('vary', 'A2A-Version')
    return a2aAgentCardDocument(cardOptions(request, name, agent, path), versionOf(request)) as A2AAgentCard
  })

  fastify.post('/a2a/:name', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', swaggerTransform: documentJsonRpc },
    schema: {
      operationId: 'sendA2aRequest',
      summary: 'An agent\'s A2A JSON-RPC endpoint',
      description: 'A2A over JSON-RPC 2.0: SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask (v1.0) and ' +
        'message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe (v0.3). A task is a run (its id the run id), ' +
        'its contextId a session; a pending approval is the state input-required, answered by a message to the task.',
      tags: ['front ends'],
      params: A2AParams,
      body: A2AJsonRpcRequest,
      response: { 200: A2AJsonRpcResponse, ...errorResponses(400, 401, 403, 404, 413, 415, 429, 500, 501, 503) }
    }
  }, async (request, reply) => {
    const name = request.params.name
    const agent = agentOf(name)
    service.audit.note(request, { agent: name })
    const { RunTaskHandler, a2aAgentCard, handleA2AJsonRpc } = await load()
    // the client going away ends whatever waits for the run (a blocking send, a stream)
    const stop = new AbortController()
    reply.raw.on('close', () => { if (!reply.raw.writableFinished) stop.abort() })
    const handler = new RunTaskHandler({
      card: a2aAgentCard(cardOptions(request, name, agent, request.url.split('?', 1)[0]!)),
      port: new ServiceRunPort(service, request, name),
      signal: stop.signal,
      exposeErrors: settings.exposeErrors
    })
    const answer = await handleA2AJsonRpc(handler, request.body, versionOf(request))
    if (typeof answer.body === 'string') return (reply as FastifyReply).code(answer.status).headers(answer.headers).send(answer.body)
    await writeFrames(service, request, reply, answer.headers, answer.body, () => stop.abort())
    return reply
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const a2aPlugin = fp(a2a, { fastify: '5.x', name: 'fastify-agents-a2a', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default a2aPlugin
