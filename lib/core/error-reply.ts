import { STATUS_CODES } from 'node:http'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { MethodNotAllowedError, RouteNotFoundError } from './errors.js'
import type { ErrorResponse } from '../../schemas/common.js'
import { earlyContextOf } from './request-context.js'

/** Builds the service's error body (README.md, "Error codes") for any error and status. */
export function errorBody (request: FastifyRequest, status: number, error: Partial<FastifyError>, exposeErrors: boolean): ErrorResponse {
  const context = earlyContextOf(request)
  // Only an unhandled failure is hidden; deliberate 5xx (503 SHUTDOWN, 504 AGENT_TIMEOUT) say what happened.
  const hidden = status === 500 && !exposeErrors
  const body: ErrorResponse = {
    statusCode: status,
    error: STATUS_CODES[status] ?? 'Error',
    message: hidden ? 'Internal Server Error' : error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE'
      ? `${error.message!}: send the body as JSON, with Content-Type: application/json`
      : String(error.message ?? ''),
    requestId: context.requestId,
    traceId: context.trace.traceId
  }
  // A code is ours to show when the error was thrown on purpose (it carries a status); an internal
  // error's code (ECONNREFUSED, …) stays in the log.
  if (typeof error.code === 'string' && (error.statusCode !== undefined || exposeErrors)) body.code = error.code
  return body
}

export function buildErrorHandler (exposeErrors: boolean) {
  return function agentsErrorHandler (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
    const status = typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500
    if (status >= 500) request.log.error({ err: error }, error.message)
    // a client's mistake is not ours to debug: its code and message, no stack
    else request.log.info({ statusCode: status, code: error.code }, error.message)
    // what the error asks of the client beside its body (QUOTA_EXCEEDED's retry-after)
    const headers = (error as { headers?: Record<string, string> }).headers
    if (headers !== undefined) void reply.headers(headers)
    void reply.code(status).send(errorBody(request, status, error, exposeErrors))
  }
}

function patternOf (url: string): RegExp {
  const source = url
    .split('/')
    .map((part) => part.startsWith(':') ? '[^/]+' : part === '*' ? '.*' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('/')
  return new RegExp(`^${source}/?$`)
}

/**
 * The paths of our routes with their methods, to answer a wrong method on a known path with 405 and
 * `Allow` (Fastify's router alone would say 404).
 */
export class RouteIndex {
  #routes: Array<{ pattern: RegExp, methods: Set<string> }> = []

  add (url: string, methods: string | string[]): void {
    const pattern = patternOf(url)
    let entry = this.#routes.find((r) => r.pattern.source === pattern.source)
    if (entry === undefined) {
      entry = { pattern, methods: new Set() }
      this.#routes.push(entry)
    }
    for (const method of Array.isArray(methods) ? methods : [methods]) entry.methods.add(method)
  }

  /** Collects every route added to `fastify` from now on. */
  collect (fastify: FastifyInstance): void {
    fastify.addHook('onRoute', (route) => {
      // A catch-all (@fastify/cors' `OPTIONS *`) names no path: it must not turn every unknown path into a 405.
      if (route.url.endsWith('*')) return
      this.add(route.url, route.method)
    })
  }

  allowed (path: string): string[] {
    const methods = new Set<string>()
    for (const route of this.#routes) {
      if (route.pattern.test(path)) for (const m of route.methods) methods.add(m)
    }
    return [...methods].sort()
  }
}

export function buildNotFoundHandler (index: RouteIndex) {
  return function agentsNotFound (request: FastifyRequest, reply: FastifyReply): never {
    const path = request.url.split('?', 1)[0]!
    const allowed = index.allowed(path)
    if (allowed.length > 0) {
      void reply.header('allow', allowed.join(', '))
      throw new MethodNotAllowedError(request.method, path)
    }
    throw new RouteNotFoundError(request.method, request.url)
  }
}
