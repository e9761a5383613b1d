import { createAgentService } from './service.js'
import type { AgentServiceOptions } from '../lib/core/types.js'

function withoutStores (adminApi: NonNullable<AgentServiceOptions['adminApi']>): NonNullable<AgentServiceOptions['adminApi']> {
  if (adminApi === true) return adminApi
  const { auditStore: _a, checkpointStore: _c, ...rest } = adminApi
  return rest
}

/** The OpenAPI 3.1 document of a service with these options, built without binding a port. */
export async function buildOpenApiDocument (options: AgentServiceOptions): Promise<Record<string, unknown>> {
  // The stores do not shape the document, and the service closes those that own their connection: it gets
  // none of yours (memory ones instead), so the options can go on to serve.
  // Nor do webhooks: a service that delivered them from your outbox while building a document would be a surprise.
  // Nor quotas (their 429 is documented whatever the options).
  const {
    auditStore: _a, sessionStore: _s, approvalStore: _p, checkpointStore: _c, db: _d, idempotency, adminApi, webhooks: _w, webhookStore: _o,
    quotas: _q, quotaStore: _qs, ...rest
  } = options
  const service = createAgentService({
    logger: false,
    ...rest,
    ...(idempotency === undefined ? {} : { idempotency: {} }),
    ...(adminApi === undefined ? {} : { adminApi: withoutStores(adminApi) })
  })
  try {
    await service.app.ready()
    return service.app.agentService.openApiDocument()
  } finally {
    await service.close(0)
  }
}
