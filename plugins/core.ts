import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyPluginAsync } from 'fastify'
import { AgentServiceCore } from '../lib/service/service.js'
import { resolveSettings } from '../lib/service/settings.js'
import type { Settings } from '../lib/service/settings.js'
import type { AgentServiceOptions } from '../lib/core/types.js'
import { prepareTracing } from '../lib/core/tracing.js'

export type CorePluginOptions = AgentServiceOptions | { settings: Settings }

/**
 * Closes the stores that opened their own connection (from a URL or a filename: `postgresStores(url)`,
 * `sqliteStores(path)`, `redisStores(url)`); a store on a client or pool you passed is left open for you.
 */
async function closeOwnedStores (stores: readonly object[], timeoutMs: number, log: FastifyBaseLogger): Promise<void> {
  for (const store of stores as Array<{ ownsConnection?: boolean, close?: () => Promise<void> }>) {
    if (store.ownsConnection !== true) continue
    // a backend that stopped answering must not hold the shutdown: the store gets the deadline of any store call
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`the store did not close within ${timeoutMs} ms`)), timeoutMs)
    })
    await Promise.race([store.close!(), deadline])
      .catch((err: unknown) => log.error({ err }, 'could not close a store'))
      .finally(() => clearTimeout(timer))
  }
}

const core: FastifyPluginAsync<CorePluginOptions> = async (fastify, options) => {
  const settings = 'settings' in options ? options.settings : resolveSettings(options)
  prepareTracing()
  const service = new AgentServiceCore(settings, fastify.log)
  fastify.decorate('agentService', service)
  service.audit.declare(fastify)
  service.startPurging(fastify.log)
  // leases, claiming and recovery run once the app is up (a host app still registering has no routes to serve yet)
  fastify.addHook('onReady', async () => {
    for (const warning of settings.warnings) fastify.log.warn(warning)
    service.worker.start(fastify.log)
    service.webhooks?.start()
    service.scheduler.start(fastify.log)
  })
  // a client the service's stores opened themselves (ioredis from a URL) reports its connection errors here
  for (const store of settings.stores) (store as { useLogger?: (log: FastifyBaseLogger) => void }).useLogger?.(fastify.log)
  // onClose runs after the drain (a preClose hook): nothing in flight uses the stores any more
  fastify.addHook('onClose', async () => {
    service.stopPurging()
    await service.scheduler.stop()
    await service.worker.stop()
    await service.webhooks?.stop()
    await service.audit.writer.flush()
    await closeOwnedStores(settings.stores, settings.storeTimeoutMs, fastify.log)
  })
}

/** The shared state (`app.agentService`) every other fastify-agents plugin depends on. */
export const corePlugin = fp(core, { fastify: '5.x', name: 'fastify-agents-core' })
export default corePlugin
