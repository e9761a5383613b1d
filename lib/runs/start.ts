import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import {
  AgentNotFoundError, EphemeralBackgroundError, EphemeralSessionError, RunCancelledWhileQueuedError, RunInProgressError, RunNotFoundError,
  RunSessionMismatchError, SessionBusyError, SessionNotFoundError
} from '../core/errors.js'
import { randomId } from '../core/ids.js'
import type { RunHost } from './host.js'
import type { Agent, TraceContext } from '../core/types.js'
import { iso } from '../stores/common.js'
import { CANCELLED_ERROR } from '../stores/run-policy.js'
import type { Message, NewRun, RunRecord, RunReplay, RunSpec } from '../stores/types.js'
import type { Multitask, OnDisconnect } from '../../schemas/runs.js'
import { RunLog } from './log.js'
import type { AgentRun, RunOptions, RunSink } from './run.js'
import { ownedSession, withGiven } from './sessions.js'

/** What a run request asks for beyond the agent, whichever transport (HTTP, SSE, WebSocket) it came over. */
export interface RunRequestFields {
  input: unknown
  sessionId?: string | undefined
  resumeRunId?: string | undefined
  metadata?: Record<string, unknown> | undefined
  onDisconnect?: OnDisconnect | undefined
  multitask?: Multitask | undefined
  store?: boolean | undefined
}

/** Who asks, and where the run's ids come from (a RequestContext fits). */
export interface RunCaller {
  readonly principal: string
  readonly requestId: string
  readonly trace: TraceContext
}

export interface PrepareRunOptions {
  service: RunHost
  agent: string
  request: RunRequestFields
  caller: RunCaller
  log: FastifyBaseLogger
  /** the HTTP request whose audit entry names the run (a WebSocket run has its own, the upgrade's) */
  auditedRequest?: FastifyRequest
  /** aborted when the client goes away while the run waits for its session (multitask: 'enqueue') */
  signal?: AbortSignal
  /** how a validation message names the input: `body/input` (the default) or `message/input` (WebSocket) */
  inputPath?: string
  /** messages the request gives beside the session's own (a chat completion's earlier ones): ctx.history ends with them */
  history?: Message[]
  /** kept with the run for the front end that starts it (RunSpec.frontend), never given to the agent */
  frontend?: Record<string, unknown>
  /** the run's id, chosen beforehand (a schedule's fire claims it before the run is stored) */
  runId?: string
  /** the schedule whose fire the run is (RunSpec.schedule, ctx.schedule) */
  schedule?: { id: string, scheduledFor: string }

  /** a replay of an ended run (lib/runs/rewind.ts): starts from its checkpoint, its completed steps replayed */
  replay?: RunReplay
}

/**
 * Resolves a run request into a registered run that is not started yet: the caller subscribes with
 * `run.listen()` and then calls `run.start()`. Looks the agent up, checks the input against its schema, loads
 * the checkpoint of a resumed run, finds (or creates) the session, takes it as `multitask` says and stores the
 * run's record. Throws AGENT_NOT_FOUND, FST_ERR_VALIDATION, RUN_IN_PROGRESS, RUN_NOT_FOUND, RUN_SESSION_MISMATCH,
 * SESSION_NOT_FOUND, SESSION_BUSY.
 */
export async function prepareRun (options: PrepareRunOptions): Promise<AgentRun> {
  return agentRunOf(options, await resolveRun(options, 'foreground'))
}

/**
 * A background run started on this instance at once (a schedule's fire, docs/schedules.md): checked and stored as
 * any background run is, but `running` under this instance's lease (recovered as a background run is, should the
 * instance go) instead of queued for whichever instance claims it; queued as any background run when its session
 * is busy. Resolves with its record and, when it runs here, the run to start (no client listens).
 */
export async function startBackgroundRun (options: PrepareRunOptions): Promise<{ record: RunRecord, run: AgentRun | null }> {
  const resolved = await resolveRun(options, 'here')
  const { record } = resolved.newRun
  return { record, run: record.status === 'running' ? agentRunOf(options, resolved) : null }
}

/** The registered run of a request resolved and stored running here: not started yet. */
function agentRunOf (options: PrepareRunOptions, resolved: ResolvedRun): AgentRun {
  const { service, request, caller } = options
  const { settings } = service
  const { agent, agentInput, newRun, history, resume } = resolved
  const { record, ephemeral } = newRun
  const { runId, sessionId } = record
  return service.runs.create({
    runId,
    agentName: record.agent,
    agent,
    input: request.input,
    agentInput,
    sessionId,
    principal: caller.principal,
    requestId: caller.requestId,
    trace: caller.trace,
    history: withGiven(history, options.history),
    metadata: request.metadata,
    resume,
    timeoutMs: settings.requestTimeoutMs,
    exposeErrors: settings.exposeErrors,
    log: options.log,
    capabilities: service.capabilities,
    sink: withQuota(service, caller.principal, runId, new RunLog({
      store: settings.runStore,
      runId,
      retentionMs: ephemeral ? EPHEMERAL_RETENTION_MS : settings.runRetentionMs,
      log: options.log,
      owner: service.worker.owner,
      onFailure: () => { service.stats.count('runLogFailures') },
      onLost: () => { service.runs.get(runId)?.detach('INSTANCE_LOST', true) },
      onStored: (events) => { service.eventsStored({ runId, agent: record.agent, sessionId, principal: caller.principal }, events) }
    })),
    onDisconnect: record.background ? 'continue' : request.onDisconnect ?? 'cancel',
    attempt: record.attempt,
    lastSeq: record.lastSeq,
    detachable: newRun.detachable,
    leaseUntil: newRun.lease?.until,
    schedule: options.schedule,
    journal: replayJournal(options.replay)
  })
}

/** Where a replay's steps come from: the log of the run it replays, up to where that run ended. */
export function replayJournal (replay: RunReplay | undefined): RunOptions['journal'] {
  return replay === undefined ? undefined : [{ runId: replay.runId, lastSeq: replay.lastSeq, foreign: true }]
}

/**
 * A background run (docs/runs.md): checked and stored as `queued` like any run request (the agent, the input, the session
 * as `multitask` says), then run by whichever instance sharing the run store has room. Resolves with its record.
 */
export async function queueRun (options: PrepareRunOptions): Promise<RunRecord> {
  const { newRun } = await resolveRun(options, 'background')
  return newRun.record
}

/**
 * How a run is stored: running here for its client (`foreground`), queued for any instance (`background`), or a
 * background run running here (`here`).
 */
type RunMode = 'foreground' | 'background' | 'here'

/** What a run request resolves to before it runs: checked, its session found or made, its record stored. */
async function resolveRun (options: PrepareRunOptions, mode: RunMode): Promise<ResolvedRun> {
  const { service, agent: name, request, caller, auditedRequest } = options
  const background = mode !== 'foreground'
  const { settings } = service
  const agent = settings.agents.get(name)
  if (agent === undefined) throw new AgentNotFoundError(name)
  if (auditedRequest !== undefined) service.audit.note(auditedRequest, { agent: name })
  // before anything is loaded, created or registered: a bad input leaves no trace but its 400
  // (no await for a check that is not async: an await of nothing still costs the run a tick)
  const validate = settings.agentSchemas.get(name)?.validate
  let agentInput = validate === undefined ? request.input : validate(request.input, options.inputPath ?? 'body/input')
  if (agentInput instanceof Promise) agentInput = await agentInput
  const ephemeral = request.store === false
  if (ephemeral && (request.sessionId !== undefined || request.resumeRunId !== undefined)) throw new EphemeralSessionError()
  if (ephemeral && background) throw new EphemeralBackgroundError()

  let runId: string = options.runId ?? randomId()
  let sessionId: string | null = request.sessionId ?? null
  let resume: { step: number, state: unknown } | undefined = options.replay === undefined ? undefined : { step: options.replay.step, state: options.replay.state }
  let history: Message[] | undefined
  if (request.resumeRunId !== undefined) {
    // Ownership first (docs/auth-and-traffic.md): another principal's run, in flight or ended, is not found, never in progress.
    const resumeRunId = request.resumeRunId
    const checkpoint = await settings.checkpointStore.load(resumeRunId)
    if (checkpoint === null || checkpoint.agent !== name) {
      // in flight here before its first checkpoint: in progress, to its owner only
      if (service.runs.get(resumeRunId)?.options.principal === caller.principal) throw new RunInProgressError(resumeRunId)
      throw new RunNotFoundError(resumeRunId)
    }
    // A resumed run belongs to its session: without it (expired, or someone else's), there is nothing to resume.
    const session = await ownedSession(settings.sessionStore, checkpoint.sessionId, caller.principal)
    if (session === null) throw new RunNotFoundError(resumeRunId)
    if (sessionId !== null && sessionId !== checkpoint.sessionId) throw new RunSessionMismatchError(resumeRunId)
    if (service.runs.has(resumeRunId)) throw new RunInProgressError(resumeRunId)
    runId = checkpoint.runId
    sessionId = checkpoint.sessionId
    resume = { step: checkpoint.step, state: checkpoint.state }
    history = session.messages
  }

  // the quotas (docs/auth-and-traffic.md) once the run's id is known, before anything of it is stored: a refusal leaves nothing behind
  // (without quotas, no await: an await of nothing still costs the run a tick)
  const admitted = service.quotas !== null && await service.quotas.admit(caller.principal, runId)
  try {
    return await storeRun(options, mode, { agent, agentInput, runId, sessionId, resume, history, ephemeral })
  } catch (err) {
    // not a resume that lost to the same run in progress: that run holds the slot
    if (admitted && !(err instanceof RunInProgressError)) await service.quotas!.release(caller.principal, runId)
    throw err
  }
}

interface ResolvedRun {
  agent: Agent
  /** what the agent's run gets: the input as its schema gave it back */
  agentInput: unknown
  newRun: NewRun
  history: Message[] | undefined
  resume: { step: number, state: unknown } | undefined
}

/** The rest of resolveRun, once the run is admitted: its session found or made, its record stored. */
async function storeRun (options: PrepareRunOptions, mode: RunMode, resolved: {
  agent: Agent, agentInput: unknown, runId: string, sessionId: string | null, resume: { step: number, state: unknown } | undefined,
  history: Message[] | undefined, ephemeral: boolean
}): Promise<ResolvedRun> {
  const { service, agent: name, request, caller, auditedRequest } = options
  const { settings } = service
  const { agent, agentInput, runId, resume, ephemeral } = resolved
  const background = mode !== 'foreground'
  const queued = mode === 'background'
  let { sessionId, history } = resolved
  // a session made for this run is this run's alone: nothing to wait for
  let fresh = false
  const resumed = request.resumeRunId !== undefined
  if (sessionId !== null && !resumed) {
    const session = await ownedSession(settings.sessionStore, sessionId, caller.principal)
    if (session === null) throw new SessionNotFoundError(sessionId)
    history = session.messages
  } else if (sessionId === null && !ephemeral) {
    // made with the run, below
    sessionId = randomId()
    fresh = true
  }
  if (auditedRequest !== undefined) service.audit.note(auditedRequest, { runId, sessionId: sessionId ?? undefined })

  // (two resumes of one run racing: the store's reopen is a compare-and-set, the second is RUN_IN_PROGRESS)
  const now = iso(Date.now())
  const record: RunRecord = {
    runId,
    agent: name,
    sessionId,
    principal: caller.principal,
    status: queued ? 'queued' : 'running',
    background,
    attempt: 1,
    lastSeq: 0,
    createdAt: now,
    requestId: caller.requestId,
    traceId: caller.trace.traceId
  }
  if (!queued) record.startedAt = now
  if (options.schedule !== undefined) {
    record.scheduleId = options.schedule.id
    record.scheduledFor = options.schedule.scheduledFor
  }
  const spec: RunSpec = request.metadata === undefined ? { input: request.input } : { input: request.input, metadata: request.metadata }
  if (options.history !== undefined && options.history.length > 0) spec.history = options.history
  if (options.frontend !== undefined) spec.frontend = options.frontend
  if (options.schedule !== undefined) spec.schedule = options.schedule

  if (options.replay !== undefined) spec.replay = options.replay
  const newRun: NewRun = {
    record,
    spec,
    ephemeral,
    detachable: background || request.onDisconnect === 'continue',
    lease: queued ? null : service.worker.lease()
  }
  if (resumed && !background && await reopened(service, newRun)) {
    // a resumed run goes on in the same record and log
  } else if (fresh) {
    // the session and its first run in one write where the run store can (docs/stores.md, "Round trips"); else the
    // session first: a run never names a session that is not there
    const session = { id: sessionId!, agent: name, principal: caller.principal, metadata: {} }
    const created = await settings.runStore.createWithSession?.(newRun, session, settings.sessionTtlMs, settings.sessionStore)
    if (created === undefined) {
      await settings.sessionStore.create(session, settings.sessionTtlMs)
      await settings.runStore.create(newRun, { exclusive: true })
    }
  } else if (sessionId === null) {
    await settings.runStore.create(newRun, { exclusive: !ephemeral })
  } else {
    await takeSession(service, newRun, request.multitask ?? 'reject', options.signal)
  }
  return { agent, agentInput, newRun, history, resume }
}

/**
 * Resumes the stored run under its id (its next attempt, its log going on); false when there is no record to
 * resume (past its retention: the caller stores it afresh). A run in progress anywhere is RUN_IN_PROGRESS.
 */
async function reopened (service: RunHost, run: NewRun): Promise<boolean> {
  const result = await service.settings.runStore.reopen(run, { exclusive: true })
  switch (result.outcome) {
    case 'reopened':
      run.record.attempt = result.record.attempt
      run.record.lastSeq = result.record.lastSeq
      run.record.createdAt = result.record.createdAt
      return true
    case 'not_found': return false
    case 'in_progress': throw new RunInProgressError(run.record.runId)
    default: throw new SessionBusyError(run.record.sessionId, result.holder)
  }
}

/** The run's log, giving its quota slot back and counting its tokens at its end (with the `quotas` option). */
function withQuota (service: RunHost, principal: string, runId: string, log: RunLog): RunSink {
  return service.quotas === null ? log : service.quotas.sink(principal, runId, log)
}

/** An ephemeral run's record and events go this soon after it ends (a follower catching the end gets it). */
export const EPHEMERAL_RETENTION_MS = 1_000

/**
 * Resolves once `sessionId` may be free again (its run ended, here or on another instance), once the run
 * `waiting` changed (a queued run cancelled meanwhile), or when the signal aborts.
 */
function sessionFreed (service: RunHost, sessionId: string, waiting: string | null, signal: AbortSignal | undefined): Promise<void> {
  const store = service.settings.runStore
  return new Promise((resolve) => {
    const done = (): void => {
      stopSession()
      stopRun?.()
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const stopSession = store.watchSession(sessionId, done)
    const stopRun = waiting === null ? null : store.watch(waiting, done)
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** Stores the run with its session taken, as `multitask` says when another run holds the session. */
async function takeSession (service: RunHost, run: NewRun, multitask: Multitask, signal: AbortSignal | undefined): Promise<void> {
  const store = service.settings.runStore
  const sessionId = run.record.sessionId!
  if (multitask === 'enqueue') {
    // a background run to start here takes its session when it is free
    if (run.record.background && run.lease !== null && (await store.create(run, { exclusive: true })).outcome === 'created') return
    run.record.status = 'queued'
    delete run.record.startedAt
    const lease = run.lease
    // a background run waits in the queue for whichever instance claims it once the session is free
    if (run.record.background) {
      run.lease = null
      await store.create(run, { exclusive: false })
      return
    }
    run.lease = null
    await store.create(run, { exclusive: false })
    for (;;) {
      // watched before trying, so that a session given back in between is not missed
      const freed = sessionFreed(service, sessionId, run.record.runId, signal)
      const leased = { ...lease!, until: Date.now() + service.settings.runLeaseMs }
      const started = await store.start(run.record.runId, iso(Date.now()), leased)
      if (started.outcome === 'started') {
        run.lease = leased
        run.record.status = 'running'
        run.record.startedAt = started.record.startedAt
        return
      }
      if (started.outcome === 'gone') throw new RunCancelledWhileQueuedError(run.record.runId)
      await freed
      if (signal?.aborted === true) {
        await store.cancel(run.record.runId, cancelledEnd(), service.settings.runRetentionMs)
        throw signal.reason
      }
    }
  }
  for (;;) {
    const freed = sessionFreed(service, sessionId, null, signal)
    const created = await store.create(run, { exclusive: true })
    if (created.outcome === 'created') return
    if (multitask === 'reject') throw new SessionBusyError(sessionId, created.holder)
    // interrupt: the run in the way ends with run.failed CANCELLED (on whichever instance runs it), then this one goes
    await store.cancel(created.holder, cancelledEnd(), service.settings.runRetentionMs)
    service.runs.get(created.holder)?.abort('CANCELLED')
    await freed
    if (signal?.aborted === true) throw signal.reason
  }
}

/** How a run cancelled before it started ends. */
export function cancelledEnd (): { status: 'cancelled', endedAt: string, error: { code: string, message: string } } {
  return { status: 'cancelled', endedAt: iso(Date.now()), error: { ...CANCELLED_ERROR } }
}
