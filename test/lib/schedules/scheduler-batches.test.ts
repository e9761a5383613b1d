// The scheduler's batches (lib/schedules/scheduler.ts) on the memory stores: a fire's run starts on the instance that
// claimed it, in the schedule's session when it is free and queued behind the run holding it otherwise; an instance
// with no room queues it; a row written between its take and its claim (a PATCH) is decided by that write.
import t from 'tap'
import type { Agent, RunContext } from '../../../lib/core/types.js'
import { MemoryRunStore } from '../../../lib/stores/memory-runs.js'
import { MemoryScheduleStore } from '../../../lib/stores/memory-schedules.js'
import { build, eventually, gate, sleep } from '../../helper.js'
import { serveScheduler, stateOf } from '../../helpers/schedules.js'

function serve (t: Parameters<typeof build>[0], options: { runConcurrency?: number } = {}) {
  const seen: Array<{ runId: string, schedule: RunContext['schedule'], sessionId: string | null }> = []
  const held = gate()
  const tick: Agent = { async run (_input, ctx) { seen.push({ runId: ctx.runId, schedule: ctx.schedule, sessionId: ctx.sessionId }); return { output: null } } }
  const hold: Agent = { async run () { await held.promise; return { output: 'held' } } }
  const scheduleStore = new MemoryScheduleStore()
  const runStore = new MemoryRunStore()
  const service = build(t, { agents: { tick, hold }, scheduleStore, runStore, runLeaseMs: 1_000, ...options })
  return { service, app: service.app, seen, held, scheduleStore, runStore }
}

t.test('a fire in the schedule\'s session: started here when the session is free, queued behind the run holding it when not', async (t) => {
  const { app, seen, held, runStore } = serve(t)
  await app.ready()
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/tick/runs', payload: { input: null } })).json()
  const sessionId = first.sessionId as string
  seen.length = 0
  const at = new Date(Date.now() + 1_000).toISOString()
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', payload: { agent: 'tick', input: null, at, sessionId } })).json()
  await eventually(() => seen.length === 1, 5_000, 'the fire')
  t.equal(seen[0]!.sessionId, sessionId, 'in the schedule\'s session')
  t.match(await runStore.get(seen[0]!.runId), { background: true, status: 'completed', scheduleId: created.id, scheduledFor: at })

  // the session busy with the caller's own run: the fire waits in the queue for it
  const busy = app.inject({ method: 'POST', url: '/v1/agents/hold/runs', payload: { input: null, sessionId } })
  await eventually(() => app.agentService.runs.size === 1, 5_000, 'the caller\'s run holds the session')
  const later = new Date(Date.now() + 1_000).toISOString()
  await app.inject({ method: 'PATCH', url: `/v1/schedules/${created.id as string}`, payload: { at: later, enabled: true } })
  const queued = await eventually(async () => {
    const row = await app.agentService.settings.scheduleStore.get(created.id)
    const runId = row?.state.schedule.lastRunId
    const record = runId === seen[0]!.runId || runId == null ? null : await runStore.get(runId)
    return record?.status === 'queued' && record
  }, 5_000, 'the fire queued')
  t.match(queued, { background: true, sessionId, scheduleId: created.id, scheduledFor: later })
  await sleep(200)
  t.equal(seen.length, 1, 'not started while the session is busy')
  held.release()
  await busy
  await eventually(() => seen.length === 2, 10_000, 'started once the session was free')
  t.equal(seen[1]!.runId, queued.runId)
})

t.test('an instance with no room for a run queues the fire; it starts when there is room', async (t) => {
  const { app, seen, held, runStore } = serve(t, { runConcurrency: 1 })
  await app.ready()
  const blocking = (await app.inject({ method: 'POST', url: '/v1/agents/hold/runs', payload: { input: null, background: true } })).json()
  await eventually(async () => (await runStore.get(blocking.runId))?.status === 'running', 5_000, 'the background run holds the room')
  const at = new Date(Date.now() + 1_000).toISOString()
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', payload: { agent: 'tick', input: null, at } })).json()
  const queued = await eventually(async () => {
    const runId = (await app.agentService.settings.scheduleStore.get(created.id))?.state.schedule.lastRunId
    const record = runId == null ? null : await runStore.get(runId)
    return record !== null && record
  }, 5_000, 'the fire stored')
  t.match(queued, { status: 'queued', background: true, scheduleId: created.id })
  held.release()
  await eventually(() => seen.length === 1, 10_000, 'started once the room was free')
  t.equal(seen[0]!.runId, queued.runId)
})

t.test('a row written between its take and its claim (a PATCH) is decided by that write: no fire for it then', async (t) => {
  const { app, seen, scheduleStore } = serve(t)
  const take = scheduleStore.take.bind(scheduleStore)
  let patched = false
  scheduleStore.take = async (...args) => {
    const rows = await take(...args)
    for (const row of rows) {
      if (patched) continue
      patched = true
      // disabled meanwhile: its write comes first, and the claim compared on the taken revision loses
      const state = structuredClone(row.state)
      state.schedule.enabled = false
      state.schedule.nextRunAt = null
      await scheduleStore.write(row.id, row.revision, { wakeAt: null, state })
    }
    return rows
  }
  const at = new Date(Date.now() + 300).toISOString()
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.parse(at), state: stateOf('s1', { everyMs: null, at, nextRunAt: at }) })
  await app.ready()
  const row = await eventually(async () => { const r = await scheduleStore.get('s1'); return r?.state.schedule.enabled === false && r }, 5_000, 'the PATCH written')
  await sleep(500)
  t.equal(seen.length, 0, 'not fired')
  t.match(await scheduleStore.get('s1'), { revision: row.revision, wakeAt: null, state: { fire: null, schedule: { enabled: false } } }, 'left as the PATCH made it')
})

t.test('a store that fails to take the due rows: looked at again a second later, and the fire goes on', async (t) => {
  const { app, seen, scheduleStore } = serve(t)
  const take = scheduleStore.take.bind(scheduleStore)
  let failures = 0
  scheduleStore.take = async (...args) => {
    if (failures++ === 0) throw new Error('the schedule store is away')
    return take(...args)
  }
  const at = new Date(Date.now() + 200).toISOString()
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.parse(at), state: stateOf('s1', { everyMs: null, at, nextRunAt: at }) })
  await app.ready()
  await eventually(() => seen.length === 1, 5_000, 'fired after the store came back')
  t.ok(failures >= 2, 'taken again')
  t.equal(seen[0]!.schedule!.scheduledFor, at)
})

t.test('a schedule deleted while its fire\'s run is stored: the settling finds it gone, the run goes on', async (t) => {
  const holder: { app?: import('fastify').FastifyInstance } = {}
  const { app, seen, scheduleStore } = await serveScheduler(t, {
    async afterClaim (row) {
      const res = await holder.app!.inject({ method: 'DELETE', url: `/v1/schedules/${row.id}` })
      if (res.statusCode !== 204) throw new Error(res.body)
    }
  })
  holder.app = app
  // far enough ahead to be in the future still once checked, on a loaded machine (the route's first request)
  const res = await app.inject({ method: 'POST', url: '/v1/schedules', payload: { agent: 'tick', input: null, at: new Date(Date.now() + 1_000).toISOString() } })
  t.equal(res.statusCode, 201, res.body)
  const created = res.json()
  await eventually(() => seen.length === 1, 10_000, 'the run')
  t.equal(seen[0]!.schedule!.id, created.id)
  t.equal(await scheduleStore.get(created.id), null, 'still gone')
})

t.test('an instance closing while it looks at the due schedules arms no timer after', async (t) => {
  const { service, scheduleStore } = serve(t)
  const take = scheduleStore.take.bind(scheduleStore)
  let slow = false
  scheduleStore.take = async (...args) => {
    if (slow) await sleep(300)
    return take(...args)
  }
  await service.app.ready()
  slow = true
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.now() + 60_000, state: stateOf('s1', {}) })
  await sleep(50)
  await service.close(0)
  t.pass('closed while the look was under way')
})
