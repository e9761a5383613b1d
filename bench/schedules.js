// node bench/schedules.js: schedules on PostgreSQL (docs/schedules.md). Run `npx tsc -p tsconfig.test.json` first
// (it loads the compiled service from .build/).
//  - burst: three instances of the service (in this process, each with a pool of its own) share a fresh schema; 1,000
//    one-shot schedules are due in the same second. Measured: when the last run started after the due time (target
//    ≤ 2 s), how many due times started twice (target 0), and each run's lag from its due time to its start (p99 ≤ 1 s).
//  - idle: one instance holding 10,000 schedules, none due for a long time, for 20 s: the process's CPU time over the
//    wall time (target < 1% of a core).
// `node bench/schedules.js burst` (or `idle`) runs one of the two.
import os from 'node:os'
import pg from 'pg'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentService } from '../.build/app/service.js'
import { postgresStores } from '../.build/lib/stores/postgres.js'
import { firstDue, wakeOf } from '../.build/lib/schedules/policy.js'

const url = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const schema = `fa_bench_schedules_${process.pid}`
const pool = new pg.Pool({ connectionString: url, max: 2 })
const percentile = (values, p) => values.slice().sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))]

const only = process.argv[2]
const started = []
const agents = { tick: { async run (_input, ctx) { started.push({ id: ctx.schedule.id, runId: ctx.runId, scheduledFor: Date.parse(ctx.schedule.scheduledFor), at: Date.now() }); return { output: null } } } }

function service () {
  return createAgentService({ logger: process.env.BENCH_LOG === undefined ? false : { level: process.env.BENCH_LOG }, agents, ...postgresStores({ connectionString: url, max: 10 }, { schema }), runConcurrency: 500 })
}

/** A schedule row as POST /v1/schedules makes it, inserted straight into the store (the bench measures firing, not the route). */
function row (id, trigger, now) {
  const at = new Date(now).toISOString()
  const state = {
    schedule: {
      id, agent: 'tick', principal: 'bench', input: null, cron: null, everyMs: null, at: null, timezone: 'UTC', ...trigger,
      sessionId: null, overlap: 'allow', enabled: true, nextRunAt: null, lastRunAt: null, lastRunId: null, lastSkippedAt: null,
      metadata: {}, createdAt: at, updatedAt: at
    },
    fire: null,
    waiting: null,
    runs: []
  }
  state.schedule.nextRunAt = firstDue(state.schedule, now)
  return { id, principal: 'bench', createdAt: now, wakeAt: wakeOf(state, now), state }
}

async function insertAll (store, rows) {
  for (let i = 0; i < rows.length; i += 50) await Promise.all(rows.slice(i, i + 50).map((r) => store.insert(r)))
}

if (only !== 'idle') {
const services = [service(), service(), service()]
try {
  await Promise.all(services.map((s) => s.app.ready()))
  const store = services[0].app.agentService.settings.scheduleStore
  const due = Math.ceil((Date.now() + 8_000) / 1000) * 1000
  const at = new Date(due).toISOString()
  const now = Date.now()
  await insertAll(store, Array.from({ length: 1000 }, (_, i) => row(`burst-${i}`, { at }, now)))
  console.log(`1,000 schedules inserted ${due - Date.now()} ms before they are due`)
  const deadline = due + 15_000
  await sleep(Math.max(0, due - Date.now()))
  const cpu = process.cpuUsage()
  while (started.length < 1000 && Date.now() < deadline) await sleep(50)
  const used = process.cpuUsage(cpu)
  const busy = (used.user + used.system) / 1000 / (Date.now() - due)
  const lags = started.map((s) => s.at - s.scheduledFor)
  const twice = started.length - new Set(started.map((s) => `${s.id} ${s.scheduledFor}`)).size
  const last = Math.max(...started.map((s) => s.at)) - due
  console.log(`burst: ${started.length} of 1,000 started; the last ${last} ms after the due time (target ≤ 2,000); started twice: ${twice} (target 0)`)
  console.log(`burst: lag p50 ${percentile(lags, 0.5)} ms, p99 ${percentile(lags, 0.99)} ms, max ${Math.max(...lags)} ms (target p99 ≤ 1,000)`)
  const { rows } = await pool.query(`SELECT run_id, created_at, started_at FROM ${pg.escapeIdentifier(schema)}.fa_runs`)
  const stored = rows.map((r) => r.created_at.getTime() - due)
  const begun = rows.filter((r) => r.started_at !== null).map((r) => r.started_at.getTime() - r.created_at.getTime())
  const startedAt = new Map(rows.map((r) => [r.run_id, r.started_at?.getTime()]))
  const called = started.filter((s) => startedAt.get(s.runId) !== undefined).map((s) => s.at - startedAt.get(s.runId))
  // createdAt and startedAt are the instance's clock before the run's INSERT: a run started where it was claimed has
  // both at once, and its INSERT falls in the last step
  console.log(`burst: ${rows.length} runs stored; due → record made (taken, claimed) p50 ${percentile(stored, 0.5)} ms, p99 ${percentile(stored, 0.99)} ms; ` +
    `record made → started p50 ${percentile(begun, 0.5)} ms, p99 ${percentile(begun, 0.99)} ms; started → agent called (stored, begun) p50 ${percentile(called, 0.5)} ms, p99 ${percentile(called, 0.99)} ms`)
  console.log(`burst: this process (the three instances) used ${(100 * busy).toFixed(0)}% of a core from the due time to the last start; load average ${os.loadavg()[0].toFixed(1)}`)
} finally {
  await Promise.all(services.map((s) => s.close(0)))
}
}

if (only !== 'burst') {
const idle = service()
try {
  await idle.app.ready()
  const store = idle.app.agentService.settings.scheduleStore
  const now = Date.now()
  await insertAll(store, Array.from({ length: 10_000 }, (_, i) => row(`idle-${i}`, { cron: '0 0 1 1 *' }, now)))
  await sleep(2_000)
  const cpu = process.cpuUsage()
  const wall = Date.now()
  await sleep(20_000)
  const used = process.cpuUsage(cpu)
  const share = (used.user + used.system) / 1000 / (Date.now() - wall)
  console.log(`idle: one instance with 10,000 schedules: ${(100 * share).toFixed(2)}% of a core over 20 s (target < 1%)`)
} finally {
  await idle.close(0)
}
}
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
await pool.end()
