import type { FastifyBaseLogger } from 'fastify'
import type {
  Agent, AgentEvent, AgentResult, ApprovalRequest, Decision, RunContext, StepInfo, TraceContext
} from '../core/types.js'
import type { EndTurn, Message } from '../stores/types.js'
import { startRunTrace } from '../core/tracing.js'
import type { RunTrace } from '../core/tracing.js'
import { CANCELLED_ERROR } from '../stores/run-policy.js'
import { agentEventProblem } from './events.js'
import { STEP_COMPLETED, stepNameProblem } from './steps.js'
import type { JournalSource, JournaledApproval, JournaledStep } from './steps.js'
import { StepMismatchError } from '../core/errors.js'
import type { RunResult } from '../../schemas/runs.js'

export type RunFailureCode = 'AGENT_ERROR' | 'AGENT_TIMEOUT' | 'CANCELLED' | 'SHUTDOWN' | 'INSTANCE_LOST' | 'STEP_MISMATCH'
export type RunAbortCode = Exclude<RunFailureCode, 'AGENT_ERROR'>
/**
 * Why a run stops here without ending: handed to another instance at a drain, taken over after its lease lapsed, or
 * its end could not be stored while its lease lasted (whoever finds the lease lapsed ends it, or runs it again).
 */
export type RunDetachCode = 'SHUTDOWN' | 'INSTANCE_LOST' | 'STORE_UNAVAILABLE'

/** One event of a run: `json` is `data` serialized once, for every transport and the log alike. */
export interface RunEvent {
  seq: number
  type: string
  data: unknown
  json: string
}

/** Who holds a run's lease, and until when by this instance's clock (renewed while the run is in flight). */
export interface LeaseHolder {
  readonly leaseUntil: number
}

/** Where a run's events are kept (the run store's log): the terminal event is kept before anyone is sent it. */
export interface RunSink {
  event(event: RunEvent): void
  /**
   * Stores the terminal event and the end (tried again through an outage while `lease` lasts) and resolves with the
   * terminal event as stored — the one to send, which may not be `event` (the store ended the run otherwise: a
   * cancel asked for first, another instance) — or, when there is none to send, why: `INSTANCE_LOST`, the run is
   * not this instance's to end any more (it goes on elsewhere); `STORE_UNAVAILABLE`, its end could not be stored
   * while its lease lasted. Never rejects.
   */
  finish(event: RunEvent, outcome: Exclude<RunOutcome, { status: 'detached' }>, lease: LeaseHolder, turn?: EndTurn): Promise<RunEvent | 'INSTANCE_LOST' | 'STORE_UNAVAILABLE'>
  /**
   * Resolves once the log holds the event of `seq` (a write that failed is tried again while `lease` lasts); rejects
   * when it cannot: the run is another instance's now, or the store stayed away. A sink without it stores at once.
   */
  durable?(seq: number, lease: LeaseHolder): Promise<void>
  /** The run's result is in and its end follows (`finish`, once what it leaves behind is persisted): told once. */
  ending?(): void
}

export type { RunResult }

/** The one consumer of a run's events: an SSE stream, a WebSocket connection (a JSON run has none). */
export interface RunListener {
  /** Every event in order, seq from 1; the terminal one (run.completed or run.failed) comes last. */
  runEvent(event: RunEvent): void
  /** Once the run has settled, after its terminal event (before `done` resolves). */
  runSettled?(outcome: RunOutcome): void
  /** Before an iterable agent is asked for more: a promise to wait on while the consumer does not keep up. */
  backpressure?(): Promise<void> | null
}

export type RunOutcome =
  | { status: 'completed', result: RunResult, durationMs: number }
  | { status: 'failed', code: RunFailureCode, message: string, error: unknown, durationMs: number }
  /** stopped on this instance without an end: the run goes on elsewhere (its log has no terminal event from here) */
  | { status: 'detached', code: RunDetachCode, message: string, durationMs: number }

/** What a run can do beyond the agent itself; capabilities.ts gives the store-backed ones. */
export interface RunCapabilities {
  requestApproval(run: AgentRun, request: ApprovalRequest): Promise<Decision>
  checkpoint(run: AgentRun, state: unknown): Promise<void>
  /**
   * Persists what a completed run leaves behind (session turn, checkpoint removal) before `run.completed`; resolves
   * with the session's turn when it is left to the end's write instead (the sink's `finish`, RunStore.turnWithEnd).
   */
  finish(run: AgentRun, result: RunResult): Promise<EndTurn | undefined | void>
  /** The completed steps of some logs (the run store's), the first source's first; without it, a run has no journal to replay. */
  journal?(sources: readonly JournalSource[]): Promise<Map<number, JournaledStep>>
  /** The approvals an earlier attempt of the run asked for, read from its own log up to `lastSeq`. */
  approvals?(runId: string, lastSeq: number): Promise<JournaledApproval[]>
}

export interface RunOptions {
  runId: string
  agentName: string
  agent: Agent
  /** the run request's input: what the run's spec and the session's history keep */
  input: unknown
  /** what the agent's `run` gets: the input as its schema gave it back (a Standard Schema's output) */
  agentInput: unknown
  /** null for an ephemeral run (store: false) */
  sessionId: string | null
  principal: string
  requestId: string
  trace: TraceContext
  /** the session's earlier messages; undefined for a new session (ctx.history is then an empty array) */
  history: Message[] | undefined
  /** the run request's metadata; undefined when it sent none (ctx.metadata is then an empty object) */
  metadata: Record<string, unknown> | undefined
  resume?: { step: number, state: unknown }
  timeoutMs: number | null
  exposeErrors: boolean
  log: FastifyBaseLogger
  capabilities: RunCapabilities
  /** the run's log in the run store */
  sink: RunSink | null
  /** 'continue': the run goes on when its client goes away */
  onDisconnect: 'cancel' | 'continue'
  /** the run's attempt, from 1 (a resumed or requeued run is its next attempt) */
  attempt: number
  /** the seq of the run's last event so far: a resumed run goes on from there, in the same log */
  lastSeq: number
  /** any instance may run it (a background or `continue` run): at a drain it is handed off rather than ended */
  detachable: boolean
  /** when its lease in the run store ends, by this instance's clock (absent: a run held by no lease) */
  leaseUntil?: number
  /** the schedule whose fire the run is: ctx.schedule */
  schedule?: { id: string, scheduledFor: string } | undefined

  /** where its completed steps are read from beside its own log before this attempt (`lastSeq`): the run it replays */
  journal?: JournalSource[]
}

/** The reason a run's signal carries: an Error whose `code` says why the run stopped. */
export class RunAbortedError extends Error {
  readonly code: RunAbortCode
  constructor (code: RunAbortCode, message: string) {
    super(message)
    this.name = 'RunAbortedError'
    this.code = code
  }
}

const abortMessages: Record<RunAbortCode, string> = {
  AGENT_TIMEOUT: '',
  STEP_MISMATCH: '',
  CANCELLED: CANCELLED_ERROR.message,
  SHUTDOWN: 'The service is shutting down',
  INSTANCE_LOST: 'The instance running the run was lost'
}

const detachMessages: Record<RunDetachCode, string> = {
  SHUTDOWN: 'The service is shutting down: the run goes on on another instance',
  INSTANCE_LOST: 'The run was taken over by another instance',
  STORE_UNAVAILABLE: 'The run store could not store the run\'s end: follow it at /v1/runs/:runId/events'
}

function tokens (value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0
}

function isAsyncIterable (value: unknown): value is AsyncIterable<string | AgentEvent> {
  return typeof (value as AsyncIterable<unknown> | null)?.[Symbol.asyncIterator] === 'function'
}

function isAgentResult (value: unknown): value is AgentResult {
  return typeof value === 'object' && value !== null && 'output' in value
}

// `ctx.signal` is an accessor, so that the AbortController is made only when an agent looks at it. One
// shared getter, added with defineProperty: a getter written in the object literal is a new function per
// run, which puts every ctx in V8's dictionary mode.
const RUN = Symbol('fastify-agents.run')

/**
 * An own, enumerable accessor on ctx whose value comes from the run on first look; assigning it turns it back
 * into the plain, writable property it stands for (an agent may hand its own signal on to code it calls).
 */
function lazyProperty (name: string, get: (run: AgentRun) => unknown): PropertyDescriptor {
  return {
    get (this: { [RUN]: AgentRun }): unknown { return get(this[RUN]) },
    set (this: object, value: unknown): void {
      Object.defineProperty(this, name, { value, writable: true, enumerable: true, configurable: true })
    },
    enumerable: true,
    configurable: true
  }
}

type ContextMethod = 'emit' | 'requestApproval' | 'checkpoint' | 'step'

const makeMethod: { [name in ContextMethod]: (run: AgentRun) => RunContext[name] } = {
  emit: (run) => (type, data) => {
    const problem = typeof type === 'string' ? agentEventProblem(type, data) : 'the event type must be a string'
    if (problem !== null) throw new TypeError(`ctx.emit: ${problem}`)
    run.emit(type, data)
  },
  requestApproval: (run) => (request) => run.options.capabilities.requestApproval(run, request),
  checkpoint: (run) => (state) => run.options.capabilities.checkpoint(run, state),
  step: (run) => (name, fn) => run.step(name, fn)
}

// Accessors shared by every ctx, so that every ctx keeps one shape (and stays in V8's fast mode). An idle run
// whose agent never calls emit(), requestApproval() or checkpoint() holds no closure for them; a run without
// metadata, or in a new session, gets its empty object or array when the agent first looks.
const contextAccessors = {
  signal: lazyProperty('signal', (run) => run.signal),
  metadata: lazyProperty('metadata', (run) => run.options.metadata ??= {}),
  history: lazyProperty('history', (run) => run.options.history ??= []),
  emit: lazyProperty('emit', (run) => run.contextMethod('emit')),
  requestApproval: lazyProperty('requestApproval', (run) => run.contextMethod('requestApproval')),
  checkpoint: lazyProperty('checkpoint', (run) => run.contextMethod('checkpoint')),
  step: lazyProperty('step', (run) => run.contextMethod('step'))
} as const satisfies PropertyDescriptorMap

/**
 * One run of one agent. `done` settles at the earliest of: the agent finishing, the agent failing,
 * or an abort (timeout, disconnect, cancel, shutdown) — at the abort, even when the agent ignores its
 * signal. Events get sequence numbers from 1; nothing is emitted after the terminal event.
 */
export class AgentRun {
  readonly options: RunOptions
  // Created on first use: an agent that answers at once never looks at its signal. The reason is kept for
  // a late first look.
  #controller: AbortController | null = null
  #abortReason: RunAbortedError | null = null
  /** while an iterable agent runs: abort() tells it to stop directly, with no AbortSignal listener */
  #stopIterator: (() => void) | null = null
  #methods: Partial<Pick<RunContext, ContextMethod>> | null = null
  /** the number of `ctx.step` calls so far: the next one's index */
  #steps = 0
  /** the completed steps of earlier attempts, read on the first `ctx.step` */
  #journal: Promise<Map<number, JournaledStep>> | null = null
  /** the number of `ctx.requestApproval` calls so far, and the approvals earlier attempts asked for (read on the first) */
  #approvals = 0
  #earlierApprovals: Promise<JournaledApproval[]> | null = null
  #seq = 0
  #settled = false
  /** the agent returned its result, which is being persisted: a drain no longer stops the run */
  #finishing = false
  // null for a JSON run: nobody reads its events, so none is built
  #listener: RunListener | null = null
  #onSettled: ((run: AgentRun, outcome: RunOutcome) => void) | null
  // `done` is made on first use: a streamed run reports through its listener, and nobody awaits it
  #done: Promise<RunOutcome> | null = null
  #resolve: ((outcome: RunOutcome) => void) | null = null
  #outcome: RunOutcome | null = null
  #terminal: RunEvent | null = null
  #timer: NodeJS.Timeout | undefined
  #started = 0
  #firstEventMs = -1
  #text = ''
  // null without an OpenTelemetry SDK registered
  #trace: RunTrace | null = null
  /** set once ctx.checkpoint() has saved something (or the run resumed one) */
  checkpointed: boolean
  /** when its lease ends unless renewed (the worker fences the run off before then) */
  leaseUntil: number

  /** `onSettled`: told of the outcome before `done` resolves (the registry's bookkeeping, with no promise reaction) */
  constructor (options: RunOptions, onSettled: ((run: AgentRun, outcome: RunOutcome) => void) | null = null) {
    this.options = options
    this.#seq = options.lastSeq
    this.#onSettled = onSettled
    this.checkpointed = options.resume !== undefined
    this.leaseUntil = options.leaseUntil ?? Infinity
  }

  get runId (): string { return this.options.runId }
  get agentName (): string { return this.options.agentName }
  get sessionId (): string | null { return this.options.sessionId }

  /** Settles with the outcome (never rejects). */
  get done (): Promise<RunOutcome> {
    if (this.#done === null) {
      this.#done = this.#outcome !== null
        ? Promise.resolve(this.#outcome)
        : new Promise((resolve) => { this.#resolve = resolve })
    }
    return this.#done
  }

  get signal (): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController()
      if (this.#abortReason !== null) this.#controller.abort(this.#abortReason)
    }
    return this.#controller.signal
  }

  /** Whether the run has a consumer of its events (a JSON run has none). */
  get streamed (): boolean {
    return this.#listener !== null
  }

  /**
   * Subscribes the one consumer of the events (an SSE stream, a WebSocket) before `start()`. An object
   * rather than callbacks: an idle stream holds no closures for it.
   */
  listen (listener: RunListener): void {
    this.#listener = listener
  }

  /** The service's own path (run.*, approval.*, checkpoint.*): unchecked. An agent's events come through ctx.emit or a yield. */
  emit (type: string, data?: unknown): void {
    if (this.#settled) return
    // checked on the way in (ctx.emit, a yield): its text is a string
    if (type === 'message.delta') this.#text += (data as { text: string }).text
    this.#deliver(this.#event(type, data))
  }

  /** A yielded string: its JSON is built around the string's own (no object to walk). */
  #delta (text: string): void {
    this.#text += text
    this.#deliver({ seq: ++this.#seq, type: 'message.delta', data: { text }, json: `{"text":${JSON.stringify(text)}}` })
  }

  #deliver (event: RunEvent): void {
    const type = event.type
    const data = event.data
    if (this.#firstEventMs < 0 && type !== 'run.started') this.#firstEventMs = performance.now() - this.#started
    this.#trace?.event(type, data)
    this.options.sink?.event(event)
    // the log may have found the run taken over by another instance, and stopped it here
    if (!this.#settled) this.#listener?.runEvent(event)
  }

  /** From the start to the first event after `run.started` (the terminal one if none came before); -1 before it. */
  get timeToFirstEventMs (): number {
    return this.#firstEventMs
  }

  #event (type: string, data: unknown): RunEvent {
    const value = data === undefined ? null : data
    // serialized first, so that data that cannot be (a cycle, a BigInt) throws before a seq is used
    const json = JSON.stringify(value)
    return { seq: ++this.#seq, type, data: value, json }
  }

  /** The terminal event once the run has settled (its JSON is the body of a JSON run's answer). */
  get terminal (): RunEvent | null {
    return this.#terminal
  }

  start (): this {
    const { options } = this
    this.#started = performance.now()
    this.#trace = startRunTrace(this)
    if (options.timeoutMs !== null) {
      // Not unref()ed: a deadline is work in flight (the 504 is owed even with nothing else on the loop),
      // and drain clears it by aborting the run.
      this.#timer = setTimeout(() => this.abort('AGENT_TIMEOUT'), options.timeoutMs)
    }
    this.emit('run.started', { runId: this.runId, agent: this.agentName, sessionId: this.sessionId, requestId: options.requestId, traceId: options.trace.traceId, attempt: options.attempt })
    // one reaction with two handlers (not then + catch): what a waiting run holds is one promise less
    this.#execute().then((result) => this.#finish(result), (err: unknown) => this.#fail('AGENT_ERROR', err))
    return this
  }

  /** What a completed run leaves behind is persisted (capabilities.finish) before `run.completed`. */
  #finish (result: unknown): void {
    if (this.#settled) return
    try {
      if (!isAgentResult(result)) throw new TypeError(`Agent "${this.agentName}" must resolve to { output }`)
      const runResult = this.#toRunResult(result)
      this.#finishing = true
      this.options.sink?.ending?.()
      this.options.capabilities.finish(this, runResult).then((turn) => this.#complete(runResult, turn ?? undefined)).catch((err: unknown) => this.#fail('AGENT_ERROR', err))
    } catch (err) {
      // a result whose getters throw, a finish() that throws before returning its promise
      this.#fail('AGENT_ERROR', err)
    }
  }

  /**
   * Stops the agent here without ending the run: no terminal event, no end in the store (whoever requeued or took
   * over the run goes on with it). Its client's stream closes; it can rejoin the run's log.
   */
  detach (code: Exclude<RunDetachCode, 'STORE_UNAVAILABLE'>, lost = false): boolean {
    // A run whose result is in completes here (a hand-off, or a fence while its lease may still be this instance's:
    // the agent has stopped, nothing runs twice), unless the store says it is another instance's now (`lost`).
    if (this.#settled || (this.#finishing && !lost)) return false
    this.#settled = true
    clearTimeout(this.#timer)
    const reason = new RunAbortedError(code, detachMessages[code])
    this.#abortReason = reason
    this.#stopIterator?.()
    this.#controller?.abort(reason)
    this.#close({ status: 'detached', code, message: reason.message, durationMs: performance.now() - this.#started })
    return true
  }

  abort (code: RunAbortCode, why?: string): void {
    // a drain lets a run whose result is in complete (its deadline, or a cancel, still ends it)
    if (this.#settled || (this.#finishing && code === 'SHUTDOWN')) return
    const message = why ?? (code === 'AGENT_TIMEOUT'
      ? `Agent "${this.agentName}" did not finish within ${this.options.timeoutMs} ms`
      : abortMessages[code])
    const reason = new RunAbortedError(code, message)
    this.#abortReason = reason
    this.#fail(code, reason)
    this.#stopIterator?.()
    this.#controller?.abort(reason)
  }

  #context (): RunContext {
    const { options } = this
    const ctx = {
      runId: this.runId,
      agent: this.agentName,
      sessionId: this.sessionId,
      principal: options.principal,
      requestId: options.requestId,
      trace: options.trace,
      log: options.log,
      [RUN]: this
    } as Omit<RunContext, 'signal' | 'metadata' | 'history' | ContextMethod> & Partial<Pick<RunContext, 'resume'>> & { [RUN]: AgentRun }
    // One defineProperty per accessor: defineProperties(ctx, map) collects every descriptor into a list first.
    Object.defineProperty(ctx, 'signal', contextAccessors.signal)
    Object.defineProperty(ctx, 'metadata', contextAccessors.metadata)
    Object.defineProperty(ctx, 'history', contextAccessors.history)
    Object.defineProperty(ctx, 'emit', contextAccessors.emit)
    Object.defineProperty(ctx, 'requestApproval', contextAccessors.requestApproval)
    Object.defineProperty(ctx, 'checkpoint', contextAccessors.checkpoint)
    Object.defineProperty(ctx, 'step', contextAccessors.step)
    if (options.resume !== undefined) ctx.resume = options.resume
    if (options.schedule !== undefined) (ctx as { schedule?: RunContext['schedule'] }).schedule = options.schedule
    return ctx as unknown as RunContext
  }

  /**
   * `ctx.step` (docs/durable-agents.md): a step that an earlier attempt completed gives its journaled output back, and
   * `fn` is not called; else `fn` runs, and its output is stored in the log (`step.completed`) before it is returned.
   * The output is returned as its JSON (what a later attempt would get). The index counts the run's steps in the
   * order they are called, so steps run at once (Promise.all) keep theirs.
   */
  async step<T> (name: string, fn: (info: StepInfo) => T | Promise<T>): Promise<T> {
    const problem = stepNameProblem(name) ?? (typeof fn === 'function' ? null : 'fn must be a function')
    if (problem !== null) throw new TypeError(`ctx.step: ${problem}`)
    const index = this.#steps++
    if (this.#abortReason !== null) throw this.#abortReason
    const done = (await (this.#journal ??= this.#readJournal())).get(index)
    if (done !== undefined) {
      if (done.name !== name) {
        const error = new StepMismatchError(index, name, done.name)
        this.abort('STEP_MISMATCH', error.message)
        throw error
      }
      // a replay's steps come from another run's log: written to this one's too, for its own later attempts
      if (done.foreign === true) await this.#journalStep(name, index, done.json)
      return JSON.parse(done.json) as T
    }
    const output = await fn({ attempt: this.options.attempt, idempotencyKey: `${this.runId}:${index}` })
    const json = JSON.stringify(output === undefined ? null : output)
    await this.#journalStep(name, index, json)
    return JSON.parse(json) as T
  }

  /** A completed step's event, built around its output's JSON, stored before the step returns. */
  async #journalStep (name: string, index: number, json: string): Promise<void> {
    // stopped meanwhile (handed off, taken over, cancelled): the step is not this attempt's to journal
    if (this.#abortReason !== null || this.#settled) throw this.#abortReason ?? new RunAbortedError('CANCELLED', abortMessages.CANCELLED)
    const event: RunEvent = {
      seq: ++this.#seq,
      type: STEP_COMPLETED,
      data: { name, index, output: JSON.parse(json) },
      json: `{"name":${JSON.stringify(name)},"index":${index},"output":${json}}`
    }
    this.#deliver(event)
    await this.options.sink?.durable?.(event.seq, this)
  }

  #readJournal (): Promise<Map<number, JournaledStep>> {
    const { options } = this
    const sources = options.lastSeq > 0 ? [{ runId: this.runId, lastSeq: options.lastSeq }, ...options.journal ?? []] : options.journal ?? []
    const read = options.capabilities.journal
    return sources.length === 0 || read === undefined ? Promise.resolve(new Map()) : read(sources)
  }

  /**
   * The approval an earlier attempt of the run asked for at this `ctx.requestApproval` call's index, if any: a
   * requeued or resumed run waits for it, or gets its decision back, rather than asking again (docs/durable-agents.md).
   */
  async earlierApproval (): Promise<JournaledApproval | undefined> {
    const index = this.#approvals++
    const { lastSeq, capabilities } = this.options
    if (lastSeq === 0 || capabilities.approvals === undefined) return undefined
    return (await (this.#earlierApprovals ??= capabilities.approvals(this.runId, lastSeq)))[index]
  }

  /** `ctx.emit`, `ctx.requestApproval`, `ctx.checkpoint`, `ctx.step`: made on an agent's first look, one of each per run. */
  contextMethod<N extends ContextMethod> (name: N): RunContext[N] {
    this.#methods ??= {}
    return (this.#methods[name] ??= makeMethod[name](this))
  }

  // Not an async function: a promise agent's result goes straight to start()'s chain. Each run that waits
  // (an idle SSE stream, a slow model) would otherwise hold one more suspended frame and its promises.
  #execute (): Promise<unknown> {
    let returned: ReturnType<Agent['run']>
    try {
      const trace = this.#trace
      returned = trace === null ? this.options.agent.run(this.options.agentInput, this.#context()) : trace.within(() => this.options.agent.run(this.options.agentInput, this.#context()))
    } catch (err) {
      return Promise.reject(err)
    }
    return isAsyncIterable(returned) ? this.#iterate(returned) : Promise.resolve(returned)
  }

  async #iterate (returned: AsyncIterable<string | AgentEvent>): Promise<AgentResult> {
    const iterator = returned[Symbol.asyncIterator]()
    // An agent that ignores its signal is still told to stop: return() runs its finally blocks. abort() calls
    // this itself: a listener on the run's signal would create an AbortController for every streamed run.
    this.#stopIterator = () => { iterator.return?.()?.catch(() => {}) }
    for (;;) {
      const wait = this.#listener?.backpressure?.()
      if (wait !== null && wait !== undefined) {
        await wait
        if (this.#settled) return { output: null }
      }
      // a generator's body runs in the context of whoever calls next(): the run span's, with a trace
      const step = await (this.#trace === null ? iterator.next() : this.#trace.within(() => iterator.next()))
      if (this.#settled) return { output: null }
      if (step.done === true) {
        this.#stopIterator = null
        return isAgentResult(step.value) ? step.value : { output: this.#text }
      }
      const value = step.value
      if (typeof value === 'string') this.#delta(value)
      else if (typeof value?.type === 'string') {
        const problem = agentEventProblem(value.type, value.data)
        if (problem !== null) throw new TypeError(`Agent "${this.agentName}" yielded an event it may not: ${problem}`)
        this.emit(value.type, value.data)
      }
      else throw new TypeError(`Agent "${this.agentName}" yielded ${JSON.stringify(value)}: expected a string or { type, data }`)
    }
  }

  #toRunResult (result: AgentResult): RunResult {
    const inputTokens = tokens(result.usage?.inputTokens)
    const outputTokens = tokens(result.usage?.outputTokens)
    return {
      runId: this.runId,
      agent: this.agentName,
      sessionId: this.sessionId,
      status: 'completed',
      output: result.output === undefined ? null : result.output,
      usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens },
      finishReason: typeof result.finishReason === 'string' ? result.finishReason : 'stop',
      requestId: this.options.requestId,
      traceId: this.options.trace.traceId
    }
  }

  #complete (runResult: RunResult, turn: EndTurn | undefined): void {
    if (this.#settled) return
    this.#end('run.completed', runResult, { status: 'completed', result: runResult, durationMs: performance.now() - this.#started }, turn)
  }

  #fail (code: RunFailureCode, error: unknown): void {
    if (this.#settled) return
    let message: string
    if (code !== 'AGENT_ERROR') message = (error as RunAbortedError).message
    else {
      this.options.log.error({ err: error, runId: this.runId, agent: this.agentName }, 'agent failed')
      message = this.options.exposeErrors ? String((error as Error)?.message ?? error) : 'Internal Server Error'
    }
    this.#end('run.failed', { error: { code, message }, traceId: this.options.trace.traceId }, { status: 'failed', code, message, error, durationMs: performance.now() - this.#started })
  }

  /** No event after the terminal one; it is stored (the sink) before it is delivered and the run settles. */
  #end (type: string, data: unknown, outcome: Exclude<RunOutcome, { status: 'detached' }>, turn?: EndTurn): void {
    this.#settled = true
    clearTimeout(this.#timer)
    let event: RunEvent
    try {
      event = this.#event(type, data)
    } catch (err) {
      // a result whose output cannot be serialized: the run fails instead, with an event that can
      this.options.log.error({ err, runId: this.runId, agent: this.agentName }, 'the run result cannot be serialized')
      const message = this.options.exposeErrors ? String((err as Error).message) : 'Internal Server Error'
      outcome = { status: 'failed', code: 'AGENT_ERROR', message, error: err, durationMs: outcome.durationMs }
      event = this.#event('run.failed', { error: { code: 'AGENT_ERROR', message }, traceId: this.options.trace.traceId })
    }
    this.#terminal = event
    if (this.#firstEventMs < 0) this.#firstEventMs = performance.now() - this.#started
    const sink = this.options.sink
    if (sink === null) this.#settle(event, outcome)
    else void sink.finish(event, outcome, this, turn).then((kept) => this.#stored(event, outcome, kept))
  }

  /** The run's client is sent the terminal event the log kept, and none when there is none to send (the run stops here). */
  #stored (event: RunEvent, outcome: Exclude<RunOutcome, { status: 'detached' }>, kept: RunEvent | 'INSTANCE_LOST' | 'STORE_UNAVAILABLE'): void {
    if (typeof kept === 'string') {
      this.#terminal = null
      this.#close({ status: 'detached', code: kept, message: detachMessages[kept], durationMs: outcome.durationMs })
      return
    }
    if (kept !== event) {
      this.#terminal = kept
      outcome = storedOutcome(kept, outcome.durationMs)
    }
    this.#settle(kept, outcome)
  }

  #settle (event: RunEvent, outcome: RunOutcome): void {
    this.#listener?.runEvent(event)
    this.#close(outcome)
  }

  #close (outcome: RunOutcome): void {
    this.#trace?.end(outcome)
    this.#onSettled?.(this, outcome)
    this.#listener?.runSettled?.(outcome)
    this.#outcome = outcome
    this.#resolve?.(outcome)
  }
}

/** The outcome a stored terminal event tells (a run.completed's result, a run.failed's error). */
function storedOutcome (event: RunEvent, durationMs: number): Exclude<RunOutcome, { status: 'detached' }> {
  if (event.type === 'run.completed') return { status: 'completed', result: event.data as RunResult, durationMs }
  const { code, message } = (event.data as { error: { code: RunFailureCode, message: string } }).error
  return { status: 'failed', code, message, error: null, durationMs }
}
