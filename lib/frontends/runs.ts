import { createHash } from 'node:crypto'
import type { ServerResponse } from 'node:http'
import { ApprovalAlreadyDecidedError, ClientClosedError, ApprovalExpiredError, ApprovalNotFoundError, RunAlreadyEndedError, RunRecordNotFoundError } from '../core/errors.js'
import type { AgentServiceCore } from '../service/service.js'
import { cancelledEnd } from '../runs/start.js'
import { ownedSession } from '../runs/sessions.js'
import type { ApprovalRecord, DecideResult, RunRecord } from '../stores/types.js'
import type { ApprovalEventData, RunEvent } from './run-events.js'
import { decisionOf } from '../runs/decisions.js'
import type { DecisionFields } from '../runs/decisions.js'

/** The front ends whose conversation ids name sessions: each keeps its own namespace. */
export type Conversations = 'chat' | 'ag-ui'

/**
 * The session a front end's conversation id (the AI SDK's chat id, AG-UI's thread id) stands for, in the caller's
 * own space: a hash of the protocol, the principal, the agent and the id. Two principals using one id get two
 * sessions, and nothing needs storing to find it again, on any instance.
 */
export function conversationSessionId (kind: Conversations, principal: string, agent: string, id: string): string {
  return `${kind}-${createHash('sha256').update(JSON.stringify([kind, principal, agent, id])).digest('base64url')}`
}

/** Makes the conversation's session if it has none yet (a first message, or one after the session expired). */
export async function ensureSession (service: AgentServiceCore, sessionId: string, agent: string, principal: string, metadata: Record<string, unknown>): Promise<void> {
  const { sessionStore, sessionTtlMs } = service.settings
  if (await ownedSession(sessionStore, sessionId, principal) !== null) return
  await sessionStore.create({ id: sessionId, agent, principal, metadata }, sessionTtlMs)
}

/** The session's latest run when it is in progress (queued or running), else null. */
export async function runInProgress (service: AgentServiceCore, sessionId: string, principal: string): Promise<RunRecord | null> {
  const { runs: [latest] } = await service.settings.runStore.listBySession(sessionId, { limit: 1 })
  if (latest === undefined || latest.principal !== principal) return null
  return latest.status === 'queued' || latest.status === 'running' ? latest : null
}

/**
 * Decides an approval that a front end answers: only one of the caller's own runs of this agent (and of this
 * conversation's session, when given); anything else is APPROVAL_NOT_FOUND, as an unknown id, and stays as it was.
 * The decision is the approval store's compare-and-set, as `POST /v1/approvals/:id`. Returns the outcome: a lost
 * race (already decided, expired) is for the caller to judge.
 */
export async function decideOwnApproval (
  service: AgentServiceCore, approvalId: string, owner: { sessionId?: string, principal: string, agent: string },
  decision: DecisionFields, path?: string
): Promise<{ approval: ApprovalRecord, outcome: Exclude<DecideResult['outcome'], 'not_found'> }> {
  const store = service.settings.approvalStore
  const approval = await store.get(approvalId)
  if (approval === null || approval.principal !== owner.principal || approval.agent !== owner.agent ||
    (owner.sessionId !== undefined && approval.sessionId !== owner.sessionId)) {
    throw new ApprovalNotFoundError(approvalId)
  }
  // Without auth everyone is 'anonymous', which says nothing about who decided.
  const result = await store.decide(approvalId, decisionOf(approval, decision, owner.principal === 'anonymous' ? null : owner.principal, path))
  if (result.outcome === 'not_found') throw new ApprovalNotFoundError(approvalId)
  return { approval: result.approval, outcome: result.outcome }
}

/**
 * Decides the approvals a front end's request answers (the conversation's own; others are left as they are) and
 * returns those of the run asked first, earliest requested first: the rest of that run is what the response streams.
 * A decision that lost the race (decided elsewhere meanwhile, expired) is in the run's log all the same.
 * APPROVAL_NOT_FOUND when none is the conversation's.
 */
export async function decideAnswers (
  service: AgentServiceCore, answers: ReadonlyArray<{ id: string, decision: DecisionFields, path?: string }>,
  owner: { sessionId: string, principal: string, agent: string }
): Promise<ApprovalRecord[]> {
  const decided: ApprovalRecord[] = []
  for (const { id, decision, path } of answers) {
    try {
      decided.push((await decideOwnApproval(service, id, owner, decision, path)).approval)
    } catch (err) {
      if (err instanceof ApprovalNotFoundError) continue
      throw err
    }
  }
  if (decided.length === 0) throw new ApprovalNotFoundError(answers[0]!.id)
  const runId = decided[0]!.runId
  return decided.filter((approval) => approval.runId === runId).sort((a, b) => Date.parse(a.requestedAt) - Date.parse(b.requestedAt))
}

/**
 * Whether the log has reached the `approval.requested` of every one of these approvals (where a continuation
 * picks the run up): true at the last of them. Stateful: one per continuation.
 */
export function requestsOf (approvalIds: readonly string[]): (event: RunEvent) => boolean {
  const missing = new Set(approvalIds)
  return (event) => event.type === 'approval.requested' && missing.delete((event.data as ApprovalEventData).approval.id) && missing.size === 0
}

/** The error a lost compare-and-set answers with, where the caller wants one. */
export function decisionError (approvalId: string, outcome: 'expired' | 'already_decided'): Error {
  return outcome === 'expired' ? new ApprovalExpiredError(approvalId) : new ApprovalAlreadyDecidedError(approvalId)
}

/**
 * Cancels a run, wherever it runs: the store tells the instance running it, and this one aborts it at once if it is
 * here (as `POST /v1/runs/:runId/cancel`). RUN_NOT_FOUND for a run the store does not have, RUN_ALREADY_ENDED for one
 * that has ended.
 */
export async function cancelRun (service: AgentServiceCore, runId: string): Promise<void> {
  const result = await service.settings.runStore.cancel(runId, cancelledEnd(), service.settings.runRetentionMs)
  if (result.outcome === 'not_found') throw new RunRecordNotFoundError(runId)
  if (result.outcome === 'ended') throw new RunAlreadyEndedError(runId)
  if (result.outcome === 'requested') service.runs.get(runId)?.abort('CANCELLED')
  // a queued run never ran: nobody else gives its quota slot back
  if (result.outcome === 'cancelled') await service.quotas?.release(result.record.principal, runId)
}

/** Aborted when the response closes before it is sent: a run waiting for its session stops waiting. */
export function clientGone (raw: ServerResponse): AbortSignal {
  const controller = new AbortController()
  raw.once('close', () => { if (!raw.writableFinished) controller.abort(new ClientClosedError('The client went away')) })
  return controller.signal
}
