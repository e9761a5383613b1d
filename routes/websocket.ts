import type { IncomingMessage } from 'node:http'
import type {} from '@fastify/websocket'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import { UpgradeRequiredError } from '../lib/core/errors.js'
import { Connection, WS_MAX_PAYLOAD, WebSocketHeartbeat } from '../lib/runs/websocket.js'
import { errorResponses } from '../schemas/common.js'
import { routePluginScope } from '../lib/service/composition.js'

export type WebsocketPluginOptions = Record<never, never>

/** Headers the hooks set on the reply (X-Request-ID, rate limit, …) that belong on the 101 as well. */
function upgradeHeaders (reply: FastifyReply): string[] {
  const lines: string[] = []
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (/^(connection|upgrade|content-|transfer-encoding|sec-websocket-)/i.test(name)) continue
    for (const one of [value].flat()) {
      const text = String(one)
      // raw header lines: a CR or LF in a value would split the response
      if (!/[\r\n]/.test(text)) lines.push(`${name}: ${text}`)
    }
  }
  return lines
}


/**
 * `GET /ws`: the WebSocket transport (docs/runs.md). The upgrade is an ordinary GET through every hook
 * (request id, auth with `access_token`, rate limit, drain); then JSON messages start and cancel runs,
 * and every run event comes back as a frame.
 */
const websocket: FastifyPluginAsyncTypebox<WebsocketPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'websocketPlugin')
  const service = fastify.agentService
  const connections = new Set<Connection>()
  const heartbeat = new WebSocketHeartbeat()
  // the reply of each upgrade in progress, for the headers of its 101
  const upgrading = new WeakMap<IncomingMessage, FastifyReply>()

  // The drain closes the connections (1001) once their runs have ended or been aborted with SHUTDOWN.
  const closeAll = async (): Promise<void> => {
    await Promise.all([...connections].map((connection) => connection.shutdown()))
  }
  const forget = service.drain.onShutdown(closeAll)
  fastify.addHook('onClose', async () => forget())
  // begins the drain (the drain plugin's onClose waits for it: a preClose hook is bounded by Fastify's plugin timeout)
  const drain = async (): Promise<void> => { void Promise.allSettled([service.drain.begin(service.settings.drainTimeoutMs)]) }

  // A host app that mounted @fastify/websocket itself keeps it (a second one would answer every upgrade twice).
  if (!fastify.hasDecorator('websocketServer')) {
    // loaded with the websocket option only: importing the package does not pay for it (bench/import.js)
    const { default: fastifyWebsocket } = await import('@fastify/websocket')
    await fastify.register(fastifyWebsocket, {
      options: { maxPayload: WS_MAX_PAYLOAD },
      preClose: drain,
      errorHandler (error, _socket, request) {
        // protocol errors (a frame over the cap, a bad frame): ws has already sent the close frame with the right code
        request.log.info({ err: error }, 'websocket protocol error')
      }
    })
  } else {
    fastify.addHook('preClose', drain)
  }

  fastify.websocketServer.on('headers', (headers: string[], raw: IncomingMessage) => {
    const reply = upgrading.get(raw)
    if (reply === undefined) return
    upgrading.delete(raw)
    headers.push(...upgradeHeaders(reply))
  })

  fastify.route({
    method: 'GET',
    url: '/ws',
    config: { access: 'run' },
    schema: {
      operationId: 'openWebSocket',
      summary: 'WebSocket transport',
      description: 'Upgrade to a WebSocket (only when the service has `websocket: true`). Client messages: ' +
        '`{ type: "run.start", ref?, agent, input, sessionId?, resumeRunId?, metadata? }`, `{ type: "run.cancel", runId }`; ' +
        'server frames: every run event as `{ type, runId, ref?, seq, data }`, errors as `{ type: "error", ref?, error: { code, message } }`.',
      tags: ['agents'],
      response: {
        101: { type: 'null', description: 'Switching Protocols: the connection is a WebSocket from now on' },
        ...errorResponses(401, 403, 426, 429, 500, 503)
      }
    },
    preHandler (request, reply, done) {
      upgrading.set(request.raw, reply)
      done()
    },
    handler: async () => {
      throw new UpgradeRequiredError()
    },
    wsHandler (socket: WebSocket, request: FastifyRequest) {
      const connection = new Connection(socket, service, request)
      connections.add(connection)
      heartbeat.add(socket)
      socket.on('message', (data: Buffer, isBinary: boolean) => connection.receive(data, isBinary))
      socket.once('close', () => {
        connections.delete(connection)
        heartbeat.delete(socket)
        connection.closed()
      })
      // A hijacked reply runs no onResponse hook: the upgrade is audited here, as answered.
      service.audit.record(request, 101)
    }
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const websocketPlugin = fp(websocket, { fastify: '5.x', name: 'fastify-agents-websocket', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default websocketPlugin
