// Recovery and hand-off scenarios (docs/runs.md) run against any run store (the memory one in test/routes/background.test.ts,
// SQLite, PostgreSQL and Redis in test/stores/run-service.test.ts): the instance that dies is played by the test,
// through the store, so that it dies exactly when the scenario says.
import type { Test } from 'tap'
import type { Agent } from '../../lib/core/types.js'
import { MemoryQuotaStore } from '../../lib/stores/memory-quotas.js'
import type { RunStore } from '../../lib/stores/types.js'
import { MIN_RUN_LEASE_MS } from '../../schemas/options.js'
import { build, echo, eventually, parseSse } from '../helper.js'

/**
 * Issue 31: a cancel asked for before a run's instance died wins over recovery. A background run of a resumable
 * agent (one recovery would requeue) is claimed by an instance that starts it, is asked to cancel (202), and dies
 * before it acts on the cancel; when its lease lapses, the instance that finds it ends it `cancelled` at its first
 * attempt: no `run.requeued`, never run again.
 */
export async function cancelAskedBeforeDeath (t: Test, store: RunStore): Promise<void> {
  let executions = 0
  const steady: Agent = { resumable: true, async run () { executions++; return { output: 'ran again' } } }
  const { app } = build(t, { runStore: store, runLeaseMs: MIN_RUN_LEASE_MS, agents: { steady } })
  await app.ready()
  const { worker } = app.agentService
  // this instance neither claims nor looks for lapsed leases until the other one has died (the claim it began at
  // ready is done once stop() resolves: it would take the run below before the other instance could)
  await worker.stop()
  const queued = await app.inject({ method: 'POST', url: '/v1/agents/steady/runs', payload: { input: null, background: true } })
  t.equal(queued.statusCode, 202)
  const { runId } = queued.json() as { runId: string }

  // the other instance claims it and starts it...
  const claimed = await store.claim({ owner: 'dying-instance', until: Date.now() + MIN_RUN_LEASE_MS }, new Date().toISOString(), 1)
  t.same(claimed.map((record) => record.runId), [runId])
  await store.append(runId, [{ seq: 1, type: 'run.started', data: JSON.stringify({ runId, attempt: 1 }) }], 'dying-instance')
  // ...is asked to cancel it...
  const cancel = await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel` })
  t.equal(cancel.statusCode, 202)
  // ...and dies before it acts on it: its lease lapses, and this instance finds it
  worker.start(app.log)
  const ended = await eventually(async () => {
    const record = await store.get(runId)
    return record !== null && record.status !== 'running' && record.status !== 'queued' && record
  }, MIN_RUN_LEASE_MS + 5_000, 'the lapsed run ended')
  t.match(ended, { status: 'cancelled', attempt: 1, error: { code: 'CANCELLED' } })
  const log = parseSse((await app.inject({ url: `/v1/runs/${runId}/events` })).body)
  t.same(log.map((e) => e.event), ['run.started', 'run.failed'], 'no run.requeued')
  t.match(log.at(-1)!.data, { error: { code: 'CANCELLED' } })
  t.equal(executions, 0, 'never run again')
}

/**
 * A cancel answered 202 while a drain hands its run off: the run ends `cancelled`, never queued again. One instance
 * runs a background run of a resumable agent and drains; just as it hands the run off, the other instance is asked
 * to cancel it (202: the run is running), so the hand-off's requeue finds the cancel asked for. The run ends
 * cancelled at its first attempt, its quota slot given back; the other instance never runs it.
 */
export async function cancelAskedAtHandOff (t: Test, [storeA, storeB]: [RunStore, RunStore]): Promise<void> {
  let executions = 0
  let started!: () => void
  const running = new Promise<void>((resolve) => { started = resolve })
  const steady: Agent = {
    resumable: true,
    async run (_input, ctx) {
      executions++
      started()
      await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }))
      return { output: 'never' }
    }
  }
  const shared = { agents: { steady, echo }, quotas: { maxConcurrentRuns: 1 }, quotaStore: new MemoryQuotaStore() }
  const a = build(t, { ...shared, runStore: storeA })
  const b = build(t, { ...shared, runStore: storeB })
  const queued = await a.app.inject({ method: 'POST', url: '/v1/agents/steady/runs', payload: { input: null, background: true } })
  t.equal(queued.statusCode, 202)
  const { runId } = queued.json() as { runId: string }
  await running
  t.match(await storeA.get(runId), { status: 'running' }, 'claimed and started by the first instance')

  // the other instance is asked to cancel it as the first hands it off (after its last events are stored)
  let cancel: { statusCode: number } | null = null
  const requeue = storeA.requeue.bind(storeA)
  storeA.requeue = async (...args) => {
    cancel = await b.app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel` })
    return requeue(...args)
  }
  await a.close(0)
  t.equal(cancel!.statusCode, 202, 'the cancel was answered 202')
  t.match(await storeB.get(runId), { status: 'cancelled', attempt: 1, error: { code: 'CANCELLED' } })
  const log = parseSse((await b.app.inject({ url: `/v1/runs/${runId}/events` })).body)
  t.same(log.map((e) => e.event), ['run.started', 'run.failed'], 'no run.requeued')
  t.match(log.at(-1)!.data, { error: { code: 'CANCELLED' } })
  t.equal((await b.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'next' } })).statusCode, 200, 'its quota slot given back')
  t.equal(executions, 1, 'never run again')
}
