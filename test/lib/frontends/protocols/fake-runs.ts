// An in-memory stand-in for the run store and pipeline behind the A2A port: scripted agents append
// events to per-run logs that followers read from any seq, as /v1/runs/:runId/events does (docs/runs.md).
import type { A2ARunPort } from '../../../../lib/frontends/a2a/protocol.js'
import type { Approval, RunEvent } from '../../../../lib/frontends/run-events.js'

interface Run {
  sessionId: string | null
  events: RunEvent[]
  wake: Set<() => void>
  cancelled: boolean
  onCancel: Set<() => void>
}

export interface Script {
  emit (type: string, data: unknown): void
  approval (action: string, payload: unknown, reason: string | null): Promise<Approval>
  cancelled (): Promise<void>
}

type Agent = (input: unknown, script: Script) => Promise<{ output: unknown } | null>

export class FakeRuns implements A2ARunPort {
  readonly runs = new Map<string, Run>()
  readonly sessions = new Set<string>(['session-known'])
  readonly #pending = new Map<string, { runId: string, approval: Approval, resolve: (approval: Approval) => void }>()
  #next = 0
  /** How many follow() iterators are open (closed ones ran their finally). */
  following = 0
  /** Makes the next follow() throw after this many events. */
  breakFollowAfter: number | null = null
  /** Makes start() throw this. */
  startError: unknown = null
  /** Runs started from now on are ephemeral (`store: false`): no session. */
  ephemeral = false

  constructor (readonly agent: Agent) {}

  async start ({ input, sessionId }: { input: unknown, sessionId?: string }): Promise<{ runId: string, sessionId: string | null }> {
    if (this.startError !== null) throw this.startError
    if (sessionId !== undefined && !this.sessions.has(sessionId)) {
      throw Object.assign(new Error(`Session ${sessionId} not found`), { code: 'SESSION_NOT_FOUND' })
    }
    const runId = `run-${++this.#next}`
    const session = sessionId ?? `session-${this.#next}`
    this.sessions.add(session)
    const run: Run = { sessionId: this.ephemeral ? null : session, events: [], wake: new Set(), cancelled: false, onCancel: new Set() }
    this.runs.set(runId, run)
    this.#append(runId, 'run.started', { runId, agent: 'helper', sessionId: run.sessionId, requestId: 'req', traceId: 'trace', attempt: 1 })
    void this.#execute(runId, input)
    return { runId, sessionId: run.sessionId }
  }

  async #execute (runId: string, input: unknown): Promise<void> {
    const run = this.runs.get(runId)!
    const script: Script = {
      emit: (type, data) => { this.#append(runId, type, data) },
      approval: (action, payload, reason) => new Promise((resolve) => {
        const approval: Approval = {
          id: `appr-${runId}`, runId, agent: 'helper', sessionId: run.sessionId ?? runId, principal: 'alice', action, payload, reason,
          status: 'pending', requestedAt: '2030-01-01T00:00:00.000Z', expiresAt: '2030-01-01T00:10:00.000Z'
        }
        this.#pending.set(approval.id, { runId, approval, resolve })
        this.#append(runId, 'approval.requested', { approval })
      }),
      cancelled: () => new Promise((resolve) => { run.onCancel.add(resolve) })
    }
    try {
      const result = await this.agent(input, script)
      if (run.cancelled) return
      if (result === null) return
      this.#append(runId, 'run.completed', {
        runId, agent: 'helper', sessionId: run.sessionId, status: 'completed', output: result.output,
        usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 }, finishReason: 'stop', requestId: 'req', traceId: 'trace'
      })
    } catch (error) {
      if (!run.cancelled) this.#append(runId, 'run.failed', { error: { code: 'AGENT_ERROR', message: (error as Error).message }, traceId: 'trace' })
    }
  }

  #append (runId: string, type: string, data: unknown): void {
    const run = this.runs.get(runId)!
    run.events.push({ seq: run.events.length + 1, type, data })
    for (const wake of run.wake) wake()
  }

  #ended (run: Run): boolean {
    const last = run.events.at(-1)?.type
    return last === 'run.completed' || last === 'run.failed'
  }

  async read (runId: string): Promise<{ sessionId: string | null, events: RunEvent[] } | null> {
    const run = this.runs.get(runId)
    return run === undefined ? null : { sessionId: run.sessionId, events: [...run.events] }
  }

  async * follow (runId: string, after: number, signal: AbortSignal | undefined): AsyncGenerator<RunEvent, void, undefined> {
    const run = this.runs.get(runId)!
    this.following++
    let breakAfter = this.breakFollowAfter
    this.breakFollowAfter = null
    try {
      let next = after
      while (true) {
        while (next < run.events.length) {
          if (breakAfter !== null && breakAfter-- === 0) throw new Error('the store went away')
          yield run.events[next++]!
        }
        if (this.#ended(run) || signal?.aborted === true) return
        await new Promise<void>((resolve) => {
          const wake = () => { run.wake.delete(wake); signal?.removeEventListener('abort', wake); resolve() }
          run.wake.add(wake)
          signal?.addEventListener('abort', wake)
        })
      }
    } finally {
      this.following--
    }
  }

  async cancel (runId: string): Promise<void> {
    const run = this.runs.get(runId)!
    if (this.#ended(run)) throw Object.assign(new Error('Run already ended'), { code: 'RUN_ALREADY_ENDED' })
    run.cancelled = true
    for (const [id, pending] of this.#pending) {
      if (pending.runId === runId) this.#pending.delete(id)
    }
    this.#append(runId, 'run.failed', { error: { code: 'CANCELLED', message: 'Run cancelled' }, traceId: 'trace' })
    for (const resolve of run.onCancel) resolve()
  }

  async decide (approvalId: string, decision: { approved: boolean, comment?: string }): Promise<void> {
    const pending = this.#pending.get(approvalId)
    if (pending === undefined) throw Object.assign(new Error('Approval already decided'), { code: 'APPROVAL_ALREADY_DECIDED' })
    this.#pending.delete(approvalId)
    const approval: Approval = {
      ...pending.approval,
      status: decision.approved ? 'approved' : 'rejected',
      decision: { approved: decision.approved, comment: decision.comment ?? null, decidedBy: 'alice', decidedAt: '2030-01-01T00:01:00.000Z' }
    }
    this.#append(pending.runId, 'approval.decided', { approval })
    pending.resolve(approval)
  }
}
