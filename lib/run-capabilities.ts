import { randomUUID } from 'node:crypto'
import type { AgentRun, RunCapabilities } from './runner.js'
import type { ApprovalRecord, ApprovalStore, CheckpointStore, SessionStore } from './stores/types.js'
import type { Decision } from './types.js'

export const DEFAULT_APPROVAL_TIMEOUT_MS = 15 * 60_000

export interface CapabilityStores {
  sessionStore: SessionStore
  approvalStore: ApprovalStore
  checkpointStore: CheckpointStore
  sessionTtlMs: number
}

function toDecision (approval: ApprovalRecord): Decision {
  return {
    approved: approval.decision?.approved ?? false,
    comment: approval.decision?.comment ?? null,
    decidedBy: approval.decision?.decidedBy ?? null,
    status: approval.status
  }
}

/** The store-backed `ctx.requestApproval`, `ctx.checkpoint` and the completion bookkeeping. */
export function storeCapabilities (stores: CapabilityStores): RunCapabilities {
  const { sessionStore, approvalStore, checkpointStore, sessionTtlMs } = stores

  async function requestApproval (run: AgentRun, request: Parameters<RunCapabilities['requestApproval']>[1]): Promise<Decision> {
    const now = Date.now()
    const timeoutMs = request.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS
    const approval: ApprovalRecord = {
      id: randomUUID(),
      runId: run.runId,
      agent: run.agentName,
      sessionId: run.sessionId,
      principal: run.options.principal,
      action: request.action,
      payload: request.payload ?? null,
      reason: request.reason ?? null,
      status: 'pending',
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(now + timeoutMs).toISOString()
    }
    await approvalStore.create(approval)
    run.emit('approval.requested', { approval })

    const expiry = new AbortController()
    const timer = setTimeout(() => expiry.abort(), timeoutMs)
    timer.unref()
    try {
      const decided = await approvalStore.waitForDecision(approval.id, AbortSignal.any([run.signal, expiry.signal]))
      run.emit('approval.decided', { approval: decided })
      return toDecision(decided)
    } catch (err) {
      if (run.signal.aborted) {
        // The run is over (timeout, disconnect, cancel, shutdown): nobody is waiting for this decision.
        await approvalStore.cancel(approval.id).catch((cancelError: unknown) => run.options.log.error({ err: cancelError }, 'could not cancel approval'))
        throw run.signal.reason
      }
      if (!expiry.signal.aborted) throw err
      const current = await approvalStore.expire(approval.id)
      // A decision that landed just before the expiry wins over it.
      if (current !== null && current.status !== 'expired') {
        run.emit('approval.decided', { approval: current })
        return toDecision(current)
      }
      return { approved: false, status: 'expired' }
    } finally {
      clearTimeout(timer)
    }
  }

  async function checkpoint (run: AgentRun, state: unknown): Promise<void> {
    const saved = await checkpointStore.save({ runId: run.runId, agent: run.agentName, sessionId: run.sessionId, state })
    run.checkpointed = true
    run.emit('checkpoint.saved', { step: saved.step })
  }

  async function finish (run: AgentRun, result: Parameters<RunCapabilities['finish']>[1]): Promise<void> {
    const at = new Date().toISOString()
    await sessionStore.appendTurn(run.sessionId, [
      { role: 'user', content: run.options.input, runId: run.runId, at },
      { role: 'assistant', content: result.output, runId: run.runId, at }
    ], sessionTtlMs)
    if (run.checkpointed) await checkpointStore.delete(run.runId)
  }

  return { requestApproval, checkpoint, finish }
}
