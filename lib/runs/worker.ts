import type { FastifyBaseLogger } from 'fastify'
import { randomId } from '../core/ids.js'
import type { RunHost } from './host.js'
import { iso } from '../stores/common.js'
import { CANCELLED_ERROR } from '../stores/run-policy.js'
import type { LapsedRun, RunLease, RunRecord } from '../stores/types.js'
import { RunLog } from './log.js'
import { withGiven } from './sessions.js'
import { cancelledEnd, replayJournal } from './start.js'

export const DEFAULT_RUN_LEASE_MS = 30_000
export const DEFAULT_RUN_CONCURRENCY = 64
export const DEFAULT_MAX_RUN_ATTEMPTS = 3
/** Lapsed leases are looked for at least this often: a dead instance's runs are found within runLeaseMs + this. */
const MAX_SCAN_INTERVAL_MS = 5_000
/** Queued runs are also looked for this often, should a notification be lost: never the only signal. */
const CLAIM_POLL_MS = 5_000
const SCAN_BATCH = 100

/**
 * This instance's side of background runs (docs/runs.md): every run it runs is held by a lease, renewed while the run runs; queued
 * detachable runs (background runs, requeued runs) are claimed while there is room; runs whose instance is gone
 * (their lease lapsed) are requeued when their agent is resumable and they are detachable, else ended
 * `INSTANCE_LOST`. At a drain, claiming stops, and at its deadline the resumable detachable runs are handed off.
 */
export class RunWorker {
  /** this instance, as the run store knows it */
  readonly owner = randomId()
  readonly #service: RunHost
  readonly #leaseMs: number
  #log: FastifyBaseLogger | null = null
  #timers: NodeJS.Timeout[] = []
  #unwatchQueue: (() => void) | null = null
  #claiming = false
  #claimAgain = false
  /** the claim in progress: a hand-off waits for the runs it brings in */
  #claimed: Promise<void> = Promise.resolve()
  #stopped = true
  /** a run is fenced off once its lease has less than this left unrenewed (another instance may take it after) */
  readonly #margin: number
  #renewing = false
  #scanning = false

  constructor (service: RunHost) {
    this.#service = service
    this.#leaseMs = service.settings.runLeaseMs
    this.#margin = Math.floor(this.#leaseMs / 3)
  }

  /** A lease from now, for a run this instance starts. */
  lease (): RunLease {
    return { owner: this.owner, until: Date.now() + this.#leaseMs }
  }

  start (log: FastifyBaseLogger): void {
    this.#log = log
    this.#stopped = false
    const every = (ms: number, fn: () => void): void => {
      const timer = setInterval(fn, ms)
      timer.unref()
      this.#timers.push(timer)
    }
    // Every sixth of a lease, though a run is fenced only after two thirds unrenewed: a store or an event loop held
    // up for up to half a lease (measured: 400 ms stalls on a loaded 2-core machine) costs no run. Every third,
    // a stall of a third was enough.
    every(Math.max(1, Math.floor(this.#leaseMs / 6)), () => {
      void this.#renew()
      void this.#service.quotas?.renew()
    })
    // a timer of its own, twice as often as renewals: a renewal that hangs, or a loop held up, still fences in time;
    // after a stall, the answer of a renewal that came meanwhile is read first (I/O goes before setImmediate)
    every(Math.max(1, Math.floor(this.#leaseMs / 12)), () => setImmediate(() => this.#fence()))
    every(Math.min(MAX_SCAN_INTERVAL_MS, Math.max(1, Math.floor(this.#leaseMs / 2))), () => { void this.#scan() })
    every(CLAIM_POLL_MS, () => this.claim())
    this.#unwatchQueue = this.#service.settings.runStore.watchQueue(() => this.claim())
    this.claim()
  }

  /** No more claiming (a drain began, or the service closes). */
  stopClaiming (): void {
    this.#stopped = true
    this.#unwatchQueue?.()
    this.#unwatchQueue = null
  }

  /**
   * No more timers or claims; resolves once the claim on its way is done (what it brought in has started), so that
   * nothing is claimed here after: a run queued then is left to the instances that claim.
   */
  async stop (): Promise<void> {
    this.stopClaiming()
    for (const timer of this.#timers) clearInterval(timer)
    this.#timers = []
    await this.#claimed
  }

  /** Claims queued detachable runs while this instance has room (one claim at a time; a call meanwhile asks again). */
  claim (): void {
    if (this.#stopped) return
    if (this.#claiming) {
      this.#claimAgain = true
      return
    }
    this.#claiming = true
    this.#claimed = this.#claimSome().catch((err: unknown) => this.#log?.warn({ err }, 'could not claim queued runs'))
      .finally(() => {
        this.#claiming = false
        if (this.#claimAgain) {
          this.#claimAgain = false
          this.claim()
        }
      })
  }

  async #claimSome (): Promise<void> {
    const { settings, runs } = this.#service
    for (;;) {
      const room = settings.runConcurrency - runs.detachedCount
      if (room <= 0 || this.#stopped) return
      const lease = this.lease()
      const claimed = await settings.runStore.claim(lease, iso(Date.now()), room)
      if (claimed.length === 0) return
      let until = lease.until
      let held: Set<string> | null = null
      for (const [i, record] of claimed.entries()) {
        // A slow claim, or the last runs of a large one: the leases of those still to start are renewed, so that
        // each starts with two thirds of a lease ahead of it, time for its first renewal.
        if (Date.now() > until - 2 * this.#margin) {
          const sentAt = Date.now()
          held = new Set(await settings.runStore.renew(this.owner, claimed.slice(i).map((run) => run.runId), sentAt + this.#leaseMs))
          until = sentAt + this.#leaseMs
        }
        if (held?.has(record.runId) === false) {
          this.#notStarted(record.runId)
          continue
        }
        try {
          await this.#startClaimed(record, until)
        } catch (err) {
          this.#log?.error({ err, runId: record.runId }, 'could not start a claimed run')
        }
      }
    }
  }

  /** A claimed run starts here: its input from the store, its checkpoint when it is resumed, no client of its own. */
  async #startClaimed (record: RunRecord, leaseUntil: number): Promise<void> {
    const service = this.#service
    const { settings } = service
    this.#service.stats.recordQueueWait((Date.parse(record.startedAt!) - Date.parse(record.createdAt)) / 1000)
    const agent = settings.agents.get(record.agent)
    const spec = await settings.runStore.spec(record.runId)
    // a schedule's fire: from its due time to its start (docs/schedules.md)
    if (spec?.schedule !== undefined) this.#service.stats.recordScheduleLag((Date.parse(record.startedAt!) - Date.parse(spec.schedule.scheduledFor)) / 1000)
    const log = this.#log!.child({ runId: record.runId })
    // a replay starts from the checkpoint of the run it replays, until it has one of its own
    const replay = spec?.replay
    let resume: { step: number, state: unknown } | undefined = replay === undefined ? undefined : { step: replay.step, state: replay.state }
    if (record.attempt > 1 && agent?.resumable === true) {
      const checkpoint = await settings.checkpointStore.load(record.runId)
      if (checkpoint !== null) resume = { step: checkpoint.step, state: checkpoint.state }
    }
    const session = record.sessionId === null ? null : await settings.sessionStore.get(record.sessionId)
    const input = spec?.input ?? null
    // The stored input is the request's, as sent: the agent gets it as its schema gives it back (a Standard Schema
    // may transform it, asynchronously), and a schema that changed since (a new release) fails the run at its start.
    const validate = settings.agentSchemas.get(record.agent)?.validate
    let agentInput: unknown = input
    let refused: Error | undefined
    if (validate !== undefined) {
      try {
        agentInput = await validate(input, 'input')
      } catch (error) {
        refused = error as Error
      }
    }
    // A copy still running here lost its lease when the run was requeued (this instance seemed gone): it stops
    // before the next attempt starts, so that the run is never run twice at once, here either.
    service.runs.get(record.runId)?.detach('INSTANCE_LOST', true)
    // made ready too late (a store that hung): its lease may lapse before a renewal, and another instance take it
    if (this.#fenced(leaseUntil, Date.now())) return this.#notStarted(record.runId)
    await service.quotas?.keep(record.principal, record.runId)
    const sink = new RunLog({
      store: settings.runStore,
      runId: record.runId,
      retentionMs: settings.runRetentionMs,
      log,
      owner: this.owner,
      onFailure: () => { service.stats.count('runLogFailures') },
      onLost: () => { service.runs.get(record.runId)?.detach('INSTANCE_LOST', true) },
      onStored: (events) => { service.eventsStored(record, events) }
    })
    const run = service.runs.create({
      runId: record.runId,
      // an agent gone from this instance's options fails the run at its start, naming it
      agentName: record.agent,
      agent: agent === undefined
        ? { run: () => Promise.reject(new Error(`Agent "${record.agent}" is not served by this instance`)) }
        : refused === undefined ? agent : { run: () => Promise.reject(refused) },
      input,
      agentInput,
      sessionId: record.sessionId,
      principal: record.principal,
      requestId: record.requestId,
      trace: { traceId: record.traceId },
      history: withGiven(session?.messages, spec?.history),
      metadata: spec?.metadata,
      resume,
      timeoutMs: settings.requestTimeoutMs,
      exposeErrors: settings.exposeErrors,
      log,
      capabilities: service.capabilities,
      sink: service.quotas?.sink(record.principal, record.runId, sink) ?? sink,
      onDisconnect: 'continue',
      attempt: record.attempt,
      lastSeq: record.lastSeq,
      detachable: true,
      leaseUntil,
      schedule: spec?.schedule,
      journal: replayJournal(replay)
    })
    run.start()
    // its end makes room for the next
    void run.done.then(() => this.claim())
  }

  /** Its lease lapses, and the run is requeued (or ended) by whichever instance finds it. */
  #notStarted (runId: string): void {
    this.#log?.warn({ runId }, 'a claimed run was not started: the run store answered too late for its lease')
  }

  async #renew (): Promise<void> {
    // one renewal at a time: while one hangs, the fence stops the runs by the clock
    if (this.#renewing) return
    this.#renewing = true
    const { runs, settings } = this.#service
    const running = runs.list()
    const sentAt = Date.now()
    try {
      if (running.length > 0) {
        const held = new Set(await settings.runStore.renew(this.owner, running.map((run) => run.runId), sentAt + this.#leaseMs))
        for (const run of running) {
          // the store counts from when it was asked: that is when the renewed lease ends, by this clock
          if (held.has(run.runId)) run.leaseUntil = Math.max(run.leaseUntil, sentAt + this.#leaseMs)
          // a run whose lease is no longer ours was requeued or ended elsewhere: it stops here
          else run.detach('INSTANCE_LOST', true)
        }
      }
    } catch (err) {
      this.#log?.warn({ err }, 'could not renew the leases of this instance\'s runs')
    } finally {
      this.#renewing = false
    }
  }

  /**
   * A run whose lease is this close to its end, unrenewed, stops here: another instance may take it over once it
   * lapses, and a run is never run by two instances at once.
   */
  #fence (): void {
    const now = Date.now()
    for (const run of this.#service.runs.list()) {
      if (this.#fenced(run.leaseUntil, now) && run.detach('INSTANCE_LOST')) {
        this.#log?.warn({ runId: run.runId, leaseLeftMs: run.leaseUntil - now }, 'run stopped here: its lease could not be renewed in time')
      }
    }
  }

  #fenced (leaseUntil: number, now: number): boolean {
    return now > leaseUntil - this.#margin
  }

  async #scan (): Promise<void> {
    if (this.#scanning) return
    this.#scanning = true
    try {
      const now = Date.now()
      for (const lapsed of await this.#service.settings.runStore.lapsed(now, SCAN_BATCH)) await this.#recover(lapsed, now)
    } catch (err) {
      this.#log?.warn({ err }, 'could not look for runs whose instance was lost')
    } finally {
      this.#scanning = false
    }
  }

  /** A run whose instance is gone: requeued for its next attempt when it can go on elsewhere, else ended. */
  async #recover ({ record, detachable, cancelRequested }: LapsedRun, now: number): Promise<void> {
    const { settings } = this.#service
    const store = settings.runStore
    const resumable = settings.agents.get(record.agent)?.resumable === true
    if (!cancelRequested && detachable && resumable && record.attempt < settings.maxRunAttempts) {
      // (a cancel asked for since it was found lapsed: the requeue ends it cancelled instead)
      const requeued = await store.requeue(record.runId, { lapsedBefore: now }, 'INSTANCE_LOST', cancelledEnd(), settings.runRetentionMs)
      if (requeued !== null) {
        if (requeued.status === 'queued') this.#log?.info({ runId: record.runId, attempt: requeued.attempt }, 'run requeued: its instance was lost')
        else this.#log?.warn({ runId: record.runId, code: 'CANCELLED' }, 'run ended: its instance was lost')
        await this.#told(requeued)
      }
      return
    }
    const error = cancelRequested
      ? { ...CANCELLED_ERROR }
      : { code: 'INSTANCE_LOST', message: record.attempt >= settings.maxRunAttempts && detachable && resumable ? `The instance running the run was lost, after ${record.attempt} attempts` : 'The instance running the run was lost' }
    const end = { status: cancelledOrFailed(error.code), endedAt: iso(Date.now()), error }
    const ended = await store.abandon(record.runId, now, end, settings.runRetentionMs)
    if (ended !== null) {
      this.#log?.warn({ runId: record.runId, code: error.code }, 'run ended: its instance was lost')
      await this.#told(ended)
    }
  }

  /** The listeners of stored events (webhooks) hear the event the store wrote itself (requeued, ended). */
  async #told (record: RunRecord): Promise<void> {
    this.#service.eventsStored(record, await this.#service.settings.runStore.events(record.runId, record.lastSeq - 1, 1))
  }

  /**
   * At a drain's deadline: the runs that can go on elsewhere (detachable, of a resumable agent) are requeued for
   * another instance rather than ended; the others are left to the drain's SHUTDOWN.
   */
  async handOff (): Promise<void> {
    const { settings, runs } = this.#service
    // runs claimed as the drain began are started by now, and handed off with the others
    await this.#claimed
    await Promise.all(runs.list().filter((run) => run.options.detachable && run.options.agent.resumable === true).map(async (run) => {
      // a run whose result is in completes here instead
      if (!run.detach('SHUTDOWN')) return
      // its last events first: the log goes on, without a gap, where the next attempt picks it up
      await (run.options.sink as RunLog | null)?.flush()
      try {
        // (a run whose cancel was asked for ends cancelled instead, its 202 kept: its quota slot is given back)
        const requeued = await settings.runStore.requeue(run.runId, { owner: this.owner }, 'SHUTDOWN', cancelledEnd(), settings.runRetentionMs)
        if (requeued === null) return
        if (requeued.status !== 'queued') await this.#service.quotas?.release(requeued.principal, requeued.runId)
        await this.#told(requeued)
      } catch (err) {
        // its lease lapses, and another instance requeues it then
        this.#log?.warn({ err, runId: run.runId }, 'could not hand a run off at shutdown')
      }
    }))
  }
}

function cancelledOrFailed (code: string): 'cancelled' | 'failed' {
  return code === 'CANCELLED' ? 'cancelled' : 'failed'
}
