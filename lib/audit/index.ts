import fp from 'fastify-plugin'
import type { FastifyPluginCallback } from 'fastify'
import { isStateChanging } from './log.js'
import { AUDIT, REQUEST_CONTEXT } from '../service/composition.js'

const audit: FastifyPluginCallback = (fastify, _options, done) => {
  const log = fastify.agentService.audit
  // A state-changing request's entry is in the store before its answer is sent (group commit: one append for the
  // answers of a burst). A stream (a hijacked reply) commits before its terminal event instead. The memory ring
  // keeps nothing past the process: no hook to wait on it.
  if (log.durable) {
    fastify.addHook('onSend', (request, reply, payload, next) => {
      if (!isStateChanging(request.method)) return next(null, payload)
      void log.commit(request, reply.statusCode).then(() => next(null, payload))
    })
  }
  // the rest, and a request that got no answer (the client left): written behind
  fastify.addHook('onResponse', (request, reply, next) => {
    log.record(request, reply.statusCode)
    next()
  })
  done()
}

/** Audits and counts every request of the scope it is registered in (lib/audit/log.ts). */
export const auditPlugin = fp(audit, {
  fastify: '5.x', name: AUDIT.name, dependencies: ['fastify-agents-core', REQUEST_CONTEXT.name]
})
export default auditPlugin
