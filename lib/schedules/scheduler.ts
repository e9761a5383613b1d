// This instance's side of schedules (docs/schedules.md): one timer for the earliest wake-up of every schedule, armed
// again whenever the schedule store says a schedule changed (here or on another instance), never a walk through the
// table. At a wake-up the due rows are read and each is decided by policy.ts and written back by compare-and-set on
// its revision: of instances waking together one claims a due time, the others' writes fail and they move on. A fire
// is a claim (the run's id chosen, a deadline to start it) written before its run is stored, and settled after: an
// instance killed in between leaves a claim that lapses, and whichever instance wakes for it stores the same run.
import type { FastifyBaseLogger } from 'fastify'
import { randomId } from '../core/ids.js'
import { newTraceId } from '../core/trace-context.js'
import type { RunHost } from '../runs/host.js'
import { queueRun } from '../runs/start.js'
import type { ScheduleRow, ScheduleState, ScheduleStore } from '../stores/types.js'
import { planWake, settleFire, wakeOf } from './policy.js'

/** The scheduler looks at the next wake-up at least this often, should a notification be lost: an indexed read. */
export const MAX_SLEEP_MS = 30_000
/** Due rows read at once; instances waking together take them in their own random order, so they seldom collide. */
const DUE_BATCH = 200
/** Fires under way at once on one instance. */
const FIRING = 16

export type FireOutcome = 'started' | 'skipped' | 'failed'

/** What the scheduler needs of the service: the runs, and where a fire's outcome is counted. */
export interface SchedulerHost extends RunHost {
  recordScheduleFire(agent: string, outcome: FireOutcome): void
}

/** For tests: what a fault test does between a claim and its run (a kill -9 there leaves the claim to be taken over). */
export interface SchedulerHooks {
  afterClaim?: (row: ScheduleRow) => Promise<void> | void
}

export class Scheduler {
  readonly #host: SchedulerHost
  readonly #store: ScheduleStore
  readonly #claimMs: number
  readonly #hooks: SchedulerHooks
  #log: FastifyBaseLogger | null = null
  #timer: NodeJS.Timeout | null = null
  #unwatch: (() => void) | null = null
  #stopped = true
  #waking: Promise<void> | null = null
  #again = false
  /** fires under way: stop() waits for them */
  readonly #firing = new Set<Promise<void>>()

  constructor (host: SchedulerHost, store: ScheduleStore, hooks: SchedulerHooks = {}) {
    this.#host = host
    this.#store = store
    this.#claimMs = host.settings.runLeaseMs
    this.#hooks = hooks
  }

  /** this instance, as the claims name it */
  get owner (): string {
    return this.#host.worker.owner
  }

  start (log: FastifyBaseLogger): void {
    this.#log = log
    this.#stopped = false
    this.#unwatch = this.#store.watch(() => this.wake())
    this.wake()
  }

  async stop (): Promise<void> {
    this.#stopped = true
    this.#unwatch?.()
    this.#unwatch = null
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    await this.#waking
    await Promise.all(this.#firing)
  }

  /** Looks at the due schedules now (one look at a time: a wake-up during one makes one more after it). */
  wake (): void {
    /* c8 ignore next: a store's notification landing after stop() */
    if (this.#stopped) return
    if (this.#waking !== null) {
      this.#again = true
      return
    }
    this.#waking = this.#look()
      .catch((err: unknown) => {
        this.#log?.warn({ err }, 'schedules: could not look at the due schedules')
        // the store is away: look again a little later (the timer below), not in a tight loop
        this.#arm(Date.now() + 1_000)
      })
      .finally(() => {
        this.#waking = null
        if (this.#again) {
          this.#again = false
          this.wake()
        }
      })
  }

  async #look (): Promise<void> {
    for (;;) {
      const rows = await this.#store.due(Date.now(), DUE_BATCH)
      shuffle(rows)
      await eachLimited(rows, FIRING, async (row) => this.#decide(row))
      if (rows.length < DUE_BATCH) break
    }
    const next = await this.#store.nextWake()
    this.#arm(next ?? Date.now() + MAX_SLEEP_MS)
  }

  #arm (at: number): void {
    if (this.#stopped) return
    if (this.#timer !== null) clearTimeout(this.#timer)
    const delay = Math.min(Math.max(at - Date.now(), 0), MAX_SLEEP_MS)
    this.#timer = setTimeout(() => {
      this.#timer = null
      this.wake()
    }, delay)
    this.#timer.unref()
  }

  /** One due row: decided, written back (if no other instance wrote first), then its fire carried out. */
  async #decide (row: ScheduleRow): Promise<void> {
    const now = Date.now()
    const { schedule } = row.state
    const previous = row.state.waiting?.after ?? (schedule.overlap === 'allow' ? null : schedule.lastRunId)
    const step = planWake(row.state, {
      now,
      owner: this.owner,
      claimMs: this.#claimMs,
      previousInProgress: previous !== null && await this.#inProgress(previous),
      newRunId: randomId
    })
    if (step.kind === 'none') {
      // a wake-up that finds nothing to do leaves the row's wakeAt right (a stale one would wake every instance again);
      // with nothing to do, that is never a time already past
      const wakeAt = wakeOf(row.state, now)
      if (wakeAt !== row.wakeAt) await this.#store.write(row.id, row.revision, { wakeAt, state: row.state })
      return
    }
    const written = await this.#store.write(row.id, row.revision, { wakeAt: wakeOf(step.state, now), state: step.state })
    // another instance wrote first: it decided this due time
    if (written === null) return
    if (step.kind === 'skip') {
      this.#host.recordScheduleFire(schedule.agent, 'skipped')
      return
    }
    if (step.kind === 'wait') {
      // told when the run in the way ends, not only at the recheck
      if (step.state.waiting !== null) this.#wakeWhenEnded(step.state.waiting.after)
      return
    }
    const fire = (async () => {
      await this.#hooks.afterClaim?.(written)
      await this.#fire(written, step.recovered)
    })()
    this.#firing.add(fire)
    await fire.finally(() => this.#firing.delete(fire))
  }

  async #inProgress (runId: string): Promise<boolean> {
    const record = await this.#host.settings.runStore.get(runId)
    return record !== null && (record.status === 'queued' || record.status === 'running')
  }

  #wakeWhenEnded (runId: string): void {
    const stop = this.#host.settings.runStore.watch(runId, () => {
      stop()
      this.wake()
    })
    // the recheck covers it should no change come: the watch goes with it
    setTimeout(stop, this.#claimMs).unref()
  }

  /** The claimed due time's run stored (unless it was already: a fire taken over), then the claim settled. */
  async #fire (row: ScheduleRow, recovered: boolean): Promise<void> {
    const fire = row.state.fire!
    const { schedule } = row.state
    const settings = this.#host.settings
    // a claim that ran out meanwhile (a store that hung) is another instance's to take over: storing its run here
    // too could start it twice
    if (Date.now() > fire.until - Math.floor(this.#claimMs / 3)) return
    let started: { runId: string, at: number } | null = null
    if (recovered && await settings.runStore.get(fire.runId) !== null) {
      started = { runId: fire.runId, at: Date.now() }
    } else {
      try {
        await queueRun({
          service: this.#host,
          agent: schedule.agent,
          request: {
            input: schedule.input,
            sessionId: schedule.sessionId ?? undefined,
            metadata: schedule.metadata,
            // a schedule's session may be busy with the caller's own run: the fire waits for it
            multitask: 'enqueue'
          },
          caller: { principal: schedule.principal, requestId: randomId(), trace: { traceId: newTraceId() } },
          log: this.#log!,
          runId: fire.runId,
          schedule: { id: schedule.id, scheduledFor: fire.scheduledFor }
        })
        started = { runId: fire.runId, at: Date.now() }
      } catch (err) {
        // the run cannot be stored as it is (an agent gone, a quota, a session deleted): counted, not tried again
        // at once; a store that failed leaves the claim to lapse, and the fire to be taken over
        if (isStoreFailure(err)) throw err
        this.#log?.warn({ err, scheduleId: schedule.id, scheduledFor: fire.scheduledFor }, 'schedules: a fire could not start its run')
      }
    }
    this.#host.recordScheduleFire(schedule.agent, started === null ? 'failed' : 'started')
    await this.#settle(row, fire.runId, started)
  }

  /** The claim let go (compared on the revision; read again when another write, a PATCH, came in between). */
  async #settle (row: ScheduleRow, fireRunId: string, started: { runId: string, at: number } | null): Promise<void> {
    let current: ScheduleRow | null = row
    while (current !== null) {
      const state: ScheduleState | null = settleFire(current.state, fireRunId, started)
      /* c8 ignore next: the fire settled by the instance that took it over first (scheduler-claims.test.ts races for it; the event loop decides who) */
      if (state === null) return
      if (await this.#store.write(current.id, current.revision, { wakeAt: wakeOf(state, Date.now()), state }) !== null) return
      current = await this.#store.get(row.id)
    }
  }
}

/** A store that failed or did not answer (its deadline): the fire is taken over once its claim lapses. */
function isStoreFailure (error: unknown): boolean {
  const code = (error as { code?: unknown }).code
  const status = (error as { statusCode?: unknown }).statusCode
  return code === 'STORE_UNAVAILABLE' || status === undefined || (typeof status === 'number' && status >= 500)
}

function shuffle<T> (items: T[]): void {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[items[i], items[j]] = [items[j]!, items[i]!]
  }
}

async function eachLimited<T> (items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++]!
      await fn(item)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}
