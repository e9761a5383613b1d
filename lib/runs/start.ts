import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import {
  AgentNotFoundError, RunInProgressError, RunNotFoundError, RunSessionMismatchError, SessionNotFoundError
} from '../core/errors.js'
import { randomId } from '../core/ids.js'
import type { AgentServiceCore } from '../core/service.js'
import type { TraceContext } from '../core/types.js'
import type { Message } from '../stores/types.js'
import type { AgentRun } from './run.js'
import { ownedSession } from './sessions.js'

/** What a run request asks for beyond the agent, whichever transport (HTTP, SSE, WebSocket) it came over. */
export interface RunRequestFields {
  input: unknown
  sessionId?: string | undefined
  resumeRunId?: string | undefined
  metadata?: Record<string, unknown> | undefined
}

/** Who asks, and where the run's ids come from (a RequestContext fits). */
export interface RunCaller {
  readonly principal: string
  readonly requestId: string
  readonly trace: TraceContext
}

export interface PrepareRunOptions {
  service: AgentServiceCore
  agent: string
  request: RunRequestFields
  caller: RunCaller
  log: FastifyBaseLogger
  /** the HTTP request whose audit entry names the run (a WebSocket run has its own, the upgrade's) */
  auditedRequest?: FastifyRequest
  /** how a validation message names the input: `body/input` (the default) or `message/input` (WebSocket) */
  inputPath?: string
}

/**
 * Resolves a run request into a registered run that is not started yet: the caller subscribes with
 * `run.listen()` and then calls `run.start()`. Looks the agent up, checks the input against its schema, loads
 * the checkpoint of a resumed run, finds (or creates) the session. Throws AGENT_NOT_FOUND, FST_ERR_VALIDATION,
 * RUN_IN_PROGRESS, RUN_NOT_FOUND, RUN_SESSION_MISMATCH and SESSION_NOT_FOUND.
 */
export async function prepareRun (options: PrepareRunOptions): Promise<AgentRun> {
  const { service, agent: name, request, caller, auditedRequest } = options
  const { settings } = service
  const agent = settings.agents.get(name)
  if (agent === undefined) throw new AgentNotFoundError(name)
  if (auditedRequest !== undefined) service.audit.note(auditedRequest, { agent: name })
  // before anything is loaded, created or registered: a bad input leaves no trace but its 400
  settings.agentInputs.get(name)?.(request.input, options.inputPath ?? 'body/input')

  let runId: string = randomId()
  let sessionId = request.sessionId
  let resume: { step: number, state: unknown } | undefined
  if (request.resumeRunId !== undefined) {
    const resumeRunId = request.resumeRunId
    if (service.runs.has(resumeRunId)) throw new RunInProgressError(resumeRunId)
    const checkpoint = await settings.checkpointStore.load(resumeRunId)
    if (checkpoint === null || checkpoint.agent !== name) throw new RunNotFoundError(resumeRunId)
    if (sessionId !== undefined && sessionId !== checkpoint.sessionId) throw new RunSessionMismatchError(resumeRunId)
    runId = checkpoint.runId
    sessionId = checkpoint.sessionId
    resume = { step: checkpoint.step, state: checkpoint.state }
  }

  let history: Message[] | undefined
  if (sessionId !== undefined) {
    const session = await ownedSession(settings.sessionStore, sessionId, caller.principal)
    // A resumed run belongs to its session: without it (expired, or someone else's), there is nothing to resume.
    if (session === null) throw resume === undefined ? new SessionNotFoundError(sessionId) : new RunNotFoundError(runId)
    history = session.messages
  } else {
    sessionId = randomId()
    await settings.sessionStore.create({ id: sessionId, agent: name, principal: caller.principal, metadata: {} }, settings.sessionTtlMs)
  }
  if (auditedRequest !== undefined) service.audit.note(auditedRequest, { runId, sessionId })

  // Checked again after the awaits above, in the same tick as `create`: two resumes of one run racing
  // on this instance would otherwise both pass the first check and run under one id.
  if (service.runs.has(runId)) throw new RunInProgressError(runId)
  return service.runs.create({
    runId,
    agentName: name,
    agent,
    input: request.input,
    sessionId,
    principal: caller.principal,
    requestId: caller.requestId,
    trace: caller.trace,
    history,
    metadata: request.metadata,
    resume,
    timeoutMs: settings.requestTimeoutMs,
    exposeErrors: settings.exposeErrors,
    log: options.log,
    capabilities: service.capabilities
  })
}
