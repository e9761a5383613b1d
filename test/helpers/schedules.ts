// What the schedules' tests share (docs/schedules.md): a service on the memory stores with its schedules' routes, an
// agent that records each run it saw, and a scheduler with its hooks for the edges a healthy run does not reach.
import type { Test } from 'tap'
import { Type } from '@sinclair/typebox'
import type { Agent, RunContext } from '../../lib/core/types.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { MemoryScheduleStore } from '../../lib/stores/memory-schedules.js'
import type { ScheduleState } from '../../lib/stores/types.js'
import type { SchedulerHooks } from '../../lib/schedules/scheduler.js'
import { build, echo, injected, principalFromHeader, sleep } from '../helper.js'

export const TOKEN = 'admin-token'

export interface Seen { runId: string, schedule: RunContext['schedule'], startedAt: number, endedAt: number }

/** An agent that records what each run saw, and takes `ms` (its input's, else 0). */
export function recorder (): { agent: Agent, seen: Seen[] } {
  const seen: Seen[] = []
  return {
    seen,
    agent: {
      async run (input, ctx) {
        const startedAt = Date.now()
        const wait = (input as { ms?: number } | null)?.ms ?? 0
        if (wait > 0) await sleep(wait)
        seen.push({ runId: ctx.runId, schedule: ctx.schedule, startedAt, endedAt: Date.now() })
        return { output: 'ok' }
      }
    }
  }
}

export async function serve (t: Test, agents: Record<string, Agent> = {}) {
  const typed: Agent = { input: Type.Object({ n: Type.Integer() }, { additionalProperties: false }), async run () { return { output: 1 } } }
  const service = build(t, { agents: { echo, typed, ...agents }, adminApi: { enabled: true, bearerToken: TOKEN }, runLeaseMs: 1_000 })
  principalFromHeader(service.app)
  await service.app.ready()
  const as = (principal: string) => ({ 'x-test-principal': principal })
  return { service, app: service.app, as }
}

export const future = (ms: number): string => new Date(Date.now() + ms).toISOString()

/** A service whose scheduler runs with `hooks`; its agent `tick` records each run. */
export async function serveScheduler (t: Test, hooks: SchedulerHooks = {}) {
  const seen: Array<{ runId: string, schedule: RunContext['schedule'] }> = []
  const tick: Agent = { async run (_input, ctx) { seen.push({ runId: ctx.runId, schedule: ctx.schedule }); return { output: null } } }
  const scheduleStore = new MemoryScheduleStore()
  const runStore = new MemoryRunStore()
  const service = build(t, { agents: { tick }, scheduleStore, runStore, runLeaseMs: 1_000, adminApi: { enabled: true }, ...injected({ scheduleHooks: hooks }) })
  await service.app.ready()
  return { service, app: service.app, seen, scheduleStore, runStore }
}

export function stateOf (id: string, extra: Partial<ScheduleState['schedule']>): ScheduleState {
  const now = new Date().toISOString()
  return {
    schedule: {
      id, agent: 'tick', principal: 'anonymous', input: null, cron: null, everyMs: 1_000, at: null, timezone: 'UTC', sessionId: null,
      overlap: 'allow', enabled: true, nextRunAt: now, lastRunAt: null, lastRunId: null, lastSkippedAt: null, metadata: {},
      createdAt: now, updatedAt: now, ...extra
    },
    fire: null,
    waiting: null,
    runs: []
  }
}
