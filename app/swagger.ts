import type { SwaggerOptions } from '@fastify/swagger'
import type { Settings } from '../lib/core/settings.js'
import { packageVersion as version } from '../lib/core/version.js'

/** @fastify/swagger's options: the document is built from the routes' own TypeBox schemas. */
export function openApiOptions (settings: Settings): SwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'fastify-agents',
        version,
        description: 'Named AI agents over JSON, Server-Sent Events and WebSocket.',
        license: { name: 'MIT', identifier: 'MIT' }
      },
      // the `publicUrl` option; without it, the origin the document was read from (Swagger UI's own)
      servers: [{ url: settings.publicUrl ?? '/', description: 'fastify-agents' }],
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'api-key auth (also accepted as Authorization: Bearer <key>)' },
          bearerJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'JWT auth with roles' },
          adminBearer: { type: 'http', scheme: 'bearer', description: 'The Admin API token (adminApi.bearerToken)' }
        }
      },
      security: settings.auth === null ? [] : settings.auth.strategy === 'api-key' ? [{ apiKey: [] }] : [{ bearerJwt: [] }]
    },
    hideUntagged: false
  }
}
