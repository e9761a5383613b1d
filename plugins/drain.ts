import fp from 'fastify-plugin'
import type { FastifyPluginCallback } from 'fastify'
import { ShutdownError } from '../lib/core/errors.js'
import { requestContextOf } from '../lib/core/request-context.js'
import { DRAIN, REQUEST_CONTEXT } from '../lib/service/composition.js'

const drain: FastifyPluginCallback = (fastify, _options, done) => {
  const service = fastify.agentService
  fastify.addHook('onRequest', (request, reply, next) => {
    if (!service.drain.draining || requestContextOf(request).config.public === true) return next()
    // a kept-alive connection must not outlive the drain
    void reply.header('connection', 'close')
    next(new ShutdownError())
  })
  // The host's `app.close()` drains with the `drainTimeoutMs` option; the standalone service's `close(ms)`
  // has begun already, with its own deadline, and this joins it. Begun in preClose, awaited in onClose:
  // Fastify bounds preClose hooks by its plugin timeout (10 s), not onClose ones; this onClose runs before the
  // core's, which closes the stores.
  const drained = (): Promise<void> => service.drain.begin(service.settings.drainTimeoutMs)
  fastify.addHook('preClose', (hookDone) => {
    // handled here (allSettled), its outcome awaited below
    void Promise.allSettled([drained()])
    hookDone()
  })
  fastify.addHook('onClose', async () => { await drained() })
  done()
}

/**
 * Requests that arrive while the service drains get 503 SHUTDOWN (health still answers); `app.close()`
 * drains the runs in flight (lib/service/drain.ts). Registered after the request context.
 */
export const drainPlugin = fp(drain, {
  fastify: '5.x', name: DRAIN.name, dependencies: ['fastify-agents-core', REQUEST_CONTEXT.name]
})
export default drainPlugin
