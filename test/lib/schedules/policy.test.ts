// The schedules' policy (docs/schedules.md), as plain functions: due times through croner (time zones and DST by the
// library, computed here, never waited for), the checks naming the field, and what a wake-up decides.
import t from 'tap'
import { CATCH_UP_AFTER_MS, MAX_RECENT_RUNS, WAITING_RECHECK_MS, checkTrigger, firstDue, isTimeZone, latestDue, nextDue, planWake, recordManualRun, settleFire, wakeOf } from '../../../lib/schedules/policy.js'
import type { Trigger, WakeContext } from '../../../lib/schedules/policy.js'
import type { ScheduleState } from '../../../schemas/schedules.js'

const ms = (iso: string): number => Date.parse(iso)
const cron = (expression: string, timezone = 'UTC'): Trigger => ({ cron: expression, everyMs: null, at: null, timezone })
const every = (everyMs: number): Trigger => ({ cron: null, everyMs, at: null, timezone: 'UTC' })
const at = (iso: string): Trigger => ({ cron: null, everyMs: null, at: iso, timezone: 'UTC' })
const NOW = ms('2026-06-01T12:00:00.000Z')

t.test('a trigger is checked field by field: a 400 naming it', async (t) => {
  const bad = (trigger: Partial<Trigger>, message: RegExp): void => {
    t.throws(() => checkTrigger({ cron: null, everyMs: null, at: null, timezone: 'UTC', ...trigger }, NOW), { statusCode: 400, code: 'FST_ERR_VALIDATION', message }, message.source)
  }
  bad({}, /^body must have one of cron, everyMs or at$/)
  bad({ cron: '* * * * *', everyMs: 1000 }, /^body\/everyMs cannot be combined with body\/cron/)
  bad({ everyMs: 1000, at: '2030-01-01T00:00:00Z' }, /^body\/at cannot be combined with body\/everyMs/)
  bad({ cron: '* * * *' }, /^body\/cron must have 5 or 6 fields$/)
  bad({ cron: '* * * * * * *' }, /^body\/cron must have 5 or 6 fields$/)
  bad({ cron: '@daily' }, /^body\/cron must have 5 or 6 fields$/)
  bad({ cron: '61 * * * *' }, /^body\/cron is not a valid cron expression/)
  bad({ cron: 'a b c d e' }, /^body\/cron is not a valid cron expression/)
  bad({ cron: '0 0 30 2 *' }, /^body\/cron never comes due$/)
  bad({ cron: '* * * * *', timezone: 'Mars/Olympus' }, /^body\/timezone is not an IANA time zone/)
  bad({ at: '2026-06-01T11:59:59.999Z' }, /^body\/at must be in the future$/)
  bad({ at: '2026-06-01T12:00:00.000Z' }, /^body\/at must be in the future$/)
  t.doesNotThrow(() => checkTrigger(cron('*/5 * * * *', 'Europe/Berlin'), NOW))
  t.doesNotThrow(() => checkTrigger(cron('0 */10 * * * *'), NOW), '6 fields: seconds first')
  t.doesNotThrow(() => checkTrigger(every(1000), NOW))
  t.doesNotThrow(() => checkTrigger(at('2026-06-01T12:00:00.001Z'), NOW))
  t.equal(isTimeZone('America/New_York'), true)
  t.equal(isTimeZone('UTC'), true)
  t.equal(isTimeZone('Nowhere/Else'), false)
})

t.test('due times: cron after an instant, an interval counted from its current due time, a one-shot once', async (t) => {
  t.equal(nextDue(cron('*/5 * * * *'), ms('2026-06-01T12:02:00Z')), ms('2026-06-01T12:05:00Z'))
  t.equal(nextDue(cron('*/5 * * * *'), ms('2026-06-01T12:05:00Z')), ms('2026-06-01T12:10:00Z'), 'strictly after')
  t.equal(nextDue(cron('30 * * * * *'), ms('2026-06-01T12:00:00Z')), ms('2026-06-01T12:00:30Z'), 'seconds first')
  t.equal(nextDue(cron('0 9 * * 1'), ms('2026-06-01T12:00:00Z')), ms('2026-06-08T09:00:00Z'), 'next Monday 09:00')
  t.equal(nextDue(every(60_000), NOW), NOW + 60_000, 'a new interval: one period from now')
  t.equal(nextDue(every(60_000), NOW, NOW + 5_000), NOW + 5_000, 'its current due time, not yet come')
  t.equal(nextDue(every(60_000), NOW, NOW - 150_000), NOW + 30_000, 'on the interval\'s grid, after now')
  t.equal(nextDue(every(60_000), NOW, NOW - 60_000), NOW + 60_000)
  t.equal(nextDue(at('2026-06-02T00:00:00Z'), NOW), ms('2026-06-02T00:00:00Z'))
  t.equal(nextDue(at('2026-06-01T00:00:00Z'), NOW), null, 'a one-shot past its instant has no next')
  t.equal(firstDue(cron('0 0 * * *'), NOW), '2026-06-02T00:00:00.000Z')
  t.equal(firstDue(at('2026-05-01T00:00:00Z'), NOW), null)
})

t.test('time zones across a DST change: computed by the library', async (t) => {
  // Europe/Berlin springs forward on 2026-03-29 (02:00 → 03:00 CEST) and falls back on 2026-10-25 (03:00 → 02:00 CET)
  const daily = cron('30 9 * * *', 'Europe/Berlin')
  t.equal(nextDue(daily, ms('2026-03-28T12:00:00Z')), ms('2026-03-29T07:30:00Z'), '09:30 CEST the day it changes: UTC+2')
  t.equal(nextDue(daily, ms('2026-03-27T12:00:00Z')), ms('2026-03-28T08:30:00Z'), 'the day before: 09:30 CET, UTC+1')
  t.equal(nextDue(daily, ms('2026-10-24T12:00:00Z')), ms('2026-10-25T08:30:00Z'), 'back to UTC+1 in October')
  // 02:30 does not exist on the spring day: the library runs it at the first instant after the gap, once
  const gap = cron('30 2 * * *', 'Europe/Berlin')
  t.equal(nextDue(gap, ms('2026-03-28T12:00:00Z')), ms('2026-03-29T01:00:00Z'), '03:00 CEST, the first instant after the gap')
  t.equal(nextDue(gap, ms('2026-03-29T01:00:00Z')), ms('2026-03-30T00:30:00Z'), 'and the next day as usual')
  // 02:30 happens twice on the autumn day: once
  const fires = [ms('2026-10-24T12:00:00Z')]
  for (let i = 0; i < 3; i++) fires.push(nextDue(gap, fires.at(-1)!)!)
  t.same(fires.slice(1).map((f) => new Date(f).toISOString()), ['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z', '2026-10-27T01:30:00.000Z'], 'the repeated hour fires once')
  // America/New_York: 2026-03-08 and 2026-11-01
  const ny = cron('0 8 * * *', 'America/New_York')
  t.equal(nextDue(ny, ms('2026-03-07T14:00:00Z')), ms('2026-03-08T12:00:00Z'), '08:00 EDT: UTC-4')
  t.equal(nextDue(ny, ms('2026-10-31T14:00:00Z')), ms('2026-11-01T13:00:00Z'), '08:00 EST: UTC-5')
  // an interval is a duration: the clock change does not move it
  t.equal(nextDue({ ...every(3_600_000), timezone: 'Europe/Berlin' }, ms('2026-03-29T01:30:00Z'), ms('2026-03-29T00:30:00Z')), ms('2026-03-29T02:30:00Z'))
})

t.test('catch-up: the latest due time missed, once', async (t) => {
  const fiveMinutes = cron('*/5 * * * *')
  t.equal(latestDue(fiveMinutes, ms('2026-06-01T10:00:00Z'), NOW), NOW, 'two hours missed: the last of them, now')
  t.equal(latestDue(fiveMinutes, ms('2026-06-01T10:00:00Z'), NOW + 4 * 60_000), NOW)
  t.equal(latestDue(fiveMinutes, NOW, NOW), NOW, 'due right now')
  t.equal(latestDue(every(60_000), NOW - 150_000, NOW), NOW - 30_000, 'on the interval\'s grid')
  t.equal(latestDue(at('2026-06-01T11:00:00Z'), ms('2026-06-01T11:00:00Z'), NOW), ms('2026-06-01T11:00:00Z'))
  // a cron whose previous run the library cannot place before `from` keeps `from`
  t.equal(latestDue(cron('0 0 1 1 *'), NOW - 1_000, NOW), NOW - 1_000)
})

function stateOf (trigger: Trigger, extra: Partial<ScheduleState['schedule']> = {}, rest: Partial<ScheduleState> = {}): ScheduleState {
  const created = new Date(NOW - 3_600_000).toISOString()
  return {
    schedule: {
      id: 's1', agent: 'echo', principal: 'alice', input: 1, ...trigger, sessionId: null, overlap: 'skip', enabled: true,
      nextRunAt: new Date(NOW).toISOString(), lastRunAt: null, lastRunId: null, lastSkippedAt: null, metadata: {},
      createdAt: created, updatedAt: created, ...extra
    },
    fire: null,
    waiting: null,
    runs: [],
    ...rest
  }
}

const context = (extra: Partial<WakeContext> = {}): WakeContext => {
  let n = 0
  return { now: NOW, owner: 'me', claimMs: 10_000, previousInProgress: false, newRunId: () => `run-${++n}`, ...extra }
}

t.test('a wake-up: a due time is claimed once, its run named; the next due time computed; nothing when not due', async (t) => {
  const state = stateOf(cron('*/5 * * * *'))
  const step = planWake(state, context())
  t.equal(step.kind, 'fire')
  if (step.kind !== 'fire') return
  t.equal(step.recovered, false)
  t.same(step.state.fire, { scheduledFor: new Date(NOW).toISOString(), runId: 'run-1', owner: 'me', until: NOW + 10_000 })
  t.equal(step.state.schedule.nextRunAt, '2026-06-01T12:05:00.000Z')
  t.equal(wakeOf(step.state, NOW), NOW + 10_000, 'wakes at the claim\'s end, should its run never be stored')
  t.equal(state.fire, null, 'the state given is not changed')
  t.same(planWake(state, context({ now: NOW - 1 })), { kind: 'none' }, 'woken early')
  t.same(planWake(step.state, context({ now: NOW + 1_000 })), { kind: 'none' }, 'another instance\'s claim under way')
  t.same(planWake(stateOf(cron('*/5 * * * *'), { enabled: false }), context()), { kind: 'none' }, 'disabled')
  t.same(planWake(stateOf(cron('*/5 * * * *'), { nextRunAt: null }), context()), { kind: 'none' })
})

t.test('a claim whose instance went away is taken over with the same run id', async (t) => {
  const claimed = stateOf(cron('*/5 * * * *'), {}, { fire: { scheduledFor: new Date(NOW).toISOString(), runId: 'run-x', owner: 'dead', until: NOW + 10_000 } })
  const step = planWake(claimed, context({ now: NOW + 10_000 }))
  t.equal(step.kind, 'fire')
  if (step.kind !== 'fire') return
  t.equal(step.recovered, true)
  t.same(step.state.fire, { scheduledFor: new Date(NOW).toISOString(), runId: 'run-x', owner: 'me', until: NOW + 20_000 })
})

t.test('a due time missed by a little (a slow instance) still fires for itself, then the next one', async (t) => {
  const late = planWake(stateOf(every(1_000)), context({ now: NOW + 2_500 }))
  t.equal(late.kind === 'fire' && late.state.fire!.scheduledFor, new Date(NOW).toISOString(), 'its own due time')
  t.equal(late.kind === 'fire' && late.state.schedule.nextRunAt, new Date(NOW + 1_000).toISOString(), 'the next, due already: fired next')
  const cronLate = planWake(stateOf(cron('* * * * * *')), context({ now: NOW + CATCH_UP_AFTER_MS - 1 }))
  t.equal(cronLate.kind === 'fire' && cronLate.state.fire!.scheduledFor, new Date(NOW).toISOString())
  const down = planWake(stateOf(cron('* * * * * *')), context({ now: NOW + CATCH_UP_AFTER_MS }))
  t.equal(down.kind === 'fire' && down.state.fire!.scheduledFor, new Date(NOW + CATCH_UP_AFTER_MS).toISOString(), 'missed by more: the latest, once')
})

t.test('catch-up after downtime: one fire for the latest missed due time, the next one after now', async (t) => {
  const down = stateOf(cron('*/5 * * * *'), { nextRunAt: '2026-06-01T09:00:00.000Z' })
  const step = planWake(down, context({ now: NOW + 60_000 }))
  t.equal(step.kind, 'fire')
  if (step.kind !== 'fire') return
  t.equal(step.state.fire!.scheduledFor, new Date(NOW).toISOString(), '12:00, the last of the 37 missed')
  t.equal(step.state.schedule.nextRunAt, '2026-06-01T12:05:00.000Z')
  const interval = planWake(stateOf(every(60_000), { nextRunAt: new Date(NOW - 600_000).toISOString() }), context({ now: NOW + 1_000 }))
  t.equal(interval.kind === 'fire' && interval.state.fire!.scheduledFor, new Date(NOW).toISOString())
  t.equal(interval.kind === 'fire' && interval.state.schedule.nextRunAt, new Date(NOW + 60_000).toISOString())
})

t.test('overlap three ways: skip records the skip, enqueue waits for the previous run, allow starts', async (t) => {
  const busy = context({ previousInProgress: true })
  const skip = planWake(stateOf(every(60_000), { lastRunId: 'prev' }), busy)
  t.equal(skip.kind, 'skip')
  t.equal(skip.kind === 'skip' && skip.state.schedule.lastSkippedAt, new Date(NOW).toISOString())
  t.equal(skip.kind === 'skip' && skip.state.schedule.nextRunAt, new Date(NOW + 60_000).toISOString())
  t.equal(skip.kind === 'skip' && skip.state.fire, null)

  const enqueue = planWake(stateOf(every(60_000), { lastRunId: 'prev', overlap: 'enqueue' }), busy)
  t.equal(enqueue.kind, 'wait')
  if (enqueue.kind !== 'wait') return
  t.same(enqueue.state.waiting, { scheduledFor: new Date(NOW).toISOString(), after: 'prev' })
  t.equal(wakeOf(enqueue.state, NOW), NOW + WAITING_RECHECK_MS, 'looked at again soon')
  // still in progress at the recheck: waits on; a due time passing meanwhile is skipped, one fire waits at most
  const still = planWake(enqueue.state, context({ now: NOW + 61_000, previousInProgress: true }))
  t.equal(still.kind, 'wait')
  t.equal(still.kind === 'wait' && still.state.schedule.lastSkippedAt, new Date(NOW + 60_000).toISOString())
  t.equal(still.kind === 'wait' && still.state.schedule.nextRunAt, new Date(NOW + 120_000).toISOString())
  t.equal(still.kind === 'wait' && still.state.waiting!.scheduledFor, new Date(NOW).toISOString())
  // the previous run ended: the waiting fire starts, for its own due time
  const ended = planWake(still.kind === 'wait' ? still.state : enqueue.state, context({ now: NOW + 62_000 }))
  t.equal(ended.kind, 'fire')
  t.equal(ended.kind === 'fire' && ended.state.fire!.scheduledFor, new Date(NOW).toISOString())
  t.equal(ended.kind === 'fire' && ended.state.waiting, null)
  t.equal(wakeOf({ ...enqueue.state, schedule: { ...enqueue.state.schedule, nextRunAt: new Date(NOW + 500).toISOString() } }, NOW), NOW + 500)
  t.equal(wakeOf({ ...enqueue.state, schedule: { ...enqueue.state.schedule, nextRunAt: null } }, NOW), NOW + WAITING_RECHECK_MS)

  const allow = planWake(stateOf(every(60_000), { lastRunId: 'prev', overlap: 'allow' }), busy)
  t.equal(allow.kind, 'fire', 'allow: started whatever runs')
})

t.test('settling a fire: the run recorded, the claim let go; a one-shot disables itself; another claim is left alone', async (t) => {
  const claimed = planWake(stateOf(at('2026-06-01T12:00:00.000Z'), { nextRunAt: new Date(NOW).toISOString() }), context())
  if (claimed.kind !== 'fire') throw new Error('claimed')
  t.equal(claimed.state.schedule.nextRunAt, null, 'a one-shot has no next due time')
  const settled = settleFire(claimed.state, 'run-1', { runId: 'run-1', at: NOW + 5 })!
  t.equal(settled.fire, null)
  t.equal(settled.schedule.enabled, false)
  t.equal(settled.schedule.lastRunId, 'run-1')
  t.equal(settled.schedule.lastRunAt, new Date(NOW + 5).toISOString())
  t.same(settled.runs, ['run-1'])
  t.equal(wakeOf(settled, NOW), null, 'never woken again')
  t.equal(settleFire(claimed.state, 'run-other', null), null, 'not this fire\'s claim')
  const failed = settleFire(claimed.state, 'run-1', null)!
  t.equal(failed.schedule.lastRunId, null, 'a run that could not be stored is not recorded')
  t.equal(failed.fire, null)
  const many = { ...settled, runs: Array.from({ length: MAX_RECENT_RUNS }, (_, i) => `old-${i}`) }
  const manual = recordManualRun(many, 'run-m', NOW)
  t.equal(manual.runs.length, MAX_RECENT_RUNS)
  t.equal(manual.runs[0], 'run-m')
  t.equal(manual.schedule.lastRunId, 'run-m')
})

t.test('a cron expression that comes due no more has no next due time', async (t) => {
  t.equal(nextDue(cron('0 0 30 2 *'), NOW), null)
})
