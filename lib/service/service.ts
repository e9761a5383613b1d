import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import { storeCapabilities } from '../runs/capabilities.js'
import type { RunCapabilities, RunEvent } from '../runs/run.js'
import { RunRegistry } from '../runs/registry.js'
import { SseHeartbeat } from '../runs/sse.js'
import { RunWorker } from '../runs/worker.js'
import { AuditLog } from '../audit/log.js'
import type { Access } from '../core/access.js'
import { AUTH } from './composition.js'
import { Drain } from './drain.js'
import { MissingPluginError } from '../core/errors.js'
import type { Settings } from './settings.js'
import type { StoredEvent } from '../stores/types.js'
import type { RunHost, RunIdentity, StoredEventsListener } from '../runs/host.js'
import { ServiceStats } from './stats.js'
import { WebhookDispatcher } from '../webhooks/dispatcher.js'
import { Quotas } from '../quotas/quotas.js'
import { Scheduler } from '../schedules/scheduler.js'
import type { FireOutcome, SchedulerHost } from '../schedules/scheduler.js'

// Every augmentation of Fastify's types the service makes, in one place.
declare module 'fastify' {
  interface FastifyInstance {
    /** The state every fastify-agents plugin shares (the core plugin's decorator). */
    agentService: AgentServiceCore
  }
  interface FastifyContextConfig {
    /** public routes (health): no auth, no rate limit, answered while draining */
    public?: boolean
    /** what the route needs under JWT auth beyond a valid token (`agents:run`, `approvals:read`, …) */
    access?: Access
    /** Admin API routes: their own bearer token, no service auth, counted apart in the stats */
    admin?: boolean
    /** the operator console's page and assets: served without the Admin API token (they hold no data; the page asks for it) */
    adminPublic?: boolean
    /** the route honours `Idempotency-Key` (POST /v1/agents/:name/runs, POST /v1/approvals/:id) */
    idempotency?: boolean
  }
}

export type { RunIdentity, StoredEventsListener }

export type AccessCheck = (request: FastifyRequest, access: Access, agent?: string) => boolean
/** Settles what a streamed run's request holds (an idempotency key) before its stream ends. */
export type StreamSettler = (request: FastifyRequest, final: RunEvent | undefined) => Promise<void>

const PURGE_INTERVAL_MS = 5_000
const PURGE_BATCH = 1_000

const everyone: AccessCheck = () => true
/** With the auth option set, nothing is granted until the auth plugin is there to say who the request is. */
const nobodyWithoutAuthPlugin: AccessCheck = () => {
  throw new MissingPluginError(`the auth option is set but ${AUTH.exported} is not registered: nobody is granted access until it is`)
}
const nothingToSettle: StreamSettler = async () => {}

/**
 * The state every plugin shares, as the `agentService` decorator: settings, figures, runs in flight, the audit
 * log, the drain. Cross-cutting operations hang off it, so that a route never imports another plugin: the auth
 * plugin installs the access check, the idempotency plugin the settling of streamed runs.
 */
export class AgentServiceCore implements RunHost, SchedulerHost {
  readonly settings: Settings
  readonly stats: ServiceStats
  readonly runs: RunRegistry
  readonly audit: AuditLog
  readonly drain: Drain
  readonly worker: RunWorker
  readonly heartbeat = new SseHeartbeat()
  readonly capabilities: RunCapabilities
  /** delivers the `webhooks` option's events; null without it */
  readonly webhooks: WebhookDispatcher | null
  /** the `quotas` option's admissions and slots; null without it */
  readonly quotas: Quotas | null
  /** fires the schedules (docs/schedules.md) */
  readonly scheduler: Scheduler
  readonly startedAt = new Date().toISOString()
  #accessCheck: AccessCheck
  #streamSettler = nothingToSettle
  #openApiDocument: (() => Record<string, unknown>) | null = null

  constructor (settings: Settings, log: FastifyBaseLogger) {
    this.settings = settings
    this.#accessCheck = settings.auth === null ? everyone : nobodyWithoutAuthPlugin
    this.stats = new ServiceStats(settings.agents.keys())
    this.runs = new RunRegistry(this.stats, settings.runStore)
    this.audit = new AuditLog(settings.auditStore, this.stats, log)
    this.worker = new RunWorker(this)
    this.drain = new Drain(this.runs, this.worker)
    this.capabilities = storeCapabilities(settings, this.stats)
    this.webhooks = settings.webhooks === null ? null : new WebhookDispatcher(this, settings.webhooks, log, settings.injected.webhookTuning)
    this.quotas = settings.quotas === null ? null : new Quotas(settings.quotas, settings.runLeaseMs, log)
    this.scheduler = new Scheduler(this, settings.scheduleStore, settings.injected.scheduleHooks)
  }

  recordScheduleFire (agent: string, outcome: FireOutcome): void {
    this.stats.recordScheduleFire(agent, outcome)
  }

  #purger: NodeJS.Timeout | null = null

  /** Starts purging runs, ended webhook deliveries, old audit entries and approvals past their retention, in bounded batches (a failure logged, never thrown). */
  startPurging (log: FastifyBaseLogger, intervalMs = PURGE_INTERVAL_MS): void {
    let purging = false
    this.#purger = setInterval(() => {
      if (purging) return
      purging = true
      void Promise.all([
        this.settings.runStore.purge(Date.now(), PURGE_BATCH).catch((err: unknown) => log.warn({ err }, 'could not purge expired runs')),
        this.settings.webhooks?.store.purge(Date.now(), PURGE_BATCH).catch((err: unknown) => log.warn({ err }, 'could not purge ended webhook deliveries')),
        this.settings.quotas?.store.purge(Date.now(), PURGE_BATCH).catch((err: unknown) => log.warn({ err }, 'could not purge expired quota counts')),
        // optional in the interfaces: the memory stores are bounded instead
        this.settings.auditStore.purge?.(Date.now() - this.settings.auditRetentionMs, PURGE_BATCH)
          .catch((err: unknown) => log.warn({ err }, 'could not purge old audit entries')),
        this.settings.approvalStore.purge?.(Date.now() - this.settings.approvalRetentionMs, PURGE_BATCH)
          .catch((err: unknown) => log.warn({ err }, 'could not purge old approvals'))
      ]).finally(() => { purging = false })
    }, intervalMs)
    this.#purger.unref()
  }

  stopPurging (): void {
    if (this.#purger !== null) clearInterval(this.#purger)
    this.#purger = null
  }

  /** Whether the request's principal has `access` (on `agent`): true when auth is off; throws when it is on without the auth plugin. */
  hasAccess (request: FastifyRequest, access: Access, agent?: string): boolean {
    return this.#accessCheck(request, access, agent)
  }

  useAccessCheck (check: AccessCheck): void {
    this.#accessCheck = check
  }

  /** Before a streamed run's response ends: records its final event for replay, or gives its key back. */
  settleStream (request: FastifyRequest, final: RunEvent | undefined): Promise<void> {
    return this.#streamSettler(request, final)
  }

  useStreamSettler (settle: StreamSettler): void {
    this.#streamSettler = settle
  }

  /** The OpenAPI document of the mounted routes (after `ready()`). */
  openApiDocument (): Record<string, unknown> {
    if (this.#openApiDocument === null) throw new Error('the OpenAPI document is built by the fastify-agents plugin, after ready()')
    return this.#openApiDocument()
  }

  readonly #storedEventsListeners: StoredEventsListener[] = []

  /** Listens to every run's events once stored (the webhooks' outbox is filled from here). */
  onStoredEvents (listener: StoredEventsListener): void {
    this.#storedEventsListeners.push(listener)
  }

  /** For the run log (and the recovery, whose events the store writes itself): these events are stored. */
  eventsStored (run: RunIdentity, events: readonly StoredEvent[]): void {
    for (const listener of this.#storedEventsListeners) listener(run, events)
  }

  useOpenApiDocument (build: () => Record<string, unknown>): void {
    this.#openApiDocument = build
  }
}
