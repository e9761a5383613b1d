// The scheduler's claims (lib/schedules/scheduler.ts) on the memory stores: one that ran out before its run was stored,
// a change between a claim and its settling, one taken over whose run was stored already. Other edges: scheduler.test.ts.
import t from 'tap'
import type { ScheduleRow } from '../../../lib/stores/types.js'
import { serveScheduler as serve, stateOf } from '../../helpers/schedules.js'
import { eventually, sleep } from '../../helper.js'

t.test('a claim that ran out before its run was stored is left to lapse, then taken over here: one run', async (t) => {
  let first = true
  const { scheduleStore, seen } = await serve(t, {
    async afterClaim () {
      if (!first) return
      first = false
      // past two thirds of the claim: storing the run now could race the instance taking the claim over
      await sleep(800)
    }
  })
  const at = new Date(Date.now() + 200).toISOString()
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.parse(at), state: stateOf('s1', { everyMs: null, at, nextRunAt: at }) })
  await eventually(() => seen.length === 1, 6_000, 'the run once the claim was taken over')
  await sleep(300)
  t.equal(seen.length, 1, 'once')
  t.equal(seen[0]!.schedule!.scheduledFor, at)
})

t.test('a change between a claim and its settling: the settling reads the row again and keeps the change', async (t) => {
  let changed = false
  const holder: { app?: import('fastify').FastifyInstance } = {}
  const { app, scheduleStore, seen } = await serve(t, {
    async afterClaim (row: ScheduleRow) {
      if (changed) return
      changed = true
      const res = await holder.app!.inject({ method: 'PATCH', url: `/v1/schedules/${row.id}`, payload: { metadata: { changed: true } } })
      if (res.statusCode !== 200) throw new Error(res.body)
    }
  })
  holder.app = app
  // far enough ahead to be in the future still once checked, on a loaded machine (the route's first request)
  const res = await app.inject({ method: 'POST', url: '/v1/schedules', payload: { agent: 'tick', input: null, at: new Date(Date.now() + 1_000).toISOString() } })
  t.equal(res.statusCode, 201, res.body)
  const created = res.json()
  await eventually(() => seen.length === 1, 15_000)
  const row = await eventually(async () => { const r = await scheduleStore.get(created.id); return r?.state.fire === null && r.state.schedule.lastRunId !== null && r }, 10_000, 'settled')
  t.same(row.state.schedule.metadata, { changed: true }, 'the change kept')
  t.equal(row.state.schedule.lastRunId, seen[0]!.runId)
})

t.test('a claim taken over whose run was stored already (its instance died before settling): settled, not run again', async (t) => {
  const { app, scheduleStore, seen } = await serve(t)
  const queued = await app.inject({ method: 'POST', url: '/v1/agents/tick/runs', payload: { input: null, background: true } })
  const { runId } = queued.json() as { runId: string }
  await eventually(() => seen.length === 1, 15_000)
  const state = stateOf('s1', { everyMs: null, at: new Date(Date.now() - 5_000).toISOString(), nextRunAt: null })
  state.fire = { scheduledFor: state.schedule.at!, runId, owner: 'dead', until: Date.now() - 1 }
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.now() - 1, state })
  const row = await eventually(async () => { const r = await scheduleStore.get('s1'); return r?.state.fire === null && r }, 10_000, 'settled')
  t.match(row.state.schedule, { lastRunId: runId, enabled: false })
  await sleep(200)
  t.equal(seen.length, 1, 'not run again')
})
