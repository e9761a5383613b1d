// The scheduler (lib/schedules/scheduler.ts) on the memory stores, at the edges a healthy run does not reach: a row
// woken for nothing, a claim that ran out before its run was stored, a run that cannot be stored (an agent gone) or
// whose store failed (the fire is taken over, once), a PATCH between a claim and its settling, writes that keep losing.
import t from 'tap'
import { newerFirst } from '../../../lib/stores/memory-schedules.js'
import { serveScheduler as serve, stateOf } from '../../helpers/schedules.js'
import { eventually } from '../../helper.js'

t.test('a row woken with nothing to do gets its wake-up right, and is left alone', async (t) => {
  const { scheduleStore } = await serve(t)
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.now() - 1, state: stateOf('s1', { enabled: false, nextRunAt: null }) })
  const row = await eventually(async () => { const r = await scheduleStore.get('s1'); return r?.wakeAt === null && r }, 3_000, 'the wake-up cleared')
  t.equal(row.revision, 3, 'taken, written back once, then left alone')
  t.equal(newerFirst({ createdAt: 1, id: 'a' }, { createdAt: 1, id: 'a' }), 0, 'a row is its own place in the order')
  t.equal(newerFirst({ createdAt: 1, id: 'a' }, { createdAt: 1, id: 'b' }), 1, 'ties by id, highest first')
  t.equal(newerFirst({ createdAt: 1, id: 'b' }, { createdAt: 1, id: 'a' }), -1)
  t.ok(newerFirst({ createdAt: 1, id: 'b' }, { createdAt: 2, id: 'a' }) > 0, 'newest first')
})

t.test('a run that cannot be stored (its agent gone) is counted failed and settled; the next due time goes on', async (t) => {
  const { app, scheduleStore, seen } = await serve(t)
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.now(), state: stateOf('s1', { agent: 'gone' }) })
  const row = await eventually(async () => { const r = await scheduleStore.get('s1'); return r !== null && r.revision >= 3 && r.state.fire === null && r }, 10_000, 'settled')
  t.equal(row.state.schedule.lastRunId, null, 'no run recorded')
  t.ok(row.wakeAt! > Date.now() - 1_000, 'its next due time')
  const metrics = (await app.inject({ url: '/admin/metrics' })).body
  t.match(metrics, /fastify_agents_schedule_fires_total\{agent="gone",outcome="failed"\} [1-9]/)
  t.equal(seen.length, 0)
})

t.test('the run store fails at the fire: the claim lapses and the fire is taken over, its run stored once', async (t) => {
  const { scheduleStore, runStore, seen } = await serve(t)
  const create = runStore.create.bind(runStore)
  let failures = 0
  runStore.create = async (...args) => {
    if (failures++ === 0) throw new Error('the run store is away')
    return create(...args)
  }
  const at = new Date(Date.now() + 300).toISOString()
  await scheduleStore.insert({ id: 's1', principal: 'anonymous', createdAt: Date.now(), wakeAt: Date.parse(at), state: stateOf('s1', { everyMs: null, at, nextRunAt: at }) })
  const row = await eventually(async () => { const r = await scheduleStore.get('s1'); return r?.state.schedule.lastRunId !== null && r }, 6_000, 'the run stored after the claim lapsed')
  await eventually(() => seen.length === 1, 3_000)
  t.equal(failures, 2, 'stored at the second try')
  t.equal(seen[0]!.runId, row!.state.schedule.lastRunId, 'under the id the claim named')
  t.equal(seen[0]!.schedule!.scheduledFor, at)
  t.match(row, { state: { fire: null, schedule: { enabled: false } } })
})

t.test('a PATCH whose write keeps losing is a 503; a trigger records its run once its write goes through', async (t) => {
  const { app, scheduleStore, seen } = await serve(t)
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', payload: { agent: 'tick', input: null, cron: '0 0 1 1 *' } })).json()
  const write = scheduleStore.write.bind(scheduleStore)
  scheduleStore.write = async () => null
  const patched = await app.inject({ method: 'PATCH', url: `/v1/schedules/${created.id as string}`, payload: { enabled: false } })
  t.equal(patched.statusCode, 503)
  t.match(patched.json(), { code: 'STORE_UNAVAILABLE', message: /kept changing/ })
  let lost = 0
  scheduleStore.write = async (...args) => (lost++ === 0 ? null : write(...args))
  const fired = await app.inject({ method: 'POST', url: `/v1/schedules/${created.id as string}/trigger` })
  t.equal(fired.statusCode, 202)
  await eventually(() => seen.length === 1, 15_000)
  t.equal((await scheduleStore.get(created.id))!.state.schedule.lastRunId, fired.json().runId, 'recorded at the second write')
})
