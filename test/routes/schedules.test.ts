// The schedules' routes (docs/schedules.md) on the memory stores: every bad field a 400 naming it before anything is
// stored, another principal's schedule indistinguishable from an unknown one, firing on time with ctx.schedule and
// the run's spec, overlap three ways, a one-shot schedule, the Admin API's listing and the metrics.
import t from 'tap'
import { eventually } from '../helper.js'
import { TOKEN, future, recorder, serve } from '../helpers/schedules.js'

t.test('every bad field is a 400 naming it; an unknown agent 404; nothing is stored', async (t) => {
  const { app, as } = await serve(t)
  const post = (payload: unknown) => app.inject({ method: 'POST', url: '/v1/schedules', payload: payload as object, headers: as('alice') })
  const cases: Array<[object, RegExp]> = [
    [{ agent: 'echo', input: 1 }, /^body must have one of cron, everyMs or at$/],
    [{ agent: 'echo', input: 1, cron: '* * * * *', everyMs: 5000 }, /^body\/everyMs cannot be combined with body\/cron/],
    [{ agent: 'echo', input: 1, cron: '* * * * *', at: future(60_000) }, /^body\/at cannot be combined with body\/cron/],
    [{ agent: 'echo', input: 1, cron: '99 * * * *' }, /^body\/cron is not a valid cron expression/],
    [{ agent: 'echo', input: 1, cron: '* * *' }, /^body\/cron must have 5 or 6 fields/],
    [{ agent: 'echo', input: 1, cron: '* * * * *', timezone: 'Europe/Atlantis' }, /^body\/timezone is not an IANA time zone/],
    [{ agent: 'echo', input: 1, at: new Date(Date.now() - 1000).toISOString() }, /^body\/at must be in the future$/],
    [{ agent: 'echo', input: 1, at: 'tomorrow' }, /^body\/at must match format "date-time"$/],
    [{ agent: 'echo', input: 1, everyMs: 999 }, /^body\/everyMs must be >= 1000$/],
    [{ agent: 'echo', input: 1, everyMs: 1500.5 }, /^body\/everyMs must be integer$/],
    [{ agent: 'echo', input: 1, cron: '* * * * *', overlap: 'sometimes' }, /^body\/overlap must be equal to one of the allowed values|^body\/overlap/],
    [{ agent: 'echo', input: 1, cron: '* * * * *', colour: 'red' }, /^body\/colour is not allowed$/],
    [{ input: 1, cron: '* * * * *' }, /^body must have required property 'agent'$/],
    [{ agent: 'echo', cron: '* * * * *' }, /^body must have required property 'input'$/],
    [{ agent: 'typed', input: { n: 'one' }, cron: '* * * * *' }, /^body\/input\/n must be integer$/]
  ]
  for (const [payload, message] of cases) {
    const res = await post(payload)
    t.equal(res.statusCode, 400, JSON.stringify(payload))
    t.match(res.json(), { code: 'FST_ERR_VALIDATION', message }, message.source)
  }
  const unknown = await post({ agent: 'nobody', input: 1, cron: '* * * * *' })
  t.equal(unknown.statusCode, 404)
  t.match(unknown.json(), { code: 'AGENT_NOT_FOUND' })
  const session = await post({ agent: 'echo', input: 1, cron: '* * * * *', sessionId: 'not-mine' })
  t.equal(session.statusCode, 404)
  t.match(session.json(), { code: 'SESSION_NOT_FOUND' })
  t.same((await app.inject({ url: '/v1/schedules', headers: as('alice') })).json(), { schedules: [], nextCursor: null }, 'nothing stored')
})

t.test('created, read, listed, changed and deleted by its principal only: another\'s is a 404 like an unknown one', async (t) => {
  const { app, as } = await serve(t)
  const session = (await app.inject({ method: 'POST', url: '/v1/sessions', payload: {}, headers: as('alice') })).json() as { id: string }
  const created = await app.inject({
    method: 'POST',
    url: '/v1/schedules',
    headers: as('alice'),
    payload: { agent: 'echo', input: { hello: 1 }, cron: '0 9 * * 1', timezone: 'Europe/Berlin', sessionId: session.id, metadata: { team: 'ops' } }
  })
  t.equal(created.statusCode, 201)
  const schedule = created.json()
  t.match(schedule, {
    agent: 'echo', principal: 'alice', input: { hello: 1 }, cron: '0 9 * * 1', everyMs: null, at: null, timezone: 'Europe/Berlin',
    sessionId: session.id, overlap: 'skip', enabled: true, lastRunAt: null, lastRunId: null, lastSkippedAt: null, metadata: { team: 'ops' }
  })
  t.equal(new Date(schedule.nextRunAt).getUTCDay(), 1, 'next Monday')
  t.match(new Date(schedule.nextRunAt).toISOString(), /T0[78]:00:00\.000Z$/, '09:00 in Berlin')
  t.same(Object.keys(schedule).sort(), ['agent', 'at', 'createdAt', 'cron', 'enabled', 'everyMs', 'id', 'input', 'lastRunAt', 'lastRunId', 'lastSkippedAt', 'metadata', 'nextRunAt', 'overlap', 'principal', 'sessionId', 'timezone', 'updatedAt'])

  const id = schedule.id as string
  t.same((await app.inject({ url: `/v1/schedules/${id}`, headers: as('alice') })).json(), schedule)
  for (const [method, url, payload] of [
    ['GET', `/v1/schedules/${id}`], ['PATCH', `/v1/schedules/${id}`, { enabled: false }], ['DELETE', `/v1/schedules/${id}`],
    ['GET', `/v1/schedules/${id}/runs`], ['POST', `/v1/schedules/${id}/trigger`]
  ] as Array<['GET' | 'PATCH' | 'DELETE' | 'POST', string, object?]>) {
    const theirs = await app.inject({ method, url, headers: as('bob'), ...(payload === undefined ? {} : { payload }) })
    const unknown = await app.inject({ method, url: url.replace(id, 'no-such-schedule'), headers: as('alice'), ...(payload === undefined ? {} : { payload }) })
    t.equal(theirs.statusCode, 404, `${method} ${url} as bob`)
    t.equal(unknown.statusCode, 404)
    t.same({ ...theirs.json(), requestId: null, traceId: null, message: null }, { ...unknown.json(), requestId: null, traceId: null, message: null }, 'the same answer as an unknown id')
    t.match(theirs.json(), { code: 'SCHEDULE_NOT_FOUND' })
  }
  t.same((await app.inject({ url: '/v1/schedules', headers: as('bob') })).json(), { schedules: [], nextCursor: null }, 'bob lists none')

  // PATCH: any field but the agent; the next due time follows the trigger
  const agent = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { agent: 'typed' } })
  t.equal(agent.statusCode, 400)
  t.match(agent.json(), { message: 'body/agent is not allowed' })
  const badCron = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { cron: 'nope' } })
  t.match(badCron.json(), { statusCode: 400, message: /^body\/cron/ })
  const retimed = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { everyMs: 3_600_000, overlap: 'allow', sessionId: null } })
  t.equal(retimed.statusCode, 200)
  t.match(retimed.json(), { cron: null, everyMs: 3_600_000, at: null, overlap: 'allow', sessionId: null })
  t.ok(Math.abs(Date.parse(retimed.json().nextRunAt) - (Date.now() + 3_600_000)) < 5_000, 'an hour from now')
  const disabled = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { enabled: false } })
  t.match(disabled.json(), { enabled: false, nextRunAt: null })
  const enabled = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { enabled: true, timezone: 'Asia/Tokyo' } })
  t.match(enabled.json(), { enabled: true, timezone: 'Asia/Tokyo' })
  t.not(enabled.json().nextRunAt, null)
  const badTz = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { timezone: 'Nowhere/At_All' } })
  t.match(badTz.json(), { statusCode: 400, message: /^body\/timezone/ })
  const badInput = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { sessionId: 'not-mine' } })
  t.match(badInput.json(), { statusCode: 404, code: 'SESSION_NOT_FOUND' })

  // listed by pages, the caller's only
  for (let i = 0; i < 3; i++) await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'echo', input: i, everyMs: 60_000 } })
  await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('bob'), payload: { agent: 'echo', input: 'b', everyMs: 60_000 } })
  const first = (await app.inject({ url: '/v1/schedules?limit=3', headers: as('alice') })).json()
  t.equal(first.schedules.length, 3)
  const rest = (await app.inject({ url: `/v1/schedules?limit=3&cursor=${first.nextCursor as string}`, headers: as('alice') })).json()
  t.same(rest.schedules.map((s: { id: string }) => s.id), [id], 'the oldest last')
  t.equal(rest.nextCursor, null)
  t.equal((await app.inject({ url: '/v1/schedules?cursor=bogus', headers: as('alice') })).statusCode, 400)

  // the Admin API lists everyone's
  const admin = await app.inject({ url: '/admin/schedules', headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal(admin.statusCode, 200)
  t.equal(admin.json().schedules.length, 5)
  const bobs = await app.inject({ url: '/admin/schedules?principal=bob', headers: { authorization: `Bearer ${TOKEN}` } })
  t.same(bobs.json().schedules.map((s: { principal: string }) => s.principal), ['bob'])
  const paged = await app.inject({ url: '/admin/schedules?limit=4', headers: { authorization: `Bearer ${TOKEN}` } })
  t.equal((await app.inject({ url: `/admin/schedules?cursor=${paged.json().nextCursor as string}`, headers: { authorization: `Bearer ${TOKEN}` } })).json().schedules.length, 1)
  t.equal((await app.inject({ url: '/admin/schedules' })).statusCode, 401)

  const deleted = await app.inject({ method: 'DELETE', url: `/v1/schedules/${id}`, headers: as('alice') })
  t.equal(deleted.statusCode, 204)
  t.equal((await app.inject({ url: `/v1/schedules/${id}`, headers: as('alice') })).statusCode, 404)
})

t.test('trigger: fire now, 202 like a background run, recorded as the last run', async (t) => {
  const { agent, seen } = recorder()
  const { app, as } = await serve(t, { rec: agent })
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'rec', input: null, cron: '0 0 1 1 *' } })).json()
  const fired = await app.inject({ method: 'POST', url: `/v1/schedules/${created.id as string}/trigger`, headers: as('alice') })
  t.equal(fired.statusCode, 202)
  const { runId } = fired.json()
  t.equal(fired.headers.location, `/v1/runs/${runId as string}`)
  t.match(fired.json(), { status: 'queued' })
  await eventually(() => seen.length === 1)
  t.equal(seen[0]!.runId, runId)
  t.equal(seen[0]!.schedule!.id, created.id)
  const after = (await app.inject({ url: `/v1/schedules/${created.id as string}`, headers: as('alice') })).json()
  t.equal(after.lastRunId, runId)
  t.equal(after.nextRunAt, created.nextRunAt, 'the schedule\'s own due times are not moved')
})

t.test('the caller must be allowed to run the agent; a schedule created disabled; PATCH of its input, metadata and enabled', async (t) => {
  const { app, as } = await serve(t)
  const disabled = await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'typed', input: { n: 1 }, everyMs: 60_000, enabled: false } })
  t.equal(disabled.statusCode, 201)
  t.match(disabled.json(), { enabled: false, nextRunAt: null })
  const id = disabled.json().id as string
  const enabled = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { enabled: true } })
  t.not(enabled.json().nextRunAt, null, 'enabled: its next due time')
  const again = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { enabled: true, metadata: { v: 2 }, input: { n: 2 } } })
  t.match(again.json(), { enabled: true, nextRunAt: enabled.json().nextRunAt, metadata: { v: 2 }, input: { n: 2 } }, 'enabled already: its due time kept')
  const badInput = await app.inject({ method: 'PATCH', url: `/v1/schedules/${id}`, headers: as('alice'), payload: { input: { n: 'x' } } })
  t.match(badInput.json(), { statusCode: 400, message: /^body\/input\/n/ })
  // the access check the auth plugin installs: a principal without the role for the agent
  app.agentService.useAccessCheck((_request, _access, agent) => agent !== 'typed')
  const refused = await app.inject({ method: 'POST', url: '/v1/schedules', headers: as('alice'), payload: { agent: 'typed', input: { n: 1 }, everyMs: 60_000 } })
  t.equal(refused.statusCode, 403)
  t.match(refused.json(), { code: 'FORBIDDEN' })
  const trigger = await app.inject({ method: 'POST', url: `/v1/schedules/${id}/trigger`, headers: as('alice') })
  t.equal(trigger.statusCode, 403)
})
