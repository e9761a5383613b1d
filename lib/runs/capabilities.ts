import type { AgentRun, RunCapabilities } from './run.js'
import { iso } from '../stores/common.js'
import type { ApprovalRecord, ApprovalStore, CheckpointStore, EndTurn, RunStore, SessionStore } from '../stores/types.js'
import { readApprovals, readJournal } from './steps.js'
import type { JournalSource, JournaledApproval, JournaledStep } from './steps.js'
import type { ApprovalRequest, Decision } from '../core/types.js'
import { randomId } from '../core/ids.js'
import { storableJsonSchema } from '../core/agent-schemas.js'
import type { StatsRecorder } from './host.js'

export const DEFAULT_APPROVAL_TIMEOUT_MS = 15 * 60_000
/** the longest a timer can wait (about 24.8 days) */
export const MAX_APPROVAL_TIMEOUT_MS = 2 ** 31 - 1

export interface CapabilityStores {
  sessionStore: SessionStore
  approvalStore: ApprovalStore
  checkpointStore: CheckpointStore
  runStore: RunStore
  sessionTtlMs: number
}

function toDecision (approval: ApprovalRecord): Decision {
  // Expired or cancelled (by a reader on another instance noticing the expiry, say): no decision was made.
  if (approval.decision === undefined) return { approved: false, status: approval.status }
  const { decision } = approval
  const decided: Decision = {
    approved: decision.approved,
    comment: decision.comment,
    decidedBy: decision.decidedBy,
    status: approval.status,
    // a decision taken without the fields of an edit (a front end's yes or no): what was asked for
    payload: 'payload' in decision ? decision.payload : approval.payload,
    edited: decision.edited === true
  }
  if (decision.response !== undefined) decided.response = decision.response
  return decided
}

/** The run's session, for what is kept with it; an ephemeral run (store: false) keeps nothing, so has none. */
function keeping (run: AgentRun, what: string): string {
  if (run.sessionId === null) throw new TypeError(`${what}: an ephemeral run (store: false) keeps no approvals or checkpoints`)
  return run.sessionId
}

/** The run's session was deleted, expired or (memory store) evicted while it was going: the run stands, its turn has nowhere to go. */
export function turnLost (log: AgentRun['options']['log'], runId: string, sessionId: string): void {
  log.warn({ runId, sessionId }, 'the session was gone when the run completed: its turn was not recorded')
}

/** What the approvals' figures are told. */
export type ApprovalFigures = Pick<StatsRecorder, 'gauge' | 'recordApprovalWait'>

/** The store-backed `ctx.requestApproval`, `ctx.checkpoint` and the completion bookkeeping. */
export function storeCapabilities (stores: CapabilityStores, figures: ApprovalFigures): RunCapabilities {
  const { sessionStore, approvalStore, checkpointStore, runStore, sessionTtlMs } = stores

  async function requestApproval (run: AgentRun, request: ApprovalRequest): Promise<Decision> {
    // An agent that goes on after its run was aborted gets no new approval that nobody would see.
    if (run.signal.aborted) throw run.signal.reason
    const sessionId = keeping(run, 'requestApproval')
    if (typeof request.action !== 'string' || request.action === '') throw new TypeError('requestApproval: action must be a non-empty string')
    const timeoutMs = request.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS
    if (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_APPROVAL_TIMEOUT_MS) {
      // setTimeout fires at once beyond 2^31-1 ms: a 30-day approval would expire immediately.
      throw new RangeError(`requestApproval: timeoutMs must be an integer from 0 to ${MAX_APPROVAL_TIMEOUT_MS}, got ${String(timeoutMs)}`)
    }
    let schema: Record<string, unknown> | undefined
    if (request.schema !== undefined) {
      try {
        schema = storableJsonSchema(request.schema)
      } catch (err) {
        throw new TypeError(`requestApproval: schema is ${(err as Error).message}`)
      }
    }
    const now = Date.now()
    // asked by an earlier attempt of this run (requeued, resumed): its decision, or the same approval waited for
    const earlier = await run.earlierApproval()
    if (earlier !== undefined && earlier.approval.action === request.action) {
      if (earlier.decided !== undefined) return toDecision(earlier.decided)
      const stored = await approvalStore.get(earlier.approval.id)
      if (stored?.status === 'pending') return await awaitDecision(run, stored, now, Date.parse(stored.expiresAt))
      // decided (or expired) after the earlier attempt's log ends: the decision joins this attempt's log
      if (stored !== null && stored.status !== 'cancelled') {
        run.emit('approval.decided', { approval: stored })
        return toDecision(stored)
      }
      // cancelled with its attempt (a drain's hand-off) or gone: nobody decided it, so it is asked again
    }
    const expiresMs = now + timeoutMs
    const approval: ApprovalRecord = {
      id: randomId(),
      runId: run.runId,
      agent: run.agentName,
      sessionId,
      principal: run.options.principal,
      action: request.action,
      payload: request.payload ?? null,
      reason: request.reason ?? null,
      status: 'pending',
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(expiresMs).toISOString()
    }
    if (schema !== undefined) approval.schema = schema
    await approvalStore.create(approval)
    run.emit('approval.requested', { approval })
    return await awaitDecision(run, approval, now, expiresMs)
  }

  /** Waits for a pending approval's decision, until it expires (`expiresMs`) or the run stops. */
  async function awaitDecision (run: AgentRun, approval: ApprovalRecord, now: number, expiresMs: number): Promise<Decision> {
    // Measured from expiresAt, not from now: the store's write took some of the time already.
    const expiry = new AbortController()
    const timer = setTimeout(() => expiry.abort(), Math.max(0, expiresMs - Date.now()))
    timer.unref()
    let settled: ApprovalRecord | null
    figures.gauge('approvalsPending', 1)
    try {
      settled = await approvalStore.waitForDecision(approval.id, AbortSignal.any([run.signal, expiry.signal]))
    } catch (err) {
      if (run.signal.aborted) {
        // The run is over (timeout, disconnect, cancel, shutdown): nobody is waiting for this decision.
        await approvalStore.cancel(approval.id).catch((cancelError: unknown) => run.options.log.error({ err: cancelError, approvalId: approval.id }, 'could not cancel approval'))
        throw run.signal.reason
      }
      if (!expiry.signal.aborted) throw err
      // A decision that landed just before the expiry wins over it.
      settled = await approvalStore.expire(approval.id)
    } finally {
      clearTimeout(timer)
      figures.gauge('approvalsPending', -1)
    }
    // null: the record vanished from the store while pending; for the agent that is as good as expired.
    if (settled === null) return { approved: false, status: 'expired' }
    figures.recordApprovalWait((Date.now() - now) / 1000)
    run.emit('approval.decided', { approval: settled })
    return toDecision(settled)
  }

  async function checkpoint (run: AgentRun, state: unknown): Promise<void> {
    // A run stopped here (fenced off, handed off, cancelled) saves nothing more: its next attempt may be saving its own.
    if (run.signal.aborted) throw run.signal.reason
    const saved = await checkpointStore.save({ runId: run.runId, agent: run.agentName, sessionId: keeping(run, 'checkpoint'), state })
    run.checkpointed = true
    run.emit('checkpoint.saved', { step: saved.step })
    // stopped while the save was out (a store that hung): the agent learns of it here, not after its next step
    if (run.signal.aborted) throw run.signal.reason
  }

  async function finish (run: AgentRun, result: Parameters<RunCapabilities['finish']>[1]): Promise<EndTurn | undefined> {
    // an ephemeral run keeps nothing
    if (run.sessionId === null) return
    const at = iso(Date.now())
    const messages = [
      { role: 'user', content: run.options.input, runId: run.runId, at },
      { role: 'assistant', content: result.output, runId: run.runId, at }
    ] as const
    // written with the run's end where the run store can (docs/stores.md, "Round trips"): one round trip fewer
    const turn = runStore.turnWithEnd?.(sessionStore, run.sessionId, messages, sessionTtlMs)
    if (turn === undefined && !await sessionStore.appendTurn(run.sessionId, messages, sessionTtlMs)) turnLost(run.options.log, run.runId, run.sessionId)
    if (run.checkpointed) await checkpointStore.delete(run.runId)
    return turn
  }

  function journal (sources: readonly JournalSource[]): Promise<Map<number, JournaledStep>> {
    return readJournal((runId, after, limit) => runStore.events(runId, after, limit), sources)
  }

  function approvals (runId: string, lastSeq: number): Promise<JournaledApproval[]> {
    return readApprovals((id, after, limit) => runStore.events(id, after, limit), runId, lastSeq)
  }

  return { requestApproval, checkpoint, finish, journal, approvals }
}
