import { once } from 'node:events'
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { FastifyError } from '@fastify/error'
import { createRequire } from 'node:module'
import type { ErrorObject, ValidateFunction } from 'ajv'
import type { WebSocket } from 'ws'
import {
  JsonTooDeepError, UnstorableInputError,
  ForbiddenError, InternalError, InvalidJsonMessageError, InvalidMessageError, RunNotInFlightError, ShutdownError,
  TooManyRunsError, UnknownMessageTypeError
} from '../core/errors.js'
import { jsonDeeperThan, unstorableText } from '../core/validation.js'
import { requestContextOf } from '../core/request-context.js'
import type { RunHost } from './host.js'
import { WsRunCancel, WsRunStart } from '../../schemas/websocket.js'
import type { WsErrorFrame, WsRef } from '../../schemas/websocket.js'
import type { AgentRun } from './run.js'
import { prepareRun } from './start.js'
import type { RunCaller } from './start.js'

/** Frames larger than this close the connection with 1009 (Message Too Big). */
export const WS_MAX_PAYLOAD = 1024 * 1024
export const WS_MAX_RUNS = 8
export const WS_PING_INTERVAL_MS = 30_000
/** How long a closing socket may take to answer the close frame before it is cut. */
export const WS_CLOSE_GRACE_MS = 1_000

type ErrorCode = WsErrorFrame['error']['code']

// compiled on the first message of the process, not when the package is imported
let compiled: Record<string, ValidateFunction> | null = null
function validatorOf (type: string): ValidateFunction | undefined {
  if (compiled === null) {
    const { Ajv } = createRequire(import.meta.url)('ajv') as typeof import('ajv')
    const ajv = new Ajv({ allErrors: false, strict: false })
    compiled = { 'run.start': ajv.compile(WsRunStart), 'run.cancel': ajv.compile(WsRunCancel) }
  }
  return compiled[type]
}

function describe (error: ErrorObject): string {
  if (error.keyword === 'additionalProperties') return `message${error.instancePath}/${String(error.params.additionalProperty)} is not allowed`
  return `message${error.instancePath} ${String(error.message)}`
}

function isRef (value: unknown): value is WsRef {
  return (typeof value === 'string' && value.length <= 128) || Number.isSafeInteger(value)
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

/** One client connection of the WebSocket transport (docs/runs.md): its runs (at most WS_MAX_RUNS, counting those still being set up). */
export class Connection {
  readonly socket: WebSocket
  readonly #service: RunHost
  readonly #request: FastifyRequest
  readonly #caller: RunCaller
  readonly #log: FastifyBaseLogger
  readonly #runs = new Map<string, AgentRun>()
  #starting = 0

  constructor (socket: WebSocket, service: RunHost, request: FastifyRequest) {
    const context = requestContextOf(request)
    this.socket = socket
    this.#service = service
    this.#request = request
    // every run of the connection runs as what authenticated at the upgrade, under its request id and trace
    this.#caller = { principal: context.principal, requestId: context.requestId, trace: context.trace }
    this.#log = request.log
  }

  get open (): boolean {
    return this.socket.readyState === this.socket.OPEN
  }

  receive (data: Buffer, isBinary: boolean): void {
    if (isBinary) return this.#error(undefined, new InvalidMessageError('messages must be JSON text frames'))
    let message: unknown
    const text = data.toString('utf8')
    const max = this.#service.settings.maxJsonDepth
    if (jsonDeeperThan(text, max)) return this.#error(undefined, new JsonTooDeepError(max))
    try {
      message = JSON.parse(text)
    } catch {
      return this.#error(undefined, new InvalidJsonMessageError())
    }
    const bad = text.includes('\\u') ? unstorableText(message, 'message') : null
    if (bad !== null) return this.#error(undefined, new UnstorableInputError(bad.path, bad.holds))
    if (typeof message !== 'object' || message === null || Array.isArray(message)) {
      return this.#error(undefined, new InvalidMessageError('a message must be a JSON object with a "type"'))
    }
    const fields = message as Record<string, unknown>
    const ref = isRef(fields.ref) ? fields.ref : undefined
    const validate = typeof fields.type === 'string' ? validatorOf(fields.type) : undefined
    if (validate === undefined) {
      const type = JSON.stringify(fields.type ?? null).slice(0, 64)
      return this.#error(ref, new UnknownMessageTypeError(type))
    }
    if (!validate(message)) return this.#error(ref, new InvalidMessageError(describe(validate.errors![0]!)))
    if (fields.type === 'run.start') void this.#start(message as WsRunStart)
    else this.#cancel(message as WsRunCancel)
  }

  /** The socket closed: whatever still runs has nobody to report to (a `continue` run goes on, for followers). */
  closed (): void {
    for (const run of this.#runs.values()) if (run.options.onDisconnect === 'cancel') run.abort('CANCELLED')
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
    if (this.#service.drain.draining) return this.#error(ref, new ShutdownError())
    // the upgrade needed `run` on some agent; each run needs it on its own (JWT `agents:run:<name>`)
    if (!this.#service.hasAccess(this.#request, 'run', message.agent)) {
      return this.#error(ref, new ForbiddenError(`The token lacks the role for run on agent "${message.agent}"`))
    }
    if (this.#runs.size + this.#starting >= WS_MAX_RUNS) {
      return this.#error(ref, new TooManyRunsError(WS_MAX_RUNS))
    }
    this.#starting++
    let run: AgentRun
    try {
      run = await prepareRun({ service: this.#service, agent: message.agent, request: message, caller: this.#caller, log: this.#log, inputPath: 'message/input' })
    } catch (error) {
      return this.#failed(ref, error)
    } finally {
      this.#starting--
    }
    this.#runs.set(run.runId, run)
    // every frame of this run starts the same way; the event's data is the JSON it was serialized to once
    const head = `{"type":`
    const tail = `,"runId":${JSON.stringify(run.runId)}${ref === undefined ? '' : `,"ref":${JSON.stringify(ref)}`},"seq":`
    run.listen({
      runEvent: (event) => { this.#sendText(`${head}${JSON.stringify(event.type)}${tail}${event.seq},"data":${event.json}}`) },
      runSettled: () => { this.#runs.delete(run.runId) }
    })
    run.start()
    // closed while the run was being set up: it starts only to end at once, so that it is counted and settles
    if (!this.open && run.options.onDisconnect === 'cancel') run.abort('CANCELLED')
  }

  #cancel (message: WsRunCancel): void {
    const run = this.#runs.get(message.runId)
    // another connection's run is as unknown as a missing one: runs are cancelled by whoever started them
    if (run === undefined) return this.#error(message.ref, new RunNotInFlightError(message.runId))
    run.abort('CANCELLED')
  }

  #failed (ref: WsRef | undefined, error: unknown): void {
    // Object(): whatever was thrown (an Error, a string, even undefined) can be read without throwing again
    const coded = Object(error) as { code?: unknown, statusCode?: unknown, message?: unknown }
    if (typeof coded.statusCode === 'number' && coded.statusCode < 500 && typeof coded.code === 'string') {
      return this.#error(ref, coded as FastifyError)
    }
    this.#log.error({ err: error }, 'could not start a WebSocket run')
    const exposed = this.#service.settings.exposeErrors ? String(coded.message ?? error) : 'Internal Server Error'
    this.#error(ref, new InternalError(exposed))
  }

  #error (ref: WsRef | undefined, error: FastifyError): void {
    const body = { code: error.code as ErrorCode, message: error.message }
    const frame: WsErrorFrame = ref === undefined ? { type: 'error', error: body } : { type: 'error', ref, error: body }
    this.#send(frame)
  }

  #send (frame: object): void {
    this.#sendText(JSON.stringify(frame))
  }

  #sendText (text: string): void {
    if (!this.open) return
    this.socket.send(text)
    // a client this far behind is cut: its connection-bound runs end as with any disconnect
    if (this.socket.bufferedAmount > this.#service.settings.maxStreamBufferBytes) {
      this.#service.stats.count('slowConsumers')
      this.socket.terminate()
    }
  }
}
