import fp from 'fastify-plugin'
import type { FastifyPluginCallback } from 'fastify'

const audit: FastifyPluginCallback = (fastify, _options, done) => {
  const log = fastify.agentService.audit
  fastify.addHook('onResponse', (request, reply, next) => {
    log.record(request, reply.statusCode)
    next()
  })
  done()
}

/** Audits and counts every request of the scope it is registered in (lib/core/audit.ts). */
export const auditPlugin = fp(audit, {
  fastify: '5.x', name: 'fastify-agents-audit', dependencies: ['fastify-agents-core', 'fastify-agents-request-context']
})
export default auditPlugin
