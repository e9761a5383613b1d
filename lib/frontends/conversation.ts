// The conversation run, written once for the front ends whose conversation id names a session (the AI SDK's chat,
// AG-UI): the request's session in the caller's own space, a new turn started and streamed, or the approvals a request
// answers decided and the rest of their run streamed (docs/front-ends.md).
import type { FastifyReply, FastifyRequest } from 'fastify'
import { AgentNotFoundError } from '../core/errors.js'
import { requestContextOf } from '../core/request-context.js'
import type { RequestContext } from '../core/request-context.js'
import type { AgentServiceCore } from '../service/service.js'
import { prepareRun } from '../runs/start.js'
import type { ApprovalRecord } from '../stores/types.js'
import { ProjectedStream } from './stream.js'
import type { FollowOptions, Projection } from './stream.js'
import { clientGone, conversationSessionId, decideAnswers, ensureSession } from './runs.js'
import type { DecisionFields } from '../runs/decisions.js'
import type { Conversations } from './runs.js'

/** How a protocol's responses are written. */
export interface ConversationProtocol {
  readonly kind: Conversations
  readonly headers: Record<string, string>
  /** a client that leaves before the projection ended cancels the run (else it goes on) */
  readonly cancelOnClose: boolean
}

/** One request of a conversation: its agent, the caller, and the session its conversation id names. */
export interface Conversation {
  readonly agent: string
  readonly caller: RequestContext
  readonly sessionId: string
}

export interface ApprovalAnswer {
  readonly id: string
  readonly decision: DecisionFields
  /** where the decision is in the request, for the 400 that names a field of it (default `body`) */
  readonly path?: string
}

/**
 * The conversation a request speaks of: the agent known (else AGENT_NOT_FOUND), then `checkId` (what the protocol
 * cannot use as an id), then its session named and noted in the request's audit entry.
 */
export function openConversation (
  service: AgentServiceCore, request: FastifyRequest, protocol: ConversationProtocol, agent: string, id: string, checkId?: (id: string) => void
): Conversation {
  if (!service.settings.agents.has(agent)) throw new AgentNotFoundError(agent)
  const caller = requestContextOf(request)
  checkId?.(id)
  const sessionId = conversationSessionId(protocol.kind, caller.principal, agent, id)
  service.audit.note(request, { agent, sessionId })
  return { agent, caller, sessionId }
}

/**
 * A new turn: the conversation's session made if it has none, the agent run on `input` in it (`onDisconnect:
 * 'continue'`: a response ends at an approval while the run waits; `multitask: 'interrupt'`: a new message replaces a
 * run still going) and streamed as `projection` speaks it.
 */
export async function startTurn (
  service: AgentServiceCore, request: FastifyRequest, reply: FastifyReply, protocol: ConversationProtocol, conversation: Conversation,
  turn: { input: string, inputPath: string, metadata: Record<string, unknown>, projection: Projection }
): Promise<FastifyReply> {
  const { agent, caller, sessionId } = conversation
  await ensureSession(service, sessionId, agent, caller.principal, turn.metadata)
  const run = await prepareRun({
    service,
    agent,
    request: { input: turn.input, sessionId, onDisconnect: 'continue', multitask: 'interrupt' },
    caller,
    log: request.log,
    auditedRequest: request,
    inputPath: turn.inputPath,
    signal: clientGone(reply.raw)
  })
  new ProjectedStream(service, request, reply, protocol.headers, protocol.cancelOnClose).attach(run, turn.projection)
  run.start()
  return reply
}

/**
 * The approvals a request answers decided (only the conversation's own), then the rest of the run asked first
 * streamed from its log: `follow` says how, given that run's decided approvals, earliest requested first.
 */
export async function continueTurn (
  service: AgentServiceCore, request: FastifyRequest, reply: FastifyReply, protocol: ConversationProtocol, conversation: Conversation,
  answers: readonly ApprovalAnswer[], follow: (approvals: ApprovalRecord[]) => Omit<FollowOptions, 'after'>
): Promise<FastifyReply> {
  const owner = { sessionId: conversation.sessionId, principal: conversation.caller.principal, agent: conversation.agent }
  const approvals = await decideAnswers(service, answers, owner)
  const { runId } = approvals[0]!
  service.audit.note(request, { runId })
  new ProjectedStream(service, request, reply, protocol.headers, protocol.cancelOnClose).follow(runId, { after: 0, ...follow(approvals) })
  return reply
}
