import type { FastifyBaseLogger } from 'fastify'
import type { AgentServiceState } from '../../plugins/core.js'
import {
  AgentNotFoundError, RunInProgressError, RunNotFoundError, RunSessionMismatchError, SessionNotFoundError
} from '../core/errors.js'
import type { AgentRun } from './run.js'
import type { Message } from '../stores/types.js'
import type { TraceContext } from '../core/types.js'
import { randomId } from '../core/ids.js'

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

/** Filled in as the request resolves, for the audit entry (a RequestContext fits). */
export interface RunAuditFields {
  agent: string | undefined
  runId: string | undefined
  sessionId: string | undefined
}

/**
 * Resolves a run request into a registered run that is not started yet: the caller subscribes with
 * `run.onEvent()` and then calls `run.start()`. Looks the agent up, loads the checkpoint of a resumed
 * run, finds (or creates) the session. Throws AGENT_NOT_FOUND, RUN_IN_PROGRESS, RUN_NOT_FOUND,
 * RUN_SESSION_MISMATCH and SESSION_NOT_FOUND.
 */
export async function createRun (
  state: AgentServiceState, caller: RunCaller, log: FastifyBaseLogger, name: string, request: RunRequestFields, streamed: boolean,
  audit?: RunAuditFields
): Promise<AgentRun> {
  const { settings } = state
  const agent = settings.agents.get(name)
  if (agent === undefined) throw new AgentNotFoundError(name)
  if (audit !== undefined) audit.agent = name

  let runId: string = randomId()
  let sessionId = request.sessionId
  let resume: { step: number, state: unknown } | undefined
  if (request.resumeRunId !== undefined) {
    const resumeRunId = request.resumeRunId
    if (state.runs.has(resumeRunId)) throw new RunInProgressError(resumeRunId)
    const checkpoint = await settings.checkpointStore.load(resumeRunId)
    if (checkpoint === null || checkpoint.agent !== name) throw new RunNotFoundError(resumeRunId)
    if (sessionId !== undefined && sessionId !== checkpoint.sessionId) throw new RunSessionMismatchError(resumeRunId)
    runId = checkpoint.runId
    sessionId = checkpoint.sessionId
    resume = { step: checkpoint.step, state: checkpoint.state }
  }

  let history: Message[] | undefined
  if (sessionId !== undefined) {
    const session = await settings.sessionStore.get(sessionId)
    // Another principal's session is indistinguishable from a missing one: no probing, no takeover.
    // A resumed run belongs to its session: without it (expired, or someone else's), there is nothing to resume.
    if (session === null || session.principal !== caller.principal) {
      throw resume === undefined ? new SessionNotFoundError(sessionId) : new RunNotFoundError(runId)
    }
    history = session.messages
  } else {
    sessionId = randomId()
    await settings.sessionStore.create({ id: sessionId, agent: name, principal: caller.principal, metadata: {} }, settings.sessionTtlMs)
  }
  if (audit !== undefined) {
    audit.runId = runId
    audit.sessionId = sessionId
  }

  // Checked again after the awaits above, in the same tick as `create`: two resumes of one run racing
  // on this instance would otherwise both pass the first check and run under one id.
  if (state.runs.has(runId)) throw new RunInProgressError(runId)
  return state.runs.create({
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
    log,
    capabilities: state.capabilities
  }, streamed)
}
