import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify'
import { AuditWriter } from './writer.js'
import { randomId } from '../core/ids.js'
import { RequestSlot, requestContextOf } from '../core/request-context.js'
import type { RunAudit, StatsRecorder } from '../runs/host.js'
import { iso } from '../stores/common.js'
import { MemoryAuditStore } from '../stores/memory.js'
import type { AuditEntry, AuditStore } from '../stores/types.js'

/** What a request's audit entry says beyond the request itself, noted by the routes and plugins that know it. */
export interface AuditNote {
  agent?: string
  runId?: string
  sessionId?: string
  idempotencyKey?: string
  replayed?: boolean
}

interface AuditState extends AuditNote {
  /** set once the request's one entry is written */
  audited: boolean
}

/** Whether a request changes state: its audit entry is committed before its answer (docs/stores.md). */
export function isStateChanging (method: string): boolean {
  return method === 'POST' || method === 'DELETE'
}

/**
 * Every request's one audit entry and its place in the stats. Routes and plugins `note()` what they learn
 * (the agent, the run, the key); the audit plugin's onResponse hook, or a hijacked reply's own end, `record()`s it.
 */
export class AuditLog implements RunAudit {
  readonly writer: AuditWriter
  readonly #stats: StatsRecorder
  readonly #slot = new RequestSlot<AuditState>('audit')

  /** false for the memory ring: nothing of it survives the process, so nothing waits for it */
  readonly durable: boolean

  constructor (store: AuditStore, stats: StatsRecorder, log: FastifyBaseLogger) {
    this.#stats = stats
    this.writer = new AuditWriter(store, log, (count) => { stats.count('auditFailures', count) })
    this.durable = !(store instanceof MemoryAuditStore)
  }

  /** Resolves once every entry written so far is in the store (or counted as lost). */
  flush (): Promise<void> {
    return this.writer.flush()
  }

  declare (fastify: FastifyInstance): void {
    this.#slot.declare(fastify)
  }

  #state (request: FastifyRequest): AuditState {
    let state = this.#slot.get(request)
    if (state === null) {
      state = { audited: false }
      this.#slot.set(request, state)
    }
    return state
  }

  note (request: FastifyRequest, note: AuditNote): void {
    Object.assign(this.#state(request), note)
  }

  /**
   * Writes the request's one entry behind and counts it: by the onResponse hook, or first by the route of a
   * hijacked reply (a WebSocket upgrade), whose onResponse hook runs only when its raw response finishes.
   */
  record (request: FastifyRequest, status: number): void {
    const entry = this.#entry(request, status)
    if (entry !== null) this.writer.write(entry)
  }

  /**
   * The same, for a state-changing request (docs/stores.md): resolves once the entry is in the audit store, so that
   * its answer (or a stream's terminal event) goes out after it. A store that fails is counted and logged, and
   * the answer goes out all the same (README, Deviations).
   */
  commit (request: FastifyRequest, status: number): Promise<void> {
    const entry = this.#entry(request, status)
    if (entry === null) return Promise.resolve()
    if (this.durable) return this.writer.commit(entry)
    this.writer.write(entry)
    return Promise.resolve()
  }

  /** The request's one entry, counted; null when it was made already. */
  #entry (request: FastifyRequest, status: number): AuditEntry | null {
    const context = requestContextOf(request)
    const state = this.#slot.get(request)
    if (state?.audited === true) return null
    if (state === null) this.#slot.set(request, { audited: true })
    else state.audited = true
    const durationMs = Math.round((performance.now() - context.startedAt) * 100) / 100
    // the route's config: a hook of an outer scope (rate limit, drain) may answer an admin request too
    const admin = context.config.admin === true
    this.#stats.recordRequest(status, durationMs, admin, context.route)
    // The id is ours: a client-chosen X-Request-ID is recorded as requestId and cannot collide with it.
    const entry: AuditEntry = {
      id: randomId(),
      at: iso(Date.now()),
      requestId: context.requestId,
      method: request.method,
      route: context.route,
      url: request.url,
      status,
      durationMs,
      principal: context.principal,
      ip: request.ip
    }
    if (state !== null) {
      if (state.agent !== undefined) entry.agent = state.agent
      if (state.runId !== undefined) entry.runId = state.runId
      if (state.sessionId !== undefined) entry.sessionId = state.sessionId
    }
    const traceId = context.knownTraceId
    if (traceId !== undefined) entry.traceId = traceId
    if (state !== null) {
      if (state.idempotencyKey !== undefined) entry.idempotencyKey = state.idempotencyKey
      if (state.replayed !== undefined) entry.replayed = state.replayed
    }
    if (admin) entry.admin = true
    return entry
  }
}
