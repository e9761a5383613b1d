import fp from 'fastify-plugin'
import type { FastifyPluginCallback } from 'fastify'
import type { ServerResponse } from 'node:http'
import { redactAccessToken } from '../lib/auth/credentials.js'
import { RequestContext, genRequestId } from '../lib/core/request-context.js'
import { REQUEST_CONTEXT } from '../lib/service/composition.js'

export interface RequestContextOptions {
  /**
   * Use `request.id` as the request id as it is: set when the app's own `genReqId` already applies
   * the X-Request-ID rule (the standalone server does), so logs and responses share one id.
   */
  trustRequestId?: boolean
}

/** Node hands a request to 'upgrade' (not to HTTP) when `Connection` names `upgrade`. */
function isUpgrade (connection: string | undefined): boolean {
  return connection !== undefined && /(^|[\s,])upgrade($|[\s,])/i.test(connection)
}

function closeUpgradeSocket (this: ServerResponse): void {
  this.socket?.destroy()
}

const requestContext: FastifyPluginCallback<RequestContextOptions> = (fastify, options, done) => {
  const trustRequestId = options.trustRequestId === true
  if (!fastify.hasRequestDecorator('agentsContext')) fastify.decorateRequest('agentsContext', null)

  fastify.addHook('onRequest', (request, reply, next) => {
    const requestId = trustRequestId ? request.id : genRequestId(request)
    // Mounted in a host app, Fastify's own id (reqId) is the host's: our lines carry the id the client sees too.
    if (!trustRequestId) request.log = reply.log = request.log.child({ requestId })
    request.agentsContext = new RequestContext(requestId, request.headers.traceparent, request.headers.tracestate, request.routeOptions)
    reply.header('x-request-id', requestId)
    // A credential in the query string (a browser's WebSocket access_token) is never recorded: the audit
    // entry and the error bodies read this URL (app/service.ts keeps it out of the log lines).
    if (request.raw.url!.includes('access_token=')) request.raw.url = redactAccessToken(request.raw.url!)
    // A WebSocket upgrade refused by a hook (auth, rate limit, drain) before @fastify/websocket's own hooks
    // have seen it: nothing else would close its socket, which HTTP no longer owns.
    if (request.headers.upgrade !== undefined && isUpgrade(request.headers.connection)) reply.raw.once('finish', closeUpgradeSocket)
    next()
  })
  done()
}

/** Every request's context (lib/core/request-context.ts): its id echoed as X-Request-ID, its trace, its principal. */
export const requestContextPlugin = fp(requestContext, { fastify: '5.x', name: REQUEST_CONTEXT.name })
export default requestContextPlugin
