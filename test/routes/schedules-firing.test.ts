// The schedules' firing (docs/schedules.md) on the memory stores: on time with ctx.schedule and the run's spec, a one-shot
// schedule, overlap three ways, the metrics. The routes themselves: schedules.test.ts.
import t from 'tap'
import { eventually, sleep } from '../helper.js'
import { TOKEN, future, recorder, serve, type Seen } from '../helpers/schedules.js'

t.test('fired on time: each due time one background run of the principal, with ctx.schedule; its runs listed; the metrics', async (t) => {
  const { agent, seen } = recorder()
  const { app, as } = await serve(t, { rec: agent })
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'rec', input: null, everyMs: 1_000 } })).json()
  await eventually(() => seen.length >= 3, 6_000, 'three fires')
  const fires = seen.slice(0, 3)
  const due = fires.map((f) => Date.parse(f.schedule!.scheduledFor))
  t.same(fires.map((f) => f.schedule!.id), [created.id, created.id, created.id], 'ctx.schedule names the schedule')
  t.same([due[1]! - due[0]!, due[2]! - due[1]!], [1_000, 1_000], 'one run per due time, a second apart')
  t.equal(due[0], Date.parse(created.nextRunAt), 'the first at the first due time')
  for (const fire of fires) t.ok(fire.startedAt - Date.parse(fire.schedule!.scheduledFor) < 1_000, `started within 1 s of its due time (${fire.startedAt - Date.parse(fire.schedule!.scheduledFor)} ms)`)
  await app.inject({ method: 'PATCH', url: `/v1/schedules/${created.id as string}`, headers: as('alice'), payload: { enabled: false } })
  const after = await eventually(async () => {
    const s = (await app.inject({ url: `/v1/schedules/${created.id as string}`, headers: as('alice') })).json()
    return s.lastRunId !== null && s
  })
  const runs = (await app.inject({ url: `/v1/schedules/${created.id as string}/runs?limit=2`, headers: as('alice') })).json()
  t.equal(runs.runs.length, 2)
  t.equal(runs.runs[0].runId, after.lastRunId, 'most recent first')
  t.match(runs.runs[0], { principal: 'alice', agent: 'rec', background: true })
  t.not(runs.nextCursor, null)
  const more = (await app.inject({ url: `/v1/schedules/${created.id as string}/runs?limit=50&cursor=${runs.nextCursor as string}`, headers: as('alice') })).json()
  t.ok(more.runs.length >= 1)
  t.equal(more.nextCursor, null)
  const spec = await app.agentService.settings.runStore.spec(after.lastRunId)
  t.same(spec?.schedule?.id, created.id, 'the run\'s spec carries the schedule')
  const metrics = (await app.inject({ url: '/admin/metrics', headers: { authorization: `Bearer ${TOKEN}` } })).body
  t.match(metrics, /fastify_agents_schedule_fires_total\{agent="rec",outcome="started"\} [3-9]/)
  t.match(metrics, /fastify_agents_schedule_lag_seconds_count [3-9]/)
})

t.test('a one-shot schedule fires once, then disables itself', async (t) => {
  const { agent, seen } = recorder()
  const { app, as } = await serve(t, { rec: agent })
  const at = future(1_200)
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'rec', input: null, at } })).json()
  t.equal(created.nextRunAt, at)
  await eventually(() => seen.length === 1, 5_000)
  t.equal(seen[0]!.schedule!.scheduledFor, at)
  const after = await eventually(async () => {
    const s = (await app.inject({ url: `/v1/schedules/${created.id as string}`, headers: as('alice') })).json()
    return !s.enabled && s
  })
  t.match(after, { enabled: false, nextRunAt: null, lastRunId: seen[0]!.runId })
  await sleep(1_200)
  t.equal(seen.length, 1, 'never again')
})

t.test('overlap three ways on runs longer than the interval: skip, enqueue, allow', async (t) => {
  const { agent, seen } = recorder()
  const { app, as } = await serve(t, { rec: agent })
  const ids: Record<string, string> = {}
  for (const overlap of ['skip', 'enqueue', 'allow']) {
    const created = await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'rec', input: { ms: 2_200 }, everyMs: 1_000, overlap } })
    ids[overlap] = created.json().id
  }
  await sleep(5_500)
  for (const id of Object.values(ids)) await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { enabled: false } })
  await eventually(() => app.agentService.runs.size === 0, 5_000, 'the runs ended')
  const of = (overlap: string) => seen.filter((s) => s.schedule!.id === ids[overlap]).sort((a, b) => a.startedAt - b.startedAt)
  const overlapping = (runs: Seen[]) => runs.some((run, i) => i > 0 && run.startedAt < runs[i - 1]!.endedAt)

  const skip = of('skip')
  const skipped = (await app.inject({ url: `/v1/schedules/${ids.skip!}`, headers: as('alice') })).json()
  t.ok(skip.length >= 1 && skip.length <= 2, `skip: ${skip.length} runs`)
  t.equal(overlapping(skip), false, 'skip: never two at once')
  t.not(skipped.lastSkippedAt, null, 'skip: the skip recorded')
  const metrics = (await app.inject({ url: '/admin/metrics', headers: { authorization: `Bearer ${TOKEN}` } })).body
  t.match(metrics, /fastify_agents_schedule_fires_total\{agent="rec",outcome="skipped"\} [1-9]/, 'skip: counted')

  const enqueue = of('enqueue')
  t.ok(enqueue.length >= 2, `enqueue: ${enqueue.length} runs`)
  t.equal(overlapping(enqueue), false, 'enqueue: each waited for the one before')
  for (let i = 1; i < enqueue.length; i++) t.ok(enqueue[i]!.startedAt - enqueue[i - 1]!.endedAt < 1_500, 'enqueue: started soon after the previous one ended')

  const allow = of('allow')
  t.ok(allow.length >= 4, `allow: ${allow.length} runs`)
  t.equal(overlapping(allow), true, 'allow: started while the previous ran')
})
