// Background runs, leases and recovery (docs/runs.md), with instances in one process sharing memory stores: a run
// queued on one is claimed by another, a lapsed lease is found and its run requeued or ended, a drain hands runs
// off. The same across processes, killed with SIGKILL, on PostgreSQL and Redis: test/stores/.
import { mock } from 'node:test'
import t from 'tap'
import type { Test } from 'tap'
import type { Agent, AgentServiceOptions } from '../../lib/core/types.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { cancelledEnd } from '../../lib/runs/start.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { MIN_RUN_LEASE_MS } from '../../schemas/options.js'
import { build, eventually, handOffPair, gate, keepAlive, orAbort, parseSse, sleep } from '../helper.js'
import { cancelAskedAtHandOff, cancelAskedBeforeDeath } from '../helpers/recovery.js'

type Service = ReturnType<typeof build>

// the shortest lease the options take: the lapses these tests wait for come soonest
const LEASE_MS = MIN_RUN_LEASE_MS

/** Two instances on shared stores (runs, sessions, checkpoints…), each with its own worker. */
function pair (t: Parameters<typeof build>[0], options: Partial<AgentServiceOptions>): [Service, Service] {
  const stores = memoryStores()
  return [build(t, { ...stores, ...options }), build(t, { ...stores, ...options })]
}

/** The workers' timers never hold a process; with inject() (no sockets) a test waiting on them needs one that does. */
async function events (app: Service['app'], runId: string) {
  return parseSse((await app.inject({ url: `/v1/runs/${runId}/events` })).body)
}

t.test('background: 202 with Location at once; the run runs with nobody connected; the record says background', async (t) => {
  const held = gate()
  let ran = 0
  const { app } = build(t, {
    idempotency: {},
    agents: { later: { async run (input) { ran++; await held.promise; return { output: input } } } }
  })
  await app.ready()
  const res = await app.inject({ method: 'POST', url: '/v1/agents/later/runs', payload: { input: 7, background: true }, headers: { 'idempotency-key': 'bg-1' } })
  t.equal(res.statusCode, 202)
  const body = res.json()
  t.same(Object.keys(body).sort(), ['requestId', 'runId', 'sessionId', 'status', 'traceId'])
  t.match(body, { status: 'queued', requestId: res.headers['x-request-id'], traceId: /^[0-9a-f]{32}$/, sessionId: String })
  t.equal(res.headers.location, `/v1/runs/${body.runId}`)
  await eventually(() => ran === 1)
  t.match((await app.inject({ url: `/v1/runs/${body.runId}` })).json(), { status: 'running', background: true, attempt: 1 })
  const replay = await app.inject({ method: 'POST', url: '/v1/agents/later/runs', payload: { input: 7, background: true }, headers: { 'idempotency-key': 'bg-1' } })
  t.equal(replay.statusCode, 202)
  t.equal(replay.headers['idempotent-replayed'], 'true')
  t.same(replay.json(), body, 'the key replays the 202')
  t.equal(replay.headers.location, `/v1/runs/${body.runId}`, 'issue 23: with its Location')
  held.release()
  await eventually(async () => (await app.inject({ url: `/v1/runs/${body.runId}` })).json().status === 'completed')
  t.equal(ran, 1, 'run once')
  t.same((await events(app, body.runId)).map((e) => e.event), ['run.started', 'run.completed'])
  const ephemeral = await app.inject({ method: 'POST', url: '/v1/agents/later/runs', payload: { input: 1, background: true, store: false } })
  t.equal(ephemeral.statusCode, 400)
  t.match(ephemeral.json(), { code: 'FST_ERR_VALIDATION', message: /background cannot be combined with store: false/ })
})

t.test('background runs in a busy session: reject (409), enqueue (waits in the queue), interrupt', async (t) => {
  const held = gate()
  const { app } = build(t, { agents: { held: { async run (_i, ctx) { await orAbort(held.promise, ctx.signal); return { output: 'held' } } }, quick: { async run () { return { output: 'quick' } } } } })
  await app.ready()
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, background: true } })).json()
  await eventually(async () => (await app.inject({ url: `/v1/runs/${first.runId}` })).json().status === 'running')
  const busy = await app.inject({ method: 'POST', url: '/v1/agents/quick/runs', payload: { input: null, background: true, sessionId: first.sessionId } })
  t.equal(busy.statusCode, 409)
  t.match(busy.json(), { code: 'SESSION_BUSY' })
  const queued = (await app.inject({ method: 'POST', url: '/v1/agents/quick/runs', payload: { input: null, background: true, sessionId: first.sessionId, multitask: 'enqueue' } })).json()
  await sleep(50)
  t.match((await app.inject({ url: `/v1/runs/${queued.runId}` })).json(), { status: 'queued' }, 'waits while the session is busy')
  held.release()
  await eventually(async () => (await app.inject({ url: `/v1/runs/${queued.runId}` })).json().status === 'completed')
  const third = (await app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, background: true, sessionId: first.sessionId } })).json()
  t.ok(third.runId, 'free again')
})

t.test('runConcurrency bounds the background runs an instance runs at once; the rest wait queued', async (t) => {
  const held = gate()
  let running = 0
  let most = 0
  const { app } = build(t, {
    runConcurrency: 2,
    agents: { held: { async run () { running++; most = Math.max(most, running); await held.promise; running--; return { output: null } } } }
  })
  await app.ready()
  const ids: string[] = []
  for (let i = 0; i < 5; i++) ids.push((await app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: i, background: true } })).json().runId)
  await eventually(() => running === 2)
  await sleep(50)
  const statuses = await Promise.all(ids.map(async (id) => (await app.inject({ url: `/v1/runs/${id}` })).json().status))
  t.same(statuses.filter((s) => s === 'queued').length, 3)
  held.release()
  await eventually(async () => (await Promise.all(ids.map(async (id) => (await app.inject({ url: `/v1/runs/${id}` })).json().status))).every((s) => s === 'completed'))
  t.equal(most, 2)
})

t.test('a run queued on one instance is claimed by another that has room', async (t) => {
  let ranOn: string | null = null
  const [a, b] = pair(t, { agents: { where: { async run (_i, ctx) { ranOn = ctx.requestId; return { output: 'done' } } } } })
  await a.app.ready()
  await b.app.ready()
  // A takes no runs of the queue (as while it drains); B does
  a.app.agentService.worker.stopClaiming()
  const res = (await a.app.inject({ method: 'POST', url: '/v1/agents/where/runs', payload: { input: null, background: true } })).json()
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${res.runId}` })).json().status === 'completed')
  t.equal(ranOn, res.requestId, 'with the request id of the request that queued it')
  t.equal(a.app.agentService.runs.size, 0)
})

t.test('an instance that stops renewing: its resumable background run is requeued and goes on elsewhere from its checkpoint', async (t) => {
  const steps: string[] = []
  const never = gate()
  const stepper: Agent = {
    resumable: true,
    async run (_input, ctx) {
      let step = (ctx.resume?.state as { step: number } | undefined)?.step ?? 0
      for (; step < 3; step++) {
        steps.push(`${ctx.requestId}:${step}`)
        // the first attempt's instance hangs here for good (as a dead one would, without the noise)
        if (step === 1 && ctx.resume === undefined) await orAbort(never.promise, ctx.signal)
        await ctx.checkpoint({ step: step + 1 })
      }
      return { output: { steps: step } }
    }
  }
  const [a, b] = pair(t, { runLeaseMs: LEASE_MS, agents: { stepper } })
  await a.app.ready()
  await b.app.ready()
  b.app.agentService.worker.stopClaiming()
  const queued = (await a.app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload: { input: null, background: true } })).json()
  await eventually(() => steps.length === 2)
  // A dies (as far as the store can tell): its leases are never renewed again
  a.app.agentService.worker.stop()
  b.app.agentService.worker.start(b.app.log)
  const started = Date.now()
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${queued.runId}` })).json().status === 'completed', 10_000)
  t.ok(Date.now() - started < LEASE_MS + 5_000, 'found within runLeaseMs + 5 s')
  const log = await events(b.app, queued.runId)
  t.same(log.map((e) => e.id), log.map((_e, i) => i + 1), 'one unbroken sequence of seqs')
  const types = log.map((e) => e.event)
  t.same(types.slice(types.indexOf('run.requeued')), ['run.requeued', 'run.started', 'checkpoint.saved', 'checkpoint.saved', 'run.completed'])
  t.same(log.find((e) => e.event === 'run.requeued')!.data, { attempt: 2, reason: 'INSTANCE_LOST' })
  t.match(log.filter((e) => e.event === 'run.started').map((e) => e.data.attempt), [1, 2])
  t.same(steps, [`${queued.requestId}:0`, `${queued.requestId}:1`, `${queued.requestId}:1`, `${queued.requestId}:2`], 'step 0 was not done again')
  t.match(log.at(-1)!.data, { output: { steps: 3 } })
})

t.test('a lost instance\'s run that cannot go on elsewhere ends INSTANCE_LOST; so does one out of attempts', async (t) => {
  const store = new MemoryRunStore()
  const forever = gate()
  const agents = {
    plain: { async run (_i: unknown, ctx: { signal: AbortSignal }) { await orAbort(forever.promise, ctx.signal); return { output: null } } },
    tired: { resumable: true, async run (_i: unknown, ctx: { signal: AbortSignal }) { await orAbort(forever.promise, ctx.signal); return { output: null } } }
  } as Record<string, Agent>
  const [a, b] = [build(t, { runStore: store, runLeaseMs: LEASE_MS, maxRunAttempts: 2, agents }), build(t, { runStore: store, runLeaseMs: LEASE_MS, maxRunAttempts: 2, agents })]
  await a.app.ready()
  await b.app.ready()
  b.app.agentService.worker.stopClaiming()
  const plain = (await a.app.inject({ method: 'POST', url: '/v1/agents/plain/runs', payload: { input: null, background: true } })).json()
  const tired = (await a.app.inject({ method: 'POST', url: '/v1/agents/tired/runs', payload: { input: null, background: true } })).json()
  await eventually(() => a.app.agentService.runs.size === 2)
  a.app.agentService.worker.stop()
  await eventually(async () => (await store.get(plain.runId))!.status === 'failed', 5_000)
  t.match(await store.get(plain.runId), { error: { code: 'INSTANCE_LOST', message: 'The instance running the run was lost' } })
  // the resumable one is requeued; B claims it, then B is lost too: two attempts, none left
  await eventually(async () => (await store.get(tired.runId))!.status === 'queued', 5_000)
  b.app.agentService.worker.start(b.app.log)
  await eventually(async () => (await store.get(tired.runId))!.attempt === 2 && (await store.get(tired.runId))!.status === 'running', 5_000)
  b.app.agentService.worker.stop()
  const c = build(t, { runStore: store, runLeaseMs: LEASE_MS, maxRunAttempts: 2, agents })
  await c.app.ready()
  c.app.agentService.worker.stopClaiming()
  c.app.agentService.worker.start(c.app.log)
  await eventually(async () => (await store.get(tired.runId))!.status === 'failed', 5_000)
  t.match(await store.get(tired.runId), { attempt: 2, error: { code: 'INSTANCE_LOST', message: 'The instance running the run was lost, after 2 attempts' } })
  const log = await events(c.app, tired.runId)
  t.same(log.map((e) => e.event), ['run.started', 'run.requeued', 'run.started', 'run.failed'])
  forever.release()
})

t.test('a drain hands off what can go on elsewhere, and ends the rest with SHUTDOWN', async (t) => {
  const release = gate()
  const ran: string[] = []
  const agents: Record<string, Agent> = {
    moving: { resumable: true, async run (_i, ctx) { ran.push(`moving:${ctx.requestId}`); await orAbort(release.promise, ctx.signal); return { output: 'moved' } } },
    staying: { async run (_i, ctx) { await orAbort(release.promise, ctx.signal); return { output: 'stayed' } } }
  }
  const { a, b } = await handOffPair(t, { agents })
  const moving = (await a.app.inject({ method: 'POST', url: '/v1/agents/moving/runs', payload: { input: null, background: true } })).json()
  const staying = (await a.app.inject({ method: 'POST', url: '/v1/agents/staying/runs', payload: { input: null, background: true } })).json()
  await eventually(() => a.app.agentService.runs.size === 2)
  await a.close(50)
  b.app.agentService.worker.start(b.app.log)
  release.release()
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${moving.runId}` })).json().status === 'completed')
  const log = await events(b.app, moving.runId)
  t.same(log.map((e) => e.event), ['run.started', 'run.requeued', 'run.started', 'run.completed'])
  t.same(log[1]!.data, { attempt: 2, reason: 'SHUTDOWN' })
  t.match((await b.app.inject({ url: `/v1/runs/${staying.runId}` })).json(), { status: 'failed', error: { code: 'SHUTDOWN' } })
  t.equal(ran.length, 2, 'the handed-off run started again, once, on B')
})

t.test('resuming a run in progress on another instance is RUN_IN_PROGRESS; a JSON client of a run taken over gets 503', async (t) => {
  const held = gate()
  const agents: Record<string, Agent> = {
    stepper: { async run (_i, ctx) { await ctx.checkpoint({ n: 1 }); await orAbort(held.promise, ctx.signal); return { output: 'ok' } } }
  }
  keepAlive(t)
  const [a, b] = pair(t, { runLeaseMs: LEASE_MS, agents })
  await a.app.ready()
  await b.app.ready()
  const answer = a.app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload: { input: null } })
  const runId = await eventually(async () => (await a.app.agentService.settings.runStore.list({ limit: 1 })).runs[0]?.runId)
  await eventually(async () => await a.app.agentService.settings.checkpointStore.load(runId) !== null)
  const resume = await b.app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload: { input: null, resumeRunId: runId } })
  t.equal(resume.statusCode, 409)
  t.match(resume.json(), { code: 'RUN_IN_PROGRESS' })
  // A's renewals fail from now on (its store is unreachable, say): past two thirds of a lease, A stops the run itself
  const store = a.app.agentService.settings.runStore
  store.renew = async () => { throw new Error('store down') }
  const res = await answer
  t.equal(res.statusCode, 503)
  t.match(res.json(), { code: 'INSTANCE_LOST' })
  held.release()
})

/**
 * A service whose agent `held` waits for `held`, its worker stopped and the clock and intervals the test's (mocked),
 * so that a stall is exactly what the test says, whatever the machine's load; `stillHeld` checks a run kept its
 * lease, then lets it complete.
 */
async function heldOnTestTimers (t: Test) {
  keepAlive(t)
  const held = gate()
  const { app } = build(t, { runLeaseMs: LEASE_MS, agents: { held: { async run (_i, ctx) { await orAbort(held.promise, ctx.signal); return { output: 'kept' } } } } })
  await app.ready()
  const { worker, runs, settings } = app.agentService
  const store = settings.runStore
  worker.stop()
  mock.timers.enable({ apis: ['setInterval', 'Date'], now: Date.now() })
  t.teardown(() => mock.timers.reset())
  async function stillHeld (t: Test, runId: string): Promise<void> {
    t.ok(runs.has(runId), 'the run still runs here')
    t.match(await store.get(runId), { status: 'running', attempt: 1 })
    worker.stop()
    mock.timers.reset()
    held.release()
    await eventually(() => !runs.has(runId))
    t.match(await store.get(runId), { status: 'completed', result: { output: 'kept' } })
  }
  return { app, held, worker, runs, store, stillHeld }
}

t.test('a renewal the store answers after more than half a lease costs no run: renewals go out every sixth of one', async (t) => {
  // Issue 23: renewed every third of a lease (fenced after two thirds unrenewed), a stall of a third was enough to
  // lose a run; short leases on a loaded machine lost most of theirs. The worker's clock and timers are the test's
  // here, so that the stall is exactly what the test says, whatever the machine's load.
  const { app, worker, runs, store, stillHeld } = await heldOnTestTimers(t)
  const stallMs = Math.round(0.54 * LEASE_MS)
  const renew = store.renew.bind(store)
  let stalled: { sentAt: number, answer: () => void, answered: boolean } | null = null
  store.renew = async (...args) => {
    if (stalled === null) {
      // the first renewal of the run, answered stallMs after it was sent
      const answer = gate()
      stalled = { sentAt: Date.now(), answer: answer.release, answered: false }
      await answer.promise
    }
    return await renew(...args)
  }
  worker.start(app.log)
  const { runId } = (await app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, background: true } })).json()
  await eventually(() => runs.has(runId))
  // two leases, a millisecond at a time, each tick's work done before the next
  for (let ms = 0; ms < 2 * LEASE_MS; ms++) {
    mock.timers.tick(1)
    const pending = stalled as { sentAt: number, answer: () => void, answered: boolean } | null
    if (pending !== null && !pending.answered && Date.now() >= pending.sentAt + stallMs) {
      pending.answered = true
      pending.answer()
    }
    await new Promise((resolve) => setImmediate(resolve))
  }
  t.ok((stalled as { answered: boolean } | null)?.answered, `a renewal was answered ${stallMs} ms after it was sent`)
  await stillHeld(t, runId)
})

t.test('a renewal answered while the loop was held up is read before the fence looks at the lease', async (t) => {
  // After a stall, the timers come first in the event loop's turn, the answers that came meanwhile after them: the
  // fence waits for those (setImmediate), so that a renewal sent before the stall and answered during it counts.
  const { app, worker, runs, store, stillHeld } = await heldOnTestTimers(t)
  const renew = store.renew.bind(store)
  let pending: { answer: () => void } | null = null
  store.renew = async (...args) => {
    const answered = renew(...args)
    if (pending === null) {
      // the first renewal: its answer comes when the test says
      const answer = gate()
      pending = { answer: answer.release }
      await answer.promise
    }
    return await answered
  }
  worker.start(app.log)
  const { runId } = (await app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, background: true } })).json()
  await eventually(() => runs.has(runId))
  const startedAt = Date.now()
  while (pending === null) {
    mock.timers.tick(1)
    await new Promise((resolve) => setImmediate(resolve))
  }
  // the loop held up for 0.6 of a lease, the answer in meanwhile: the lease it had before the renewal is past its fence
  const stallMs = Math.round(0.6 * LEASE_MS);
  (pending as { answer: () => void }).answer()
  mock.timers.tick(stallMs)
  t.ok(Date.now() - startedAt > LEASE_MS - Math.floor(LEASE_MS / 3), 'past the fence of the lease the run started with')
  for (let ms = 0; ms < LEASE_MS; ms++) {
    await new Promise((resolve) => setImmediate(resolve))
    mock.timers.tick(1)
  }
  await stillHeld(t, runId)
})

t.test('a renewal that finds a run no longer this instance\'s stops it here', async (t) => {
  const held = gate()
  let aborted: unknown = null
  keepAlive(t)
  const store = new MemoryRunStore()
  const { app } = build(t, { runStore: store, runLeaseMs: LEASE_MS, agents: { held: { async run (_i, ctx) { try { await orAbort(held.promise, ctx.signal) } catch (err) { aborted = err } return { output: null } } } } })
  await app.ready()
  // the requeued run stays queued (claimed back here, its claim would stop this copy first): the renewal finds it
  app.agentService.worker.stopClaiming()
  const stream = app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, stream: true, onDisconnect: 'continue' } })
  const runId = await eventually(async () => (await store.list({ limit: 1 })).runs[0]?.runId)
  // another instance took it over: the store says so
  await store.requeue(runId, { owner: app.agentService.worker.owner }, 'INSTANCE_LOST', cancelledEnd(), 3_600_000)
  await eventually(() => aborted !== null)
  t.match(aborted, { code: 'INSTANCE_LOST', message: 'The run was taken over by another instance' })
  const body = parseSse((await stream).body)
  t.same(body.map((e) => e.event), ['run.started'], 'the stream ends without an end of its own: the run goes on elsewhere')
  held.release()
})

t.test('a renewal the store never answers fences the runs off as a failed one does, before their leases lapse', async (t) => {
  const held = gate()
  keepAlive(t)
  // the store's own deadline far away: only the worker's clock can stop the run in time
  const [a] = pair(t, { runLeaseMs: LEASE_MS, storeTimeoutMs: 60_000, agents: { held: { async run (_i, ctx) { await orAbort(held.promise, ctx.signal); return { output: 'ok' } } } } })
  await a.app.ready()
  const store = a.app.agentService.settings.runStore
  store.renew = () => new Promise(() => {})
  const res = await a.app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null } })
  t.equal(res.statusCode, 503)
  t.match(res.json(), { code: 'INSTANCE_LOST' })
  held.release()
})

t.test('a run claimed as its instance begins to drain is handed off with the others, not ended', async (t) => {
  const release = gate()
  const agents: Record<string, Agent> = {
    moving: { resumable: true, async run (_i, ctx) { await orAbort(release.promise, ctx.signal); return { output: 'moved' } } }
  }
  const stores = memoryStores()
  const a = build(t, { ...stores, agents })
  const b = build(t, { ...stores, agents })
  await a.app.ready()
  await b.app.ready()
  a.app.agentService.worker.stopClaiming()
  // B's claim is answered, then held until its drain has begun (and its deadline passed)
  const bStore = b.app.agentService.settings.runStore
  const claim = bStore.claim.bind(bStore)
  const claimed = gate()
  const proceed = gate()
  bStore.claim = async (...args) => {
    const records = await claim(...args)
    if (records.length > 0) {
      claimed.release()
      await proceed.promise
    }
    return records
  }
  const moving = (await a.app.inject({ method: 'POST', url: '/v1/agents/moving/runs', payload: { input: null, background: true } })).json()
  await claimed.promise
  const closed = b.close(20)
  await sleep(100)
  proceed.release()
  await closed
  a.app.agentService.worker.start(a.app.log)
  release.release()
  await eventually(async () => (await a.app.inject({ url: `/v1/runs/${moving.runId}` })).json().status === 'completed')
  const log = await events(a.app, moving.runId)
  t.same(log.map((e) => e.event), ['run.started', 'run.requeued', 'run.started', 'run.completed'])
  t.same(log[1]!.data, { attempt: 2, reason: 'SHUTDOWN' })
})

t.test('a run whose next events the store refuses as another instance\'s stops here; its log is left to the other', async (t) => {
  const held = gate()
  let aborted: unknown = null
  const store = new MemoryRunStore()
  const { app } = build(t, {
    runStore: store,
    agents: {
      held: {
        async run (_i, ctx) {
          await held.promise
          ctx.emit('message.delta', { text: 'late' })
          try { await orAbort(new Promise(() => {}), ctx.signal) } catch (err) { aborted = err }
          return { output: null }
        }
      }
    }
  })
  await app.ready()
  // the requeued run stays queued: this instance does not claim it back
  app.agentService.worker.stopClaiming()
  const stream = app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, stream: true, onDisconnect: 'continue' } })
  const runId = await eventually(async () => (await store.list({ limit: 1 })).runs[0]?.runId)
  await eventually(async () => (await store.get(runId))?.lastSeq === 1)
  // another instance took it over (its lease seemed lapsed), before this one's renewal could tell
  await store.requeue(runId, { owner: app.agentService.worker.owner }, 'INSTANCE_LOST', cancelledEnd(), 3_600_000)
  held.release()
  await eventually(() => aborted !== null)
  t.match(aborted, { code: 'INSTANCE_LOST' })
  await stream
  t.same((await store.events(runId, 0, 10)).map((e) => e.type), ['run.started', 'run.requeued'], 'nothing of this instance\'s after the takeover')
})

t.test('the worker logs what it cannot do and goes on: a claimed run that cannot start, a scan, a hand-off', async (t) => {
  const stores = memoryStores()
  const warnings: string[] = []
  const agents: Record<string, Agent> = { moving: { resumable: true, run: (_i, ctx) => orAbort(new Promise(() => {}), ctx.signal) as Promise<never> } }
  const a = build(t, { ...stores, agents, runLeaseMs: LEASE_MS })
  keepAlive(t)
  await a.app.ready()
  const { worker, settings } = a.app.agentService
  const store = settings.runStore
  const logged = (what: string) => (obj: unknown, msg?: string) => { warnings.push(`${what}:${msg ?? String(obj)}`) }
  const log = Object.assign(Object.create(a.app.log), { warn: logged('warn'), error: logged('error'), child: () => log })
  worker.stop()
  // a claimed run whose spec cannot be read
  const spec = store.spec.bind(store)
  store.spec = async () => { throw new Error('spec unreadable') }
  const queued = (await a.app.inject({ method: 'POST', url: '/v1/agents/moving/runs', payload: { input: null, background: true } })).json()
  // the scan's store call fails too
  store.lapsed = async () => { throw new Error('lapsed unreadable') }
  worker.start(log)
  await eventually(() => warnings.some((w) => w === 'error:could not start a claimed run'))
  await eventually(() => warnings.some((w) => w === 'warn:could not look for runs whose instance was lost'))
  store.spec = spec
  // a run that started, then a hand-off the store refuses
  const second = (await a.app.inject({ method: 'POST', url: '/v1/agents/moving/runs', payload: { input: null, background: true } })).json()
  await eventually(() => a.app.agentService.runs.has(second.runId))
  store.requeue = async () => { throw new Error('requeue refused') }
  await worker.handOff()
  t.ok(warnings.includes('warn:could not hand a run off at shutdown'))
  t.ok(queued.runId)
})

/** Holds the runs' turns on their way to the session: `persisting` once one is, released by `proceed`. */
function holdTurns ({ app }: Pick<Service, 'app'>): { persisting: ReturnType<typeof gate>, proceed: ReturnType<typeof gate> } {
  const sessions = app.agentService.settings.sessionStore
  const appendTurn = sessions.appendTurn.bind(sessions)
  const persisting = gate()
  const proceed = gate()
  sessions.appendTurn = async (...args) => {
    persisting.release()
    await proceed.promise
    return await appendTurn(...args)
  }
  return { persisting, proceed }
}

t.test('a run whose result is in when the drain hands off completes here: neither handed off nor failed', async (t) => {
  const agents: Record<string, Agent> = { quick: { resumable: true, async run () { return { output: 'done' } } } }
  const stores = memoryStores()
  const a = build(t, { ...stores, agents })
  await a.app.ready()
  // the run's turn is being written to its session when the drain's deadline comes
  const { persisting, proceed } = holdTurns(a)
  const queued = (await a.app.inject({ method: 'POST', url: '/v1/agents/quick/runs', payload: { input: null, background: true } })).json()
  await persisting.promise
  const closed = a.close(10)
  await sleep(60)
  proceed.release()
  await closed
  t.match(await stores.runStore.get(queued.runId), { status: 'completed', attempt: 1, result: { output: 'done' } })
  t.same((await stores.runStore.events(queued.runId, 0, 10)).map((e) => e.type), ['run.started', 'run.completed'])
})

t.test('a run whose result is in is fenced off only once the store says it is another instance\'s', async (t) => {
  const { app } = build(t, { agents: { quick: { async run () { return { output: 'done' } } } } })
  await app.ready()
  const { persisting, proceed } = holdTurns({ app })
  const reply = app.inject({ method: 'POST', url: '/v1/agents/quick/runs', payload: { input: null } })
  await persisting.promise
  const run = app.agentService.runs.list()[0]!
  t.equal(run.detach('INSTANCE_LOST'), false, 'a fence leaves it to complete: its agent has stopped')
  t.equal(run.detach('INSTANCE_LOST', true), true, 'taken over: it stops here')
  proceed.release()
  t.match((await reply).json(), { code: 'INSTANCE_LOST' })
})

t.test('a run whose result is in when its lease runs short completes here; the fence stops the others', async (t) => {
  keepAlive(t)
  const held = gate()
  const { app } = build(t, {
    runLeaseMs: LEASE_MS,
    agents: {
      quick: { async run () { return { output: 'done' } } },
      held: { async run (_i, ctx) { await orAbort(held.promise, ctx.signal); return { output: 'late' } } }
    }
  })
  await app.ready()
  const { persisting, proceed } = holdTurns({ app })
  const other = app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null } })
  const reply = app.inject({ method: 'POST', url: '/v1/agents/quick/runs', payload: { input: null } })
  await persisting.promise
  // no renewal answers from now on: both leases run short
  app.agentService.settings.runStore.renew = () => new Promise(() => {})
  t.match((await other).json(), { code: 'INSTANCE_LOST' })
  proceed.release()
  t.match((await reply).json(), { output: 'done' }, 'its agent had stopped: it completes')
  held.release()
})

/** A queued detachable run as a store holds one, made without a request. */
function queuedRecord (runId: string, agent: string, sessionId: string | null) {
  return {
    record: { runId, agent, sessionId, principal: 'anonymous', status: 'queued' as const, background: true, attempt: 1, lastSeq: 0, createdAt: new Date().toISOString(), requestId: `req-${runId}`, traceId: 'a'.repeat(32) },
    spec: { input: 'hi' },
    ephemeral: false,
    detachable: true,
    lease: null
  }
}

t.test('claimed runs this instance serves as well as it can: one without a session, one of an agent it does not have', async (t) => {
  const store = new MemoryRunStore()
  keepAlive(t)
  const { app } = build(t, { runStore: store })
  await app.ready()
  await store.create(queuedRecord('no-session', 'echo', null), { exclusive: false })
  await store.create(queuedRecord('no-agent', 'gone', null), { exclusive: false })
  await eventually(async () => (await store.get('no-session'))?.status === 'completed' && (await store.get('no-agent'))?.status === 'failed')
  t.match(await store.get('no-session'), { result: { output: 'hi' } })
  t.match(await store.get('no-agent'), { error: { code: 'AGENT_ERROR' } })
})

t.test('a lapsed run whose cancel was asked for ends cancelled; scans never overlap', async (t) => {
  const store = new MemoryRunStore()
  keepAlive(t)
  const { app } = build(t, { runStore: store, runLeaseMs: LEASE_MS })
  await app.ready()
  // its instance died while a cancel was on its way to it
  const lost = queuedRecord('lost', 'echo', null)
  await store.create({ ...lost, record: { ...lost.record, status: 'running', startedAt: lost.record.createdAt }, lease: { owner: 'gone', until: Date.now() - 1 } }, { exclusive: false })
  await store.cancel('lost', { status: 'cancelled', endedAt: new Date().toISOString() }, 60_000)
  // a scan that takes longer than the scan interval: the next one waits its turn
  const settings = app.agentService.settings.runStore
  const lapsed = settings.lapsed.bind(settings)
  let scans = 0
  let concurrent = 0
  let most = 0
  settings.lapsed = async (...args) => {
    scans++
    concurrent++
    // asserted at the end: a scan may still begin while the test's service closes
    most = Math.max(most, concurrent)
    // longer than the scan interval (half a lease)
    await sleep(LEASE_MS)
    concurrent--
    return await lapsed(...args)
  }
  await eventually(async () => (await store.get('lost'))?.status === 'cancelled', 5_000)
  t.match(await store.get('lost'), { error: { code: 'CANCELLED' } })
  t.ok(scans >= 1)
  t.equal(most, 1, 'one scan at a time')
})

t.test('a cancel asked for just after recovery found its resumable run lapsed: the requeue ends it cancelled', async (t) => {
  const store = new MemoryRunStore()
  keepAlive(t)
  let ran = 0
  const steady: Agent = { resumable: true, async run () { ran++; return { output: 'ran again' } } }
  const { app } = build(t, { runStore: store, runLeaseMs: LEASE_MS, agents: { steady } })
  const lost = queuedRecord('lost', 'steady', null)
  await store.create({ ...lost, record: { ...lost.record, status: 'running', startedAt: lost.record.createdAt }, lease: { owner: 'gone', until: Date.now() - 1 } }, { exclusive: false })
  const lapsed = store.lapsed.bind(store)
  store.lapsed = async (...args) => {
    const found = await lapsed(...args)
    // found without a cancel, which lands before the scan requeues it
    if (found.some((run) => run.record.runId === 'lost' && !run.cancelRequested)) t.match(await store.cancel('lost', cancelledEnd(), 60_000), { outcome: 'requested' })
    return found
  }
  await app.ready()
  const ended = await eventually(async () => {
    const record = await store.get('lost')
    return record !== null && record.status !== 'running' && record.status !== 'queued' && record
  }, LEASE_MS + 5_000, 'the lapsed run ended')
  t.match(ended, { status: 'cancelled', attempt: 1, error: { code: 'CANCELLED' } })
  t.same((await events(app, 'lost')).map((e) => e.event), ['run.failed'], 'no run.requeued')
  t.equal(ran, 0, 'never run again')
})

t.test('a cancel asked for before its instance died wins over recovery, for a resumable agent\'s run too: cancelled, not requeued', async (t) => {
  keepAlive(t)
  await cancelAskedBeforeDeath(t, new MemoryRunStore())
})

t.test('a cancel answered 202 while a drain hands its run off: the run ends cancelled, not requeued', async (t) => {
  const store = new MemoryRunStore()
  await cancelAskedAtHandOff(t, [store, store])
})

t.test('a worker stopped while a claim is on its way resolves once it is done: nothing is claimed here after', async (t) => {
  const store = new MemoryRunStore()
  const held = gate()
  const claim = store.claim.bind(store)
  let claims = 0
  store.claim = async (...args) => {
    claims++
    await held.promise
    return claim(...args)
  }
  const { app } = build(t, { runStore: store })
  // the worker starts at ready with a claim, held on its way
  await app.ready()
  t.equal(claims, 1)
  let stopped = false
  const stopping = app.agentService.worker.stop().then(() => { stopped = true })
  await new Promise((resolve) => setImmediate(resolve))
  t.notOk(stopped, 'stop() waits for the claim on its way')
  held.release()
  await stopping
  await store.create(queuedRecord('after-stop', 'echo', null), { exclusive: false })
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(claims, 1, 'no claim after stop()')
  t.match(await store.get('after-stop'), { status: 'queued' }, 'left to the instances that claim')
})

t.test('a claimed run\'s log: a write the store refuses is counted; a takeover found while it finishes stops writing', async (t) => {
  const store = new MemoryRunStore()
  keepAlive(t)
  const go = gate()
  const agents: Record<string, Agent> = {
    talker: { async run (_i, ctx) { await go.promise; ctx.emit('message.delta', { text: 'a' }); return { output: 'said' } } }
  }
  const { app } = build(t, { runStore: store, agents })
  await app.ready()
  const { runs, stats, worker } = app.agentService
  const append = store.append.bind(store)
  const appendNow = store.appendNow.bind(store)
  let refusals = 0
  // the first write of the claimed run fails (the store hiccups), the next ones go through
  store.append = async (...args) => {
    if (refusals++ === 0) throw new Error('store hiccup')
    return await append(...args)
  }
  store.appendNow = (...args) => {
    if (refusals++ === 0) throw new Error('store hiccup')
    appendNow(...args)
  }
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/talker/runs', payload: { input: null, background: true } })).json()
  await eventually(() => runs.has(first.runId))
  go.release()
  await eventually(async () => (await store.get(first.runId))?.status === 'completed')
  t.equal(stats.runLogFailures, 1, 'the refused write is counted, and written with the next')
  t.same((await store.events(first.runId, 0, 10)).map((e) => e.type), ['run.started', 'message.delta', 'run.completed'])

  // taken over by another instance as it finishes: its last events are refused, and nothing more is written
  const again = gate()
  agents.talker!.run = async (_i, ctx) => { await again.promise; ctx.emit('message.delta', { text: 'b' }); return { output: 'late' } }
  store.append = append
  store.appendNow = appendNow
  const second = (await app.inject({ method: 'POST', url: '/v1/agents/talker/runs', payload: { input: null, background: true } })).json()
  await eventually(() => runs.has(second.runId))
  worker.stopClaiming()
  await store.requeue(second.runId, { owner: worker.owner }, 'INSTANCE_LOST', cancelledEnd(), 3_600_000)
  again.release()
  await eventually(() => !runs.has(second.runId))
  t.same((await store.events(second.runId, 0, 10)).map((e) => e.type), ['run.started', 'run.requeued'], 'nothing of this instance\'s after the takeover')
  t.match(await store.get(second.runId), { status: 'queued', attempt: 2 })
})

t.test('a run requeued while its copy still runs here is claimed back: the copy stops before the next attempt', async (t) => {
  const store = new MemoryRunStore()
  keepAlive(t)
  let calls = 0
  let aborted: unknown = null
  const agents: Record<string, Agent> = {
    held: {
      resumable: true,
      async run (_i, ctx) {
        if (++calls > 1) return { output: 'second' }
        try { await orAbort(new Promise(() => {}), ctx.signal) } catch (err) { aborted = err }
        return { output: 'first' }
      }
    }
  }
  const { app } = build(t, { runStore: store, agents })
  await app.ready()
  const queued = (await app.inject({ method: 'POST', url: '/v1/agents/held/runs', payload: { input: null, background: true } })).json()
  await eventually(() => calls === 1)
  await store.requeue(queued.runId, { owner: app.agentService.worker.owner }, 'INSTANCE_LOST', cancelledEnd(), 3_600_000)
  await eventually(async () => (await store.get(queued.runId))?.status === 'completed')
  t.match(aborted, { code: 'INSTANCE_LOST' })
  t.match(await store.get(queued.runId), { attempt: 2, result: { output: 'second' } })
})

t.test('a takeover found while a run finishes: nothing of its end is written here', async (t) => {
  const store = new MemoryRunStore()
  const agents: Record<string, Agent> = {
    talker: {
      async run (_i, ctx) {
        // the log's first write (run.started, after its short wait) is stored before the delta comes
        while ((await store.events(ctx.runId, 0, 1)).length === 0) await sleep(5)
        ctx.emit('message.delta', { text: 'a' })
        return { output: 'said' }
      }
    }
  }
  const { app } = build(t, { runStore: store, agents })
  await app.ready()
  app.agentService.worker.stopClaiming()
  const append = store.append.bind(store)
  const hold = gate()
  // the log's batched path, as a store across the network takes it: the delta's write is held until the run has
  // ended here; meanwhile another instance took the run over
  Object.assign(store, { appendNow: undefined })
  store.append = async (runId, events, owner) => {
    if (events.some((e) => e.type === 'message.delta')) {
      await hold.promise
      await store.requeue(runId, { owner }, 'INSTANCE_LOST', cancelledEnd(), 3_600_000)
    }
    return await append(runId, events, owner)
  }
  const reply = app.inject({ method: 'POST', url: '/v1/agents/talker/runs', payload: { input: null, stream: true } })
  const runId = await eventually(async () => (await store.list({ limit: 1 })).runs[0]?.runId)
  await sleep(100)
  hold.release()
  await reply
  t.same((await store.events(runId, 0, 10)).map((e) => e.type), ['run.started', 'run.requeued'])
  t.match(await store.get(runId), { status: 'queued', attempt: 2 })
})

/**
 * An instance whose store answers its first claim after most of a lease; the renewal that follows is answered at
 * once, as late, or refuses the run (as though another instance had it now).
 */
async function lateClaim (t: Parameters<typeof build>[0], renewal: 'prompt' | 'late' | 'refused') {
  keepAlive(t)
  let executions = 0
  const store = new MemoryRunStore()
  const slowOnce = <A extends unknown[], R>(fn: (...args: A) => Promise<R>, slow: (result: R) => boolean) => {
    let late = true
    return async (...args: A): Promise<R> => {
      const result = await fn(...args)
      if (late && slow(result)) {
        late = false
        await sleep(0.8 * LEASE_MS)
      }
      return result
    }
  }
  store.claim = slowOnce(store.claim.bind(store), (records) => records.length > 0)
  if (renewal === 'late') store.renew = slowOnce(store.renew.bind(store), () => true)
  if (renewal === 'refused') {
    const renew = store.renew.bind(store)
    let refused = false
    store.renew = async (...args) => {
      if (refused) return renew(...args)
      refused = true
      return []
    }
  }
  const { app } = build(t, { runStore: store, runLeaseMs: LEASE_MS, agents: { later: { resumable: true, async run () { executions++; return { output: 'done' } } } } })
  await app.ready()
  const { runId } = (await app.inject({ method: 'POST', url: '/v1/agents/later/runs', payload: { input: null, background: true } })).json()
  const record = await eventually(async () => {
    const found = (await app.inject({ url: `/v1/runs/${runId}` })).json()
    return found.status === 'completed' ? found : undefined
  }, 10_000)
  return { executions, attempt: record.attempt as number }
}

t.test('a claim answered with little of its lease left: the lease is renewed before the run starts', async (t) => {
  t.same(await lateClaim(t, 'prompt'), { executions: 1, attempt: 1 })
})

t.test('a claim answered too late, its renewal late or refused: the run is not started; it lapses, is requeued and runs once', async (t) => {
  for (const renewal of ['late', 'refused'] as const) {
    const { executions, attempt } = await lateClaim(t, renewal)
    t.equal(executions, 1, `${renewal}: executed once, by the claim that came in time`)
    t.ok(attempt >= 2, `${renewal}: the late claim counted as an attempt that lapsed`)
  }
})
