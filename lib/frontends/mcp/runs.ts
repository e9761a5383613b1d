// The run pipeline as the MCP server sees it, bound to one request: its caller's tools (agents), calls (runs) and
// tasks (background runs). Everything about a task is read from the stores, so that any instance sharing them
// answers for any task; nothing here knows the SDK.
import type { FastifyRequest } from 'fastify'
import { requestContextOf } from '../../core/request-context.js'
import type { AgentServiceCore } from '../../service/service.js'
import type { Agent } from '../../core/types.js'
import { endsTheRun } from '../run-events.js'
import type { LoggedEvent } from '../run-events.js'
import { prepareRun, queueRun } from '../../runs/start.js'
import type { AgentRun } from '../../runs/run.js'
import type { ApprovalRecord, RunRecord, RunStatus } from '../../stores/types.js'
import { followRun } from '../follow.js'
import { cancelRun, decideOwnApproval } from '../runs.js'
import type { McpKept, McpTask, McpToolResult } from './schemas.js'
import { inputOf, toolOf, toolResult } from './tools.js'
import type { McpTool } from './schemas.js'

/** How often a client should poll a task (ms). */
export const POLL_INTERVAL_MS = 1_000
/** How long tasks/cancel waits for the run's end before answering the task as it stands. */
const CANCEL_WAIT_MS = 5_000
/** Runs read per tasks/list page (most recent first); the caller's tasks among them make the page. */
const LIST_SCAN = 100

/** The run's input could not be had from the arguments: the tool holds it as `input`, and there is none. */
export class MissingInputError extends Error {}

/** A task of the caller's: its run's record and what the run keeps for its task. */
export interface OwnedTask {
  record: RunRecord
  kept: McpKept
}

export class McpRuns {
  readonly service: AgentServiceCore
  readonly request: FastifyRequest

  constructor (service: AgentServiceCore, request: FastifyRequest) {
    this.service = service
    this.request = request
  }

  get principal (): string {
    return requestContextOf(this.request).principal
  }

  /** The agent, when the caller may run it (else undefined: unknown and forbidden look the same). */
  agent (name: string): Agent | undefined {
    const agent = this.service.settings.agents.get(name)
    return agent !== undefined && this.service.hasAccess(this.request, 'run', name) ? agent : undefined
  }

  tools (): McpTool[] {
    const tools: McpTool[] = []
    for (const [name, agent] of this.service.settings.agents) {
      if (this.service.hasAccess(this.request, 'run', name)) tools.push(toolOf(name, agent, this.service.settings.agentSchemas.get(name)))
    }
    return tools
  }

  #options (name: string, agent: Agent, args: Record<string, unknown> | undefined, sessionId: string | undefined, frontend?: Record<string, unknown>) {
    const input = inputOf(this.service.settings.agentSchemas.get(name), args)
    if (input === null) throw new MissingInputError('arguments/input is required')
    return {
      service: this.service,
      agent: name,
      request: { input: input.input, sessionId, onDisconnect: 'cancel' as const },
      caller: requestContextOf(this.request),
      log: this.request.log,
      auditedRequest: this.request,
      inputPath: input.path,
      frontend
    }
  }

  /** A tools/call: the run, checked and registered, not started yet. */
  prepare (name: string, agent: Agent, args: Record<string, unknown> | undefined, sessionId: string | undefined): Promise<AgentRun> {
    return prepareRun(this.#options(name, agent, args, sessionId))
  }

  /** A task-augmented tools/call: a background run, queued; its task as it starts. */
  async queue (name: string, agent: Agent, args: Record<string, unknown> | undefined, sessionId: string | undefined, ttl: number | null | undefined): Promise<McpTask> {
    const retention = this.service.settings.runRetentionMs
    const kept: McpKept = { ttl: typeof ttl === 'number' ? Math.min(Math.max(ttl, 0), retention) : retention }
    const record = await queueRun(this.#options(name, agent, args, sessionId, { mcp: kept }))
    return taskOf(record, kept, null)
  }

  /** The caller's task `taskId`; null for an unknown one, another principal's, one past its ttl, or a run that is no task. */
  async owned (taskId: string): Promise<OwnedTask | null> {
    const store = this.service.settings.runStore
    const record = await store.get(taskId)
    if (record === null || record.principal !== this.principal || !this.service.hasAccess(this.request, 'run', record.agent)) return null
    // (a spec gone since the record was read: its run is being purged)
    /* c8 ignore next */
    const kept = (await store.spec(taskId))?.frontend?.mcp as McpKept | undefined
    if (kept === undefined || Date.parse(record.createdAt) + kept.ttl < Date.now()) return null
    // (a task is a background run: it has a session)
    this.service.audit.note(this.request, { agent: record.agent, runId: record.runId, sessionId: record.sessionId as string })
    return { record, kept }
  }

  /** The task as it stands: a running run with a pending approval waits for input. */
  async task ({ record, kept }: OwnedTask): Promise<McpTask> {
    let pending: ApprovalRecord | null = null
    if (record.status === 'running') [pending = null] = await this.service.settings.approvalStore.listPending({ runId: record.runId })
    return taskOf(record, kept, pending)
  }

  /** The caller's tasks, most recent first: a page of the runs, and the cursor of the next. */
  async list (cursor: string | undefined): Promise<{ tasks: McpTask[], nextCursor: string | null }> {
    const store = this.service.settings.runStore
    const page = await store.list(cursor === undefined ? { limit: LIST_SCAN } : { limit: LIST_SCAN, cursor })
    const tasks: McpTask[] = []
    for (const run of page.runs) {
      if (!run.background || run.principal !== this.principal) continue
      const owned = await this.owned(run.runId)
      if (owned !== null) tasks.push(await this.task(owned))
    }
    return { tasks, nextCursor: page.nextCursor }
  }

  /** Cancels the task's run (wherever it runs) and answers the task once it has ended, or as it stands after a while. */
  async cancel (owned: OwnedTask): Promise<McpTask> {
    const { runId } = owned.record
    await cancelRun(this.service, runId)
    for await (const event of followRun(this.service.settings.runStore, runId, owned.record.lastSeq, AbortSignal.timeout(CANCEL_WAIT_MS))) {
      if (endsTheRun(event)) break
    }
    const record = await this.service.settings.runStore.get(runId)
    // (purged since: as it was)
    /* c8 ignore next */
    return this.task({ record: record ?? owned.record, kept: owned.kept })
  }

  /** The run's events from its log, then live ones, until it ends (or `signal` aborts). */
  follow (runId: string, signal: AbortSignal): AsyncGenerator<LoggedEvent, void, undefined> {
    return followRun(this.service.settings.runStore, runId, 0, signal)
  }

  /** The tools/call result of a task whose run has ended (read again: its end is in the record). */
  async result (runId: string, meta: Record<string, unknown>): Promise<McpToolResult | null> {
    const record = await this.service.settings.runStore.get(runId)
    // (purged while it was awaited, or the wait was cut short)
    /* c8 ignore next */
    if (record === null || !isTerminalStatus(record.status)) return null
    const end = record.status === 'completed' ? { output: record.result!.output } : { error: record.error! }
    return toolResult(end, record, meta)
  }

  /** Whether the approval still waits for a decision (one asked before may have been decided since). */
  async pending (approvalId: string): Promise<boolean> {
    return (await this.service.settings.approvalStore.get(approvalId))?.status === 'pending'
  }

  /**
   * An elicitation's answer decides the approval it asked for, as the caller (compare-and-set, as `POST
   * /v1/approvals/:id`): only one of the caller's own approvals, of an agent it may run; anything else is ignored.
   */
  async decide (approvalId: string, decision: { approved: boolean, comment?: string | undefined }): Promise<string> {
    const approval = await this.service.settings.approvalStore.get(approvalId)
    if (approval === null || approval.principal !== this.principal || !this.service.hasAccess(this.request, 'run', approval.agent)) return 'not_found'
    this.service.audit.note(this.request, { agent: approval.agent, runId: approval.runId, sessionId: approval.sessionId })
    const { outcome } = await decideOwnApproval(this.service, approvalId, { principal: this.principal, agent: approval.agent }, decision)
    return outcome
  }
}

function isTerminalStatus (status: RunStatus): status is 'completed' | 'failed' | 'cancelled' {
  return status === 'completed' || status === 'failed' || status === 'cancelled'
}

/** A run's record as a task: `input_required` while an approval of the running run is pending. */
export function taskOf (record: RunRecord, kept: McpKept, pending: ApprovalRecord | null): McpTask {
  const task: McpTask = {
    taskId: record.runId,
    status: 'working',
    ttl: kept.ttl,
    createdAt: record.createdAt,
    lastUpdatedAt: record.endedAt ?? record.startedAt ?? record.createdAt,
    pollInterval: POLL_INTERVAL_MS
  }
  if (isTerminalStatus(record.status)) {
    task.status = record.status
    if (record.status !== 'completed') task.statusMessage = `${record.error!.code}: ${record.error!.message}`
  } else if (pending !== null) {
    task.status = 'input_required'
    task.statusMessage = pending.action
  }
  return task
}

/**
 * Starts the run and hands each of its events to `onEvent` as the run emits it (it runs here), then, when it goes on
 * elsewhere (a drain's hand-off), as its log gives them; resolves with the event that ends it, or undefined when
 * `signal` aborts first.
 */
export function watchRun (runs: McpRuns, run: AgentRun, signal: AbortSignal, onEvent: (event: LoggedEvent) => void): Promise<LoggedEvent | undefined> {
  return new Promise((resolve, reject) => {
    let last = 0
    const stop = (): void => { resolve(undefined) }
    signal.addEventListener('abort', stop, { once: true })
    const end = (event: LoggedEvent | undefined): void => {
      signal.removeEventListener('abort', stop)
      resolve(event)
    }
    run.listen({
      runEvent (event) {
        last = event.seq
        if (signal.aborted) return
        onEvent(event)
        if (endsTheRun(event)) end(event)
      },
      runSettled (outcome) {
        if (outcome.status !== 'detached' || signal.aborted) return
        void (async () => {
          for await (const event of followRun(runs.service.settings.runStore, run.runId, last, signal)) {
            onEvent(event)
            if (endsTheRun(event)) return end(event)
          }
          end(undefined)
        })().catch(reject)
      }
    })
    run.start()
  })
}
