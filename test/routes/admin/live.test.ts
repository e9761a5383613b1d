// The console's Admin API routes (docs/operations.md, the operator console): the live feed (one audit entry per
// connection, snapshots at every interval, ended by its time, the client or the server's close), run history by
// principal and id, and a run's events from its log.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { z } from 'zod'
import { MemoryApprovalStore } from '../../../lib/stores/memory.js'
import type { Agent } from '../../../lib/core/types.js'
import { MemoryRunStore } from '../../../lib/stores/memory-runs.js'
import { auditEntries, build, echo, eventually, listen, parseSse, principalFromHeader } from '../../helper.js'

const TOKEN = 'admin-live-token'
const auth = { authorization: `Bearer ${TOKEN}` }

/** Waits for a decision, then answers with it. */
const asker: Agent = {
  input: Type.String({ minLength: 1 }),
  async run (_input, ctx) {
    const decision = await ctx.requestApproval({ action: 'deploy', payload: { to: 'prod' } })
    return { output: decision.approved }
  }
}

/** An input in Zod: the console is given its library's JSON Schema. */
const zodded: Agent = {
  input: z.object({ nights: z.number().int() }),
  run: async () => ({ output: 'ok' })
}

const failing: Agent = {
  async * run () {
    yield 'half'
    throw new Error('the model went away')
  }
}

t.test('the live feed: snapshots at every interval, one audit entry for the connection, ended after liveFeedMs', async (t) => {
  const service = build(t, {
    agents: { echo, asker, zodded },
    adminApi: { enabled: true, bearerToken: TOKEN, liveIntervalMs: 50, liveFeedMs: 1000 }
  })
  const app = service.app
  const denied = await app.inject({ url: '/admin/live' })
  t.equal(denied.statusCode, 401, 'the token, as every admin route')
  t.equal(denied.headers['www-authenticate'], 'Bearer realm="admin"')

  const asking = app.inject({ method: 'POST', url: '/v1/agents/asker/runs', payload: { input: 'go' } })
  const pending = await eventually(async () => (await app.agentService.settings.approvalStore.listPending({}))[0])
  const started = Date.now()
  const response = await app.inject({ url: '/admin/live', headers: auth })
  t.ok(Date.now() - started >= 1000, 'held open for liveFeedMs')
  t.equal(response.statusCode, 200)
  t.match(response.headers['content-type'], /^text\/event-stream/)
  t.ok(response.headers['x-request-id'])
  const events = parseSse(response.body)
  t.ok(events.length >= 2, `a snapshot at once, then every 50 ms (${events.length})`)
  t.ok(events.every((e) => e.event === 'snapshot'))
  const last = events.at(-1)!.data
  t.same(Object.keys(last).sort(), ['agents', 'approvals', 'at', 'cluster', 'health', 'runs', 'stats'])
  t.same(last.cluster, { running: 1, queued: 0, approvalsPending: 1, capped: false })
  t.match(last.runs, [{ agent: 'asker', status: 'running', principal: 'anonymous' }])
  t.notOk('result' in last.runs[0], 'runs without their results')
  t.match(last.approvals, [{ id: pending.id, action: 'deploy', payload: { to: 'prod' } }])
  t.same(last.agents.map((a: { name: string }) => a.name), ['echo', 'asker', 'zodded'])
  const inputs = last.agents.map((a: { input?: unknown }) => a.input)
  t.same(inputs.slice(0, 2), [undefined, { type: 'string', minLength: 1 }], 'the input\'s JSON Schema, when there is one')
  t.match(inputs[2], { type: 'object', properties: { nights: { type: 'integer' } }, required: ['nights'] }, 'a Zod input as Zod\'s JSON Schema')
  t.equal(last.health.status, 'ok')
  t.equal(last.stats.runs.inFlight, 1)

  const audited = (await auditEntries(app)).filter((e) => e.url === '/admin/live')
  t.equal(audited.length, 2, 'one entry per connection (the 401 and the feed), however many snapshots')
  t.match(audited[0], { status: 200, principal: 'admin', admin: true, method: 'GET' })
  t.ok(audited[0]!.durationMs < 900, 'written when it opened, not when it ended')

  await app.inject({ method: 'POST', url: `/v1/approvals/${pending.id}`, payload: { approved: true } })
  t.equal((await asking).json().output, true)
})

t.test('the live feed: a snapshot that cannot be read is a problem event, and the next one is tried', async (t) => {
  const approvals = new MemoryApprovalStore()
  let failures = 1
  const listPending = approvals.listPending.bind(approvals)
  approvals.listPending = async (filter) => {
    if (failures-- > 0) throw Object.assign(new Error('the approvals are away'), { code: 'STORE_UNAVAILABLE' })
    return listPending(filter)
  }
  const service = build(t, { approvalStore: approvals, adminApi: { enabled: true, liveIntervalMs: 50, liveFeedMs: 200 } })
  const events = parseSse((await service.app.inject({ url: '/admin/live' })).body)
  t.match(events[0], { event: 'problem', data: { code: 'STORE_UNAVAILABLE', message: 'the approvals are away' } })
  t.equal(events[1]?.event, 'snapshot')
  failures = 1
  approvals.listPending = async () => { if (failures-- > 0) throw new Error('no code'); return [] }
  t.match(parseSse((await service.app.inject({ url: '/admin/live' })).body)[0], { event: 'problem', data: { code: 'INTERNAL_ERROR', message: 'no code' } })
})

t.test('the live feed: a snapshot still being read when the feed ends is dropped, not written after the end', async (t) => {
  const approvals = new MemoryApprovalStore()
  let release!: () => void
  const held = new Promise<void>((resolve) => { release = resolve })
  let reads = 0
  approvals.listPending = async () => {
    // the first snapshot goes out; the second is still being read when the feed's time is up
    if (++reads === 2) await held
    return []
  }
  const service = build(t, { approvalStore: approvals, adminApi: { enabled: true, liveIntervalMs: 50, liveFeedMs: 120 } })
  const response = await service.app.inject({ url: '/admin/live' })
  t.equal(reads, 2, 'the feed ended during the second read')
  release()
  await eventually(() => reads === 2)
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(parseSse(response.body).map((e) => e.event), ['snapshot'], 'the late snapshot is not written')
  t.equal(reads, 2, 'and no read after it')
})

t.test('the live feed: nothing but the records leaves (a field a store adds is dropped)', async (t) => {
  const runs = new MemoryRunStore()
  const list = runs.list.bind(runs)
  runs.list = async (query) => {
    const page = await list(query)
    return { ...page, runs: page.runs.map((r) => ({ ...r, secret: 'kept in the store' })) }
  }
  let release = (): void => {}
  const waiter: Agent = { async run () { await new Promise<void>((resolve) => { release = resolve }); return { output: 'done' } } }
  const service = build(t, { agents: { waiter }, runStore: runs, adminApi: { enabled: true, liveIntervalMs: 1000, liveFeedMs: 100 } })
  const running = service.app.inject({ method: 'POST', url: '/v1/agents/waiter/runs', payload: { input: 1 } })
  await eventually(async () => (await list({ limit: 1, status: 'running' })).runs[0])
  const [snapshot] = parseSse((await service.app.inject({ url: '/admin/live' })).body)
  t.equal(snapshot!.data.runs.length, 1)
  t.notOk('secret' in snapshot!.data.runs[0])
  release()
  await running
})

t.test('the live feed ends when the client leaves, and when the server closes', async (t) => {
  const approvals = new MemoryApprovalStore()
  let reads = 0
  const listPending = approvals.listPending.bind(approvals)
  approvals.listPending = async (filter) => { reads++; return listPending(filter) }
  const { service, url } = await listen(t, { approvalStore: approvals, adminApi: { enabled: true, liveIntervalMs: 50, liveFeedMs: 60_000 } })

  const controller = new AbortController()
  const left = await fetch(`${url}/admin/live`, { signal: controller.signal })
  const reader = left.body!.getReader()
  t.match(new TextDecoder().decode((await reader.read()).value), /^event: snapshot\n/)
  controller.abort()
  await eventually(() => service.app.agentService.heartbeat.size === 0, 2000, 'the feed forgotten')
  const after = reads
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.ok(reads <= after + 1, 'no more reads once the client left')

  const open = await fetch(`${url}/admin/live`)
  const body = open.text()
  await eventually(() => reads > after + 2)
  const closed = service.close(0)
  t.match(await body, /^event: snapshot\n/, 'the response ends: a feed never holds the server open')
  await closed
})

t.test('run history: by principal, by id (with the other filters), 400 for bad ones', async (t) => {
  const service = build(t, { agents: { echo }, adminApi: { enabled: true, bearerToken: TOKEN } })
  principalFromHeader(service.app)
  const app = service.app
  const ids: Record<string, string> = {}
  for (const principal of ['alice', 'bob', 'alice']) {
    const response = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: { 'x-test-principal': principal }, payload: { input: principal } })
    ids[principal] = response.json().runId
  }
  const runs = async (query: string): Promise<{ runs: Array<{ runId: string, principal: string }>, nextCursor: string | null }> => {
    const response = await app.inject({ url: `/admin/runs?${query}`, headers: auth })
    t.equal(response.statusCode, 200, query)
    return response.json()
  }
  t.same((await runs('principal=alice')).runs.map((r) => r.principal), ['alice', 'alice'])
  t.same((await runs('principal=bob&agent=echo&status=completed')).runs.map((r) => r.runId), [ids.bob])
  t.same((await runs('principal=carol')).runs, [])
  t.same((await runs(`runId=${ids.bob}`)).runs.map((r) => r.runId), [ids.bob])
  t.same(await runs(`runId=${ids.bob}&principal=bob&status=completed`), { runs: [await runs(`runId=${ids.bob}`).then((p) => p.runs[0])], nextCursor: null })
  t.same((await runs(`runId=${ids.bob}&principal=alice`)).runs, [], 'an id that does not match the other filters')
  t.same((await runs(`runId=${ids.bob}&status=failed`)).runs, [])
  t.same((await runs('runId=nothing-like-it')).runs, [])
  t.notOk('result' in (await runs(`runId=${ids.bob}`)).runs[0]!, 'without its result')
  for (const bad of ['principal=', `principal=${'p'.repeat(201)}`, 'runId=', `runId=${'r'.repeat(129)}`, 'status=done', 'other=1']) {
    const response = await app.inject({ url: `/admin/runs?${bad}`, headers: auth })
    t.equal(response.statusCode, 400, bad)
    t.equal(response.json().code, 'FST_ERR_VALIDATION')
  }
  t.equal((await app.inject({ url: '/admin/runs?principal=alice' })).statusCode, 401)
})

t.test('a run\'s events from its log, whoever started it: by page; 404 unknown, 400 bad input, 401 without the token', async (t) => {
  const service = build(t, { agents: { failing }, adminApi: { enabled: true, bearerToken: TOKEN } })
  principalFromHeader(service.app)
  const app = service.app
  const failed = await app.inject({ method: 'POST', url: '/v1/agents/failing/runs', headers: { 'x-test-principal': 'carol', accept: 'text/event-stream' }, payload: { input: 1 } })
  const runId = parseSse(failed.body)[0]!.data.runId as string
  const all = await app.inject({ url: `/admin/runs/${runId}/events`, headers: auth })
  t.equal(all.statusCode, 200)
  const page = all.json()
  t.match(page.run, { runId, status: 'failed', principal: 'carol', error: { code: 'AGENT_ERROR' } })
  t.same(page.events.map((e: { type: string }) => e.type), ['run.started', 'message.delta', 'run.failed'])
  t.same(page.events.map((e: { seq: number }) => e.seq), [1, 2, 3])
  t.match(page.events[1].data, { text: 'half' })
  t.match(page.events[2].data, { error: { code: 'AGENT_ERROR' } })
  t.equal(page.nextAfter, null)

  const first = (await app.inject({ url: `/admin/runs/${runId}/events?limit=2`, headers: auth })).json()
  t.same(first.events.map((e: { seq: number }) => e.seq), [1, 2])
  t.equal(first.nextAfter, 2)
  const rest = (await app.inject({ url: `/admin/runs/${runId}/events?after=2&limit=2`, headers: auth })).json()
  t.same(rest.events.map((e: { seq: number }) => e.seq), [3])
  t.equal(rest.nextAfter, null)

  const unknown = await app.inject({ url: '/admin/runs/nothing-like-it/events', headers: auth })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().code, 'RUN_NOT_FOUND')
  for (const bad of ['after=-1', 'after=x', 'limit=0', 'limit=501', 'other=1']) {
    const response = await app.inject({ url: `/admin/runs/${runId}/events?${bad}`, headers: auth })
    t.equal(response.statusCode, 400, bad)
  }
  t.equal((await app.inject({ url: `/admin/runs/${runId}/events` })).statusCode, 401)
  t.equal((await app.inject({ method: 'POST', url: `/admin/runs/${runId}/events`, headers: auth })).statusCode, 405)
})

t.test('liveIntervalMs and liveFeedMs are checked', async (t) => {
  for (const [adminApi, message] of [
    [{ enabled: true, liveIntervalMs: 10 }, '/adminApi/liveIntervalMs must be >= 50'],
    [{ enabled: true, liveFeedMs: 1.5 }, '/adminApi/liveFeedMs must be integer']
  ] as const) {
    t.throws(() => build(t, { adminApi }), { message: `invalid options: ${message}` })
  }
  const service = build(t, { adminApi: { enabled: true } })
  await service.app.ready()
  t.match(service.app.agentService.settings.adminApi, { liveIntervalMs: 2000, liveFeedMs: 60_000 })
})

t.test('the console page: served without a token under a strict CSP, no inline script or handler, no markup from data', async (t) => {
  const service = build(t, { adminApi: { enabled: true, bearerToken: TOKEN } })
  const page = await service.app.inject({ url: '/admin/console' })
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-security-policy'], /^default-src 'self';/)
  t.notMatch(page.headers['content-security-policy'], /unsafe-inline|unsafe-eval/)
  const html = page.body
  t.same([...html.matchAll(/<script\b([^>]*)>([^<]*)<\/script>/g)].map((m) => [/\bsrc="/.test(m[1]!), m[2]]), [[true, '']], 'one script, loaded from its own path')
  t.notMatch(html, /\son[a-z]+=/i, 'no inline event handler')
  for (const id of ['history', 'playground', 'confirm', 'cluster-figures', 'operator']) t.match(html, `id="${id}"`)
  const script = (await service.app.inject({ url: '/admin/console/app.js' })).body
  t.notMatch(script, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/, 'text goes in as text')
  t.match(script, /ADMIN \+ '\/live'/, 'the live feed, not polls')
  t.notMatch(script, /setInterval/, 'nothing polled')
})
