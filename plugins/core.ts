import fp from 'fastify-plugin'
import type { FastifyPluginAsync } from 'fastify'
import { AgentServiceCore } from '../lib/core/service.js'
import { resolveSettings } from '../lib/core/settings.js'
import type { Settings } from '../lib/core/settings.js'
import type { AgentServiceOptions } from '../lib/core/types.js'

export type CorePluginOptions = AgentServiceOptions | { settings: Settings }

const core: FastifyPluginAsync<CorePluginOptions> = async (fastify, options) => {
  const settings = 'settings' in options ? options.settings : resolveSettings(options)
  const service = new AgentServiceCore(settings, fastify.log)
  fastify.decorate('agentService', service)
  service.audit.declare(fastify)
  service.startPurging(fastify.log)
  fastify.addHook('onClose', async () => {
    service.stopPurging()
    await service.audit.writer.flush()
  })
}

/** The shared state (`app.agentService`) every other fastify-agents plugin depends on. */
export const corePlugin = fp(core, { fastify: '5.x', name: 'fastify-agents-core' })
export default corePlugin
