import fp from 'fastify-plugin'
import type { FastifyPluginAsync, FastifyPluginCallback } from 'fastify'
import { AUDIT, AUTH, CORS, DRAIN, IDEMPOTENCY, RATE_LIMIT, REQUEST_CONTEXT, REQUEST_PIPELINE } from '../lib/service/composition.js'
import type { HookPlugin } from '../lib/service/composition.js'
import { auditPlugin } from '../lib/audit/index.js'
import { authPlugin } from '../lib/auth/index.js'
import { corsPlugin } from '../plugins/cors.js'
import { drainPlugin } from '../plugins/drain.js'
import { idempotencyPlugin } from '../lib/idempotency/index.js'
import { rateLimitPlugin } from '../plugins/rate-limit.js'
import { requestContextPlugin } from '../plugins/request-context.js'

/**
 * In order: the request context; the drain, which refuses before anything else looks at the request; the audit;
 * CORS, which answers preflights before anyone asks for credentials; auth, which names the principal; the rate
 * limit, which counts by it (rejected requests too: auth's verdict comes after); idempotency, which wraps the
 * routes marked `config.idempotency`. Each one is a no-op when its option is unset.
 */
const HOOK_PLUGINS: Array<[HookPlugin, FastifyPluginAsync | FastifyPluginCallback]> = [
  [REQUEST_CONTEXT, requestContextPlugin], [DRAIN, drainPlugin], [AUDIT, auditPlugin], [CORS, corsPlugin], [AUTH, authPlugin],
  [RATE_LIMIT, rateLimitPlugin], [IDEMPOTENCY, idempotencyPlugin]
]

const pipeline: FastifyPluginAsync = async (fastify) => {
  // those an enclosing scope has already (the standalone service's root has the first three) apply here too
  for (const [hook, plugin] of HOOK_PLUGINS) {
    if (!fastify.hasPlugin(hook.name)) await fastify.register(plugin)
  }
}

/**
 * Every hook plugin the route plugins need, in the order they must run, in the scope it is registered in:
 * register it after `corePlugin` and before the route plugins (README, "Each concern on its own").
 */
export const requestPipelinePlugin = fp(pipeline, { fastify: '5.x', name: REQUEST_PIPELINE.name, dependencies: ['fastify-agents-core'] })
export default requestPipelinePlugin
