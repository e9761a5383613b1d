import type { FastifyContextConfig, FastifyInstance, FastifyRequest } from 'fastify'
import { randomId } from './ids.js'
import { isValidRequestId, newTraceId, parseTraceparent } from './trace-context.js'
import type { TraceContext } from './types.js'

/**
 * What every route needs of a request: its id (echoed as X-Request-ID), its trace, who it is and which route
 * it reached. Each plugin keeps its own per-request state in a `RequestSlot` of its own.
 */
export class RequestContext {
  readonly requestId: string
  readonly startedAt: number
  /** who authenticated: an api key's id, a JWT's sub, 'admin' (Admin API token), else 'anonymous' */
  principal = 'anonymous'
  /** true once a credential proved the principal (the rate limit counts by principal only then) */
  authenticated = false
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

/** An id generator applying the X-Request-ID rule, for Fastify's `genReqId` option. */
export function genRequestId (req: { headers: Record<string, string | string[] | undefined> }): string {
  const incoming = req.headers['x-request-id']
  return isValidRequestId(incoming) ? incoming : randomId()
}

/** The request's context, made by the request context plugin's hook; throws when that plugin does not cover the request. */
export function requestContextOf (request: FastifyRequest): RequestContext {
  const context = request.agentsContext
  if (context === null || context === undefined) {
    throw new Error(`fastify-agents: ${request.method} ${request.url} has no request context: register requestContextPlugin (or the whole service) in the scope of this route`)
  }
  return context
}

/**
 * The context of a request that may have been refused before any hook ran (the router's own errors, a body
 * parser's): made on the spot. Only the error replies use this; everything else uses `requestContextOf`.
 */
export function earlyContextOf (request: FastifyRequest): RequestContext {
  // `??=`: requests the router rejects before any hook have not even got the decorator's null
  request.agentsContext ??= new RequestContext(genRequestId(request), request.headers.traceparent, request.headers.tracestate, request.routeOptions)
  return request.agentsContext
}

/**
 * Per-request state owned by one plugin, under a symbol of its own (as @fastify/rate-limit keeps its own).
 * Declared on the request with a null start, so that every request keeps one shape.
 */
export class RequestSlot<T> {
  readonly #key: symbol

  constructor (name: string) {
    this.#key = Symbol(`fastify-agents.${name}`)
  }

  /** Declares the slot on the requests of `fastify` (once per app; a second call is a no-op). */
  declare (fastify: FastifyInstance): void {
    if (!fastify.hasRequestDecorator(this.#key)) fastify.decorateRequest(this.#key, null)
  }

  get (request: FastifyRequest): T | null {
    return ((request as unknown as Record<symbol, T | null | undefined>)[this.#key]) ?? null
  }

  set (request: FastifyRequest, value: T | null): void {
    (request as unknown as Record<symbol, T | null>)[this.#key] = value
  }
}
