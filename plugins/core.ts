import fp from 'fastify-plugin'
import type { FastifyPluginAsync } from 'fastify'
import { AuditWriter } from '../lib/core/audit-writer.js'
import { storeCapabilities } from '../lib/runs/capabilities.js'
import type { RunCapabilities } from '../lib/runs/run.js'
import { RunRegistry } from '../lib/runs/registry.js'
import { resolveSettings } from '../lib/core/settings.js'
import type { Settings } from '../lib/core/settings.js'
import { SseHeartbeat } from '../lib/runs/sse.js'
import { ServiceStats } from '../lib/core/stats.js'
import type { AgentServiceOptions } from '../lib/core/types.js'

export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000

/** The state every fastify-agents plugin shares, as the `agentService` decorator. */
export interface AgentServiceState {
  readonly settings: Settings
  readonly stats: ServiceStats
  readonly runs: RunRegistry
  readonly audit: AuditWriter
  readonly heartbeat: SseHeartbeat
  readonly capabilities: RunCapabilities
  readonly startedAt: string
  /** true from the start of `close()`: new requests get 503 SHUTDOWN */
  draining: boolean
  /** how long `close()` lets runs finish before aborting them with SHUTDOWN */
  drainTimeoutMs: number
  /** the OpenAPI document of the mounted routes (after `ready()`) */
  openApiDocument: () => Record<string, unknown>
}

declare module 'fastify' {
  interface FastifyInstance {
    agentService: AgentServiceState
  }
}

export type CorePluginOptions = AgentServiceOptions | { settings: Settings }

const core: FastifyPluginAsync<CorePluginOptions> = async (fastify, options) => {
  const settings = 'settings' in options ? options.settings : resolveSettings(options)
  const stats = new ServiceStats(settings.agents.keys())
  const state: AgentServiceState = {
    settings,
    stats,
    runs: new RunRegistry(stats),
    audit: new AuditWriter(settings.auditStore, fastify.log, (count) => { stats.auditFailures += count }),
    heartbeat: new SseHeartbeat(),
    capabilities: storeCapabilities(settings),
    startedAt: new Date().toISOString(),
    draining: false,
    drainTimeoutMs: DEFAULT_DRAIN_TIMEOUT_MS,
    openApiDocument: () => { throw new Error('the OpenAPI document is built by the fastify-agents plugin, after ready()') }
  }
  fastify.decorate('agentService', state)

  // Drain: runs in flight get until the deadline to finish; the rest end with SHUTDOWN.
  fastify.addHook('preClose', async () => {
    state.draining = true
    let timer: NodeJS.Timeout | undefined
    const deadline = new Promise<void>((resolve) => { timer = setTimeout(resolve, state.drainTimeoutMs) })
    await Promise.race([state.runs.idle(), deadline])
    clearTimeout(timer)
    state.runs.abortAll('SHUTDOWN')
    await state.runs.idle()
    // let the aborted runs' replies and final events reach their sockets before the server closes
    await new Promise((resolve) => setImmediate(resolve))
  })

  fastify.addHook('onClose', async () => {
    await state.audit.flush()
  })
}

export const corePlugin = fp(core, { fastify: '5.x', name: 'fastify-agents-core' })
export default corePlugin
