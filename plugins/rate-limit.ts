import fp from 'fastify-plugin'
import fastifyRateLimit from '@fastify/rate-limit'
import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { isPreflight } from '../lib/auth/credentials.js'
import { InvalidOptionsError, RateLimitedError } from '../lib/core/errors.js'
import { requestContextOf } from '../lib/core/request-context.js'
import { AUTH, RATE_LIMIT, REQUEST_CONTEXT } from '../lib/service/composition.js'

/** The Redis keys of the shared budget start with this. */
export const RATE_LIMIT_NAMESPACE = 'fastify-agents:rate-limit:'

/** Whose budget a request spends: its principal once authenticated, else its client IP. */
export function rateLimitKey (request: FastifyRequest): string {
  const context = requestContextOf(request)
  // `request.ip` follows X-Forwarded-For only under Fastify's `trustProxy` (the `trustProxy` option)
  return context.authenticated ? `principal:${context.principal}` : `ip:${request.ip}`
}

const rateLimit: FastifyPluginAsync = async (fastify) => {
  const options = fastify.agentService.settings.rateLimit
  if (options === null) return
  // @fastify/rate-limit decorates the instance once: a host app's own registration would hand us its limiter.
  if (fastify.hasDecorator('rateLimit')) {
    throw new InvalidOptionsError('/rateLimit cannot be used when the app registers @fastify/rate-limit itself (its limit already applies to these routes)')
  }
  await fastify.register(fastifyRateLimit, {
    // not per route: one hook below covers every request of the scope, 404s included
    global: false,
    max: options.maxRequests,
    timeWindow: options.intervalMs,
    redis: options.redis,
    nameSpace: RATE_LIMIT_NAMESPACE,
    keyGenerator: rateLimitKey,
    // A Redis outage lets requests through rather than failing every one of them.
    skipOnError: true,
    errorResponseBuilder: (_request, context) => new RateLimitedError(context.after)
  })
  const limit = fastify.rateLimit()
  fastify.addHook('onRequest', async function rateLimited (request, reply) {
    if (request.routeOptions.config.public === true || isPreflight(request)) return
    await limit.call(this, request, reply)
  })
}

/**
 * `maxRequests` per `intervalMs` per principal (else client IP) via @fastify/rate-limit, shared by every
 * instance with `redis`. Every request counts but health and CORS preflights: Admin API requests and
 * rejected ones too. Over the budget: 429 `RATE_LIMITED` with `retry-after`; every counted response
 * carries `x-ratelimit-limit`, `-remaining` and `-reset`. Registered after the auth plugin.
 */
export const rateLimitPlugin = fp(rateLimit, {
  fastify: '5.x', name: RATE_LIMIT.name, dependencies: ['fastify-agents-core', REQUEST_CONTEXT.name, AUTH.name]
})
export default rateLimitPlugin
