import { STATUS_CODES } from 'node:http'
import type { IncomingMessage, ServerOptions, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import Fastify from 'fastify'
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import fp from 'fastify-plugin'
import { withTokenRedaction } from '../lib/auth/credentials.js'
import { DEFAULT_DRAIN_TIMEOUT_MS } from '../lib/service/drain.js'
import { errorBody } from '../lib/core/error-reply.js'
import { HeadersTooLargeError, MalformedRequestError, RequestTimeoutError } from '../lib/core/errors.js'
import { earlyContextOf, genRequestId } from '../lib/core/request-context.js'
import { randomId } from '../lib/core/ids.js'
import { newTraceId } from '../lib/core/trace-context.js'
import { buildSharedSerializer } from '../lib/core/serializers.js'
import { resolveSettings } from '../lib/service/settings.js'
import type { Settings } from '../lib/service/settings.js'
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

/** The error Node's HTTP server raised on a connection, as ours (408, 431 or 400); `dispatched`: its headers had arrived. */
function clientError (error: NodeJS.ErrnoException, settings: Settings, dispatched: boolean): Error & { statusCode: number, code: string } {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return dispatched ? new RequestTimeoutError('body', settings.bodyTimeoutMs) : new RequestTimeoutError('headers', settings.headersTimeoutMs)
  }
  if (error.code === 'HPE_HEADER_OVERFLOW') return new HeadersTooLargeError()
  return new MalformedRequestError(String(error.code))
}

/** Node checks the timeouts of open requests on an interval: often enough to keep to the shorter one. */
function checkingInterval (settings: Settings): number {
  return Math.min(1_000, Math.max(10, Math.floor(Math.min(settings.headersTimeoutMs, settings.bodyTimeoutMs) / 10)))
}

/** The standalone service: its own Fastify app with the whole suite mounted at the root. */
export function createAgentService (options: AgentServiceOptions): AgentService {
  const settings = resolveSettings(options)
  // The requests whose headers have arrived, by their raw message: one whose body then stalls is answered with its own id.
  const requests = new WeakMap<IncomingMessage, FastifyRequest>()

  const serverOptions: FastifyServerOptions & { http: ServerOptions } = {
    genReqId: genRequestId,
    bodyLimit: settings.bodyLimit,
    // the longest id a route takes (a chat id, 128 characters); Fastify's default, 100, would leave some unreachable
    routerOptions: { maxParamLength: 128 },
    // each response schema compiled once per process, however many services it starts (lib/core/serializers.ts)
    schemaController: { compilersFactory: { buildSerializer: buildSharedSerializer } },
    trustProxy: settings.trustProxy,
    // Our own drain answers requests that arrive while closing (503 SHUTDOWN, X-Request-ID, our shape).
    return503OnClosing: false,
    forceCloseConnections: false,
    // Slow clients (docs/operations.md): Node answers nothing until the whole request arrived, so it must arrive in time.
    requestTimeout: settings.bodyTimeoutMs,
    http: { headersTimeout: settings.headersTimeoutMs, connectionsCheckingInterval: checkingInterval(settings) },
    // What Node's parser refuses or times out never reaches a route: answered here in our shape, then closed.
    clientErrorHandler (error: NodeJS.ErrnoException, socket: Socket) {
      if (error.code === 'ECONNRESET' || socket.destroyed) return
      const response = (socket as { _httpMessage?: ServerResponse })._httpMessage
      const request = requests.get(response?.req as IncomingMessage)
      const ours = clientError(error, settings, request !== undefined)
      const body = request === undefined
        ? { statusCode: ours.statusCode, error: STATUS_CODES[ours.statusCode]!, message: ours.message, code: ours.code, requestId: randomId(), traceId: newTraceId() }
        : errorBody(request, ours.statusCode, ours, settings.exposeErrors)
      ;(request?.log ?? app.log).info({ statusCode: ours.statusCode, code: ours.code, reason: error.code }, ours.message)
      // a response under way cannot be replaced: the connection just closes (one that has ended is the previous request's)
      if (socket.writable && (response?.headersSent !== true || response.writableEnded)) {
        const json = JSON.stringify(body)
        socket.write(`HTTP/1.1 ${ours.statusCode} ${body.error}\r\nContent-Type: application/json; charset=utf-8\r\n` +
          `Content-Length: ${Buffer.byteLength(json)}\r\nX-Request-ID: ${body.requestId}\r\nConnection: close\r\n\r\n${json}`)
      }
      socket.destroy()
    },
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
  app.addHook('onRequest', (request, _reply, done) => {
    requests.set(request.raw, request)
    done()
  })
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
