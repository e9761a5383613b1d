import Fastify from 'fastify'
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyServerOptions } from 'fastify'
import { markResolved, fastifyAgents } from './plugin.js'
import { genRequestId, requestContextOf } from '../plugins/request-context.js'
import { errorBody } from '../plugins/error-handler.js'
import { DEFAULT_DRAIN_TIMEOUT_MS } from '../plugins/core.js'
import { withTokenRedaction } from '../lib/core/auth.js'
import { resolveSettings } from '../lib/core/settings.js'
import type { AgentServiceOptions } from '../lib/core/types.js'

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
  markResolved(options, settings)

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
      void reply.code(status).header('x-request-id', requestContextOf(request).requestId)
        .send(errorBody(request, status, error, settings.exposeErrors))
    }
  }
  const app = isLoggerInstance(options.logger)
    ? Fastify({ ...serverOptions, loggerInstance: options.logger })
    : Fastify({ ...serverOptions, logger: withTokenRedaction(options.logger ?? { level: 'info' }) as FastifyServerOptions['logger'] })
  void app.register(fastifyAgents, options)

  let closing: Promise<void> | null = null

  async function drain (drainTimeoutMs: number): Promise<void> {
    // before ready() the plugins have not loaded yet: there is nothing in flight to drain
    if (app.hasDecorator('agentService')) app.agentService.drainTimeoutMs = drainTimeoutMs
    const server = app.server
    let serverClosed: Promise<void> = Promise.resolve()
    if (server.listening) {
      // Refuse new connections now; Fastify's own close would do it only after the preClose drain.
      serverClosed = new Promise((resolve) => server.close(() => resolve()))
    }
    // Connections that go idle during the drain are closed as they do; whatever is left after the
    // deadline (and a grace for the final events to flush) is cut.
    const sweeper = setInterval(() => server.closeIdleConnections(), 50)
    const cutoff = setTimeout(() => server.closeAllConnections(), drainTimeoutMs + 1_000)
    sweeper.unref()
    cutoff.unref()
    try {
      await app.close()
      await serverClosed
    } finally {
      clearInterval(sweeper)
      clearTimeout(cutoff)
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
      closing ??= drain(drainTimeoutMs)
      return closing
    }
  }
}
