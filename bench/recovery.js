// node bench/recovery.js [trials=20]: recovery after kill -9, and queue claim latency, on PostgreSQL (docs/runs.md).
// Two instances in processes of their own (test/fixtures/recovery-instance.ts, compiled: run
// `npx tsc -p tsconfig.test.json` first) share a fresh schema on PG_URL, with runLeaseMs 1000 (the
// shortest the options take).
//  - recovery: a resumable background run checkpoints, the instance running it is killed (SIGKILL); measured from
//    the moment its lease lapsed (its lease_until) to the moment the other instance's agent starts again from the
//    checkpoint, and from the kill to then. The killed instance is started again for the next trial.
//  - claim latency: background runs posted one at a time to idle instances; from the 202 to the agent's start
//    (its first record), and the record's startedAt − createdAt (the claim, on the store's clock).
import pg from 'pg'
import { setTimeout as sleep } from 'node:timers/promises'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { executions, percentile, postBackground, startInstance } from '../.build/test/helpers/instances.js'

const url = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const trials = Number(process.argv[2] ?? 20)
const runLeaseMs = 1000
const schema = `fa_bench_recovery_${process.pid}`
const dir = mkdtempSync(join(tmpdir(), 'fa-bench-recovery-'))
const file = join(dir, 'executions.jsonl')
const pool = new pg.Pool({ connectionString: url, max: 2 })
const start = (name) => startInstance({ url, schema, name, executions: file, runLeaseMs })

async function until (check, ms = 30_000) {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > deadline) throw new Error('timed out')
    await sleep(5)
  }
}

const stats = (values) => `p50 ${percentile(values, 0.5).toFixed(0)} ms, p99 ${percentile(values, 0.99).toFixed(0)} ms (n=${values.length})`

const instances = await Promise.all([start('i0'), start('i1')])
let restarts = 2
try {
  const claimWall = []
  const claimStore = []
  for (let i = 0; i < 50; i++) {
    const sent = await postBackground(instances[i % 2], 'resumable', { steps: 1, stepMs: 1 }).then((runId) => ({ runId, at: Date.now() }))
    const started = await until(() => executions(file, sent.runId).find((row) => row.kind === 'start'))
    claimWall.push(started.at - sent.at)
    await until(() => executions(file, sent.runId).some((row) => row.kind === 'end'))
    const { rows: [run] } = await pool.query(`SELECT created_at, started_at FROM ${pg.escapeIdentifier(schema)}.fa_runs WHERE run_id = $1`, [sent.runId])
    claimStore.push(run.started_at.getTime() - run.created_at.getTime())
  }
  console.log(`claim latency, 202 → agent started: ${stats(claimWall)}`)
  console.log(`claim latency, record createdAt → startedAt: ${stats(claimStore)}`)

  const fromLapse = []
  const fromKill = []
  for (let trial = 0; trial < trials; trial++) {
    const runId = await postBackground(instances[trial % 2], 'resumable', { steps: 4, stepMs: 200 })
    const runner = (await until(() => executions(file, runId).find((row) => row.kind === 'step' && row.step === 1))).instance
    const victim = instances.findIndex((instance) => instance.name === runner)
    await instances[victim].kill()
    const killedAt = Date.now()
    const { rows: [run] } = await pool.query(`SELECT lease_until FROM ${pg.escapeIdentifier(schema)}.fa_runs WHERE run_id = $1`, [runId])
    const resumed = await until(() => executions(file, runId).find((row) => row.kind === 'start' && row.instance !== runner))
    fromLapse.push(resumed.at - run.lease_until.getTime())
    fromKill.push(resumed.at - killedAt)
    await until(() => executions(file, runId).some((row) => row.kind === 'end'))
    instances[victim] = await start(`i${restarts++}`)
  }
  console.log(`recovery after kill -9, lease lapse → continued: ${stats(fromLapse)} (runLeaseMs ${runLeaseMs})`)
  console.log(`recovery after kill -9, kill → continued: ${stats(fromKill)}`)
} finally {
  await Promise.all(instances.map((instance) => instance.kill()))
  await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
  await pool.end()
  rmSync(dir, { recursive: true, force: true })
}
