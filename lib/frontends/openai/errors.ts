// Errors on the OpenAI-shaped routes: OpenAI's body `{ error: { message, type, param, code } }`, the service's own
// code in `code`, for every error these routes answer (the shared hooks' 401, 429, 503 too: a hook's error goes to
// the error handler of the route it stops).
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { errorBody } from '../../core/error-reply.js'
import type { OpenAiError } from './schemas.js'

function typeOf (status: number): string {
  if (status === 401) return 'authentication_error'
  if (status === 403) return 'permission_error'
  if (status === 429) return 'rate_limit_error'
  return status >= 500 ? 'server_error' : 'invalid_request_error'
}

export function openAiErrorOf (status: number, message: string, code: string | null, param: string | null): OpenAiError {
  return { error: { message, type: typeOf(status), param, code } }
}

/** The field a validation message names (`body/input/0/content must …` → `input/0/content`), else null. */
function paramOf (message: string, code: string | undefined): string | null {
  if (code !== 'FST_ERR_VALIDATION' && code !== 'FA_UNSTORABLE_TEXT') return null
  const match = /^(?:body|querystring|params)\/(\S+)/.exec(message)
  return match === null ? null : match[1]!
}

export function buildOpenAiErrorHandler (exposeErrors: boolean) {
  return function openAiErrorHandler (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
    const status = typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500
    if (status >= 500) request.log.error({ err: error }, error.message)
    else request.log.info({ statusCode: status, code: error.code }, error.message)
    const headers = (error as { headers?: Record<string, string> }).headers
    if (headers !== undefined) void reply.headers(headers)
    // the service's own body decides what is shown (a 500's message hidden unless exposeErrors, a code only when ours)
    const body = errorBody(request, status, error, exposeErrors)
    void reply.code(status).send(openAiErrorOf(status, body.message, body.code ?? null, paramOf(body.message, body.code)))
  }
}
