import fp from 'fastify-plugin'
import fastifyCors from '@fastify/cors'
import type { FastifyPluginAsync } from 'fastify'
import { CORS } from '../lib/service/composition.js'

/** The request headers the service reads, allowed in preflights. */
export const CORS_ALLOWED_HEADERS = Object.freeze([
  'authorization', 'content-type', 'x-api-key', 'idempotency-key', 'x-idempotency-key', 'x-request-id',
  'traceparent', 'tracestate', 'last-event-id'
])

/** The response headers a browser script may read. */
export const CORS_EXPOSED_HEADERS = Object.freeze([
  'x-request-id', 'retry-after', 'idempotent-replayed', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'
])

export const CORS_METHODS = Object.freeze(['GET', 'POST', 'DELETE', 'OPTIONS'])

const cors: FastifyPluginAsync = async (fastify) => {
  const origin = fastify.agentService.settings.cors
  if (origin === null) return
  await fastify.register(fastifyCors, {
    // One origin as a list, not a string: @fastify/cors sends a string origin to every caller, a list
    // only to the caller that matches it, so a request from another origin gets no allow header.
    origin: origin === '*' ? '*' : [origin],
    methods: [...CORS_METHODS],
    allowedHeaders: [...CORS_ALLOWED_HEADERS],
    exposedHeaders: [...CORS_EXPOSED_HEADERS],
    maxAge: 600,
    // A bare OPTIONS (no Origin) is answered like a preflight rather than with @fastify/cors' plain-text
    // 400, which would be the one error body not in the service's shape.
    strictPreflight: false
  })
}

/**
 * CORS via @fastify/cors when the `cors` option is set (one origin, or `*`); nothing at all otherwise.
 * Registered before auth: a preflight is answered in its onRequest hook, before credentials are asked for.
 */
export const corsPlugin = fp(cors, { fastify: '5.x', name: CORS.name, dependencies: ['fastify-agents-core'] })
export default corsPlugin
