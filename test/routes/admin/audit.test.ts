import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import type { AgentService } from '../../../app/service.js'
import { sqliteStores } from '../../../lib/stores/sqlite.js'
import type { AuditEntry } from '../../../lib/stores/types.js'
import type { AgentServiceOptions } from '../../../lib/core/types.js'
import { auditCount, build, settle } from '../../helper.js'

interface Page { entries: AuditEntry[], nextCursor: string | null }

async function page (service: AgentService, query: string): Promise<Page> {
  const response = await service.app.inject(`/admin/audit?${query}`)
  if (response.statusCode !== 200) throw new Error(`${response.statusCode} ${response.body}`)
  return response.json()
}

t.test('entry shape: the documented fields (docs/operations.md), ids of our own, most recent first', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  const run = await service.app.inject({
    method: 'POST',
    url: '/v1/agents/echo/runs?x=1',
    headers: { 'x-request-id': 'client-chosen', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    payload: { input: 'hi' }
  })
  await service.app.inject({ url: '/v1/agents', headers: { 'x-request-id': 'client-chosen' } })
  await settle(service)
  const { entries, nextCursor } = await page(service, '')
  t.equal(nextCursor, null)
  t.equal(entries.length, 2)
  const [list, runEntry] = entries as [AuditEntry, AuditEntry]
  t.same(Object.keys(runEntry).sort(), ['agent', 'at', 'durationMs', 'id', 'ip', 'method', 'principal', 'requestId', 'route', 'runId', 'sessionId', 'status', 'traceId', 'url'])
  t.match(runEntry, {
    requestId: 'client-chosen',
    method: 'POST',
    route: '/v1/agents/:name/runs',
    url: '/v1/agents/echo/runs?x=1',
    status: 200,
    principal: 'anonymous',
    ip: '127.0.0.1',
    agent: 'echo',
    runId: run.json().runId,
    sessionId: run.json().sessionId,
    traceId: '0af7651916cd43dd8448eb211c80319c'
  })
  t.ok(typeof runEntry.durationMs === 'number' && runEntry.durationMs >= 0)
  t.ok(Date.parse(runEntry.at) <= Date.parse(list.at))
  t.equal(list.requestId, 'client-chosen', 'the same client request id twice: two entries')
  t.not(list.id, runEntry.id, 'the ids are ours')
  t.not(list.id, 'client-chosen')
  t.notOk('admin' in list)
})

t.test('limit: 1 to 500, default 50; bad input is a 400', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  await Promise.all(Array.from({ length: 60 }, () => service.app.inject('/v1/agents')))
  await settle(service)
  t.equal((await page(service, '')).entries.length, 50)
  t.equal((await page(service, 'limit=1')).entries.length, 1)
  await settle(service)
  t.equal((await page(service, 'limit=500')).entries.length, 60 + 2, 'the two admin reads above are audited too')
  for (const query of ['limit=0', 'limit=501', 'limit=-1', 'limit=2.5', 'limit=ten', 'status=abc', 'status=600', 'status=4x', 'status=44',
    'agent=', 'cursor=', 'unknown=1', `agent=${'a'.repeat(65)}`, `cursor=${'a'.repeat(513)}`]) {
    const response = await service.app.inject(`/admin/audit?${query}`)
    t.equal(response.statusCode, 400, query)
    t.equal(response.json().code, 'FST_ERR_VALIDATION', query)
  }
  for (const cursor of ['bm90LWEtbnVtYmVy', '!!!', 'MTIzNDU2Nzg5MDEyMzQ1Njc4OTA']) {
    const response = await service.app.inject(`/admin/audit?cursor=${cursor}`)
    t.equal(response.statusCode, 400, cursor)
    t.equal(response.json().code, 'FA_INVALID_CURSOR')
  }
})

t.test('filters: agent, one status, a status class', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  const app = service.app
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } }) // 200 echo
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 2 } }) // 200 echo
  await app.inject('/v1/agents/nope') // 404
  await app.inject('/v1/nothing') // 404
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: {} }) // 400
  await app.inject({ method: 'DELETE', url: '/v1/agents' }) // 405
  await app.inject('/v1/agents') // 200
  await settle(service)

  const statuses = async (query: string): Promise<number[]> => (await page(service, query)).entries.map((e) => e.status)
  t.same(await statuses('status=404'), [404, 404])
  t.same(await statuses('status=4xx'), [405, 400, 404, 404])
  t.same(await statuses('status=4XX'), [405, 400, 404, 404])
  t.same(await statuses('status=405'), [405])
  t.same(await statuses('status=5xx'), [])
  await settle(service)
  // the admin reads just above are 200s too, and newer
  const ok = (await page(service, 'status=2xx')).entries
  t.same(ok.filter((e) => e.admin !== true).map((e) => e.route), ['/v1/agents', '/v1/agents/:name/runs', '/v1/agents/:name/runs'])
  t.equal(ok.length, 3 + 5)
  t.ok(ok.slice(0, 5).every((e) => e.admin === true), 'the five admin reads above, newest first')
  const echo = (await page(service, 'agent=echo')).entries
  t.same(echo.map((e) => e.status), [200, 200], 'runs of echo (the 400 failed validation before naming its agent)')
  t.ok(echo.every((e) => e.agent === 'echo'))
  t.same((await page(service, 'agent=echo&status=4xx')).entries, [])
  t.same((await page(service, 'agent=other')).entries, [])
})

t.test('ring buffer: the default memory store keeps the latest 500', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  for (let i = 0; i < 520; i += 20) {
    await Promise.all(Array.from({ length: 20 }, (_, j) => service.app.inject({ url: '/v1/agents', headers: { 'x-request-id': `r-${i + j}` } })))
    await settle(service)
  }
  t.equal(await auditCount(service.app.agentService.settings.auditStore), 500)
  const first = await page(service, 'limit=500')
  t.equal(first.entries.length, 500)
  t.equal(first.nextCursor, null, 'nothing older survives')
  t.same(first.entries.map((e) => e.requestId), Array.from({ length: 500 }, (_, k) => `r-${519 - k}`), 'r-0 … r-19 were evicted, in order')
  await settle(service)
  const after = await page(service, 'limit=500')
  t.equal(after.entries[0]!.admin, true, 'the admin read itself is the newest entry')
  t.equal(after.entries.at(-1)!.requestId, 'r-21', 'and pushed out the oldest one')
  t.equal(await auditCount(service.app.agentService.settings.auditStore), 500)
})

const backends: Array<[string, (t: Test) => Partial<AgentServiceOptions>]> = [
  ['memory', () => ({})],
  ['sqlite', (t) => {
    const stores = sqliteStores(join(t.testdir(), 'audit.db'))
    t.teardown(() => stores.auditStore.close?.())
    return { auditStore: stores.auditStore }
  }]
]

for (const [backend, storeOptions] of backends) t.test(`cursor paging (${backend}): no duplicates and no gaps while new requests arrive`, async (t) => {
  const service = build(t, { ...storeOptions(t), adminApi: { enabled: true } })
  const app = service.app
  for (let i = 0; i < 120; i++) {
    await app.inject(i % 3 === 0 ? '/v1/agents/nope' : { method: 'POST', url: '/v1/agents/echo/runs', payload: { input: i } })
  }
  await settle(service)
  // what the pages must add up to: the log as it was when the first page was read
  const store = service.app.agentService.settings.auditStore
  const snapshot = (await store.query({ limit: 500 })).entries.map((e) => e.id)
  t.equal(snapshot.length, 120)

  let arrivals = 0
  const seen: string[] = []
  let cursor: string | null = null
  let pages = 0
  do {
    // new requests land while the page is being read, and between pages
    const traffic = Array.from({ length: 5 }, () => app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'new' } }))
    arrivals += traffic.length
    const current: Page = await page(service, `limit=17${cursor === null ? '' : `&cursor=${cursor}`}`)
    await Promise.all(traffic)
    await settle(service)
    if (pages === 0) {
      // the first page may already include some of the concurrent arrivals: they are newer than the snapshot
      const known = current.entries.filter((e) => snapshot.includes(e.id))
      seen.push(...known.map((e) => e.id))
    } else {
      seen.push(...current.entries.map((e) => e.id))
    }
    cursor = current.nextCursor
    pages++
  } while (cursor !== null)

  t.equal(new Set(seen).size, seen.length, 'no duplicates')
  t.same(seen, snapshot, 'no gaps, most recent first')
  t.ok(pages >= 8)
  t.ok(await auditCount(store) >= 120 + arrivals, 'the arrivals were written meanwhile')
})

t.test('cursor paging with a filter', async (t) => {
  const service = build(t, { adminApi: { enabled: true } })
  for (let i = 0; i < 40; i++) await service.app.inject(i % 4 === 0 ? '/v1/nothing' : '/v1/agents')
  await settle(service)
  const ids: string[] = []
  let cursor: string | null = null
  do {
    const current: Page = await page(service, `limit=3&status=404${cursor === null ? '' : `&cursor=${cursor}`}`)
    t.ok(current.entries.every((e) => e.status === 404))
    ids.push(...current.entries.map((e) => e.id))
    cursor = current.nextCursor
  } while (cursor !== null)
  t.equal(ids.length, 10)
  t.equal(new Set(ids).size, 10)
})
