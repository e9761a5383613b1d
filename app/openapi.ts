import { createAgentService } from './service.js'
import type { AgentServiceOptions } from '../lib/core/types.js'

/** The OpenAPI 3.1 document of a service with these options, built without binding a port. */
export async function buildOpenApiDocument (options: AgentServiceOptions): Promise<Record<string, unknown>> {
  const service = createAgentService({ logger: false, ...options })
  try {
    await service.app.ready()
    return service.app.agentService.openApiDocument()
  } finally {
    await service.close(0)
  }
}
