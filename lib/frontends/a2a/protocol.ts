// A2A (docs/front-ends.md) on top of @a2a-js/sdk's own server pieces: its JsonRpcTransportHandler (v1.0
// names) and LegacyJsonRpcTransportHandler (v0.3 names) parse, validate, dispatch and serialize; its
// formatSSEEvent frames. What is ours is the A2ARequestHandler those take, written over the run store
// (a task is a run, its context a session) instead of the SDK's in-process DefaultRequestHandler, plus
// the folding of run events into tasks and the agent card. No Fastify here: see NOTES.md for the routes.
import {
  AgentCard, Role, SSE_HEADERS, TaskState, formatSSEErrorEvent, formatSSEEvent
} from '@a2a-js/sdk'
import type {
  Artifact, CancelTaskRequest, GetTaskRequest, Message, Part, SendMessageRequest, StreamResponse,
  SubscribeToTaskRequest, Task, TaskStatus
} from '@a2a-js/sdk'
import { JsonRpcTransportHandler, ServerCallContext, validateVersion } from '@a2a-js/sdk/server'
import type { A2ARequestHandler } from '@a2a-js/sdk/server'
import { LegacyJsonRpcTransportHandler } from '@a2a-js/sdk/compat/v0_3/server'
import { A2A_LEGACY_PROTOCOL_VERSION, LEGACY_METHOD_TASKS_RESUBSCRIBE, isLegacyJsonRpcMethod } from '@a2a-js/sdk/compat/v0_3'
import {
  ContentTypeNotSupportedError, PushNotificationNotSupportedError, RequestMalformedError, TaskNotCancelableError,
  TaskNotFoundError, UnsupportedOperationError
} from '@a2a-js/sdk/errors'
import { isCustomEventType } from '../run-events.js'
import type {
  Approval, ApprovalEventData, LoggedEvent, RunCompletedData, RunEvent, RunFailedData, TextDeltaData
} from '../run-events.js'

export const A2A_VERSION_HEADER = 'a2a-version'
/** The one artifact of a task: the run's output, streamed as text while it is produced. */
export const RESPONSE_ARTIFACT_ID = 'response'

const TERMINAL = new Set([TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED])

function textPart (value: string): Part {
  return { content: { $case: 'text', value }, mediaType: 'text/plain', filename: '', metadata: {} }
}

function dataPart (value: unknown): Part {
  return { content: { $case: 'data', value }, mediaType: 'application/json', filename: '', metadata: {} }
}

/** A run's output as artifact parts: a string is text, anything else JSON data. */
function outputParts (output: unknown): Part[] {
  return typeof output === 'string' ? [textPart(output)] : [dataPart(output ?? null)]
}

/**
 * A run folded into an A2A task, event by event: `push` returns the stream responses an event makes
 * (status and artifact updates), `task()` the task as it stands.
 */
export class A2ATaskProjection {
  readonly #task: Task
  #text = ''
  /** The artifact as it stands: undefined before the first chunk, null while it is the streamed text so far. */
  #artifact: Artifact | null | undefined = undefined
  #pending: Approval | null = null
  #lastSeq = 0

  constructor (taskId: string, contextId: string) {
    this.#task = {
      id: taskId,
      contextId,
      status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined },
      artifacts: [],
      history: [],
      metadata: {}
    }
  }

  get state (): TaskState {
    return this.#task.status!.state
  }

  /** The approval the task waits for (state input-required), if any. */
  get pendingApproval (): Approval | null {
    return this.#pending
  }

  /** The seq of the last event pushed: where to follow the run from. */
  get lastSeq (): number {
    return this.#lastSeq
  }

  /** True in a terminal state and in input-required: an A2A stream ends at either. */
  get ended (): boolean {
    return TERMINAL.has(this.state) || this.state === TaskState.TASK_STATE_INPUT_REQUIRED
  }

  task (): Task {
    const task = structuredClone(this.#task)
    // the whole artifact is made when asked for: a stream of deltas needs only its chunks
    if (this.#artifact !== undefined) task.artifacts = [structuredClone(this.#artifact ?? this.#chunk([textPart(this.#text)]))]
    return task
  }

  /**
   * An attempt's end that the run goes on after (`goesOn`, read from the log of a run resumed under its id) is
   * progress, as `run.requeued` is: the task keeps working rather than reach a terminal state it could not leave.
   */
  push (event: LoggedEvent): StreamResponse[] {
    this.#lastSeq = event.seq
    if (event.goesOn === true) return [this.#progress(event)]
    switch (event.type) {
      case 'run.started':
        return [this.#status(TaskState.TASK_STATE_WORKING, undefined)]
      case 'message.delta': {
        const { text } = event.data as TextDeltaData
        const append = this.#text !== ''
        this.#text += text
        return [this.#artifactUpdate([textPart(text)], append, false)]
      }
      case 'approval.requested': {
        const { approval } = event.data as ApprovalEventData
        this.#pending = approval
        const prompt = approval.reason ?? `Approve ${approval.action}?`
        const request = { id: approval.id, action: approval.action, payload: approval.payload ?? null, reason: approval.reason ?? null, expiresAt: approval.expiresAt }
        return [this.#status(TaskState.TASK_STATE_INPUT_REQUIRED, this.#message(event.seq, [textPart(prompt), dataPart({ approval: request })]))]
      }
      case 'run.completed': {
        const { output, usage, finishReason } = event.data as RunCompletedData
        // The whole output replaces the streamed text: an agent's result need not be its text deltas.
        const artifact = this.#artifactUpdate(outputParts(output), false, true)
        return [artifact, this.#status(TaskState.TASK_STATE_COMPLETED, undefined, { usage, finishReason })]
      }
      case 'run.failed': {
        const { error } = event.data as RunFailedData
        const state = error.code === 'CANCELLED' ? TaskState.TASK_STATE_CANCELED : TaskState.TASK_STATE_FAILED
        return [this.#status(state, this.#message(event.seq, [textPart(error.message)]), { error })]
      }
      default:
        if (event.type === 'approval.decided') this.#pending = null
        if (event.type.startsWith('tool.call') && event.type !== 'tool.call') return []
        if (event.type === 'tool.call' || event.type === 'tool.result' || event.type === 'approval.decided' ||
          event.type === 'run.requeued' || isCustomEventType(event.type)) {
          return [this.#progress(event)]
        }
        return []
    }
  }

  /** Progress the A2A client may show: the event itself, as data in a working status message. */
  #progress (event: RunEvent): StreamResponse {
    return this.#status(TaskState.TASK_STATE_WORKING, this.#message(event.seq, [dataPart({ type: event.type, data: event.data ?? null })]))
  }

  #message (seq: number, parts: Part[]): Message {
    return {
      messageId: `${this.#task.id}:${seq}`,
      contextId: this.#task.contextId,
      taskId: this.#task.id,
      role: Role.ROLE_AGENT,
      parts,
      metadata: {},
      extensions: [],
      referenceTaskIds: []
    }
  }

  #status (state: TaskState, message: Message | undefined, metadata: Record<string, unknown> = {}): StreamResponse {
    const status: TaskStatus = { state, message, timestamp: undefined }
    this.#task.status = status
    if (Object.keys(metadata).length > 0) this.#task.metadata = { ...this.#task.metadata, ...metadata }
    // made for this update alone (task() hands out copies of the task): nothing to clone
    return { payload: { $case: 'statusUpdate', value: { taskId: this.#task.id, contextId: this.#task.contextId, status: { ...status }, metadata } } }
  }

  #chunk (parts: Part[]): Artifact {
    return { artifactId: RESPONSE_ARTIFACT_ID, name: RESPONSE_ARTIFACT_ID, description: '', parts, metadata: {}, extensions: [] }
  }

  #artifactUpdate (parts: Part[], append: boolean, lastChunk: boolean): StreamResponse {
    const chunk = this.#chunk(parts)
    this.#artifact = append ? null : chunk
    return { payload: { $case: 'artifactUpdate', value: { taskId: this.#task.id, contextId: this.#task.contextId, artifact: chunk, append, lastChunk, metadata: {} } } }
  }
}

/** The run store and pipeline, as the A2A handler needs them; bound to the caller's principal. */
export interface A2ARunPort {
  /** Starts a run of the agent with this input, in the session (a new one when absent). */
  start (request: { input: unknown, sessionId?: string }): Promise<{ runId: string, sessionId: string | null }>
  /**
   * The caller's run: its session and its events so far (an attempt's end that more events follow marked `goesOn`);
   * null when unknown, expired or someone else's.
   */
  read (runId: string): Promise<{ sessionId: string | null, events: LoggedEvent[] } | null>
  /**
   * Events with seq > `after`, then live ones until the terminal event that ends the run (an attempt's end that the
   * run goes on after comes marked `goesOn`), then it ends. It must also end when `signal` aborts: a generator's
   * return() waits for a pending next(), so only the signal can release a follower that waits for an event when the
   * client goes away.
   */
  follow (runId: string, after: number, signal: AbortSignal | undefined): AsyncIterable<LoggedEvent>
  cancel (runId: string): Promise<void>
  /** Compare-and-set on the approval being pending, as POST /v1/approvals/:id. */
  decide (approvalId: string, decision: { approved: boolean, comment?: string }): Promise<void>
}

/** The service's error codes (README.md, "Error codes") that have an A2A counterpart; others are internal errors. */
const PORT_ERRORS: Record<string, new (message: string) => Error> = {
  RUN_NOT_FOUND: TaskNotFoundError,
  SESSION_NOT_FOUND: RequestMalformedError,
  FST_ERR_VALIDATION: RequestMalformedError,
  SESSION_BUSY: UnsupportedOperationError,
  RUN_IN_PROGRESS: UnsupportedOperationError,
  APPROVAL_ALREADY_DECIDED: UnsupportedOperationError,
  APPROVAL_EXPIRED: UnsupportedOperationError,
  RUN_ALREADY_ENDED: TaskNotCancelableError,
  QUOTA_EXCEEDED: UnsupportedOperationError
}

export interface RunTaskHandlerOptions {
  card: AgentCard
  port: A2ARunPort
  /** Aborted by the route when the client goes away: ends the followers of this request. */
  signal?: AbortSignal
  /** Unexpected errors keep their message only with this (as the `exposeErrors` option). */
  exposeErrors?: boolean
}

/** The A2A request handler over runs: what JsonRpcTransportHandler and its v0.3 twin dispatch to. */
export class RunTaskHandler implements A2ARequestHandler {
  readonly #card: AgentCard
  readonly #port: A2ARunPort
  readonly #signal: AbortSignal | undefined
  readonly #exposeErrors: boolean

  constructor (options: RunTaskHandlerOptions) {
    this.#card = options.card
    this.#port = options.port
    this.#signal = options.signal
    this.#exposeErrors = options.exposeErrors ?? false
  }

  async getAgentCard (): Promise<AgentCard> {
    return this.#card
  }

  async getAuthenticatedExtendedAgentCard (): Promise<AgentCard> {
    throw new UnsupportedOperationError('Agent does not support authenticated extended card.')
  }

  async sendMessage (params: SendMessageRequest): Promise<Message | Task> {
    const projection = await this.#begin(params)
    // Returning at once leaves the run going on without this request (NOTES.md: onDisconnect 'continue').
    if (params.configuration?.returnImmediately !== true) {
      for await (const _ of this.#follow(projection, false));
    }
    return projection.task()
  }

  async * sendMessageStream (params: SendMessageRequest): AsyncGenerator<StreamResponse, void, undefined> {
    const projection = await this.#begin(params)
    yield { payload: { $case: 'task', value: projection.task() } }
    yield * this.#follow(projection, false)
  }

  async getTask (params: GetTaskRequest): Promise<Task> {
    return (await this.#projection(params.id)).task()
  }

  async cancelTask (params: CancelTaskRequest): Promise<Task> {
    const projection = await this.#projection(params.id)
    if (projection.state === TaskState.TASK_STATE_CANCELED) return projection.task()
    if (TERMINAL.has(projection.state)) throw new TaskNotCancelableError(`Task not cancelable: ${params.id}`)
    await this.#call(this.#port.cancel(params.id))
    // A cancelled run ends within a second, on whichever instance runs it (docs/runs.md).
    for await (const _ of this.#follow(projection, true));
    return projection.task()
  }

  async * resubscribe (params: SubscribeToTaskRequest): AsyncGenerator<StreamResponse, void, undefined> {
    const projection = await this.#projection(params.id)
    if (TERMINAL.has(projection.state)) {
      throw new UnsupportedOperationError(`Task ${params.id} is in a terminal state and cannot be subscribed to.`)
    }
    yield { payload: { $case: 'task', value: projection.task() } }
    if (!projection.ended) yield * this.#follow(projection, false)
  }

  async listTasks (): Promise<never> {
    throw new UnsupportedOperationError('ListTasks is not supported: list a session\'s runs with GET /v1/sessions/:id/runs.')
  }

  async createTaskPushNotificationConfig (): Promise<never> {
    throw new PushNotificationNotSupportedError()
  }

  async getTaskPushNotificationConfig (): Promise<never> {
    throw new PushNotificationNotSupportedError()
  }

  async listTaskPushNotificationConfigs (): Promise<never> {
    throw new PushNotificationNotSupportedError()
  }

  async deleteTaskPushNotificationConfig (): Promise<never> {
    throw new PushNotificationNotSupportedError()
  }

  /** A new task (a run), or the answer to a task waiting for input (its pending approval). */
  async #begin (params: SendMessageRequest): Promise<A2ATaskProjection> {
    const message = params.message
    if (message === undefined) throw new RequestMalformedError('message is required.')
    if (message.taskId === '') {
      const input = inputOf(message)
      const { runId, sessionId } = await this.#call(this.#port.start(message.contextId === '' ? { input } : { input, sessionId: message.contextId }))
      return new A2ATaskProjection(runId, sessionId ?? runId)
    }
    const projection = await this.#projection(message.taskId)
    const approval = projection.pendingApproval
    if (approval === null) {
      throw new UnsupportedOperationError(`Task ${message.taskId} is not waiting for input.`)
    }
    if (message.contextId !== '' && message.contextId !== projection.task().contextId) {
      throw new RequestMalformedError(`contextId ${message.contextId} is not the context of task ${message.taskId}.`)
    }
    await this.#call(this.#port.decide(approval.id, decisionOf(message)))
    return projection
  }

  /** The run's events after those the projection has seen, as stream responses, until the stream must end. */
  async * #follow (projection: A2ATaskProjection, toTheEnd: boolean): AsyncGenerator<StreamResponse, void, undefined> {
    for await (const event of this.#port.follow(projection.task().id, projection.lastSeq, this.#signal)) {
      yield * projection.push(event)
      if (toTheEnd ? TERMINAL.has(projection.state) : projection.ended) return
    }
  }

  async #projection (taskId: string): Promise<A2ATaskProjection> {
    const run = await this.#call(this.#port.read(taskId))
    if (run === null) throw new TaskNotFoundError(`Task not found: ${taskId}`)
    const projection = new A2ATaskProjection(taskId, run.sessionId ?? taskId)
    for (const event of run.events) projection.push(event)
    return projection
  }

  async #call<T> (promise: Promise<T>): Promise<T> {
    try {
      return await promise
    } catch (error) {
      const code = (error as { code?: unknown }).code
      const Mapped = typeof code === 'string' ? PORT_ERRORS[code] : undefined
      const message = (error as Error).message
      if (Mapped !== undefined) throw new Mapped(message)
      throw this.#exposeErrors ? error : new Error('Internal Server Error')
    }
  }
}

/** A run's input from an A2A message: its text, or the value of its one data part. */
function inputOf (message: Message): unknown {
  const texts: string[] = []
  const data: unknown[] = []
  for (const part of message.parts) {
    if (part.content?.$case === 'text') texts.push(part.content.value)
    else if (part.content?.$case === 'data') data.push(part.content.value)
    else throw new ContentTypeNotSupportedError('Only text and data parts are supported.')
  }
  if (texts.length === 0 && data.length === 1) return data[0]
  if (texts.length === 0) throw new RequestMalformedError('The message needs one text part, or exactly one data part.')
  return texts.join('\n')
}

const YES = /^(yes|y|ok|approve|approved|accept)[.!]?$/i
const NO = /^(no|n|reject|rejected|deny|denied|decline)[.!]?$/i

/** An approval decision from an A2A message: a data part `{ approved, comment? }`, or a yes/no text. */
function decisionOf (message: Message): { approved: boolean, comment?: string } {
  for (const part of message.parts) {
    if (part.content?.$case === 'data') {
      const { approved, comment } = (part.content.value ?? {}) as { approved?: unknown, comment?: unknown }
      if (typeof approved === 'boolean') return typeof comment === 'string' ? { approved, comment } : { approved }
    }
    if (part.content?.$case === 'text') {
      const text = part.content.value.trim()
      if (YES.test(text)) return { approved: true }
      if (NO.test(text)) return { approved: false }
    }
  }
  throw new RequestMalformedError('The task waits for an approval: send a data part {"approved": true|false, "comment"?: string}, or the text "approve" or "reject".')
}

export interface A2ACardOptions {
  name: string
  description?: string
  /** The JSON-RPC endpoint, absolute: https://host/v1/a2a/:name */
  url: string
  version?: string
  /** Declares the `Authorization: Bearer` scheme (API keys and JWTs alike, docs/auth-and-traffic.md). */
  bearerAuth?: boolean
}

/** The agent card (SDK core shape), listing the JSON-RPC endpoint for protocol versions 1.0 and 0.3. */
export function a2aAgentCard (options: A2ACardOptions): AgentCard {
  const description = options.description ?? ''
  const modes = ['text/plain', 'application/json']
  return {
    name: options.name,
    description,
    supportedInterfaces: ['1.0', A2A_LEGACY_PROTOCOL_VERSION].map((protocolVersion) =>
      ({ url: options.url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion })),
    provider: undefined,
    version: options.version ?? '1.0.0',
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: options.bearerAuth === true
      ? { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { description: '', scheme: 'Bearer', bearerFormat: '' } } } }
      : {},
    securityRequirements: options.bearerAuth === true ? [{ schemes: { bearer: { list: [] } } }] : [],
    defaultInputModes: modes,
    defaultOutputModes: modes,
    skills: [{ id: options.name, name: options.name, description, tags: [], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: []
  }
}

/**
 * The card's JSON for a request with this A2A-Version header: the v1.0 document for "1.0", the v0.3
 * one otherwise (a v0.3 client sends no header), as the SDK's own Express card handler does.
 */
export function a2aAgentCardDocument (options: A2ACardOptions, a2aVersion: string | undefined): Record<string, unknown> {
  if (a2aVersion !== undefined && a2aVersion !== A2A_LEGACY_PROTOCOL_VERSION) {
    return AgentCard.toJSON(a2aAgentCard(options)) as Record<string, unknown>
  }
  // The SDK converts a card to v0.3 only inside its Express router, so the v0.3 document is written here;
  // the tests read it back with the SDK's parseLegacyAgentCard.
  const description = options.description ?? ''
  const modes = ['text/plain', 'application/json']
  return {
    protocolVersion: '0.3.0',
    name: options.name,
    description,
    url: options.url,
    preferredTransport: 'JSONRPC',
    version: options.version ?? '1.0.0',
    capabilities: { streaming: true, pushNotifications: false, stateTransitionHistory: false },
    ...(options.bearerAuth === true ? { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } }, security: [{ bearer: [] }] } : {}),
    defaultInputModes: modes,
    defaultOutputModes: modes,
    skills: [{ id: options.name, name: options.name, description, tags: [] }]
  }
}

export interface A2AHttpResponse {
  status: number
  headers: Record<string, string>
  /** JSON text, or SSE frames to write as they come (call `return()` on it if the client goes away) */
  body: string | AsyncGenerator<string, void, undefined>
}

const JSON_HEADERS = { 'content-type': 'application/json' }

/**
 * One JSON-RPC request to the A2A endpoint: v0.3 method names go to the SDK's legacy handler, all
 * others to its v1.0 handler, whatever the A2A-Version header says; streaming methods answer SSE.
 * The framing follows the SDK's Express adapter, which Fastify cannot mount.
 */
export async function handleA2AJsonRpc (
  handler: A2ARequestHandler, body: unknown, a2aVersion: string | undefined
): Promise<A2AHttpResponse> {
  const method = typeof body === 'object' && body !== null ? (body as { method?: unknown }).method : undefined
  const id = typeof body === 'object' && body !== null ? (body as { id?: unknown }).id ?? null : null
  const legacy = isLegacyJsonRpcMethod(method)
  const mapError = legacy ? LegacyJsonRpcTransportHandler.mapToLegacyJSONRPCError : JsonRpcTransportHandler.mapToJSONRPCError
  const context = new ServerCallContext({ requestedVersion: a2aVersion ?? (legacy ? A2A_LEGACY_PROTOCOL_VERSION : '1.0') })
  if (a2aVersion !== undefined) {
    try {
      validateVersion(a2aVersion, await handler.getAgentCard(), 'JSONRPC')
    } catch (error) {
      return { status: 200, headers: JSON_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', id, error: mapError(error) }) }
    }
  }
  const transport = legacy ? new LegacyJsonRpcTransportHandler(handler) : new JsonRpcTransportHandler(handler)
  const result = await transport.handle((legacy ? blockingByDefault(body) : body) as Record<string, unknown>, context)
  if (!(Symbol.asyncIterator in result)) {
    return { status: 200, headers: JSON_HEADERS, body: JSON.stringify(result) }
  }
  const stream = result as AsyncGenerator<unknown, void, undefined>
  let first: IteratorResult<unknown, void> | undefined
  // An error before the first event is a plain JSON-RPC error, except for v0.3 tasks/resubscribe,
  // whose clients expect SSE in every case.
  if (!(legacy && method === LEGACY_METHOD_TASKS_RESUBSCRIBE)) {
    try {
      first = await stream.next()
    } catch (error) {
      return { status: 200, headers: JSON_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', id, error: mapError(error) }) }
    }
  }
  return { status: 200, headers: { ...SSE_HEADERS }, body: frames(stream, first, id, mapError) }
}

/**
 * v0.3's `message/send` waits for the task unless `configuration.blocking` is false (a2a-js 0.3 and the Python SDK
 * read it so, as does a request without a configuration), but the SDK's v0.3 translation reads a configuration without
 * `blocking` as returnImmediately: such a request is given `blocking: true` (docs/front-ends.md).
 */
function blockingByDefault (body: unknown): unknown {
  const { params } = body as { params?: { configuration?: { blocking?: unknown } } }
  const configuration = params?.configuration
  if (typeof configuration !== 'object' || configuration === null || configuration.blocking !== undefined) return body
  return { ...body as object, params: { ...params, configuration: { ...configuration, blocking: true } } }
}

async function * frames (
  stream: AsyncGenerator<unknown, void, undefined>, first: IteratorResult<unknown, void> | undefined,
  id: unknown, mapError: (error: unknown) => unknown
): AsyncGenerator<string, void, undefined> {
  try {
    if (first?.done === false) yield formatSSEEvent(first.value)
    for await (const envelope of stream) yield formatSSEEvent(envelope)
  } catch (error) {
    yield formatSSEErrorEvent({ jsonrpc: '2.0', id, error: mapError(error) })
  } finally {
    await stream.return(undefined)
  }
}
