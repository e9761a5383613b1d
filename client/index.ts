// fastify-agents/client: a fetch-based client of the service's HTTP API, for browsers and Node (global fetch), typed
// from the same TypeBox schemas the routes validate with. Types only come from schemas/ (nothing of the server is
// loaded: test/client/bundle.test.ts checks the import graph). A run's stream rejoins by `Last-Event-ID` when the
// connection drops, without a duplicate or a gap (docs/client.md).
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage } from 'eventsource-parser'
import type { AgentInfo, AgentList } from '../schemas/agents.js'
import type { Approval, ApprovalList, ApprovalListQuery, DecideApprovalRequest } from '../schemas/approvals.js'
import type { UiMessage } from '../schemas/chat.js'
import type { ErrorResponse } from '../schemas/common.js'
import type {
  ApprovalEventData, CheckpointSavedData, RunRequeuedData, RunStartedData, TextDeltaData, ToolCallData, ToolCallDeltaData,
  ToolResultData
} from '../schemas/events.js'
import type { QueuedRun, RunFailedEvent, RunPage, RunRecord, RunRequest, RunResult, SessionRunsQuery } from '../schemas/runs.js'
import type { CreateSessionRequest, Session, SessionListQuery, SessionPage, SessionWithMessages } from '../schemas/sessions.js'

export type {
  AgentInfo, Approval, ApprovalEventData, CheckpointSavedData, ErrorResponse, QueuedRun, RunFailedEvent, RunPage, RunRecord,
  RunRequest, RunRequeuedData, RunResult, RunStartedData, Session, SessionPage, SessionWithMessages, TextDeltaData,
  ToolCallData, ToolCallDeltaData, ToolResultData, UiMessage
}

/** The data of each built-in event type of a run's stream. */
export interface RunEventData {
  'run.started': RunStartedData
  'message.delta': TextDeltaData
  'reasoning.delta': TextDeltaData
  'tool.call.delta': ToolCallDeltaData
  'tool.call': ToolCallData
  'tool.result': ToolResultData
  'approval.requested': ApprovalEventData
  'approval.decided': ApprovalEventData
  'checkpoint.saved': CheckpointSavedData
  'run.requeued': RunRequeuedData
  'run.completed': RunResult
  'run.failed': RunFailedEvent
}

/** A built-in event: `type` narrows `data`. `id` is the event's seq in the run's log (from 1, without gaps). */
export type BuiltInRunEvent = { [K in keyof RunEventData]: { id: number, type: K, data: RunEventData[K] } }[keyof RunEventData]

/** An event the agent emitted itself (`ctx.emit` / a yielded `{ type, data }`): `name` is its type. */
export interface CustomRunEvent {
  id: number
  type: 'custom'
  name: string
  data: unknown
}

export type RunStreamEvent = BuiltInRunEvent | CustomRunEvent

const BUILT_IN = new Set<string>([
  'run.started', 'message.delta', 'reasoning.delta', 'tool.call.delta', 'tool.call', 'tool.result', 'approval.requested',
  'approval.decided', 'checkpoint.saved', 'run.requeued', 'run.completed', 'run.failed'
])

/** An error the service answered with: `code` is its code (`AGENT_NOT_FOUND`, `FA_INVALID_CURSOR`, …). */
export class AgentsClientError extends Error {
  readonly status: number
  readonly code: string | undefined
  readonly requestId: string | undefined
  readonly traceId: string | undefined
  /** the error body, when the answer was the service's JSON error */
  readonly body: ErrorResponse | undefined

  constructor (status: number, body: ErrorResponse | undefined, statusText: string) {
    super(body?.message ?? `${status} ${statusText}`)
    this.name = 'AgentsClientError'
    this.status = status
    this.body = body
    this.code = body?.code
    this.requestId = body?.requestId
    this.traceId = body?.traceId
  }
}

/** A run's stream could not be rejoined: `retries` attempts in a row failed. Rejoin later with `runs.join(runId, { after })`. */
export class StreamLostError extends Error {
  readonly runId: string | undefined
  /** the id of the last event received: where a later `join` goes on from */
  readonly lastEventId: number
  constructor (runId: string | undefined, lastEventId: number, cause: unknown) {
    super(runId === undefined
      ? 'The run\'s stream was lost before its first event: its id is not known'
      : `The stream of run ${runId} was lost after event ${lastEventId} and could not be rejoined`, { cause })
    this.name = 'StreamLostError'
    this.runId = runId
    this.lastEventId = lastEventId
  }
}

export interface ClientOptions {
  /** the service's origin, e.g. `http://127.0.0.1:3000` (a path, if the service is mounted under one) */
  baseUrl: string
  /** the API prefix (default `/v1`) */
  prefix?: string
  /** sent as `X-API-Key` (api-key auth) */
  apiKey?: string
  /** sent as `Authorization: Bearer` (JWT auth) */
  token?: string
  /** more headers on every request (a function: read for each one) */
  headers?: Record<string, string> | (() => Record<string, string>)
  /** default: the global fetch */
  fetch?: typeof fetch
}

export interface StreamOptions {
  signal?: AbortSignal
  /** rejoins in a row that may fail before the stream gives up with StreamLostError (default 5) */
  retries?: number
  /** the wait before the first rejoin, doubled after each failed one (default 250 ms) */
  retryDelayMs?: number
}

export interface JoinOptions extends StreamOptions {
  /** the seq after which to start (default 0: the run from its first event) */
  after?: number
}

/** A run request as the client sends it (`stream` and `background` are the methods' to set). */
export type RunInput = Omit<RunRequest, 'stream' | 'background'>

interface Request {
  method?: string
  path: string
  query?: Record<string, string | number | undefined>
  body?: unknown
  headers?: Record<string, string>
  signal?: AbortSignal | undefined
}

const TERMINAL = new Set(['run.completed', 'run.failed'])

/** A signal that never aborts: what a wait without one listens to. */
const NEVER = new AbortController().signal

function sleep (ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', aborted)
      resolve()
    }, ms)
    function aborted (): void {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener('abort', aborted, { once: true })
  })
}

/** The SSE events of a response body, as they arrive. */
async function * sseMessages (body: ReadableStream<Uint8Array>): AsyncGenerator<EventSourceMessage> {
  const arrived: EventSourceMessage[] = []
  const parser = createParser({ onEvent: (message) => { arrived.push(message) } })
  const reader = body.getReader()
  const decoder = new TextDecoder()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      parser.feed(decoder.decode(value, { stream: true }))
      while (arrived.length > 0) yield arrived.shift()!
    }
  } finally {
    // a consumer that stops early closes the connection; a reader that failed has nothing left to cancel
    await reader.cancel().catch(() => undefined)
  }
}

function typed (message: EventSourceMessage): RunStreamEvent {
  const id = Number(message.id)
  const type = message.event!
  const data: unknown = JSON.parse(message.data)
  return BUILT_IN.has(type) ? { id, type, data } as BuiltInRunEvent : { id, type: 'custom', name: type, data }
}

export class AgentsClient {
  readonly #base: string
  readonly #options: ClientOptions
  readonly #fetch: typeof fetch

  constructor (options: ClientOptions) {
    if (typeof options?.baseUrl !== 'string' || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError('baseUrl must be an http(s) URL, e.g. http://127.0.0.1:3000')
    }
    this.#options = options
    this.#base = options.baseUrl.replace(/\/+$/, '') + (options.prefix ?? '/v1')
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis)
  }

  readonly agents = {
    list: async (options: { signal?: AbortSignal } = {}): Promise<AgentInfo[]> =>
      (await this.#json<AgentList>({ path: '/agents', signal: options.signal })).agents,
    get: (name: string, options: { signal?: AbortSignal } = {}): Promise<AgentInfo> =>
      this.#json({ path: `/agents/${encodeURIComponent(name)}`, signal: options.signal })
  }

  readonly runs = {
    /** Runs the agent and answers with its result (a failed run is an AgentsClientError with the run's code). */
    create: (agent: string, request: RunInput, options: { signal?: AbortSignal, idempotencyKey?: string } = {}): Promise<RunResult> =>
      this.#json({ method: 'POST', path: `/agents/${encodeURIComponent(agent)}/runs`, body: request, signal: options.signal, headers: idempotency(options.idempotencyKey) }),
    /** Queues the run (202): any instance sharing the run store runs it; follow it with `join`. */
    background: (agent: string, request: RunInput, options: { signal?: AbortSignal, idempotencyKey?: string } = {}): Promise<QueuedRun> =>
      this.#json({ method: 'POST', path: `/agents/${encodeURIComponent(agent)}/runs`, body: { ...request, background: true }, signal: options.signal, headers: idempotency(options.idempotencyKey) }),
    /**
     * Runs the agent and yields its events as they come. `onDisconnect` defaults to `continue`, so that a dropped
     * connection does not cancel the run: the stream rejoins it by `Last-Event-ID`. Stopping early (break, an aborted
     * signal) leaves the run going: cancel it with `runs.cancel`.
     */
    stream: (agent: string, request: RunInput, options: StreamOptions = {}): AsyncGenerator<RunStreamEvent, void, undefined> =>
      this.#follow(() => this.#send({
        method: 'POST',
        path: `/agents/${encodeURIComponent(agent)}/runs`,
        body: { onDisconnect: 'continue', ...request, stream: true },
        headers: { accept: 'text/event-stream' },
        signal: options.signal
      }), undefined, 0, options),
    /** A run's events after `after` (default: all of them), then live ones until its end; rejoins as `stream` does. */
    join: (runId: string, options: JoinOptions = {}): AsyncGenerator<RunStreamEvent, void, undefined> =>
      this.#follow(() => this.#events(runId, options.after ?? 0, options.signal), runId, options.after ?? 0, options),
    get: (runId: string, options: { signal?: AbortSignal } = {}): Promise<RunRecord> =>
      this.#json({ path: `/runs/${encodeURIComponent(runId)}`, signal: options.signal }),
    /** Asks the run to stop (202, the record as it was); it ends with `run.failed` CANCELLED. */
    cancel: (runId: string, options: { signal?: AbortSignal } = {}): Promise<RunRecord> =>
      this.#json({ method: 'POST', path: `/runs/${encodeURIComponent(runId)}/cancel`, signal: options.signal })
  }

  readonly sessions = {
    /** The caller's own sessions, most recently active first (`nextCursor` for the next page). */
    list: (query: SessionListQuery = {}, options: { signal?: AbortSignal } = {}): Promise<SessionPage> =>
      this.#json({ path: '/sessions', query, signal: options.signal }),
    create: (request: CreateSessionRequest = {}, options: { signal?: AbortSignal } = {}): Promise<Session> =>
      this.#json({ method: 'POST', path: '/sessions', body: request, signal: options.signal }),
    get: (id: string, options: { signal?: AbortSignal } = {}): Promise<SessionWithMessages> =>
      this.#json({ path: `/sessions/${encodeURIComponent(id)}`, signal: options.signal }),
    delete: async (id: string, options: { signal?: AbortSignal } = {}): Promise<void> => {
      await this.#send({ method: 'DELETE', path: `/sessions/${encodeURIComponent(id)}`, signal: options.signal })
    },
    /** The session's runs, most recent first. */
    runs: (id: string, query: SessionRunsQuery = {}, options: { signal?: AbortSignal } = {}): Promise<RunPage> =>
      this.#json({ path: `/sessions/${encodeURIComponent(id)}/runs`, query, signal: options.signal }),
    /** A chat's messages as the AI SDK's UIMessage[] (to seed `useChat({ messages })`). */
    chatMessages: (agent: string, chatId: string, options: { signal?: AbortSignal } = {}): Promise<UiMessage[]> =>
      this.#json({ path: `/agents/${encodeURIComponent(agent)}/chat/${encodeURIComponent(chatId)}/messages`, signal: options.signal })
  }

  readonly approvals = {
    /** Pending approvals, oldest first. */
    list: async (query: ApprovalListQuery = {}, options: { signal?: AbortSignal } = {}): Promise<Approval[]> =>
      (await this.#json<ApprovalList>({ path: '/approvals', query, signal: options.signal })).approvals,
    get: (id: string, options: { signal?: AbortSignal } = {}): Promise<Approval> =>
      this.#json({ path: `/approvals/${encodeURIComponent(id)}`, signal: options.signal }),
    /** Decides a pending approval: exactly one of concurrent decisions wins, the others are 409 APPROVAL_ALREADY_DECIDED. */
    decide: (id: string, decision: DecideApprovalRequest, options: { signal?: AbortSignal, idempotencyKey?: string } = {}): Promise<Approval> =>
      this.#json({ method: 'POST', path: `/approvals/${encodeURIComponent(id)}`, body: decision, signal: options.signal, headers: idempotency(options.idempotencyKey) })
  }

  /** The response of a request that succeeded (2xx), else an AgentsClientError with the service's code. */
  async #send (request: Request): Promise<Response> {
    const url = new URL(this.#base + request.path)
    for (const [name, value] of Object.entries(request.query ?? {})) if (value !== undefined) url.searchParams.set(name, String(value))
    const headers: Record<string, string> = { ...this.#auth(), ...request.headers }
    if (request.body !== undefined) headers['content-type'] = 'application/json'
    const response = await this.#fetch(url, {
      method: request.method ?? 'GET',
      headers,
      ...(request.body === undefined ? {} : { body: JSON.stringify(request.body) }),
      ...(request.signal === undefined ? {} : { signal: request.signal })
    })
    if (response.ok) return response
    const text = await response.text()
    let body: ErrorResponse | undefined
    try {
      const parsed = JSON.parse(text) as ErrorResponse
      if (typeof parsed?.message === 'string') body = parsed
    } catch {}
    throw new AgentsClientError(response.status, body, response.statusText)
  }

  async #json<T> (request: Request): Promise<T> {
    return await (await this.#send(request)).json() as T
  }

  #auth (): Record<string, string> {
    const { apiKey, token, headers } = this.#options
    return {
      ...(apiKey === undefined ? {} : { 'x-api-key': apiKey }),
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      ...(typeof headers === 'function' ? headers() : headers)
    }
  }

  #events (runId: string, after: number, signal: AbortSignal | undefined): Promise<Response> {
    return this.#send({
      path: `/runs/${encodeURIComponent(runId)}/events`,
      headers: { accept: 'text/event-stream', 'last-event-id': String(after) },
      signal
    })
  }

  /**
   * The events of `open()`'s stream, then — when the connection drops before the run's end, or the server ends the
   * stream with an `error` event (its store failed) — of `/runs/:runId/events` from the last event received: each
   * event once, in order. An answer the service refuses (4xx, 5xx) is not retried: it is thrown.
   */
  async * #follow (open: () => Promise<Response>, knownRunId: string | undefined, after: number, options: StreamOptions): AsyncGenerator<RunStreamEvent, void, undefined> {
    const retries = options.retries ?? 5
    const retryDelayMs = options.retryDelayMs ?? 250
    let runId = knownRunId
    let last = after
    let failures = 0
    // the last event received ends the run: a stream that then ends cleanly is over (a rejoin ends at once)
    let ended = false
    let response: Response | null = await open()
    for (;;) {
      let lost: unknown = null
      if (response === null) lost = new Error('the rejoin failed')
      else {
        try {
          for await (const message of sseMessages(response.body!)) {
            // the follower's own `error` event (no id): its store failed; the rest is to be read again
            if (message.id === undefined) {
              lost = new Error(message.data)
              break
            }
            const event = typed(message)
            if (event.id <= last) continue
            last = event.id
            failures = 0
            if (event.type === 'run.started') runId = event.data.runId
            ended = TERMINAL.has(event.type)
            yield event
          }
        } catch (error) {
          if (options.signal?.aborted === true) throw error
          lost = error
        }
      }
      if (lost === null) {
        if (ended) return
        lost = new Error('the stream ended before the run did')
      }
      if (runId === undefined || failures >= retries) throw new StreamLostError(runId, last, lost)
      failures++
      await sleep(retryDelayMs * 2 ** (failures - 1), options.signal ?? NEVER)
      try {
        response = await this.#events(runId, last, options.signal)
      } catch (error) {
        // the service's answer (the run is gone: 404) is final; a network failure counts as a failed rejoin
        if (error instanceof AgentsClientError || options.signal?.aborted === true) throw error
        response = null
      }
    }
  }
}

function idempotency (key: string | undefined): Record<string, string> | undefined {
  return key === undefined ? undefined : { 'idempotency-key': key }
}

export function createClient (options: ClientOptions): AgentsClient {
  return new AgentsClient(options)
}
