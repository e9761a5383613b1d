// The adapters' durable runs (docs/durable-agents.md) through a kill -9: instances in processes of their own sharing
// a PostgreSQL schema or a Redis key prefix (test/fixtures/adapter-agents.ts). The AI SDK agent's model calls and
// tool executions, and the LangGraph agent's nodes, are recorded in a file: what was journaled (or checkpointed)
// before the kill is never executed again by the instance that takes the run over.
import pg from 'pg'
import t from 'tap'
import type { Test } from 'tap'
import { eventually, parseSse, sleep } from '../helper.js'
import { storeCluster } from '../helpers/instances.js'
import type { Backend, Execution, Instance } from '../helpers/instances.js'
import { pgUrl, pgReachable, redisReachable } from '../helpers/services.js'
import { ADAPTER_STEPS } from '../fixtures/adapter-agents.js'

t.setTimeout(240_000)

// The victim is found by its lease's lapse. An instance fences its own runs off with a third of its lease
// unrenewed: on a 1 s lease, a stall of a loaded machine (the suite's other files beside) lost the survivor's
// attempt too (attempt 3, its node run again), so these instances hold their runs for 3 s.
const KILL_LEASE_MS = 3_000

const range = (n: number): number[] => Array.from({ length: n }, (_v, i) => i)

/** A run of `agent` killed on its instance in its fourth step; resolves once the other instance ended it. */
async function killedInFourthStep (t: Test, backend: Backend, admin: pg.Pool | null, agent: string) {
  const cluster = storeCluster(t, backend, admin, { adapters: true })
  const instances = await Promise.all([cluster.start('a', KILL_LEASE_MS), cluster.start('b', KILL_LEASE_MS)])
  const res = await fetch(`${instances[0]!.url}/v1/agents/${agent}/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: 'go', background: true })
  })
  t.equal(res.status, 202)
  const { runId } = await res.json() as { runId: string }
  const runner = await eventually(async () => cluster.executions(runId).find((row) => row.kind === 'step' && row.step === 3)?.instance, 20_000)
  const victim = instances.find((instance) => instance.name === runner)!
  const survivor = instances.find((instance) => instance.name !== runner)!
  await sleep(50)
  await victim.kill()
  const record = await eventually(async () => {
    const run = await (await fetch(`${survivor.url}/v1/runs/${runId}`)).json() as { status: string }
    return run.status !== 'running' && run.status !== 'queued' && run
  }, KILL_LEASE_MS + 20_000, 'the run ended')
  const log = parseSse(await (await fetch(`${survivor.url}/v1/runs/${runId}/events`)).text())
  const requeue = log.findIndex((e) => e.event === 'run.requeued')
  t.same(log[requeue]?.data, { attempt: 2, reason: 'INSTANCE_LOST' })
  return { record, log, requeue, victim, survivor, rows: cluster.executions(runId) }
}

/** Where `kind`'s step `step` was executed, in order. */
const where = (rows: readonly Execution[], kind: string, step: number): string[] => rows.filter((row) => row.kind === kind && row.step === step).map((row) => row.instance)

function onceOn (t: Test, rows: readonly Execution[], kind: string, step: number, instance: Instance, why: string): void {
  t.same(where(rows, kind, step), [instance.name], `${kind} ${step}, ${why}: executed once, on ${instance.name}`)
}

const pgUp = await pgReachable()
const redisUp = await redisReachable()
const admin = pgUp ? new pg.Pool({ connectionString: pgUrl(), max: 2 }) : null
t.teardown(() => admin?.end())

for (const backend of ['postgres', 'redis'] as const) {
  const skip = (backend === 'postgres' ? pgUp : redisUp) ? false : `${backend} not reachable`

  t.test(`${backend}: kill -9 in an AI SDK run: no journaled model call made again, no journaled tool executed again`, { skip }, async (t) => {
    const { record, log, requeue, victim, survivor, rows } = await killedInFourthStep(t, backend, admin, 'model-tools')
    t.match(record, { status: 'completed', attempt: 2, result: { output: 'done' } })
    const journaled = (name: string, events: typeof log) => events.filter((e) => e.event === 'step.completed' && (e.data as { name: string }).name === name).length
    const models = journaled('model', log.slice(0, requeue))
    const tools = journaled('tool.work', log.slice(0, requeue))
    t.ok(models >= 4 && tools >= 3, `${models} model calls and ${tools} tool executions journaled before the kill`)
    t.equal(journaled('model', log), ADAPTER_STEPS + 1, 'each model call journaled once')
    t.equal(journaled('tool.work', log), ADAPTER_STEPS, 'each tool execution journaled once')
    for (const step of range(models)) onceOn(t, rows, 'model', step, victim, 'journaled')
    for (const step of range(tools)) onceOn(t, rows, 'step', step, victim, 'journaled')
    for (const step of range(ADAPTER_STEPS + 1).slice(models)) t.equal(where(rows, 'model', step).at(-1), survivor.name, `model ${step}: called by the survivor`)
    for (const step of range(ADAPTER_STEPS).slice(tools)) t.equal(where(rows, 'step', step).at(-1), survivor.name, `step ${step}: executed by the survivor`)
    t.ok(rows.filter((row) => row.kind === 'step').length <= ADAPTER_STEPS + 1, 'only the tool execution in flight ran twice')
  })

  t.test(`${backend}: kill -9 in a LangGraph run: the graph goes on from its last checkpoint, no node before it run again`, { skip }, async (t) => {
    const { record, victim, survivor, rows } = await killedInFourthStep(t, backend, admin, 'graph-nodes')
    t.match(record, { status: 'completed', attempt: 2, result: { output: `node ${ADAPTER_STEPS - 1}` } })
    const from = Math.min(...rows.filter((row) => row.kind === 'step' && row.instance === survivor.name).map((row) => row.step))
    t.ok(from >= 3, `the survivor went on from node ${from}`)
    for (const step of range(from)) onceOn(t, rows, 'step', step, victim, 'before the checkpoint')
    for (const step of range(ADAPTER_STEPS).slice(from)) t.equal(where(rows, 'step', step).filter((name) => name === survivor.name).length, 1, `node ${step}: run once by the survivor`)
    t.ok(rows.filter((row) => row.kind === 'step').length <= ADAPTER_STEPS + 1, 'only the node in flight ran twice')
  })
}
