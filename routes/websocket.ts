import { once } from 'node:events'
import type { IncomingMessage } from 'node:http'
import fastifyWebsocket from '@fastify/websocket'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { Ajv } from 'ajv'
import type { ErrorObject, ValidateFunction } from 'ajv'
import { WebSocket } from 'ws'
import { createRun } from '../lib/runs/start.js'
import type { RunCaller } from '../lib/runs/start.js'
import { UpgradeRequiredError } from '../lib/core/errors.js'
import type { AgentRun } from '../lib/runs/run.js'
import { errorResponses } from '../schemas/common.js'
import { WsRunCancel, WsRunStart } from '../schemas/websocket.js'
import type { WsErrorFrame, WsRef } from '../schemas/websocket.js'
import type { AgentServiceState } from '../plugins/core.js'
import { auditRequest } from '../plugins/audit.js'
import { hasAccess } from '../plugins/auth.js'
import { requestContextOf } from '../plugins/request-context.js'

/** Frames larger than this close the connection with 1009 (Message Too Big). */
export const WS_MAX_PAYLOAD = 1024 * 1024
export const WS_MAX_RUNS = 8
export const WS_PING_INTERVAL_MS = 30_000
/** How long a closing socket may take to answer the close frame before it is cut. */
export const WS_CLOSE_GRACE_MS = 1_000

export type WebsocketPluginOptions = Record<never, never>

type ErrorCode = WsErrorFrame['error']['code']

const ajv = new Ajv({ allErrors: false, strict: false })
const validators: Record<string, ValidateFunction> = {
  'run.start': ajv.compile(WsRunStart),
  'run.cancel': ajv.compile(WsRunCancel)
}

function describe (error: ErrorObject): string {
  if (error.keyword === 'additionalProperties') return `message${error.instancePath}/${String(error.params.additionalProperty)} is not allowed`
  return `message${error.instancePath} ${String(error.message)}`
}

function isRef (value: unknown): value is WsRef {
  return (typeof value === 'string' && value.length <= 128) || Number.isSafeInteger(value)
}

/** Headers the hooks set on the reply (X-Request-ID, rate limit, …) that belong on the 101 as well. */
function upgradeHeaders (reply: FastifyReply): string[] {
  const lines: string[] = []
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (/^(connection|upgrade|content-|transfer-encoding|sec-websocket-)/i.test(name)) continue
    for (const one of [value].flat()) {
      const text = String(one)
      // raw header lines: a CR or LF in a value would split the response
      if (!/[\r\n]/.test(text)) lines.push(`${name}: ${text}`)
    }
  }
  return lines
}

/**
 * One timer pings every open socket (protocol-level ping); a socket that has not answered the previous
 * ping by the next one is cut. Idle connections stay alive through proxies, dead ones do not linger.
 */
export class WebSocketHeartbeat {
  readonly intervalMs: number
  #alive = new Map<WebSocket, boolean>()
  #timer: NodeJS.Timeout | null = null

  constructor (intervalMs = WS_PING_INTERVAL_MS) {
    this.intervalMs = intervalMs
  }

  get size (): number {
    return this.#alive.size
  }

  add (socket: WebSocket): void {
    this.#alive.set(socket, true)
    socket.on('pong', () => { if (this.#alive.has(socket)) this.#alive.set(socket, true) })
    if (this.#timer === null) {
      this.#timer = setInterval(() => this.#beat(), this.intervalMs)
      this.#timer.unref()
    }
  }

  delete (socket: WebSocket): void {
    this.#alive.delete(socket)
    if (this.#alive.size === 0 && this.#timer !== null) {
      clearInterval(this.#timer)
      this.#timer = null
    }
  }

  #beat (): void {
    for (const [socket, alive] of this.#alive) {
      if (!alive) {
        socket.terminate()
        this.delete(socket)
        continue
      }
      this.#alive.set(socket, false)
      socket.ping()
    }
  }
}

/** One client connection: its runs (at most WS_MAX_RUNS, counting those still being set up). */
class Connection {
  readonly socket: WebSocket
  readonly #state: AgentServiceState
  readonly #request: FastifyRequest
  readonly #caller: RunCaller
  readonly #log: FastifyBaseLogger
  readonly #runs = new Map<string, AgentRun>()
  #starting = 0

  constructor (socket: WebSocket, state: AgentServiceState, request: FastifyRequest) {
    const context = requestContextOf(request)
    this.socket = socket
    this.#state = state
    this.#request = request
    // every run of the connection runs as what authenticated at the upgrade, under its request id and trace
    this.#caller = { principal: context.principal, requestId: context.requestId, trace: context.trace }
    this.#log = request.log
  }

  get open (): boolean {
    return this.socket.readyState === WebSocket.OPEN
  }

  receive (data: Buffer, isBinary: boolean): void {
    if (isBinary) return this.#error(undefined, 'INVALID_MESSAGE', 'messages must be JSON text frames')
    let message: unknown
    try {
      message = JSON.parse(data.toString('utf8'))
    } catch {
      return this.#error(undefined, 'INVALID_JSON', 'the message is not valid JSON')
    }
    if (typeof message !== 'object' || message === null || Array.isArray(message)) {
      return this.#error(undefined, 'INVALID_MESSAGE', 'a message must be a JSON object with a "type"')
    }
    const fields = message as Record<string, unknown>
    const ref = isRef(fields.ref) ? fields.ref : undefined
    const validate = typeof fields.type === 'string' ? validators[fields.type] : undefined
    if (validate === undefined) {
      const type = JSON.stringify(fields.type ?? null).slice(0, 64)
      return this.#error(ref, 'UNKNOWN_MESSAGE_TYPE', `unknown message type ${type}: expected "run.start" or "run.cancel"`)
    }
    if (!validate(message)) return this.#error(ref, 'INVALID_MESSAGE', describe(validate.errors![0]!))
    if (fields.type === 'run.start') void this.#start(message as WsRunStart)
    else this.#cancel(message as WsRunCancel)
  }

  /** The socket closed: whatever still runs has nobody to report to. */
  closed (): void {
    for (const run of this.#runs.values()) run.abort('CANCELLED')
  }

  /** Drain: the runs have ended (core's preClose), the socket closes with 1001; resolves once it has. */
  async shutdown (): Promise<void> {
    const closed = once(this.socket, 'close')
    this.socket.close(1001, 'The service is shutting down')
    const grace = setTimeout(() => this.socket.terminate(), WS_CLOSE_GRACE_MS)
    await closed
    clearTimeout(grace)
  }

  async #start (message: WsRunStart): Promise<void> {
    const ref = message.ref
    if (this.#state.draining) return this.#error(ref, 'SHUTDOWN', 'The service is shutting down')
    // the upgrade needed `run` on some agent; each run needs it on its own (JWT `agents:run:<name>`)
    if (!hasAccess(this.#request, 'run', message.agent)) {
      return this.#error(ref, 'FORBIDDEN', `The token lacks the role for run on agent "${message.agent}"`)
    }
    if (this.#runs.size + this.#starting >= WS_MAX_RUNS) {
      return this.#error(ref, 'TOO_MANY_RUNS', `at most ${WS_MAX_RUNS} runs at once on one connection`)
    }
    this.#starting++
    let run: AgentRun
    try {
      run = await createRun(this.#state, this.#caller, this.#log, message.agent, message, true)
    } catch (error) {
      return this.#failed(ref, error)
    } finally {
      this.#starting--
    }
    this.#runs.set(run.runId, run)
    run.listen({
      runEvent: (event) => {
        this.#send(ref === undefined
          ? { type: event.type, runId: run.runId, seq: event.seq, data: event.data }
          : { type: event.type, runId: run.runId, ref, seq: event.seq, data: event.data })
      },
      runSettled: () => { this.#runs.delete(run.runId) }
    })
    run.start()
    // closed while the run was being set up: it starts only to end at once, so that it is counted and settles
    if (!this.open) run.abort('CANCELLED')
  }

  #cancel (message: WsRunCancel): void {
    const run = this.#runs.get(message.runId)
    // another connection's run is as unknown as a missing one: runs are cancelled by whoever started them
    if (run === undefined) return this.#error(message.ref, 'RUN_NOT_FOUND', `No run "${message.runId}" in flight on this connection`)
    run.abort('CANCELLED')
  }

  #failed (ref: WsRef | undefined, error: unknown): void {
    // Object(): whatever was thrown (an Error, a string, even undefined) can be read without throwing again
    const coded = Object(error) as { code?: unknown, statusCode?: unknown, message?: unknown }
    if (typeof coded.statusCode === 'number' && coded.statusCode < 500 && typeof coded.code === 'string') {
      return this.#error(ref, coded.code as ErrorCode, String(coded.message))
    }
    this.#log.error({ err: error }, 'could not start a WebSocket run')
    const exposed = this.#state.settings.exposeErrors ? String(coded.message ?? error) : 'Internal Server Error'
    this.#error(ref, 'INTERNAL_ERROR', exposed)
  }

  #error (ref: WsRef | undefined, code: ErrorCode, message: string): void {
    const frame: WsErrorFrame = ref === undefined
      ? { type: 'error', error: { code, message } }
      : { type: 'error', ref, error: { code, message } }
    this.#send(frame)
  }

  #send (frame: object): void {
    if (this.open) this.socket.send(JSON.stringify(frame))
  }
}

/**
 * `GET /ws`: the WebSocket transport (contract §8). The upgrade is an ordinary GET through every hook
 * (request id, auth with `access_token`, rate limit, drain); then JSON messages start and cancel runs,
 * and every run event comes back as a frame.
 */
const websocket: FastifyPluginAsyncTypebox<WebsocketPluginOptions> = async (fastify) => {
  const state = fastify.agentService
  const connections = new Set<Connection>()
  const heartbeat = new WebSocketHeartbeat()
  // the reply of each upgrade in progress, for the headers of its 101
  const upgrading = new WeakMap<IncomingMessage, FastifyReply>()

  const drain = async (): Promise<void> => {
    // core's preClose, an ancestor's hook and so run first, has let the runs finish or ended them with SHUTDOWN
    await Promise.all([...connections].map((connection) => connection.shutdown()))
  }

  // A host app that mounted @fastify/websocket itself keeps it (a second one would answer every upgrade twice).
  if (!fastify.hasDecorator('websocketServer')) {
    await fastify.register(fastifyWebsocket, {
      options: { maxPayload: WS_MAX_PAYLOAD },
      preClose: drain,
      errorHandler (error, _socket, request) {
        // protocol errors (a frame over the cap, a bad frame): ws has already sent the close frame with the right code
        request.log.info({ err: error }, 'websocket protocol error')
      }
    })
  } else {
    fastify.addHook('preClose', drain)
  }

  fastify.websocketServer.on('headers', (headers: string[], raw: IncomingMessage) => {
    const reply = upgrading.get(raw)
    if (reply === undefined) return
    upgrading.delete(raw)
    headers.push(...upgradeHeaders(reply))
  })

  fastify.route({
    method: 'GET',
    url: '/ws',
    config: { access: 'run' },
    schema: {
      summary: 'WebSocket transport',
      description: 'Upgrade to a WebSocket (only when the service has `websocket: true`). Client messages: ' +
        '`{ type: "run.start", ref?, agent, input, sessionId?, resumeRunId?, metadata? }`, `{ type: "run.cancel", runId }`; ' +
        'server frames: every run event as `{ type, runId, ref?, seq, data }`, errors as `{ type: "error", ref?, error: { code, message } }`.',
      tags: ['agents'],
      response: {
        101: { type: 'null', description: 'Switching Protocols: the connection is a WebSocket from now on' },
        ...errorResponses(401, 403, 426, 429, 500, 503)
      }
    },
    preHandler (request, reply, done) {
      upgrading.set(request.raw, reply)
      done()
    },
    handler: async () => {
      throw new UpgradeRequiredError()
    },
    wsHandler (socket: WebSocket, request: FastifyRequest) {
      const connection = new Connection(socket, state, request)
      connections.add(connection)
      heartbeat.add(socket)
      socket.on('message', (data: Buffer, isBinary: boolean) => connection.receive(data, isBinary))
      socket.once('close', () => {
        connections.delete(connection)
        heartbeat.delete(socket)
        connection.closed()
      })
      // A hijacked reply runs no onResponse hook: the upgrade is audited here, as answered.
      auditRequest(state, request, 101)
    }
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const websocketPlugin = fp(websocket, { fastify: '5.x', name: 'fastify-agents-websocket', dependencies: ['fastify-agents-core'], encapsulate: true })
export default websocketPlugin
