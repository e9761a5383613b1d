// Webhooks (docs/webhooks.md): the events a run stores are put in an outbox (the webhook store), and delivered from
// it by whichever instance claims them, signed the Standard Webhooks way by the `standardwebhooks` package.
import { createHash } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { Webhook } from 'standardwebhooks'
import { iso } from '../stores/common.js'
import type { NewWebhookDelivery, StoredEvent, WebhookAttempt, WebhookDelivery, WebhookOutcome } from '../stores/types.js'
import type { WebhookPayload } from '../../schemas/webhooks.js'
import { randomId } from '../core/ids.js'
import type { RunIdentity, StatsRecorder, StoredEventsListener } from '../runs/host.js'
import { packageVersion } from '../core/version.js'
import type { WebhookSettings } from './options.js'

export interface WebhookTuning {
  /** an attempt without an answer by then fails */
  attemptTimeoutMs: number
  /** the delay before the first retry; each next one doubles it */
  firstRetryMs: number
  /** the longest delay between two attempts */
  maxRetryMs: number
  /** how long after its event a delivery is attempted, before it is given up */
  windowMs: number
  /** how often due deliveries are looked for: retries, and deliveries enqueued on other instances */
  pollMs: number
  /** a claim's lease: far longer than an attempt, so that an attempt ends before anyone else may claim it */
  leaseMs: number
  /** at most this many attempts at once per instance */
  maxInFlight: number
  /** deliveries the outbox refused (an outage), kept in memory to be tried again: beyond this many, the oldest are lost */
  maxBacklog: number
}

export const DEFAULT_WEBHOOK_TUNING: Readonly<WebhookTuning> = Object.freeze({
  attemptTimeoutMs: 10_000,
  firstRetryMs: 10_000,
  maxRetryMs: 60 * 60_000,
  windowMs: 24 * 60 * 60_000,
  pollMs: 1_000,
  leaseMs: 60_000,
  maxInFlight: 16,
  maxBacklog: 10_000
})

/** What the dispatcher needs of the service: its figures, whether it drains, and the run events as they are stored. */
export interface WebhookHost {
  readonly stats: Pick<StatsRecorder, 'recordWebhookDelivery'>
  readonly drain: { readonly draining: boolean }
  onStoredEvents(listener: StoredEventsListener): void
}

/**
 * The wait after failed attempt number `attempt`: doubling from `firstRetryMs` up to `maxRetryMs`, give or take 20 %
 * so that deliveries failing together (an endpoint down) do not all come back together.
 */
export function retryDelay (attempt: number, given: Readonly<WebhookTuning> = DEFAULT_WEBHOOK_TUNING, random = Math.random()): number {
  const base = Math.min(given.firstRetryMs * 2 ** Math.min(attempt - 1, 40), given.maxRetryMs)
  return Math.round(base * (0.8 + 0.4 * random))
}

/** The `webhook-id` of an event: the same event always gets the same id, so enqueuing it again changes nothing. */
export function webhookId (runId: string, event: StoredEvent): string {
  const digest = createHash('sha256').update(`${runId}\n${event.seq}\n${event.type}\n${event.data}`).digest('base64url')
  return `msg_${digest.slice(0, 32)}`
}

/** The body: who the run is, then the event's own data (a value that is not an object goes under `value`). */
export function webhookPayload (run: RunIdentity, event: StoredEvent, at: number): string {
  const identity = { runId: run.runId, agent: run.agent, sessionId: run.sessionId, principal: run.principal }
  const own = JSON.parse(event.data) as unknown
  let data: WebhookPayload['data'] & Record<string, unknown> = identity
  // the identity comes first and wins: an agent's custom data cannot pose as another run or principal
  if (typeof own === 'object' && own !== null && !Array.isArray(own)) data = { ...identity, ...own, ...identity }
  else if (own !== null) data = { ...identity, value: own }
  const payload: WebhookPayload = { type: event.type, timestamp: iso(at), data }
  return JSON.stringify(payload)
}

/** Why an attempt got no answer, for its record. */
export function describeFailure (error: unknown, timeoutMs: number): string {
  const { name, message, cause } = error as { name?: unknown, message?: unknown, cause?: { message?: unknown } }
  if (name === 'TimeoutError') return `no answer within ${timeoutMs} ms`
  // fetch's "fetch failed" says nothing: its cause says what (connect ECONNREFUSED 127.0.0.1:…)
  return String(typeof cause?.message === 'string' ? cause.message : message)
}

/**
 * This instance's side of the webhooks: it enqueues a delivery for each subscribed event its runs store, and delivers
 * what it claims from the outbox — its own deliveries at once, retries and other instances' deliveries when a poll
 * finds them due. Claims stop when a drain begins; attempts on their way are cut at close (and due again at once).
 */
export class WebhookDispatcher {
  /** this instance, as the outbox's leases know it */
  readonly owner = randomId()
  readonly #service: WebhookHost
  readonly #settings: WebhookSettings
  readonly #tuning: Readonly<WebhookTuning>
  readonly #signer: Webhook
  readonly #log: FastifyBaseLogger
  readonly #closing = new AbortController()
  readonly #inFlight = new Set<Promise<void>>()
  /** the signals of the attempts on their way (see #attempt) */
  readonly #signals = new Set<AbortSignal>()
  #backlog: NewWebhookDelivery[] = []
  #enqueuing: Promise<void> | null = null
  #claiming: Promise<void> | null = null
  #claimAgain = false
  #timer: NodeJS.Timeout | undefined
  #running = false

  /** `tuning`: the defaults' timings are the ones documented (docs/webhooks.md); tests run retries in milliseconds */
  constructor (service: WebhookHost, settings: WebhookSettings, log: FastifyBaseLogger, tuning: Partial<WebhookTuning> = {}) {
    this.#service = service
    this.#settings = settings
    this.#tuning = Object.freeze({ ...DEFAULT_WEBHOOK_TUNING, ...tuning })
    this.#signer = new Webhook(settings.secret)
    this.#log = log
    service.onStoredEvents((run, events) => this.#told(run, events))
  }

  start (): void {
    this.#running = true
    this.#timer = setInterval(() => {
      this.#enqueue()
      this.wake()
    }, this.#tuning.pollMs)
    this.#timer.unref()
    this.wake()
  }

  /** Stops claiming, cuts the attempts on their way (each recorded, due again at once), and enqueues what it still holds. */
  async stop (): Promise<void> {
    this.#running = false
    clearInterval(this.#timer)
    this.#closing.abort()
    await this.#claiming
    await Promise.all(this.#inFlight)
    await this.#enqueuing
    // one last try for what the outbox refused so far
    this.#enqueue()
    await this.#enqueuing
    this.#lose(this.#backlog.length)
  }

  #told (run: RunIdentity, events: readonly StoredEvent[]): void {
    const now = Date.now()
    let added = false
    for (const event of events) {
      if (!this.#settings.events.has(event.type)) continue
      this.#backlog.push({
        id: webhookId(run.runId, event),
        type: event.type,
        runId: run.runId,
        payload: webhookPayload(run, event, now),
        createdAt: now,
        dueAt: now,
        giveUpAt: now + this.#tuning.windowMs
      })
      added = true
    }
    if (added) this.#enqueue()
  }

  /** One enqueue at a time; the deliveries told meanwhile make the next batch. A refused batch is tried again by the poll. */
  #enqueue (): void {
    if (this.#enqueuing !== null || this.#backlog.length === 0) return
    const batch = this.#backlog
    this.#backlog = []
    this.#enqueuing = this.#settings.store.enqueue(batch).then(() => {
      this.#enqueuing = null
      this.wake()
      this.#enqueue()
    }, (err: unknown) => {
      this.#enqueuing = null
      this.#backlog = batch.concat(this.#backlog)
      const over = this.#backlog.length - this.#tuning.maxBacklog
      if (over > 0) this.#backlog.splice(0, over)
      this.#log.warn({ err, deliveries: this.#backlog.length }, 'could not put webhook deliveries in the outbox: tried again shortly')
      if (over > 0) this.#lose(over)
    })
  }

  #lose (count: number): void {
    if (count === 0) return
    for (let i = 0; i < count; i++) this.#service.stats.recordWebhookDelivery('lost')
    this.#log.error({ deliveries: count }, 'webhook deliveries lost: the outbox refused them for too long')
  }

  /** Claims due deliveries while there is room (one claim at a time; a call meanwhile asks again). */
  wake (): void {
    if (!this.#running || this.#service.drain.draining) return
    if (this.#claiming !== null) {
      this.#claimAgain = true
      return
    }
    this.#claiming = this.#claimSome()
      .catch((err: unknown) => this.#log.warn({ err }, 'could not claim webhook deliveries'))
      .finally(() => {
        this.#claiming = null
        if (this.#claimAgain) {
          this.#claimAgain = false
          this.wake()
        }
      })
  }

  async #claimSome (): Promise<void> {
    const { store } = this.#settings
    for (;;) {
      const room = this.#tuning.maxInFlight - this.#inFlight.size
      if (room <= 0 || !this.#running || this.#service.drain.draining) return
      const now = Date.now()
      const claimed = await store.claim({ owner: this.owner, until: now + this.#tuning.leaseMs }, now, room)
      for (const delivery of claimed) {
        const attempt = this.#attempt(delivery).finally(() => {
          this.#inFlight.delete(attempt)
          this.wake()
        })
        this.#inFlight.add(attempt)
      }
      if (claimed.length < room) return
    }
  }

  async #attempt (delivery: WebhookDelivery): Promise<void> {
    const { attemptTimeoutMs } = this.#tuning
    const started = Date.now()
    const at = new Date(started)
    let status: number | null = null
    let error: string | null = null
    // held here for the attempt's life: undici holds the signal it is given weakly, and on some Node 20 releases a
    // composite of AbortSignal.any() nothing else holds is collected before close aborts it (the attempt then hangs)
    const signal = AbortSignal.any([AbortSignal.timeout(attemptTimeoutMs), this.#closing.signal])
    this.#signals.add(signal)
    try {
      const response = await fetch(this.#settings.url, {
        method: 'POST',
        body: delivery.payload,
        // a redirect is not a 2xx: the endpoint is the one configured, nowhere else
        redirect: 'manual',
        headers: {
          'content-type': 'application/json',
          'user-agent': `fastify-agents/${packageVersion}`,
          'webhook-id': delivery.id,
          'webhook-timestamp': String(Math.floor(started / 1000)),
          'webhook-signature': this.#signer.sign(delivery.id, at, delivery.payload)
        },
        signal
      })
      status = response.status
      await response.body?.cancel()
    } catch (err) {
      error = this.#closing.signal.aborted ? 'the instance closed during the attempt' : describeFailure(err, attemptTimeoutMs)
    } finally {
      this.#signals.delete(signal)
    }
    const now = Date.now()
    const delivered = status !== null && status >= 200 && status < 300
    // cut by the close: due again at once, for an instance that stays
    const cut = !delivered && this.#closing.signal.aborted
    const outcome: WebhookOutcome = delivered ? 'delivered' : cut || now < delivery.giveUpAt ? 'retried' : 'failed'
    const attempt: WebhookAttempt = {
      webhookId: delivery.id,
      event: delivery.type,
      runId: delivery.runId,
      attempt: delivery.attempt,
      at: iso(started),
      status,
      error,
      durationMs: now - started,
      outcome
    }
    this.#service.stats.recordWebhookDelivery(outcome)
    const dueAt = cut ? now : Math.min(now + retryDelay(delivery.attempt, this.#tuning), delivery.giveUpAt)
    const log = { webhookId: delivery.id, runId: delivery.runId, event: delivery.type, attempt: delivery.attempt, status, error }
    if (outcome === 'failed') this.#log.warn(log, 'webhook delivery given up: no 2xx answer within the retry window')
    else if (outcome === 'retried') this.#log.info({ ...log, retryAt: iso(dueAt) }, 'webhook attempt failed: it will be retried')
    try {
      if (!await this.#settings.store.record(attempt, this.owner, { dueAt, retentionMs: this.#settings.retentionMs })) {
        this.#log.warn(log, 'webhook attempt recorded, but its delivery had been claimed again meanwhile (this instance stalled past its lease)')
      }
    } catch (err) {
      // its lease runs out, and the delivery is attempted again then
      this.#log.warn({ ...log, err }, 'could not record a webhook attempt')
    }
  }
}
