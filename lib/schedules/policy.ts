// What a schedule does, decided once for every backend (docs/schedules.md): its due times (cron expressions and time
// zones through croner, never by hand), the checks of a schedule's fields, and what a wake-up does to a schedule's
// state — claim a due time, skip it, queue it behind the previous run, take over a claim whose instance went away.
// Plain functions of the state and the time: the scheduler (scheduler.ts) reads a row, asks here, and writes the
// answer back by compare-and-set, so that of instances deciding at once one write wins.
import { Cron } from 'croner'
import { InputValidationError } from '../core/errors.js'
import type { Schedule, ScheduleState } from '../../schemas/schedules.js'

/** How many run ids a schedule keeps for `GET /v1/schedules/:id/runs`. */
export const MAX_RECENT_RUNS = 100
/**
 * A due time missed by less than this still fires for itself (an instance slowed down, a store that answered late),
 * each in turn; due times missed by more (no instance ran) give one catch-up fire, for the latest of them.
 */
export const CATCH_UP_AFTER_MS = 5_000
/** A fire queued behind the previous run (overlap: 'enqueue') looks at that run again this often, besides being told. */
export const WAITING_RECHECK_MS = 1_000

export type Trigger = Pick<Schedule, 'cron' | 'everyMs' | 'at' | 'timezone'>

function invalid (message: string): Error {
  return new InputValidationError(message)
}

/** The cron expression read in `timezone`; throws a 400 naming `body/cron` when croner refuses it. */
function cronOf (expression: string, timezone: string): Cron {
  const fields = expression.trim().split(/\s+/)
  // 5 fields (minute first) or 6 (second first): croner's 7th (year) and its nicknames are not offered
  if (fields.length !== 5 && fields.length !== 6) throw invalid('body/cron must have 5 or 6 fields')
  try {
    // legacyMode: day-of-month and day-of-week combine with OR, as in every crontab
    return new Cron(expression, { timezone, paused: true, legacyMode: true })
  } catch (error) {
    throw invalid(`body/cron is not a valid cron expression (${(error as Error).message})`)
  }
}

/** Whether `name` is an IANA time zone the runtime knows. */
export function isTimeZone (name: string): boolean {
  try {
    // eslint-disable-next-line no-new
    new Intl.DateTimeFormat('en-US', { timeZone: name })
    return true
  } catch {
    return false
  }
}

/**
 * Checks a schedule's trigger as a request gives it: exactly one of cron, everyMs and at; a known time zone; a cron
 * expression croner reads; `at` in the future. Throws a 400 naming the field.
 */
export function checkTrigger (trigger: Trigger, now: number): void {
  const given = (['cron', 'everyMs', 'at'] as const).filter((name) => trigger[name] !== null)
  if (given.length === 0) throw invalid('body must have one of cron, everyMs or at')
  if (given.length > 1) throw invalid(`body/${given[1]!} cannot be combined with body/${given[0]!}: a schedule has one trigger`)
  if (!isTimeZone(trigger.timezone)) throw invalid(`body/timezone is not an IANA time zone: ${JSON.stringify(trigger.timezone)}`)
  if (trigger.cron !== null) {
    if (cronOf(trigger.cron, trigger.timezone).nextRun(new Date(now)) === null) throw invalid('body/cron never comes due')
  }
  if (trigger.at !== null && Date.parse(trigger.at) <= now) throw invalid('body/at must be in the future')
}

/** The first due time after `after` (epoch ms); `from` is the current due time an interval counts from. null: none. */
export function nextDue (trigger: Trigger, after: number, from: number | null = null): number | null {
  if (trigger.cron !== null) return cronOf(trigger.cron, trigger.timezone).nextRun(new Date(after))?.getTime() ?? null
  if (trigger.everyMs !== null) {
    if (from === null || from > after) return from ?? after + trigger.everyMs
    return from + (Math.floor((after - from) / trigger.everyMs) + 1) * trigger.everyMs
  }
  const at = Date.parse(trigger.at!)
  return at > after ? at : null
}

/** The latest due time at or before `now`, counting from the due time `from` (≤ now): one catch-up, never a burst. */
export function latestDue (trigger: Trigger, from: number, now: number): number {
  if (trigger.cron !== null) {
    // croner's previous runs are strictly before the reference: one millisecond later includes `now` itself
    const [latest] = cronOf(trigger.cron, trigger.timezone).previousRuns(1, new Date(now + 1))
    return latest === undefined || latest.getTime() < from ? from : latest.getTime()
  }
  if (trigger.everyMs !== null) return from + Math.floor((now - from) / trigger.everyMs) * trigger.everyMs
  return from
}

/** When the scheduler must look at the schedule next: its claim's end, its waiting fire's recheck, its next due time. */
export function wakeOf (state: ScheduleState, now: number): number | null {
  if (state.fire !== null) return state.fire.until
  const { schedule } = state
  const next = schedule.enabled && schedule.nextRunAt !== null ? Date.parse(schedule.nextRunAt) : null
  if (state.waiting !== null) return next === null ? now + WAITING_RECHECK_MS : Math.min(next, now + WAITING_RECHECK_MS)
  return next
}

/** What a wake-up decides for one schedule; `state` is what to write (compared on the revision read). */
export type WakeStep =
  /** nothing due: someone else's claim is under way, or the wake-up came early */
  | { kind: 'none' }
  /** a due time claimed: its run is to be stored under `state.fire.runId`, then settled */
  | { kind: 'fire', state: ScheduleState, recovered: boolean }
  /** the previous run is still in progress (overlap: 'skip'): the due time is recorded as skipped */
  | { kind: 'skip', state: ScheduleState }
  /** the fire waits for the previous run (overlap: 'enqueue'), or still does */
  | { kind: 'wait', state: ScheduleState }

export interface WakeContext {
  now: number
  /** this instance, the claim's owner */
  owner: string
  /** how long a claim holds before another instance takes it over */
  claimMs: number
  /** whether the run the schedule would overlap (its last one, or the one its waiting fire waits for) is in progress */
  previousInProgress: boolean
  /** a new run id, for a fire */
  newRunId: () => string
}

const iso = (ms: number): string => new Date(ms).toISOString()

/** What a wake-up does to a schedule whose wakeAt has come (see WakeStep). Pure: the state given is not changed. */
export function planWake (current: ScheduleState, context: WakeContext): WakeStep {
  const { now, owner, claimMs, previousInProgress } = context
  const state = structuredClone(current)
  const { schedule } = state
  if (state.fire !== null) {
    if (state.fire.until > now) return { kind: 'none' }
    // its instance went away between the claim and the run's start: the same run id, so that it starts once
    state.fire = { ...state.fire, owner, until: now + claimMs }
    return { kind: 'fire', state, recovered: true }
  }
  if (!schedule.enabled) return { kind: 'none' }
  const due = schedule.nextRunAt === null ? null : Date.parse(schedule.nextRunAt)
  const trigger: Trigger = schedule

  if (state.waiting !== null) {
    // due times that come while a fire waits are skipped: one waits at most
    if (due !== null && due <= now) skip(state, latestDue(trigger, due, now), now)
    if (previousInProgress) return { kind: 'wait', state }
    const scheduledFor = Date.parse(state.waiting.scheduledFor)
    state.waiting = null
    return claim(state, scheduledFor, context)
  }
  if (due === null || due > now) return { kind: 'none' }

  // late by a little: this due time, then the next (perhaps due already: the scheduler looks again at once)
  const recent = now - due < CATCH_UP_AFTER_MS
  const scheduledFor = recent ? due : latestDue(trigger, due, now)
  schedule.nextRunAt = nullableIso(recent ? nextDue(trigger, due, due) : nextDue(trigger, now, due))
  if (previousInProgress && schedule.overlap === 'skip') {
    schedule.lastSkippedAt = iso(scheduledFor)
    return { kind: 'skip', state }
  }
  if (previousInProgress && schedule.overlap === 'enqueue') {
    state.waiting = { scheduledFor: iso(scheduledFor), after: schedule.lastRunId! }
    return { kind: 'wait', state }
  }
  return claim(state, scheduledFor, context)
}

function skip (state: ScheduleState, scheduledFor: number, now: number): void {
  state.schedule.lastSkippedAt = iso(scheduledFor)
  state.schedule.nextRunAt = nullableIso(nextDue(state.schedule, now, Date.parse(state.schedule.nextRunAt!)))
}

function claim (state: ScheduleState, scheduledFor: number, context: WakeContext): WakeStep {
  state.fire = { scheduledFor: iso(scheduledFor), runId: context.newRunId(), owner: context.owner, until: context.now + context.claimMs }
  return { kind: 'fire', state, recovered: false }
}

function nullableIso (ms: number | null): string | null {
  return ms === null ? null : iso(ms)
}

/**
 * The state once the fire's run is stored (`runId` given) or could not be (null): the claim let go, the run
 * recorded as the schedule's last; a one-shot schedule disables itself. null when the claim is no longer this fire's.
 */
export function settleFire (current: ScheduleState, fireRunId: string, started: { runId: string, at: number } | null): ScheduleState | null {
  if (current.fire?.runId !== fireRunId) return null
  const state = structuredClone(current)
  state.fire = null
  const { schedule } = state
  if (started !== null) {
    schedule.lastRunId = started.runId
    schedule.lastRunAt = iso(started.at)
    state.runs = [started.runId, ...state.runs.filter((id) => id !== started.runId)].slice(0, MAX_RECENT_RUNS)
  }
  if (schedule.at !== null) {
    schedule.enabled = false
    schedule.nextRunAt = null
  }
  return state
}

/** A run started by hand (`POST /v1/schedules/:id/trigger`), recorded as the schedule's last. */
export function recordManualRun (current: ScheduleState, runId: string, at: number): ScheduleState {
  const state = structuredClone(current)
  state.schedule.lastRunId = runId
  state.schedule.lastRunAt = iso(at)
  state.runs = [runId, ...state.runs].slice(0, MAX_RECENT_RUNS)
  return state
}

/** The first due time of a schedule whose trigger is new (created, changed, enabled again): the first after now. */
export function firstDue (trigger: Trigger, now: number): string | null {
  return nullableIso(nextDue(trigger, now))
}
