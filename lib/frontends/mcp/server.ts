// /v1/mcp on @modelcontextprotocol/sdk (an optional peer: this module is loaded by the first MCP request, never by
// the package). Each request gets the SDK's own Server and stateless Streamable HTTP transport, its methods answered
// from the stores (lib/frontends/mcp/runs.ts), so that any instance answers any request (docs/front-ends.md, "MCP").
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import {
  CallToolRequestSchema, CancelTaskRequestSchema, ElicitResultSchema, ErrorCode, GetTaskPayloadRequestSchema, GetTaskRequestSchema,
  ListTasksRequestSchema, ListToolsRequestSchema, McpError, RELATED_TASK_META_KEY
} from '@modelcontextprotocol/sdk/types.js'
import type { JSONRPCMessage, JSONRPCRequest, RequestId, ServerNotification, ServerRequest, ServerResult } from '@modelcontextprotocol/sdk/types.js'
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js'
import type { jsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/types.js'
import { randomId } from '../../core/ids.js'
import type { AgentServiceCore } from '../../service/service.js'
import { packageVersion } from '../../core/version.js'
import { endsTheRun } from '../run-events.js'
import type { Approval, ApprovalEventData, RunCompletedData, RunFailedData, TextDeltaData } from '../run-events.js'
import { SseStream } from '../../runs/sse.js'
import { cancelRun } from '../runs.js'
import { McpRuns, MissingInputError, watchRun } from './runs.js'
import type { OwnedTask } from './runs.js'
import type { McpToolResult } from './schemas.js'
import { toolResult } from './tools.js'

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>

/** The JSON-RPC id of an elicitation that asks for an approval: whichever instance receives the answer knows which. */
const ELICITATION_ID = 'fa-approval:'
/** The session id we give a client that declared form elicitation (see `sessionIdFor`). */
const ELICITS = '.elicit'

const INFO = { name: 'fastify-agents', version: packageVersion }
const CAPABILITIES = { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } }
// the Server checks only what it asks the client for with elicitInput(), which we never call: no Ajv per request
const NO_VALIDATION: jsonSchemaValidator = {
  /* c8 ignore next */
  getValidator: () => (input: unknown) => ({ valid: true, data: input as never, errorMessage: undefined })
}

/** The request's body as the route's parser left it: its text, and its value when it is JSON. */
export interface McpBody {
  text: string
  parsed?: unknown
}

/**
 * Stateless, the client's capabilities are not known after `initialize`: the session id we give it (the SDK's
 * client sends it back on every request) says whether it declared form elicitation. It holds nothing else.
 */
function sessionIdFor (body: unknown): string | null {
  const message = body as { method?: unknown, params?: { capabilities?: { elicitation?: { form?: unknown, url?: unknown } } } } | null
  if (message?.method !== 'initialize') return null
  const elicitation = message.params?.capabilities?.elicitation
  const form = typeof elicitation === 'object' && elicitation !== null && (elicitation.form !== undefined || elicitation.url === undefined)
  return randomId() + (form ? ELICITS : '')
}

function invalidParams (message: string): McpError {
  return new McpError(ErrorCode.InvalidParams, message)
}

function parse<S extends { safeParse(value: unknown): { success: true, data: unknown } | { success: false, error: { message: string } } }> (schema: S, request: JSONRPCRequest): Extract<ReturnType<S['safeParse']>, { success: true }>['data'] {
  const parsed = schema.safeParse(request)
  if (!parsed.success) throw invalidParams(`Invalid params for ${request.method}: ${parsed.error.message}`)
  return parsed.data as never
}

/** One request's MCP exchange: the SDK's server, our methods. */
class Exchange {
  readonly runs: McpRuns
  readonly service: AgentServiceCore
  readonly elicits: boolean
  readonly transport = new WebStandardStreamableHTTPServerTransport({})
  readonly server = new Server(INFO, { capabilities: CAPABILITIES, jsonSchemaValidator: NO_VALIDATION })
  /** the decisions the request's elicitation answers make: the request is answered once they are made */
  readonly decisions: Array<Promise<void>> = []
  /** the response's stream, once its head is out; what is sent before waits in `#early` */
  #output: SseStream | null = null
  #early = ''

  constructor (service: AgentServiceCore, request: FastifyRequest) {
    this.service = service
    this.runs = new McpRuns(service, request)
    const session = request.headers['mcp-session-id']
    this.elicits = typeof session === 'string' && session.endsWith(ELICITS)
    this.server.fallbackRequestHandler = (message, extra) => this.#answer(message, extra)
    this.server.onerror = (err) => { request.log.debug({ err }, 'MCP') }
  }

  /** The response's stream is open: what was sent before goes first. */
  open (output: SseStream): void {
    this.#output = output
    // (a call's run starts once the stores have answered: the stream is open by then, but nothing says it must be)
    /* c8 ignore next */
    if (this.#early !== '') this.write(this.#early)
    this.#early = ''
  }

  /**
   * Writes a frame of the response's stream as the SDK's transport frames its messages (`event: message`, the JSON
   * message as `data`), batched with the rest of the tick's: the progress of a call, one per delta, is the hot path
   * (the transport's send() checks every message against four zod schemas; bench/README.md, "MCP").
   */
  #send (frame: string): void {
    /* c8 ignore next */
    if (this.#output === null) this.#early += frame
    else this.write(frame)
  }

  /** Writes to the response's stream; a reader too far behind (`maxStreamBufferBytes`) is cut, as on every stream. */
  write (text: string): void {
    const output = this.#output!
    output.write(text)
    if (output.buffered > this.service.settings.maxStreamBufferBytes) {
      this.service.stats.count('slowConsumers')
      output.cut()
    }
  }

  async connect (): Promise<void> {
    await this.server.connect(this.transport)
    const sdk = this.transport.onmessage!
    // an elicitation's answer has no request waiting for it here (it may have been asked by another instance)
    this.transport.onmessage = (message, extra) => {
      const approvalId = answeredApproval(message)
      if (approvalId === null) sdk(message, extra)
      else this.decisions.push(this.#decide(approvalId, (message as { result?: unknown }).result))
    }
  }

  async #answer (request: JSONRPCRequest, extra: Extra): Promise<ServerResult> {
    const outcome = await this.#method(request, extra).then((result) => ({ result }), (err: unknown) => ({ err }))
    // a request that changes state is answered once its audit entry is stored (docs/operations.md)
    await this.service.audit.commit(this.runs.request, 200)
    if ('err' in outcome) throw this.#jsonRpcError(outcome.err)
    return outcome.result as ServerResult
  }

  async #method (request: JSONRPCRequest, extra: Extra): Promise<unknown> {
    switch (request.method) {
      case 'tools/list':
        parse(ListToolsRequestSchema, request)
        return { tools: this.runs.tools() }
      case 'tools/call': return this.#call(parse(CallToolRequestSchema, request).params, extra)
      case 'tasks/get': return this.#owned(parse(GetTaskRequestSchema, request).params.taskId).then((owned) => this.runs.task(owned))
      case 'tasks/result': return this.#result(parse(GetTaskPayloadRequestSchema, request).params.taskId, extra)
      case 'tasks/list': return this.#list(parse(ListTasksRequestSchema, request).params?.cursor)
      case 'tasks/cancel': return this.#cancel(parse(CancelTaskRequestSchema, request).params.taskId)
      default: throw new McpError(ErrorCode.MethodNotFound, `Method not found: ${request.method}`)
    }
  }

  /** Our errors as JSON-RPC's: a bad argument is invalid params, as is an unknown session; the rest keep their code in `data`. */
  #jsonRpcError (err: unknown): McpError {
    if (err instanceof McpError) return err
    if (err instanceof MissingInputError) return invalidParams(err.message)
    const { code, statusCode, message, headers } = err as { code?: unknown, statusCode?: unknown, message: string, headers?: unknown }
    if (code === 'FST_ERR_VALIDATION' || code === 'FA_UNSTORABLE_TEXT' || code === 'SESSION_NOT_FOUND' || code === 'FA_INVALID_CURSOR') return invalidParams(message)
    if (typeof code === 'string' && typeof statusCode === 'number' && statusCode < 500) {
      return new McpError(-32000, `${code}: ${message}`, { code, statusCode, ...(headers === undefined ? {} : { headers }) })
    }
    this.runs.request.log.error({ err }, 'MCP request failed')
    if (typeof code === 'string') return new McpError(ErrorCode.InternalError, `${code}: ${message}`, { code })
    return new McpError(ErrorCode.InternalError, this.service.settings.exposeErrors ? message : 'Internal error')
  }

  async #call (params: { name: string, arguments?: Record<string, unknown> | undefined, task?: { ttl?: number | null | undefined } | undefined, _meta?: Record<string, unknown> | undefined }, extra: Extra): Promise<ServerResult> {
    const agent = this.runs.agent(params.name)
    // another principal's tool (JWT roles) is as unknown as one that does not exist
    if (agent === undefined) throw invalidParams(`Unknown tool: ${params.name}`)
    const sessionId = params._meta?.sessionId
    if (sessionId !== undefined && typeof sessionId !== 'string') throw invalidParams('_meta/sessionId must be a string')
    if (params.task !== undefined) return { task: await this.runs.queue(params.name, agent, params.arguments, sessionId, params.task.ttl) }
    const run = await this.runs.prepare(params.name, agent, params.arguments, sessionId)
    const token = params._meta?.progressToken as string | number | undefined
    const progress = token === undefined ? null : `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":${JSON.stringify(token)},"progress":`
    const end = await watchRun(this.runs, run, extra.signal, (event) => {
      if (event.type === 'message.delta') {
        if (progress !== null) this.#send(`${progress}${event.seq},"message":${JSON.stringify((event.data as TextDeltaData).text)}}}\n\n`)
      } else if (event.type === 'approval.requested') {
        // (the request closed while the approval was looked up: nothing to ask it on)
        /* c8 ignore next 3 */
        this.#elicit((event.data as ApprovalEventData).approval, extra.requestId).catch((err: unknown) => {
          this.runs.request.log.warn({ err }, 'could not ask for the approval')
        })
      }
    })
    if (end === undefined) {
      // the client left (its request closed): the run goes with it, wherever it runs now
      cancelRun(this.service, run.runId).catch(() => {})
      throw new McpError(ErrorCode.ConnectionClosed, 'The request closed')
    }
    const ids = { runId: run.runId, sessionId: run.sessionId, traceId: run.options.trace.traceId }
    return toolResult(end.type === 'run.completed' ? { output: (end.data as RunCompletedData).output } : { error: (end.data as RunFailedData).error }, ids) as ServerResult
  }

  async #owned (taskId: string): Promise<OwnedTask> {
    const owned = await this.runs.owned(taskId)
    // unknown, another principal's, past its ttl: the same answer
    if (owned === null) throw invalidParams(`Task not found: ${taskId}`)
    return owned
  }

  async #result (taskId: string, extra: Extra): Promise<McpToolResult> {
    await this.#owned(taskId)
    const meta = { [RELATED_TASK_META_KEY]: { taskId } }
    for await (const event of this.runs.follow(taskId, extra.signal)) {
      if (event.type === 'approval.requested') await this.#elicit((event.data as ApprovalEventData).approval, extra.requestId, taskId)
      if (endsTheRun(event)) break
    }
    const result = await this.runs.result(taskId, meta)
    // the request closed before the end (or the run was purged meanwhile): no one to answer
    if (result === null) throw new McpError(ErrorCode.ConnectionClosed, 'The request closed')
    return result
  }

  async #list (cursor: string | undefined): Promise<ServerResult> {
    const { tasks, nextCursor } = await this.runs.list(cursor)
    return nextCursor === null ? { tasks } : { tasks, nextCursor }
  }

  async #cancel (taskId: string): Promise<ServerResult> {
    const owned = await this.#owned(taskId)
    const status = owned.record.status
    if (status !== 'queued' && status !== 'running') throw invalidParams(`Cannot cancel task ${taskId}: it is already ${status}`)
    return this.runs.cancel(owned)
  }

  /** Asks the client for a decision on a pending approval of the run (form mode), if it said it can be asked. */
  async #elicit (approval: Approval, relatedRequestId: RequestId, taskId?: string): Promise<void> {
    if (!this.elicits || !await this.runs.pending(approval.id)) return
    const payload = JSON.stringify(approval.payload ?? null, null, 2)
    const params: Record<string, unknown> = {
      mode: 'form',
      message: `The agent "${approval.agent}" asks for approval to ${approval.action}` +
        `${approval.reason === null ? '' : ` (${approval.reason})`}. Payload:\n${payload}`,
      requestedSchema: {
        type: 'object',
        properties: {
          approved: { type: 'boolean', title: 'Approve', description: `Approve ${approval.action}` },
          comment: { type: 'string', title: 'Comment' }
        },
        required: ['approved']
      }
    }
    if (taskId !== undefined) params._meta = { [RELATED_TASK_META_KEY]: { taskId } }
    await this.transport.send({ jsonrpc: '2.0', id: ELICITATION_ID + approval.id, method: 'elicitation/create', params }, { relatedRequestId })
  }

  /** accept: decided with the form's `approved` (and comment); decline: rejected; cancel (or an error): left pending. */
  async #decide (approvalId: string, result: unknown): Promise<void> {
    const answer = ElicitResultSchema.safeParse(result)
    if (!answer.success || answer.data.action === 'cancel') return
    const content = answer.data.content ?? {}
    const comment = typeof content.comment === 'string' && content.comment !== '' ? content.comment : undefined
    try {
      const outcome = await this.runs.decide(approvalId, { approved: answer.data.action === 'accept' && content.approved === true, comment })
      this.runs.request.log.info({ approvalId, outcome }, 'an elicitation answered an approval')
    } catch (err) {
      this.runs.request.log.warn({ err, approvalId }, 'could not decide the approval an elicitation answered')
    }
  }
}

/** The approval a client's JSON-RPC response answers (one of our elicitations), else null. */
function answeredApproval (message: JSONRPCMessage): string | null {
  if ('method' in message || !('id' in message)) return null
  const { id } = message
  return typeof id === 'string' && id.startsWith(ELICITATION_ID) ? id.slice(ELICITATION_ID.length) : null
}

/**
 * The incoming request as the SDK's transport reads it: a web-standard Request when it must read the body (text that
 * is not JSON: its parse error is the transport's to answer), else its method, URL and headers only (the transport
 * reads nothing else of a request whose body it is given parsed, and a whole Request costs an AbortSignal).
 */
function webRequest (request: FastifyRequest, body: McpBody): Request {
  const headers = new Headers()
  const raw = request.raw.rawHeaders
  for (let i = 0; i < raw.length; i += 2) headers.append(raw[i]!, raw[i + 1]!)
  const url = `http://mcp.local${request.url}`
  if (body.parsed === undefined) return new Request(url, { method: 'POST', headers, body: body.text })
  return { method: 'POST', url, headers } as Request
}

/** Answers a POST to /v1/mcp: the SDK's answer (JSON, or a stream of JSON-RPC messages) written to the reply. */
export async function answerMcp (service: AgentServiceCore, request: FastifyRequest, reply: FastifyReply, body: McpBody): Promise<void> {
  const exchange = new Exchange(service, request)
  await exchange.connect()
  const raw = reply.raw
  // the client leaving ends what its request waits for (a call's run is cancelled by its handler); an exchange that
  // ended has nothing left to close
  raw.once('close', () => {
    if (!raw.writableFinished) exchange.server.close().catch(() => {})
  })
  const response = await exchange.transport.handleRequest(webRequest(request, body), body.parsed === undefined ? undefined : { parsedBody: body.parsed })
  await Promise.all(exchange.decisions)
  reply.hijack()
  const headers: Record<string, string | number | string[]> = Object.assign({}, reply.getHeaders() as Record<string, string>, Object.fromEntries(response.headers))
  if (response.status === 200) {
    const sessionId = sessionIdFor(body.parsed)
    if (sessionId !== null) headers['mcp-session-id'] = sessionId
  }
  if (response.body === null || !response.headers.get('content-type')?.startsWith('text/event-stream')) {
    const text = response.body === null ? '' : await response.text()
    await service.audit.commit(request, response.status)
    raw.writeHead(response.status, headers)
    raw.end(text)
    return
  }
  // the transport's stream, batched per tick with our own frames, and cut as every stream of the service is when
  // its reader stays too far behind (maxStreamBufferBytes, the heartbeat)
  const output = new SseStream(raw, headers)
  raw.flushHeaders()
  service.heartbeat.add(output)
  raw.once('close', () => { output.closed() })
  exchange.open(output)
  const reader = response.body.getReader()
  raw.once('close', () => { if (!raw.writableFinished) reader.cancel().catch(() => {}) })
  const decoder = new TextDecoder()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    exchange.write(decoder.decode(value, { stream: true }))
  }
  service.heartbeat.delete(output)
  output.end()
}
