// Durable steps (docs/durable-agents.md) through real faults: instances in processes of their own sharing a PostgreSQL
// schema or a Redis key prefix, one killed with SIGKILL (or drained with SIGTERM) in the middle of a run of steps.
// The agent (test/fixtures/recovery-instance.ts, `durable`) appends a line to a file for each step it executes:
// a step journaled before the fault is never executed again; the one in flight runs again with the same key.
import pg from 'pg'
import t from 'tap'
import type { Test } from 'tap'
import { eventually, parseSse, sleep } from '../helper.js'
import { LEASE_MS, storeCluster } from '../helpers/instances.js'
import type { Backend, Instance } from '../helpers/instances.js'
import { pgUrl, pgReachable, redisReachable } from '../helpers/services.js'

t.setTimeout(240_000)

const STEPS = 8

async function postDurable (instance: Instance): Promise<string> {
  const res = await fetch(`${instance.url}/v1/agents/durable/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: { steps: STEPS, stepMs: 150 }, background: true })
  })
  if (res.status !== 202) throw new Error(`${res.status} ${await res.text()}`)
  return (await res.json() as { runId: string }).runId
}

/** A run of STEPS steps stopped on its instance in its fourth step (`fault`), finished by the other instance. */
async function stepsThroughFault (t: Test, backend: Backend, admin: pg.Pool | null, fault: 'kill' | 'drain'): Promise<void> {
  const cluster = storeCluster(t, backend, admin)
  // a drain hands off at once: its instances need no short lease, which a loaded machine's stall can lose (the survivor
  // fencing its own attempt off, a third one after it); a kill is found by the victim's lease lapsing
  const lease = fault === 'kill' ? LEASE_MS : 10 * LEASE_MS
  const instances = await Promise.all([cluster.start('a', lease), cluster.start('b', lease)])
  const runId = await postDurable(instances[0]!)
  const runner = await eventually(async () => cluster.executions(runId).find((row) => row.kind === 'step' && row.step === 3)?.instance, 20_000)
  const victim = instances.find((instance) => instance.name === runner)!
  const survivor = instances.find((instance) => instance.name !== runner)!
  await sleep(50)
  await (fault === 'kill' ? victim.kill() : victim.drain())
  const record = await eventually(async () => {
    const run = await (await fetch(`${survivor.url}/v1/runs/${runId}`)).json() as { status: string }
    return run.status !== 'running' && run.status !== 'queued' && run
  }, LEASE_MS + 20_000, 'the run ended')
  const log = parseSse(await (await fetch(`${survivor.url}/v1/runs/${runId}/events`)).text())
  const requeues = log.filter((e) => e.event === 'run.requeued').map((e) => e.data)
  t.match(record, { status: 'completed', attempt: 2, result: { output: { outputs: Array.from({ length: STEPS }, (_v, i) => i * 10), instance: survivor.name } } },
    `handed off once (requeues: ${JSON.stringify(requeues)})`)

  const requeue = log.findIndex((e) => e.event === 'run.requeued')
  t.same(log[requeue]!.data, { attempt: 2, reason: fault === 'kill' ? 'INSTANCE_LOST' : 'SHUTDOWN' })
  const journaled = log.slice(0, requeue).filter((e) => e.event === 'step.completed').map((e) => (e.data as { index: number }).index)
  t.ok(journaled.length >= 3, `${journaled.length} steps journaled before the ${fault}`)
  t.same(log.filter((e) => e.event === 'step.completed').map((e) => (e.data as { index: number }).index), Array.from({ length: STEPS }, (_v, i) => i), 'each step journaled once')

  const steps = cluster.executions(runId).filter((row) => row.kind === 'step')
  for (let step = 0; step < STEPS; step++) {
    const rows = steps.filter((row) => row.step === step)
    if (journaled.includes(step)) t.same(rows.map((row) => row.instance), [victim.name], `step ${step}, journaled: executed once`)
    else {
      t.ok(rows.length >= 1 && rows.at(-1)!.instance === survivor.name, `step ${step}: executed on the survivor`)
      t.same(new Set(rows.map((row) => row.key)), new Set([`${runId}:${step}`]), `step ${step}: one idempotency key on every attempt`)
    }
  }
  t.ok(steps.length <= STEPS + 1, `${steps.length} executions for ${STEPS} steps: only the one in flight ran twice`)
}

const pgUp = await pgReachable()
const redisUp = await redisReachable()
const admin = pgUp ? new pg.Pool({ connectionString: pgUrl(), max: 2 }) : null
t.teardown(() => admin?.end())

for (const backend of ['postgres', 'redis'] as const) {
  const up = backend === 'postgres' ? pgUp : redisUp
  t.test(`${backend}: kill -9 in the middle of a run of steps: the completed steps are not executed again`, { skip: up ? false : `${backend} not reachable` }, async (t) => {
    await stepsThroughFault(t, backend, admin, 'kill')
  })
  t.test(`${backend}: a drain hands a run of steps off: the completed steps are not executed again`, { skip: up ? false : `${backend} not reachable` }, async (t) => {
    await stepsThroughFault(t, backend, admin, 'drain')
  })
}
