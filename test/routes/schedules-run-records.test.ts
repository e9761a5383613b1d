// A schedule's runs carry `scheduleId` and `scheduledFor` on their record (docs/schedules.md), on every backend: in
// GET /v1/runs/:runId, GET /v1/schedules/:id/runs and the Admin API's listing of runs; a run that is no fire has
// neither. A fire for its due time and one by hand (POST /v1/schedules/:id/trigger).
import t from 'tap'
import type { Test } from 'tap'
import { buildOpenApiDocument } from '../../app/openapi.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { redisStores } from '../../lib/stores/redis.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import type { StoreSet } from '../../lib/stores/types.js'
import { build, closeStores, echo, eventually, principalFromHeader } from '../helper.js'
import { TOKEN, future, recorder } from '../helpers/schedules.js'
import { pgReachable, pgUrl, redisReachable, redisUrl, withPgSchema, withRedisPrefix } from '../helpers/services.js'

async function recordsCarryTheFire (t: Test, stores: StoreSet): Promise<void> {
  t.teardown(() => closeStores([stores]))
  const { agent, seen } = recorder()
  const service = build(t, { ...stores, agents: { rec: agent, echo }, adminApi: { enabled: true, bearerToken: TOKEN }, runLeaseMs: 1_000 })
  principalFromHeader(service.app)
  const { app } = service
  await app.ready()
  const alice = { 'x-test-principal': 'alice' }
  const admin = { authorization: `Bearer ${TOKEN}` }
  const at = future(1_000)
  const created = (await app.inject({ method: 'POST', url: '/v1/schedules', headers: alice, payload: { agent: 'rec', input: null, at } })).json()
  const id = created.id as string
  await eventually(() => seen.length === 1, 10_000, 'the fire')
  const runId = seen[0]!.runId
  const fire = { runId, scheduleId: id, scheduledFor: at }
  const run = await eventually(async () => {
    const record = (await app.inject({ url: `/v1/runs/${runId}`, headers: alice })).json()
    return record.status === 'completed' && record
  }, 10_000, 'the run ended')
  t.match(run, { ...fire, background: true, principal: 'alice' }, 'GET /v1/runs/:runId')
  t.match((await app.inject({ url: `/v1/schedules/${id}/runs`, headers: alice })).json().runs, [fire], 'the schedule\'s runs')
  const listed = (await app.inject({ url: `/admin/runs?runId=${runId}`, headers: admin })).json().runs
  t.match(listed, [fire], 'the Admin API\'s runs')

  // by hand: its due time is when it was asked for
  const before = Date.now()
  const triggered = (await app.inject({ method: 'POST', url: `/v1/schedules/${id}/trigger`, headers: alice })).json()
  const manual = await eventually(async () => {
    const record = (await app.inject({ url: `/v1/runs/${triggered.runId as string}`, headers: alice })).json()
    return record.status === 'completed' && record
  }, 10_000, 'the run fired by hand ended')
  t.equal(manual.scheduleId, id)
  t.ok(Date.parse(manual.scheduledFor) >= before && Date.parse(manual.scheduledFor) <= Date.now(), 'fired for the time it was asked')

  // a run that is no fire has neither, in either answer
  const plain = (await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: alice, payload: { input: 'x' } })).json()
  const record = (await app.inject({ url: `/v1/runs/${plain.runId as string}`, headers: alice })).json()
  t.notOk('scheduleId' in record || 'scheduledFor' in record, 'GET /v1/runs/:runId')
  const listedPlain = (await app.inject({ url: `/admin/runs?runId=${plain.runId as string}`, headers: admin })).json().runs[0]
  t.notOk('scheduleId' in listedPlain || 'scheduledFor' in listedPlain, 'the Admin API\'s runs')
}

t.test('memory stores', async (t) => {
  await recordsCarryTheFire(t, {})
})

t.test('SQLite stores', async (t) => {
  await recordsCarryTheFire(t, sqliteStores(':memory:'))
})

t.test('PostgreSQL stores', { skip: await pgReachable() ? false : 'PostgreSQL not reachable' }, async (t) => {
  await recordsCarryTheFire(t, postgresStores({ connectionString: pgUrl(), schema: withPgSchema(t) }))
})

t.test('Redis stores', { skip: await redisReachable() ? false : 'Redis not reachable' }, async (t) => {
  await recordsCarryTheFire(t, redisStores(redisUrl(), { prefix: withRedisPrefix(t) }))
})

t.test('the OpenAPI document names both fields on a run', async (t) => {
  const text = JSON.stringify(await buildOpenApiDocument({ agents: { echo } }))
  t.match(text, /"scheduleId":\{[^}]*"type":"string"/)
  t.match(text, /"scheduledFor":\{[^}]*"format":"date-time"/)
})
