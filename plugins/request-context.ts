import fp from 'fastify-plugin'
import type { FastifyContextConfig, FastifyPluginCallback, FastifyRequest } from 'fastify'
import { redactAccessToken } from '../lib/core/auth.js'
import type { AuthOutcome } from '../lib/core/auth.js'
import type { BodyFingerprint } from '../lib/core/idempotency.js'
import type { Reservation } from './idempotency.js'
import { ShutdownError } from '../lib/core/errors.js'
import { isValidRequestId, newTraceId, parseTraceparent } from '../lib/core/trace-context.js'
import type { TraceContext } from '../lib/core/types.js'
import { randomId } from '../lib/core/ids.js'
import type { ServerResponse } from 'node:http'

/** What every request carries: its id (echoed as X-Request-ID) and its trace. */
export class RequestContext {
  readonly requestId: string
  readonly startedAt: number
  /** who authenticated; set by the auth plugin */
  principal = 'anonymous'
  /** recorded in the request's audit entry */
  agent: string | undefined
  runId: string | undefined
  sessionId: string | undefined
  idempotencyKey: string | undefined
  replayed: boolean | undefined
  /** Admin API requests are audited like any other but counted apart */
  admin = false
  /** set by the request's one audit entry (plugins/audit.ts) */
  audited = false
  /** the auth plugin's verdict on the request's credential (undefined: auth off, or a public route) */
  auth: AuthOutcome | undefined = undefined
  /** the idempotency plugin's state: the body's hash as it streams in, the key this request holds */
  fingerprint: BodyFingerprint | undefined = undefined
  reservation: Reservation | undefined = undefined
  /** the route's path pattern ('' for a 404) and its config, read once: `request.routeOptions` builds a new object per read */
  readonly route: string
  readonly config: FastifyContextConfig
  #traceparent: unknown
  #tracestate: unknown
  #trace: TraceContext | null = null

  constructor (requestId: string, traceparent: unknown, tracestate: unknown, route: { url?: string, config: FastifyContextConfig } = { config: {} }) {
    this.requestId = requestId
    this.startedAt = performance.now()
    this.#traceparent = traceparent
    this.#tracestate = tracestate
    this.route = route.url ?? ''
    this.config = route.config
  }

  // Parsed (or started) on first use: most requests never read it, and a new trace id costs a random read.
  get trace (): TraceContext {
    if (this.#trace === null) this.#trace = parseTraceparent(this.#traceparent, this.#tracestate) ?? { traceId: newTraceId() }
    return this.#trace
  }

  /** The trace id if something already used the trace, without starting one just to log it. */
  get knownTraceId (): string | undefined {
    return this.#trace?.traceId
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    agentsContext: RequestContext | null
  }
}

export interface RequestContextOptions {
  /**
   * Use `request.id` as the request id as it is: set when the app's own `genReqId` already applies
   * the X-Request-ID rule (the standalone server does), so logs and responses share one id.
   */
  trustRequestId?: boolean
}

/** Returns the request's context, creating it for requests that bypassed the hook (early errors). */
export function requestContextOf (request: FastifyRequest): RequestContext {
  // `??=`: requests the router rejects before any hook have not even got the decorator's null
  request.agentsContext ??= new RequestContext(genRequestId(request), request.headers.traceparent, request.headers.tracestate, request.routeOptions)
  return request.agentsContext
}

/** An id generator applying the X-Request-ID rule, for Fastify's `genReqId` option. */
export function genRequestId (req: { headers: Record<string, string | string[] | undefined> }): string {
  const incoming = req.headers['x-request-id']
  return isValidRequestId(incoming) ? incoming : randomId()
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
  // with the service's core (always, but when this plugin is used alone): requests refused while it drains
  const service = fastify.hasDecorator('agentService') ? fastify.agentService : null

  // One hook for everything every request needs first: each hook Fastify runs costs about as much as the
  // work inside these (the bench measured ~1 µs per hook per request).
  fastify.addHook('onRequest', (request, reply, next) => {
    const requestId = trustRequestId ? request.id : genRequestId(request)
    const context = new RequestContext(requestId, request.headers.traceparent, request.headers.tracestate, request.routeOptions)
    request.agentsContext = context
    reply.header('x-request-id', requestId)
    // A credential in the query string (a browser's WebSocket access_token) is never recorded: the audit
    // entry and the error bodies read this URL (lib/service.ts keeps it out of the log lines).
    if (request.raw.url!.includes('access_token=')) request.raw.url = redactAccessToken(request.raw.url!)
    // A WebSocket upgrade refused by a hook (auth, rate limit, drain) before @fastify/websocket's own hooks
    // have seen it: nothing else would close its socket, which HTTP no longer owns.
    if (request.headers.upgrade !== undefined && isUpgrade(request.headers.connection)) reply.raw.once('finish', closeUpgradeSocket)
    if (service?.draining === true && context.config.public !== true) {
      // a kept-alive connection must not outlive the drain
      void reply.header('connection', 'close')
      return next(new ShutdownError())
    }
    next()
  })
  done()
}

export const requestContextPlugin = fp(requestContext, { fastify: '5.x', name: 'fastify-agents-request-context' })
export default requestContextPlugin
