import type { FastifyRequest } from 'fastify'
import { A2aUnavailableError, RunRecordNotFoundError } from '../../core/errors.js'
import { requestContextOf } from '../../core/request-context.js'
import type { AgentServiceCore } from '../../service/service.js'
import type { A2ARunPort } from './protocol.js'
import type { RunEvent } from '../run-events.js'
import { prepareRun } from '../../runs/start.js'
import type { RunRecord } from '../../stores/types.js'
import { followRun, storedEvents } from '../follow.js'
import { cancelRun, decideOwnApproval, decisionError } from '../runs.js'

export type A2aModule = typeof import('./protocol.js')
export type A2aLoader = () => Promise<A2aModule>

// @a2a-js/sdk is an optional peer dependency: importing the package never loads it, the first A2A request does.
const defaultLoader: A2aLoader = () => import('./protocol.js')
// the module, once loaded (or loading): what the first request imports, the next ones reuse
let loading: Promise<A2aModule> | null = null

function isMissing (error: unknown): boolean {
  const { code, message } = error as { code?: unknown, message?: unknown }
  // only the SDK itself: one that is there but fails to load says so
  return code === 'ERR_MODULE_NOT_FOUND' && typeof message === 'string' && message.includes('\'@a2a-js/sdk')
}

/**
 * The A2A module (and with it @a2a-js/sdk); A2A_UNAVAILABLE when the SDK is not installed. `loader`: a service's own
 * (tests simulate a missing SDK through it), called each time; the default's module is loaded once per process.
 */
export function loadA2a (loader?: A2aLoader): Promise<A2aModule> {
  const unavailable = (error: unknown): never => { throw isMissing(error) ? new A2aUnavailableError() : error }
  if (loader !== undefined) return loader().catch(unavailable)
  loading ??= defaultLoader().catch((error: unknown) => {
    loading = null
    return unavailable(error)
  })
  return loading
}

/**
 * The run pipeline as the A2A handler sees it, bound to one request: its caller's runs of one agent. A task is a
 * run (started `onDisconnect: 'continue'`: a task outlives the request that sent it), its context a session;
 * everything is read from the run store, so that any instance sharing it answers for any task.
 */
export class ServiceRunPort implements A2ARunPort {
  readonly #service: AgentServiceCore
  readonly #request: FastifyRequest
  readonly #agent: string

  constructor (service: AgentServiceCore, request: FastifyRequest, agent: string) {
    this.#service = service
    this.#request = request
    this.#agent = agent
  }

  get #principal (): string {
    return requestContextOf(this.#request).principal
  }

  async start ({ input, sessionId }: { input: unknown, sessionId?: string }): Promise<{ runId: string, sessionId: string | null }> {
    const run = await prepareRun({
      service: this.#service,
      agent: this.#agent,
      request: { input, sessionId, onDisconnect: 'continue' },
      caller: requestContextOf(this.#request),
      log: this.#request.log,
      auditedRequest: this.#request
    })
    run.start()
    return { runId: run.runId, sessionId: run.sessionId }
  }

  /** The caller's run of this agent; null for anyone else's, an unknown or an expired one. */
  async #owned (runId: string): Promise<RunRecord | null> {
    const record = await this.#service.settings.runStore.get(runId)
    if (record === null || record.principal !== this.#principal || record.agent !== this.#agent) return null
    this.#service.audit.note(this.#request, { runId, sessionId: record.sessionId ?? undefined })
    return record
  }

  async read (runId: string): Promise<{ sessionId: string | null, events: RunEvent[] } | null> {
    const record = await this.#owned(runId)
    if (record === null) return null
    return { sessionId: record.sessionId, events: await storedEvents(this.#service.settings.runStore, runId) }
  }

  follow (runId: string, after: number, signal: AbortSignal | undefined): AsyncIterable<RunEvent> {
    return followRun(this.#service.settings.runStore, runId, after, signal)
  }

  async cancel (runId: string): Promise<void> {
    if (await this.#owned(runId) === null) throw new RunRecordNotFoundError(runId)
    await cancelRun(this.#service, runId)
  }

  async decide (approvalId: string, decision: { approved: boolean, comment?: string }): Promise<void> {
    const { outcome } = await decideOwnApproval(this.#service, approvalId, { principal: this.#principal, agent: this.#agent }, decision)
    if (outcome !== 'decided') throw decisionError(approvalId, outcome)
  }
}
