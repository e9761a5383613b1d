import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { healthReport } from '../lib/core/health-probe.js'
import { errorResponses } from '../schemas/common.js'
import { HealthResponse } from '../schemas/health.js'
import { routePluginScope } from '../lib/service/composition.js'

export interface HealthPluginOptions {
  /** the operation's id in the OpenAPI document (default `getHealth`): one per mount, as ids are unique */
  operationId?: string
}

// Registered twice by the service: at `/health` (prefix) and at `/v1/health`.
const health: FastifyPluginAsyncTypebox<HealthPluginOptions> = async (fastify, options) => {
  routePluginScope(fastify, 'healthPlugin')
  const { settings } = fastify.agentService
  fastify.get('', {
    config: { public: true },
    schema: {
      operationId: options.operationId ?? 'getHealth',
      summary: 'Liveness and a live database probe',
      tags: ['health'],
      response: { 200: HealthResponse, 503: HealthResponse, ...errorResponses(404, 405) }
    }
  }, async (_request, reply) => {
    const report = await healthReport(settings.checks, settings.healthTimeoutMs)
    return reply.code(report.status === 'ok' ? 200 : 503).send(report)
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const healthPlugin = fp(health, { fastify: '5.x', name: 'fastify-agents-health', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default healthPlugin
