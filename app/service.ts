import Fastify from 'fastify'
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyServerOptions } from 'fastify'
import fp from 'fastify-plugin'
import { withTokenRedaction } from '../lib/core/auth.js'
import { DEFAULT_DRAIN_TIMEOUT_MS } from '../lib/core/drain.js'
import { errorBody } from '../lib/core/error-reply.js'
import { earlyContextOf, genRequestId } from '../lib/core/request-context.js'
import { resolveSettings } from '../lib/core/settings.js'
import type { AgentServiceOptions } from '../lib/core/types.js'
import { mountService } from './plugin.js'

export interface ListenOptions {
  port: number
  /** default: the `host` option, else '0.0.0.0' */
  host?: string
}

export interface AgentService {
  readonly app: FastifyInstance
  listen(options: ListenOptions): Promise<{ port: number, host: string, url: string }>
  /**
   * Drains: new connections are refused at once, in-flight requests, streams and runs may finish until
   * `drainTimeoutMs`, then the rest are aborted (streams end with run.failed SHUTDOWN); resolves then.
   */
  close(drainTimeoutMs?: number): Promise<void>
}

function isLoggerInstance (logger: unknown): logger is FastifyBaseLogger {
  return typeof (logger as FastifyBaseLogger | null)?.child === 'function' && typeof (logger as FastifyBaseLogger).info === 'function'
}

/** The standalone service: its own Fastify app with the whole suite mounted at the root. */
export function createAgentService (options: AgentServiceOptions): AgentService {
  const settings = resolveSettings(options)

  const serverOptions: FastifyServerOptions = {
    genReqId: genRequestId,
    bodyLimit: settings.bodyLimit,
    trustProxy: settings.trustProxy,
    // Our own drain answers requests that arrive while closing (503 SHUTDOWN, X-Request-ID, our shape).
    return503OnClosing: false,
    forceCloseConnections: false,
    // Errors the router raises before any hook (a malformed URL, an overlong parameter) get the same
    // body and X-Request-ID as everything else.
    frameworkErrors: (error, request, reply: FastifyReply) => {
      // the router's errors (FST_ERR_BAD_URL, FST_ERR_MAX_PARAM_LENGTH, …) always carry their status
      const status = error.statusCode as number
      void reply.code(status).header('x-request-id', earlyContextOf(request).requestId)
        .send(errorBody(request, status, error, settings.exposeErrors))
    }
  }
  const app = isLoggerInstance(options.logger)
    ? Fastify({ ...serverOptions, loggerInstance: options.logger })
    : Fastify({ ...serverOptions, logger: withTokenRedaction(options.logger ?? { level: 'info' }) as FastifyServerOptions['logger'] })
  void app.register(fp(async (fastify) => mountService(fastify, settings, true), { fastify: '5.x', name: 'fastify-agents' }))

  let closing: Promise<void> | null = null

  async function close (drainTimeoutMs: number): Promise<void> {
    // before ready() the plugins have not loaded yet: there is nothing in flight to drain
    if (!app.hasDecorator('agentService')) return app.close()
    const { drain } = app.agentService
    // The drain runs before app.close(), not in a close hook: Fastify bounds those by its plugin timeout.
    try {
      await drain.begin(drainTimeoutMs, app.server)
      await app.close()
    } finally {
      await drain.end()
    }
  }

  return {
    app,
    async listen ({ port, host }) {
      await app.listen({ port, host: host ?? settings.host })
      const address = app.server.address() as { port: number, address: string }
      const boundHost = host ?? settings.host
      return { port: address.port, host: boundHost, url: `http://${boundHost.includes(':') ? `[${boundHost}]` : boundHost}:${address.port}` }
    },
    close (drainTimeoutMs = DEFAULT_DRAIN_TIMEOUT_MS) {
      closing ??= close(drainTimeoutMs)
      return closing
    }
  }
}
