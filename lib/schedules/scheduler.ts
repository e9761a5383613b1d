// This instance's side of schedules (docs/schedules.md): one timer for the earliest wake-up of every schedule, armed
// again whenever the schedule store says a schedule changed (here or on another instance), never a walk through the
// table. At a wake-up the instance takes a batch of the due rows (of instances taking at once each row goes to one),
// decides each by policy.ts and writes them back in one compare-and-set per row, one round trip for the batch. A fire
// is a claim (the run's id chosen, a deadline to start it) written before its run is stored, and settled after: an
// instance killed in between leaves a claim that lapses, and whichever instance wakes for it stores the same run. The
// run starts on the instance that claimed it, not through the queue of background runs.
import type { FastifyBaseLogger } from 'fastify'
import { randomId } from '../core/ids.js'
import { newTraceId } from '../core/trace-context.js'
import type { RunHost } from '../runs/host.js'
import { queueRun, startBackgroundRun } from '../runs/start.js'
import type { PrepareRunOptions } from '../runs/start.js'
import type { ScheduleRow, ScheduleState, ScheduleStore, ScheduleWrite } from '../stores/types.js'
import { planWake, settleFire, wakeOf } from './policy.js'
import type { WakeStep } from './policy.js'

/** The scheduler looks at the next wake-up at least this often, should a notification be lost: an indexed read. */
export const MAX_SLEEP_MS = 30_000
/**
 * Due rows taken at once: what one instance decides, writes and settles in a round trip each. Small enough that
 * instances waking together share a burst between them.
 */
const TAKE_BATCH = 100
/**
 * Fires whose runs are being stored at once on one instance: a batch's, so that a store gathering its writes (the
 * PostgreSQL run store writes the runs created meanwhile, with their sessions, in one statement) takes them together.
 */
const FIRING = TAKE_BATCH

export type FireOutcome = 'started' | 'skipped' | 'failed'

/** What the scheduler needs of the service: the runs, and where a fire's outcome is counted. */
export interface SchedulerHost extends RunHost {
  recordScheduleFire(agent: string, outcome: FireOutcome): void
}

/** For tests: what a fault test does between a claim and its run (a kill -9 there leaves the claim to be taken over). */
export interface SchedulerHooks {
  afterClaim?: (row: ScheduleRow) => Promise<void> | void
}

/** A fire's run stored (`runId`, when), not stored (null: counted failed), or left to lapse (undefined). */
type Fired = { runId: string, at: number } | null | undefined

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
      const now = Date.now()
      // a row taken is this instance's until its claim's end: should this instance go, it is due again then
      const rows = await this.#store.take(now, TAKE_BATCH, now + this.#claimMs)
      if (rows.length > 0) await this.#decide(rows)
      if (rows.length < TAKE_BATCH) break
      /* c8 ignore next: a drain that begins in a burst of more than a batch: the rest is left to the other instances */
      if (this.#stopped) break
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

  /**
   * Rows taken: each decided and written back (one round trip for all; a row changed meanwhile, by a PATCH, is left
   * as that write made it, due again if it is), then the fires carried out and settled together, in the background.
   */
  async #decide (rows: readonly ScheduleRow[]): Promise<void> {
    const now = Date.now()
    const steps: WakeStep[] = []
    await eachLimited(rows.map((row, i) => ({ row, i })), FIRING, async ({ row, i }) => {
      const { schedule } = row.state
      const previous = row.state.waiting?.after ?? (schedule.overlap === 'allow' ? null : schedule.lastRunId)
      steps[i] = planWake(row.state, {
        now,
        owner: this.owner,
        claimMs: this.#claimMs,
        previousInProgress: previous !== null && await this.#inProgress(previous),
        newRunId: randomId
      })
    })
    // a row with nothing to do gets its own wakeAt back (its take moved it to the claim's end)
    const writes: ScheduleWrite[] = rows.map((row, i) => {
      const step = steps[i]!
      const state = step.kind === 'none' ? row.state : step.state
      return { id: row.id, revision: row.revision, wakeAt: wakeOf(state, now), state }
    })
    const written = await this.#store.writeAll(writes)
    const fires: Array<{ row: ScheduleRow, recovered: boolean }> = []
    for (const [i, row] of written.entries()) {
      const step = steps[i]!
      // changed since it was taken (a PATCH): that write decided it
      if (row === null) continue
      if (step.kind === 'skip') this.#host.recordScheduleFire(row.state.schedule.agent, 'skipped')
      // told when the run in the way ends, not only at the recheck
      if (step.kind === 'wait' && step.state.waiting !== null) this.#wakeWhenEnded(step.state.waiting.after)
      if (step.kind === 'fire') fires.push({ row, recovered: step.recovered })
    }
    if (fires.length === 0) return
    // not waited for: the next batch is taken meanwhile, and the runs of both stored together where the store gathers
    // its writes; a fire whose run could not be stored lapses, and is taken over at its claim's end (its wakeAt)
    const carried: Promise<void> = this.#fireAll(fires)
      .catch((err: unknown) => { this.#log?.warn({ err }, 'schedules: a fire could not store its run') })
      .finally(() => this.#firing.delete(carried))
    this.#firing.add(carried)
  }

  /** The claimed fires' runs stored and started, then the claims settled in one round trip. */
  async #fireAll (fires: ReadonlyArray<{ row: ScheduleRow, recovered: boolean }>): Promise<void> {
    const outcomes: Fired[] = []
    let failure: unknown = null
    await eachLimited(fires.map((fire, i) => ({ ...fire, i })), FIRING, async ({ row, recovered, i }) => {
      try {
        await this.#hooks.afterClaim?.(row)
        outcomes[i] = await this.#fire(row, recovered)
      } catch (err) {
        // a store that failed: this claim lapses and is taken over; the others settle
        failure ??= err
      }
    })
    const settled = fires.flatMap(({ row }, i) => {
      const fired = outcomes[i]
      if (fired === undefined) return []
      const state = settleFire(row.state, row.state.fire!.runId, fired)!
      return [{ row, fired, write: { id: row.id, revision: row.revision, wakeAt: wakeOf(state, Date.now()), state } }]
    })
    const written = await this.#store.writeAll(settled.map(({ write }) => write))
    // another write came in between (a PATCH): read again, and settled on what it wrote
    await Promise.all(settled.map(async ({ row, fired }, i) => written[i] === null ? this.#settle(row.id, row.state.fire!.runId, fired) : undefined))
    if (failure !== null) throw failure
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

  /**
   * The claimed due time's run stored (unless it was already: a fire taken over) and started here when this instance
   * has room (else queued, as a background run is, for whichever instance has).
   */
  async #fire (row: ScheduleRow, recovered: boolean): Promise<Fired> {
    const fire = row.state.fire!
    const { schedule } = row.state
    const host = this.#host
    const { settings } = host
    // a claim that ran out meanwhile (a store that hung) is another instance's to take over: storing its run here
    // too could start it twice
    if (Date.now() > fire.until - Math.floor(this.#claimMs / 3)) return undefined
    let started: Fired = null
    if (recovered && await settings.runStore.get(fire.runId) !== null) {
      started = { runId: fire.runId, at: Date.now() }
    } else {
      const options: PrepareRunOptions = {
        service: host,
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
      }
      try {
        if (settings.runConcurrency - host.runs.detachedCount > 0) {
          const { record, run } = await startBackgroundRun(options)
          if (run !== null) {
            run.start()
            host.stats.recordScheduleLag((Date.parse(record.startedAt!) - Date.parse(fire.scheduledFor)) / 1000)
          }
        } else {
          await queueRun(options)
        }
        started = { runId: fire.runId, at: Date.now() }
      } catch (err) {
        // the run cannot be stored as it is (an agent gone, a quota, a session deleted): counted, not tried again
        // at once; a store that failed leaves the claim to lapse, and the fire to be taken over
        if (isStoreFailure(err)) throw err
        this.#log?.warn({ err, scheduleId: schedule.id, scheduledFor: fire.scheduledFor }, 'schedules: a fire could not start its run')
      }
    }
    host.recordScheduleFire(schedule.agent, started === null ? 'failed' : 'started')
    return started
  }

  /** The claim let go, on the row as it now is (compared on the revision; read again while other writes come in). */
  async #settle (id: string, fireRunId: string, started: { runId: string, at: number } | null): Promise<void> {
    for (;;) {
      const current = await this.#store.get(id)
      if (current === null) return
      const state: ScheduleState | null = settleFire(current.state, fireRunId, started)
      /* c8 ignore next: the fire settled by the instance that took it over first (scheduler-claims.test.ts races for it; the event loop decides who) */
      if (state === null) return
      /* c8 ignore next: yet another write between this read and this one, a race no test provokes on purpose */
      if (await this.#store.write(current.id, current.revision, { wakeAt: wakeOf(state, Date.now()), state }) !== null) return
    }
  }
}

/** A store that failed or did not answer (its deadline): the fire is taken over once its claim lapses. */
function isStoreFailure (error: unknown): boolean {
  const code = (error as { code?: unknown }).code
  const status = (error as { statusCode?: unknown }).statusCode
  return code === 'STORE_UNAVAILABLE' || status === undefined || (typeof status === 'number' && status >= 500)
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
