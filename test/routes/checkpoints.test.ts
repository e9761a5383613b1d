import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { MemoryCheckpointStore } from '../../lib/stores/memory.js'
import type { CheckpointRecord } from '../../lib/stores/types.js'
import type { Agent, RunContext } from '../../lib/core/types.js'
import { build, eventually, listen, parseSse, principalFromHeader, sleep } from '../helper.js'
import { openSse } from '../helpers/streams.js'

interface StepperInput { failAt?: number, steps?: number, hangAt?: number }

/** Counts to `steps`, checkpointing each step; fails at `failAt` and hangs (until aborted) at `hangAt`. */
const resumes: Array<RunContext['resume']> = []
const stepper: Agent<StepperInput> = {
  async run (input, ctx) {
    resumes.push(ctx.resume)
    let step = (ctx.resume?.state as { done: number } | undefined)?.done ?? 0
    while (step < (input.steps ?? 3)) {
      step++
      await ctx.checkpoint({ done: step })
      if (step === input.failAt) throw new Error(`failed at ${step}`)
      if (step === input.hangAt) await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)))
    }
    return { output: { done: step, resumedFrom: ctx.resume?.step ?? null } }
  }
}

async function run (app: FastifyInstance, payload: Record<string, unknown>, headers: Record<string, string> = {}) {
  return app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload, headers })
}

t.test('checkpoint → failure → resume → completion: same runId and session, ctx.resume, checkpoint gone at the end', async (t) => {
  resumes.length = 0
  const { app } = build(t, { agents: { stepper }, exposeErrors: true })
  const first = await run(app, { input: { failAt: 2, steps: 4 }, stream: true })
  const events = parseSse(first.body)
  t.same(events.map((e) => e.event), ['run.started', 'checkpoint.saved', 'checkpoint.saved', 'run.failed'])
  t.same(events.slice(1, 3).map((e) => e.data), [{ step: 1 }, { step: 2 }])
  t.match(events[3]!.data, { error: { code: 'AGENT_ERROR', message: 'failed at 2' } })
  const { runId, sessionId } = events[0]!.data

  const store = app.agentService.settings.checkpointStore
  t.match(await store.load(runId), { runId, agent: 'stepper', sessionId, step: 2, state: { done: 2 } })
  t.match(await store.list(), [{ runId, step: 2 }], 'a failed run is resumable')

  const resumed = await run(app, { input: { steps: 4 }, resumeRunId: runId })
  t.equal(resumed.statusCode, 200)
  t.match(resumed.json(), { runId, sessionId, status: 'completed', output: { done: 4, resumedFrom: 2 } })
  t.same(resumes, [undefined, { step: 2, state: { done: 2 } }])
  t.equal(await store.load(runId), null, 'a completed run deletes its checkpoint')

  const session = (await app.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).json()
  t.equal(session.turns, 1, 'only the completed run is a turn')
  t.same(session.messages.map((m: { runId: string }) => m.runId), [runId, runId])

  const again = await run(app, { input: {}, resumeRunId: runId })
  t.equal(again.statusCode, 404)
  t.match(again.json(), { code: 'RUN_NOT_FOUND', message: `No resumable run "${runId}"` })
  const entries = (await (async () => { await app.agentService.audit.flush(); return app.agentService.settings.auditStore.query({ limit: 50 }) })()).entries
  t.match(entries[0], { status: 404, agent: 'stepper' })
})

t.test('a resumed run checkpoints on from its step; the steps keep increasing', async (t) => {
  const { app } = build(t, { agents: { stepper } })
  const first = parseSse((await run(app, { input: { failAt: 1 }, stream: true })).body)
  const runId = first[0]!.data.runId
  const second = parseSse((await run(app, { input: { failAt: 2 }, resumeRunId: runId, stream: true })).body)
  t.same(second.filter((e) => e.event === 'checkpoint.saved').map((e) => e.data.step), [2])
  t.equal(second.at(-1)!.event, 'run.failed')
  const third = parseSse((await run(app, { input: {}, resumeRunId: runId, stream: true })).body)
  t.same(third.filter((e) => e.event === 'checkpoint.saved').map((e) => e.data.step), [3])
  t.match(third.at(-1), { event: 'run.completed', data: { runId, output: { done: 3, resumedFrom: 2 } } })
})

t.test('resuming what cannot be resumed: unknown, another agent\'s, another session, another principal\'s', async (t) => {
  const { app } = build(t, { agents: { stepper, other: stepper } })
  principalFromHeader(app)
  const unknown = await run(app, { input: {}, resumeRunId: 'no-such-run' })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().code, 'RUN_NOT_FOUND')

  const failed = await run(app, { input: { failAt: 1 } }, { 'x-test-principal': 'alice' })
  t.equal(failed.statusCode, 500)
  const [checkpoint] = await app.agentService.settings.checkpointStore.list()
  const { runId, sessionId } = checkpoint!

  const otherAgent = await app.inject({ method: 'POST', url: '/v1/agents/other/runs', payload: { input: {}, resumeRunId: runId }, headers: { 'x-test-principal': 'alice' } })
  t.equal(otherAgent.statusCode, 404)
  t.equal(otherAgent.json().code, 'RUN_NOT_FOUND')

  const otherSession = (await app.inject({ method: 'POST', url: '/v1/sessions', payload: {}, headers: { 'x-test-principal': 'alice' } })).json().id
  const mismatch = await run(app, { input: {}, resumeRunId: runId, sessionId: otherSession }, { 'x-test-principal': 'alice' })
  t.equal(mismatch.statusCode, 400)
  t.match(mismatch.json(), { code: 'RUN_SESSION_MISMATCH', message: `Run "${runId}" belongs to another session` })

  const bob = await run(app, { input: {}, resumeRunId: runId }, { 'x-test-principal': 'bob' })
  t.equal(bob.statusCode, 404, 'another principal cannot resume (nor learn that the run exists)')
  t.equal(bob.json().code, 'RUN_NOT_FOUND')

  const alice = await run(app, { input: {}, resumeRunId: runId, sessionId }, { 'x-test-principal': 'alice' })
  t.equal(alice.statusCode, 200, 'the same sessionId is fine')
  t.equal(alice.json().runId, runId)
})

t.test('a run whose session expired cannot be resumed', async (t) => {
  const { app } = build(t, { agents: { stepper }, sessionTtlMs: 50 })
  const failed = parseSse((await run(app, { input: { failAt: 1 }, stream: true })).body)
  await sleep(80)
  const res = await run(app, { input: {}, resumeRunId: failed[0]!.data.runId })
  t.equal(res.statusCode, 404)
  t.equal(res.json().code, 'RUN_NOT_FOUND')
})

t.test('resuming a run still in flight is 409 RUN_IN_PROGRESS', async (t) => {
  const { service, url } = await listen(t, { agents: { stepper } })
  const app = service.app
  const stream = await openSse(url, '/v1/agents/stepper/runs', { input: { hangAt: 1 } })
  const { runId } = (await stream.next('run.started')).data
  await stream.next('checkpoint.saved')
  const res = await run(app, { input: {}, resumeRunId: runId })
  t.equal(res.statusCode, 409)
  t.match(res.json(), { code: 'RUN_IN_PROGRESS', message: `Run "${runId}" is still in flight` })

  stream.close()
  await eventually(() => app.agentService.runs.size === 0 ? true : undefined)
  t.match(await app.agentService.settings.checkpointStore.load(runId), { step: 1 }, 'a run cut off by its client keeps its checkpoint')
  const resumed = await run(app, { input: {}, resumeRunId: runId })
  t.equal(resumed.statusCode, 200)
  t.same(resumed.json().output, { done: 3, resumedFrom: 1 })
})

t.test('two resumes of one run racing on one instance: one runs, the other is 409', async (t) => {
  // load() slow enough for both requests to pass the first in-flight check before either creates its run
  class Slow extends MemoryCheckpointStore {
    override async load (runId: string): Promise<CheckpointRecord | null> {
      const record = await super.load(runId)
      await sleep(30)
      return record
    }
  }
  const { app } = build(t, { agents: { stepper }, checkpointStore: new Slow(), requestTimeoutMs: 500 })
  const failed = parseSse((await run(app, { input: { failAt: 1 }, stream: true })).body)
  const runId = failed[0]!.data.runId
  // the winner hangs at step 2 until its timeout
  const both = [run(app, { input: { hangAt: 2 }, resumeRunId: runId }), run(app, { input: { hangAt: 2 }, resumeRunId: runId })]
  const loser = await Promise.race(both)
  t.equal(loser.statusCode, 409)
  t.equal(loser.json().code, 'RUN_IN_PROGRESS')
  t.equal(app.agentService.runs.size, 1, 'one run under that id')
  t.same((await Promise.all(both)).map((r) => r.statusCode).sort(), [409, 504])
})

t.test('a timed-out run keeps its checkpoint and can be resumed', async (t) => {
  const { app } = build(t, { agents: { stepper }, requestTimeoutMs: 100 })
  const res = await run(app, { input: { hangAt: 2 } })
  t.equal(res.statusCode, 504)
  const [checkpoint] = await app.agentService.settings.checkpointStore.list()
  t.match(checkpoint, { step: 2, agent: 'stepper' })
  const resumed = await run(app, { input: {}, resumeRunId: checkpoint!.runId })
  t.same(resumed.json().output, { done: 3, resumedFrom: 2 })
})

t.test('ownership first: resuming another principal\'s run in flight is 404, never RUN_IN_PROGRESS', async (t) => {
  let release: () => void = () => {}
  const gated: Agent<{ checkpoint: boolean }> = {
    async run (input, ctx) {
      if (input.checkpoint) await ctx.checkpoint({ done: 1 })
      await new Promise<void>((resolve) => { release = resolve })
      return { output: 'done' }
    }
  }
  const { app } = build(t, { agents: { stepper, gated } })
  principalFromHeader(app)
  await app.ready()
  const alice = { 'x-test-principal': 'alice' }
  const bob = { 'x-test-principal': 'bob' }
  const resume = (runId: string, headers: Record<string, string>) =>
    app.inject({ method: 'POST', url: '/v1/agents/gated/runs', payload: { input: { checkpoint: false }, resumeRunId: runId }, headers })
  for (const checkpoint of [true, false]) {
    const first = app.inject({ method: 'POST', url: '/v1/agents/gated/runs', payload: { input: { checkpoint } }, headers: alice })
    await eventually(() => app.agentService.runs.size === 1, 5_000, 'the run in flight')
    const runId = app.agentService.runs.ids()[0]!
    if (checkpoint) await eventually(async () => await app.agentService.settings.checkpointStore.load(runId) !== null, 5_000, 'its checkpoint')
    const other = await resume(runId, bob)
    t.equal(other.statusCode, 404, `another principal (${checkpoint ? 'after' : 'before'} its first checkpoint)`)
    t.equal(other.json().code, 'RUN_NOT_FOUND')
    const owner = await resume(runId, alice)
    t.equal(owner.statusCode, 409, 'its owner is told it runs')
    t.equal(owner.json().code, 'RUN_IN_PROGRESS')
    release()
    t.equal((await first).statusCode, 200)
  }
})

t.test('a run stopped while its checkpoint was being saved learns it from ctx.checkpoint; a stopped run saves nothing more', async (t) => {
  const checkpointStore = new MemoryCheckpointStore()
  const save = checkpointStore.save.bind(checkpointStore)
  let saving!: () => void
  const saveStarted = new Promise<void>((resolve) => { saving = resolve })
  let finishSave!: () => void
  const saveHeld = new Promise<void>((resolve) => { finishSave = resolve })
  const saved: unknown[] = []
  checkpointStore.save = async (record) => {
    saving()
    await saveHeld
    saved.push(record.state)
    return save(record)
  }
  const seen: unknown[] = []
  const { app } = build(t, {
    checkpointStore,
    agents: {
      saver: {
        async run (_i, ctx) {
          try {
            await ctx.checkpoint({ n: 1 })
          } catch (err) {
            seen.push(err)
          }
          await ctx.checkpoint({ n: 2 }).catch((err: unknown) => seen.push(err))
          return { output: null }
        }
      }
    }
  })
  const answer = app.inject({ method: 'POST', url: '/v1/agents/saver/runs', payload: { input: null } })
  await saveStarted
  const runId = app.agentService.runs.ids()[0]!
  t.equal((await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel` })).statusCode, 202)
  finishSave()
  t.match((await answer).json(), { code: 'CANCELLED' })
  await eventually(() => seen.length === 2)
  t.match(seen, [{ code: 'CANCELLED' }, { code: 'CANCELLED' }], 'the save in flight, then the next one, throw the reason it stopped')
  t.same(saved, [{ n: 1 }], 'the second checkpoint was never sent to the store')
})
