// Runs as resources (docs/runs.md) with the default memory run store: records, the event log and rejoining it,
// cancel, the run request's onDisconnect / multitask / store options. The SQL and Redis backends run the same
// service paths in test/stores/.
import { connect } from 'node:net'
import t from 'tap'
import type { Agent, RunContext } from '../../lib/core/types.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { build, eventually, listen, parseSse, principalFromHeader, settle, sleep } from '../helper.js'
import { followRun, openSse } from '../helpers/streams.js'

/** An agent that streams `n` deltas, one per tick. */
const counter: Agent = {
  async * run (input) {
    const n = (input as { n?: number } | null)?.n ?? 3
    for (let i = 1; i <= n; i++) {
      yield `d${i} `
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
}

/** Waits until released (or aborted): a run that stays in progress as long as a test needs. */
function gate (): { agent: Agent, release: () => void, started: () => number, signals: AbortSignal[] } {
  let release!: () => void
  const released = new Promise<void>((resolve) => { release = resolve })
  let starts = 0
  const signals: AbortSignal[] = []
  const agent: Agent = {
    async * run (_input, ctx) {
      starts++
      signals.push(ctx.signal)
      yield 'waiting '
      await Promise.race([released, new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)))])
      yield 'done'
    }
  }
  return { agent, release, started: () => starts, signals }
}

async function runJson (app: ReturnType<typeof build>['app'], agent: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) {
  return app.inject({ method: 'POST', url: `/v1/agents/${agent}/runs`, payload, headers })
}

t.test('a run is a resource: its record, owned by its principal', async (t) => {
  const { app } = build(t)
  principalFromHeader(app)
  const res = await runJson(app, 'echo', { input: { q: 1 } }, { 'x-test-principal': 'alice' })
  const result = res.json()
  const record = await app.inject({ url: `/v1/runs/${result.runId}`, headers: { 'x-test-principal': 'alice' } })
  t.equal(record.statusCode, 200)
  t.match(record.json(), {
    runId: result.runId, agent: 'echo', sessionId: result.sessionId, principal: 'alice', status: 'completed', background: false,
    attempt: 1, lastSeq: 2, requestId: result.requestId, traceId: result.traceId, createdAt: String, startedAt: String, endedAt: String
  })
  t.same(record.json().result, result, 'the record keeps the result')
  for (const [url, who] of [[`/v1/runs/${result.runId}`, 'bob'], ['/v1/runs/nope', 'alice']] as const) {
    const missing = await app.inject({ url, headers: { 'x-test-principal': who } })
    t.equal(missing.statusCode, 404)
    t.match(missing.json(), { code: 'RUN_NOT_FOUND', message: `Run "${url.split('/').at(-1)!}" not found` })
  }
})

t.test('the JSON answer is the stored run.completed event, byte for byte', async (t) => {
  const { app } = build(t)
  const res = await runJson(app, 'echo', { input: { text: 'é ✓', n: 1.5 } })
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8')
  const events = await app.inject({ url: `/v1/runs/${res.json().runId}/events` })
  t.equal(events.headers['content-type'], 'text/event-stream; charset=utf-8')
  const parsed = parseSse(events.body)
  t.same(parsed.map((e) => e.event), ['run.started', 'run.completed'])
  t.equal(events.body.split('\n').find((line, i, lines) => lines[i - 1] === 'event: run.completed')!.slice('data: '.length), res.body)
})

t.test('a replay is the original SSE stream, byte for byte; every cursor gives exactly the events after it', async (t) => {
  const { service, url } = await listen(t, { agents: { counter } })
  const app = service.app
  const original = await fetch(`${url}/v1/agents/counter/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { n: 98 } })
  })
  const text = await original.text()
  const events = text.split('\n\n').filter((block) => block !== '').map((block) => block + '\n\n')
  t.equal(events.length, 100, '100 events: run.started, 98 deltas, run.completed')
  const runId = parseSse(text)[0]!.data.runId as string
  for (let after = 0; after <= 100; after++) {
    const replay = await app.inject({ url: `/v1/runs/${runId}/events?after=${after}` })
    if (replay.body !== events.slice(after).join('')) {
      t.fail(`after=${after}: the replay differs`)
      return
    }
  }
  t.pass('every cursor from 0 to 100')
  const byHeader = await app.inject({ url: `/v1/runs/${runId}/events?after=3`, headers: { 'last-event-id': '97' } })
  t.equal(byHeader.body, events.slice(97).join(''), 'Last-Event-ID wins over ?after')
  const end = await app.inject({ url: `/v1/runs/${runId}/events`, headers: { 'last-event-id': '100' } })
  t.equal(end.statusCode, 200)
  t.equal(end.body, '', 'a rejoin from the terminal event ends at once, with no events')
})

t.test('bad cursors are 400 — after ownership: another principal\'s run stays a 404', async (t) => {
  const { app } = build(t)
  principalFromHeader(app)
  const runId = (await runJson(app, 'echo', { input: 1 }, { 'x-test-principal': 'alice' })).json().runId
  for (const [query, headers, message] of [
    ['?after=abc', {}, 'querystring/after must be a non-negative integer'],
    ['?after=-1', {}, 'querystring/after must be a non-negative integer'],
    ['?after=1.5', {}, 'querystring/after must be a non-negative integer'],
    ['', { 'last-event-id': 'x' }, 'Last-Event-ID must be a non-negative integer'],
    ['?after=99999999999999999', {}, 'querystring/after must be a non-negative integer']
  ] as const) {
    const res = await app.inject({ url: `/v1/runs/${runId}/events${query}`, headers: { 'x-test-principal': 'alice', ...headers } })
    t.equal(res.statusCode, 400, query)
    t.match(res.json(), { code: 'FST_ERR_VALIDATION', message })
  }
  const foreign = await app.inject({ url: `/v1/runs/${runId}/events?after=abc`, headers: { 'x-test-principal': 'bob' } })
  t.equal(foreign.statusCode, 404)
  const unknown = await app.inject({ url: '/v1/runs/nope/events?after=abc' })
  t.equal(unknown.statusCode, 404)
  const extra = await app.inject({ url: `/v1/runs/${runId}/events?other=1`, headers: { 'x-test-principal': 'alice' } })
  t.equal(extra.statusCode, 400, 'an unknown query parameter')
})

t.test('a follower that joins mid-run gets what was sent, then the rest live, then the end', async (t) => {
  const held = gate()
  const { url, service } = await listen(t, { agents: { held: held.agent } })
  const stream = await openSse(url, '/v1/agents/held/runs', { input: null })
  const started = await stream.next('run.started')
  const runId = started.data.runId as string
  await stream.next('message.delta')
  const follower = await followRun(url, runId)
  t.equal(follower.headers.get('content-type'), 'text/event-stream; charset=utf-8')
  t.ok(follower.headers.get('x-request-id'))
  await follower.next('message.delta')
  t.equal(service.app.agentService.stats.followers, 1)
  held.release()
  const last = await follower.next('run.completed')
  await follower.ended
  await stream.ended
  t.same(follower.events.map((e) => [e.id, e.event]), stream.events.map((e) => [e.id, e.event]), 'the same events, in order, nothing twice')
  t.same(last.data, stream.events.at(-1)!.data)
  await eventually(() => service.app.agentService.stats.followers === 0)
})

t.test('cancel: 202 with the record, the run ends CANCELLED at once; an ended run is 409; another\'s is 404', async (t) => {
  const held = gate()
  const { app } = build(t, { agents: { held: held.agent } })
  principalFromHeader(app)
  const alice = { 'x-test-principal': 'alice' }
  const answer = runJson(app, 'held', { input: null }, alice)
  await eventually(() => held.started() === 1)
  const runId = (await app.agentService.settings.runStore.list({ limit: 1 })).runs[0]!.runId
  t.equal((await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel`, headers: { 'x-test-principal': 'bob' } })).statusCode, 404, 'not bob\'s')
  const cancel = await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel`, headers: alice })
  t.equal(cancel.statusCode, 202)
  t.match(cancel.json(), { runId, status: 'running' })
  const res = await answer
  t.equal(res.statusCode, 409, 'the JSON client still waiting learns its run was cancelled')
  t.match(res.json(), { code: 'CANCELLED', message: 'The run was cancelled' })
  t.equal(held.signals[0]!.aborted, true)
  t.match((await app.inject({ url: `/v1/runs/${runId}`, headers: alice })).json(), { status: 'cancelled', error: { code: 'CANCELLED' } })
  const again = await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel`, headers: alice })
  t.equal(again.statusCode, 409)
  t.match(again.json(), { code: 'RUN_ALREADY_ENDED' })
  const events = parseSse((await app.inject({ url: `/v1/runs/${runId}/events`, headers: alice })).body)
  t.match(events.at(-1), { event: 'run.failed', data: { error: { code: 'CANCELLED' } } })
})

t.test('a session lists its runs, most recent first; the Admin API lists every run without results', async (t) => {
  const { app } = build(t, { adminApi: { enabled: true } })
  principalFromHeader(app)
  const alice = { 'x-test-principal': 'alice' }
  const first = (await runJson(app, 'echo', { input: 1 }, alice)).json()
  const ids = [first.runId]
  for (let i = 2; i <= 4; i++) ids.push((await runJson(app, 'echo', { input: i, sessionId: first.sessionId }, alice)).json().runId)
  await runJson(app, 'echo', { input: 'other' }, { 'x-test-principal': 'bob' })
  const page = await app.inject({ url: `/v1/sessions/${first.sessionId}/runs?limit=3`, headers: alice })
  t.equal(page.statusCode, 200)
  t.same(page.json().runs.map((r: { runId: string }) => r.runId), ids.slice(1).reverse())
  const rest = await app.inject({ url: `/v1/sessions/${first.sessionId}/runs?cursor=${page.json().nextCursor}`, headers: alice })
  t.same(rest.json(), { runs: [await (await app.inject({ url: `/v1/runs/${ids[0]}`, headers: alice })).json()], nextCursor: null })
  t.equal((await app.inject({ url: `/v1/sessions/${first.sessionId}/runs`, headers: { 'x-test-principal': 'bob' } })).statusCode, 404)
  t.equal((await app.inject({ url: `/v1/sessions/${first.sessionId}/runs?limit=101`, headers: alice })).statusCode, 400)

  const admin = await app.inject({ url: '/admin/runs?limit=2' })
  t.equal(admin.statusCode, 200)
  t.equal(admin.json().runs.length, 2)
  t.equal(admin.json().runs[0].result, undefined, 'without results')
  t.equal(admin.json().runs[0].principal, 'bob', 'every principal\'s')
  const filtered = await app.inject({ url: `/admin/runs?sessionId=${first.sessionId}&status=completed&agent=echo` })
  t.equal(filtered.json().runs.length, 4)
  t.equal((await app.inject({ url: '/admin/runs?status=nope' })).statusCode, 400)
  t.equal((await app.inject({ url: '/admin/runs?cursor=bad' })).statusCode, 400)
})

t.test('onDisconnect continue: the run goes on without its client, and can be followed to its end', async (t) => {
  const held = gate()
  const { url, service } = await listen(t, { agents: { held: held.agent } })
  const stream = await openSse(url, '/v1/agents/held/runs', { input: null, onDisconnect: 'continue' })
  const runId = (await stream.next('run.started')).data.runId as string
  await stream.next('message.delta')
  stream.close()
  await sleep(50)
  t.equal(held.signals[0]!.aborted, false, 'not cancelled by the disconnect')
  const follower = await followRun(url, runId, { 'last-event-id': '2' })
  held.release()
  await follower.ended
  t.same(follower.events.map((e) => e.event), ['message.delta', 'run.completed'])
  t.equal(follower.events[0]!.data.text, 'done')
  t.match((await service.app.inject({ url: `/v1/runs/${runId}` })).json(), { status: 'completed' })

  // a JSON run too
  const jsonHeld = gate()
  const { url: url2, service: service2 } = await listen(t, { agents: { held: jsonHeld.agent } })
  const controller = new AbortController()
  const answer = fetch(`${url2}/v1/agents/held/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: null, onDisconnect: 'continue' }), signal: controller.signal }).catch((e: Error) => e)
  await eventually(() => jsonHeld.started() === 1)
  controller.abort()
  t.type(await answer, Error)
  await sleep(50)
  t.equal(jsonHeld.signals[0]!.aborted, false)
  jsonHeld.release()
  await eventually(async () => (await service2.app.agentService.settings.runStore.list({ limit: 1 })).runs[0]?.status === 'completed')
})

t.test('onDisconnect cancel (the default): a client that leaves cancels its run', async (t) => {
  const held = gate()
  const { url, service } = await listen(t, { agents: { held: held.agent } })
  const stream = await openSse(url, '/v1/agents/held/runs', { input: null })
  const runId = (await stream.next('run.started')).data.runId as string
  stream.close()
  await eventually(() => held.signals[0]!.aborted)
  await eventually(async () => (await service.app.inject({ url: `/v1/runs/${runId}` })).json().status === 'cancelled')
})

t.test('multitask reject (default): a second run in a busy session is 409 SESSION_BUSY and runs nothing', async (t) => {
  const held = gate()
  const { app } = build(t, { agents: { held: held.agent, echo: { async run (i) { return { output: i } } } } })
  const first = runJson(app, 'held', { input: null })
  await eventually(() => held.started() === 1)
  const sessionId = (await app.agentService.settings.runStore.list({ limit: 1 })).runs[0]!.sessionId!
  const busy = await runJson(app, 'echo', { input: 2, sessionId })
  t.equal(busy.statusCode, 409)
  t.match(busy.json(), { code: 'SESSION_BUSY', message: new RegExp(`^Session "${sessionId}" has a run in progress`) })
  t.equal((await app.agentService.settings.runStore.listBySession(sessionId, { limit: 10 })).runs.length, 1, 'nothing stored')
  held.release()
  t.equal((await first).statusCode, 200)
  t.equal((await runJson(app, 'echo', { input: 3, sessionId })).statusCode, 200, 'free again once it ended')
})

t.test('multitask interrupt: the run in the way ends CANCELLED, then the new one runs', async (t) => {
  const held = gate()
  const { app } = build(t, { agents: { held: held.agent } })
  const first = runJson(app, 'held', { input: null })
  await eventually(() => held.started() === 1)
  const sessionId = (await app.agentService.settings.runStore.list({ limit: 1 })).runs[0]!.sessionId!
  const second = runJson(app, 'held', { input: null, sessionId, multitask: 'interrupt' })
  t.match((await first).json(), { code: 'CANCELLED' })
  await eventually(() => held.started() === 2)
  held.release()
  t.equal((await second).statusCode, 200)
  const runs = (await app.agentService.settings.runStore.listBySession(sessionId, { limit: 10 })).runs
  t.same(runs.map((r) => r.status), ['completed', 'cancelled'])
})

t.test('multitask enqueue: the new run waits, queued, until the session is free', async (t) => {
  const held = gate()
  const order: string[] = []
  const { app } = build(t, {
    agents: {
      held: held.agent,
      next: {
        async run (_input, ctx) {
          // by the time it runs, the run before it has ended
          const before = (await app.agentService.settings.runStore.listBySession(ctx.sessionId!, { limit: 10 })).runs[1]!
          order.push(`next after ${before.status}`)
          return { output: 'after' }
        }
      }
    }
  })
  const first = runJson(app, 'held', { input: null })
  await eventually(() => held.started() === 1)
  const sessionId = (await app.agentService.settings.runStore.list({ limit: 1 })).runs[0]!.sessionId!
  const second = runJson(app, 'next', { input: null, sessionId, multitask: 'enqueue' })
  await eventually(async () => (await app.agentService.settings.runStore.listBySession(sessionId, { limit: 10 })).runs.length === 2)
  const queued = (await app.agentService.settings.runStore.listBySession(sessionId, { limit: 10 })).runs[0]!
  t.match(queued, { status: 'queued', agent: 'next' })
  t.equal(queued.startedAt, undefined)
  t.same(order, [])
  held.release()
  t.equal((await second).json().output, 'after')
  await first
  t.same(order, ['next after completed'])
  t.match(await app.agentService.settings.runStore.get(queued.runId), { status: 'completed', startedAt: String })
})

t.test('multitask enqueue: a queued run cancelled, or whose client leaves, ends without running', async (t) => {
  const held = gate()
  let ran = 0
  const { url, service } = await listen(t, { agents: { held: held.agent, never: { async run () { ran++; return { output: null } } } } })
  const app = service.app
  const first = runJson(app, 'held', { input: null })
  await eventually(() => held.started() === 1)
  const sessionId = (await app.agentService.settings.runStore.list({ limit: 1 })).runs[0]!.sessionId!
  const queuedAnswer = runJson(app, 'never', { input: null, sessionId, multitask: 'enqueue' })
  const queuedRun = await eventually(async () => (await app.agentService.settings.runStore.list({ limit: 1, status: 'queued' })).runs[0])
  const cancel = await app.inject({ method: 'POST', url: `/v1/runs/${queuedRun.runId}/cancel` })
  t.equal(cancel.statusCode, 202)
  t.match(cancel.json(), { status: 'cancelled' })
  const res = await queuedAnswer
  t.equal(res.statusCode, 409)
  t.match(res.json(), { code: 'CANCELLED', message: `Run "${queuedRun.runId}" was cancelled while it waited for its session` })
  t.same(parseSse((await app.inject({ url: `/v1/runs/${queuedRun.runId}/events` })).body).map((e) => [e.id, e.event]), [[1, 'run.failed']])

  // a client that leaves while queued
  const controller = new AbortController()
  const leaving = fetch(`${url}/v1/agents/never/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: null, sessionId, multitask: 'enqueue' }), signal: controller.signal
  }).catch((e: Error) => e)
  const second = await eventually(async () => (await app.agentService.settings.runStore.list({ limit: 1, status: 'queued' })).runs[0])
  controller.abort()
  await leaving
  await eventually(async () => (await app.agentService.settings.runStore.get(second.runId))?.status === 'cancelled')
  held.release()
  await first
  t.equal(ran, 0, 'neither queued run ran')
  await settle(service)
})

t.test('store: false runs keep nothing: no session, sessionId null, gone soon after the end', async (t) => {
  let seen: RunContext | undefined
  const { app } = build(t, {
    adminApi: { enabled: true },
    agents: {
      probe: { async run (_input, ctx) { seen = ctx; return { output: 'ok' } } },
      keeper: { async run (_input, ctx) { await ctx.checkpoint({ a: 1 }); return { output: null } } },
      asker: { async run (_input, ctx) { await ctx.requestApproval({ action: 'x' }); return { output: null } } }
    },
    exposeErrors: true
  })
  const before = (await app.inject({ url: '/admin/sessions' })).json().sessions.length
  const res = await runJson(app, 'probe', { input: 1, store: false })
  t.equal(res.statusCode, 200)
  t.equal(res.json().sessionId, null)
  t.equal(seen!.sessionId, null)
  t.equal((await app.inject({ url: '/admin/sessions' })).json().sessions.length, before, 'no session created')
  const stream = await app.inject({ method: 'POST', url: '/v1/agents/probe/runs', payload: { input: 1, store: false, stream: true } })
  const events = parseSse(stream.body)
  t.equal(events[0]!.data.sessionId, null)
  const runId = events[0]!.data.runId
  await eventually(async () => (await app.inject({ url: `/v1/runs/${runId}` })).statusCode === 404, 2_000)
  t.pass('gone within 2 s')

  const withSession = await runJson(app, 'probe', { input: 1, store: false, sessionId: 'abc' })
  t.equal(withSession.statusCode, 400)
  t.match(withSession.json(), { code: 'FST_ERR_VALIDATION', message: 'body/sessionId is not allowed with store: false (an ephemeral run has no session)' })
  t.match((await runJson(app, 'keeper', { input: 1, store: false })).json(), { statusCode: 500, message: 'checkpoint: an ephemeral run (store: false) keeps no approvals or checkpoints' })
  t.match((await runJson(app, 'asker', { input: 1, store: false })).json(), { statusCode: 500, message: 'requestApproval: an ephemeral run (store: false) keeps no approvals or checkpoints' })
})

t.test('a follower that never reads is cut, and holds no more than the bound meanwhile; the run goes on', async (t) => {
  const big = 'x'.repeat(64 * 1024)
  let yielded = 0
  const { url, service, port } = await listen(t, {
    maxStreamBufferBytes: 256 * 1024,
    agents: {
      firehose: {
        async * run () {
          for (let i = 0; i < 400; i++) {
            yielded++
            yield big
            await sleep(2)
          }
        }
      }
    }
  })
  const stream = await openSse(url, '/v1/agents/firehose/runs', { input: null, onDisconnect: 'continue' })
  const runId = (await stream.next('run.started')).data.runId as string
  stream.close()
  // a raw client that asks to follow and then reads nothing
  const socket = connect(port, '127.0.0.1')
  socket.write(`GET /v1/runs/${runId}/events HTTP/1.1\r\nhost: x\r\n\r\n`)
  socket.pause()
  t.teardown(() => socket.destroy())
  // (a paused client socket does not see the close: the server's side says it)
  await eventually(() => service.app.agentService.stats.slowConsumers === 1 && service.app.agentService.stats.followers === 0, 10_000)
  t.pass('the server cut the follower')
  await eventually(async () => (await service.app.inject({ url: `/v1/runs/${runId}` })).json().status === 'completed', 20_000)
  t.equal(yielded, 400, 'the run was never slowed nor cancelled by its follower')
})

t.test('a connection-bound run is pulled only while its client keeps up; ctx.emit beyond the bound cuts it', async (t) => {
  const big = 'y'.repeat(64 * 1024)
  let pulled = 0
  const { port, service } = await listen(t, {
    maxStreamBufferBytes: 1024 * 1024,
    agents: {
      firehose: { async * run () { for (;;) { pulled++; yield big } } },
      emitter: {
        async run (_input, ctx) {
          for (let i = 0; i < 10_000 && !ctx.signal.aborted; i++) {
            ctx.emit('blob', { big })
            await new Promise((resolve) => setImmediate(resolve))
          }
          return { output: null }
        }
      }
    }
  })
  const socket = connect(port, '127.0.0.1')
  const body = JSON.stringify({ input: null, stream: true })
  socket.write(`POST /v1/agents/firehose/runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
  socket.pause()
  await eventually(() => pulled > 10)
  // the socket's buffers fill, at the machine's pace: pulled until they are full, then not for as long as one looks
  const settled = await eventually(async () => {
    const before = pulled
    await sleep(300)
    return pulled === before && pulled
  }, 20_000, 'the pulls stopped')
  await sleep(300)
  t.equal(pulled, settled, 'not pulled while the client reads nothing')
  t.ok(pulled < 200, `pulled ${pulled} deltas of 64 KiB: about what the socket buffers hold`)
  socket.destroy()
  await eventually(async () => (await service.app.agentService.settings.runStore.list({ limit: 1 })).runs[0]?.status === 'cancelled')

  const second = connect(port, '127.0.0.1')
  const body2 = JSON.stringify({ input: null, stream: true })
  second.write(`POST /v1/agents/emitter/runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body2.length}\r\n\r\n${body2}`)
  second.pause()
  t.teardown(() => second.destroy())
  await eventually(async () => {
    const runs = (await service.app.agentService.settings.runStore.list({ limit: 2 })).runs
    return runs.length === 2 && runs[0]!.agent === 'emitter' && runs[0]!.status === 'cancelled'
  }, 10_000)
  t.equal(service.app.agentService.stats.slowConsumers, 1, 'emitting past the bound cut the connection, and cancelled its run')
})

t.test('a run store that fails while a run streams: the stream goes on, the failure is counted, a follower gets an error event', async (t) => {
  const store = new MemoryRunStore()
  let failing = false
  const append = store.append.bind(store)
  const events = store.events.bind(store)
  const appendNow = store.appendNow.bind(store)
  store.append = async (runId, batch, owner) => { if (failing) throw new Error('store down'); return append(runId, batch, owner) }
  store.appendNow = (runId, batch, owner) => { if (failing) throw new Error('store down'); appendNow(runId, batch, owner) }
  store.events = async (runId, after, limit) => { if (failing) throw new Error('store down'); return events(runId, after, limit) }
  const held = gate()
  const { url, service } = await listen(t, { runStore: store, agents: { held: held.agent } })
  const stream = await openSse(url, '/v1/agents/held/runs', { input: null })
  const runId = (await stream.next('run.started')).data.runId as string
  await stream.next('message.delta')
  const follower = await followRun(url, runId)
  await follower.next('message.delta')
  failing = true
  held.release()
  await stream.ended
  t.equal(stream.events.at(-1)!.event, 'run.completed', 'the live stream went on')
  await follower.ended.catch(() => {})
  failing = false
  t.ok(service.app.agentService.stats.runLogFailures >= 1)
  t.equal(follower.events.at(-1)!.event, 'error')
  t.match(follower.events.at(-1)!.data, { error: { code: 'STORE_UNAVAILABLE' } })
  t.ok(Number.isNaN(follower.events.at(-1)!.id), 'the error event has no id: a rejoin starts from the last real event')
  t.notOk(follower.events.some((e) => e.event === 'run.completed'), 'the follower saw no end it could not read')
})

t.test('WebSocket runs take the same options: store false, onDisconnect continue', async (t) => {
  const { openWs } = await import('../helpers/streams.js')
  const held = gate()
  const { url, service } = await listen(t, { websocket: true, agents: { held: held.agent, echo: { async run (i) { return { output: i } } } } })
  const ws = await openWs(url)
  ws.send({ type: 'run.start', ref: 'e', agent: 'echo', input: 1, store: false })
  t.match(await ws.next((f) => f.type === 'run.completed'), { ref: 'e', data: { sessionId: null, output: 1 } })
  ws.send({ type: 'run.start', ref: 'c', agent: 'held', input: null, onDisconnect: 'continue' })
  const started = await ws.next((f) => f.type === 'run.started')
  ws.socket.close()
  await ws.closed
  await sleep(50)
  t.equal(held.signals[0]!.aborted, false)
  held.release()
  await eventually(async () => (await service.app.inject({ url: `/v1/runs/${started.runId}` })).json().status === 'completed')
  const bad = await openWs(url)
  bad.send({ type: 'run.start', ref: 'x', agent: 'echo', input: 1, store: false, sessionId: 's' })
  t.match(await bad.next((f) => f.type === 'error'), { ref: 'x', error: { code: 'FST_ERR_VALIDATION' } })
  bad.socket.close()
})

t.test('ended runs are kept runRetentionMs, then gone', async (t) => {
  const { app } = build(t, { runRetentionMs: 100 })
  const runId = (await runJson(app, 'echo', { input: 1 })).json().runId
  t.equal((await app.inject({ url: `/v1/runs/${runId}` })).statusCode, 200)
  await sleep(150)
  t.equal((await app.inject({ url: `/v1/runs/${runId}` })).statusCode, 404)
})

t.test('a run store that fails to store the end: the client gets no end it did not store, the record is never reported completed', async (t) => {
  const store = new MemoryRunStore()
  store.finish = async () => { throw new Error('store down') }
  const { app } = build(t, { runStore: store })
  const res = await runJson(app, 'echo', { input: 1 })
  t.equal(res.statusCode, 503)
  t.match(res.json(), { code: 'STORE_UNAVAILABLE', message: /could not store the run's end: follow it at/ })
  t.equal(app.agentService.stats.runLogFailures, 1)
  const runId = (await store.list({ limit: 1 })).runs[0]!.runId
  t.match((await app.inject({ url: `/v1/runs/${runId}` })).json(), { status: 'running', lastSeq: 1 })
  const streamed = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true } })).body)
  t.same(streamed.map((e) => e.event), ['run.started'], 'a stream ends without a terminal event (its client rejoins the log)')
})

t.test('a follower reads a log in pages: a terminal event that ends a full page is the end once nothing follows it', async (t) => {
  // the run's 16th event (the follower's first page, lib/runs/follow.ts) is its last
  const pageful: Agent = {
    async * run () {
      for (let i = 0; i < 14; i++) yield `${i} `
    }
  }
  const { app } = build(t, { agents: { pageful } })
  const run = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/pageful/runs', payload: { input: null, stream: true } })).body)
  t.equal(run.length, 16)
  const replay = parseSse((await app.inject({ url: `/v1/runs/${run[0]!.data.runId as string}/events` })).body)
  t.same(replay.map((e) => e.id), run.map((e) => e.id))
  t.equal(replay.at(-1)!.event, 'run.completed')
})

t.test('a result that cannot be serialized fails the run with AGENT_ERROR, naming why', async (t) => {
  const { app } = build(t, { exposeErrors: true, agents: { big: { async run () { return { output: 10n } } } } })
  const res = await runJson(app, 'big', { input: 1 })
  t.equal(res.statusCode, 500)
  t.match(res.json(), { code: 'AGENT_ERROR', message: /BigInt/ })
  const stream = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/big/runs', payload: { input: 1, stream: true } })).body)
  t.match(stream.at(-1), { event: 'run.failed', data: { error: { code: 'AGENT_ERROR', message: /BigInt/ } } })
})

t.test('cancel racing the run\'s end: 404 or 409 as the store finds it', async (t) => {
  const store = new MemoryRunStore()
  const held = gate()
  const { app } = build(t, { runStore: store, agents: { held: held.agent } })
  const answer = runJson(app, 'held', { input: null })
  await eventually(() => held.started() === 1)
  const runId = (await store.list({ limit: 1 })).runs[0]!.runId
  const cancel = store.cancel.bind(store)
  store.cancel = async () => ({ outcome: 'not_found' })
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel` })).json(), { statusCode: 404, code: 'RUN_NOT_FOUND' })
  store.cancel = async (id) => ({ outcome: 'ended', record: (await store.get(id))! })
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel` })).json(), { statusCode: 409, code: 'RUN_ALREADY_ENDED' })
  store.cancel = cancel
  held.release()
  await answer
})

t.test('a follower: a run gone from under it ends its stream; a client that left mid-read is let go', async (t) => {
  const store = new MemoryRunStore()
  const held = gate()
  const { url, service } = await listen(t, { runStore: store, agents: { held: held.agent } })
  const stream = await openSse(url, '/v1/agents/held/runs', { input: null, onDisconnect: 'continue' })
  const runId = (await stream.next('run.started')).data.runId as string
  await stream.next('message.delta')
  const follower = await followRun(url, runId, { 'last-event-id': '2' })
  // the run's record goes (purged, say): the next news finds nothing and ends the follower
  const get = store.get.bind(store)
  const events = store.events.bind(store)
  store.get = async () => null
  store.events = async () => []
  held.release()
  await follower.ended
  t.same(follower.events, [], 'ended without events')
  store.get = get
  store.events = events
  await stream.ended

  // a read still on its way when the client leaves: its answer (or failure) is dropped
  let releaseRead!: (fail: boolean) => void
  store.events = (runId, after, limit) => new Promise((resolve, reject) => {
    releaseRead = (fail) => { if (fail) reject(new Error('late failure')); else events(runId, after, limit).then(resolve, reject) }
  })
  const late = await followRun(url, runId)
  await eventually(() => service.app.agentService.stats.followers === 1)
  late.close()
  await eventually(() => service.app.agentService.stats.followers === 0)
  releaseRead(true)
  const later = await followRun(url, runId)
  await eventually(() => service.app.agentService.stats.followers === 1)
  later.close()
  await eventually(() => service.app.agentService.stats.followers === 0)
  releaseRead(false)
  await sleep(20)
  store.events = events
  t.pass('nothing written to a closed follower')
})

t.test('a follower told of news while a read that found nothing is out reads again once it is back', async (t) => {
  const store = new MemoryRunStore()
  const events = store.events.bind(store)
  // the follower's reads that find nothing are held until released, once `holding` is set
  let holding: { reached: () => void, released: Promise<void> } | null = null
  let empty = 0
  store.events = async (...args) => {
    const found = await events(...args)
    if (found.length === 0) empty++
    const hold = holding
    if (found.length === 0 && hold !== null) {
      holding = null
      hold.reached()
      await hold.released
    }
    return found
  }
  const says: Array<() => void> = []
  const said = (n: number) => new Promise<void>((resolve) => { says[n] = resolve })
  const first = said(0)
  const second = said(1)
  const { app } = build(t, {
    runStore: store,
    agents: { talker: { async * run () { await first; yield 'one '; await second; yield 'two' } } }
  })
  const answer = runJson(app, 'talker', { input: null })
  const runId = await eventually(async () => (await store.list({ limit: 1 })).runs[0]?.runId)
  const following = app.inject({ url: `/v1/runs/${runId}/events` })
  // the follower has read what there is, and waits for news
  await eventually(() => empty >= 1)
  let release!: () => void
  const reached = new Promise<void>((resolve) => {
    holding = { reached: resolve, released: new Promise((resolve) => { release = resolve }) }
  })
  says[0]!()
  // the read after the first delta found nothing, and is held: the second delta comes meanwhile
  await reached
  says[1]!()
  await eventually(async () => (await store.get(runId))!.lastSeq >= 3, 5_000, 'the second delta stored')
  release()
  await answer
  const body = parseSse((await following).body)
  t.same(body.filter((e) => e.event === 'message.delta').map((e) => e.data.text), ['one ', 'two'])
  t.equal(body.at(-1)!.event, 'run.completed')
})

t.test('a follower hears of news after its end and ignores it', async (t) => {
  const store = new MemoryRunStore()
  const listeners: Array<() => void> = []
  const watch = store.watch.bind(store)
  // a store whose watch keeps calling after the follower stopped watching (a notification already on its way)
  store.watch = (runId, listener) => { listeners.push(() => listener({ kind: 'events', lastSeq: 99 })); return watch(runId, listener) }
  const held = gate()
  const { app } = build(t, { runStore: store, agents: { held: held.agent } })
  const answer = runJson(app, 'held', { input: null })
  await eventually(() => held.started() === 1)
  const runId = (await store.list({ limit: 1 })).runs[0]!.runId
  const following = app.inject({ url: `/v1/runs/${runId}/events` })
  await eventually(() => listeners.length === 2)
  held.release()
  await answer
  const res = await following
  t.equal(parseSse(res.body).at(-1)!.event, 'run.completed')
  for (const listener of listeners) listener()
  t.pass('a late notification does nothing')
})


t.test('resuming a run in progress elsewhere is RUN_IN_PROGRESS; into a busy session, SESSION_BUSY', async (t) => {
  const store = new MemoryRunStore()
  const stepper: Agent = { async run (_input, ctx) { await ctx.checkpoint({ n: 1 }); throw new Error('fail after a checkpoint') } }
  const { service, url } = await listen(t, { runStore: store, agents: { stepper, echo: { async run (i) { return { output: i } } } } })
  const app = service.app
  const failed = (await runJson(app, 'stepper', { input: 1 })).json()
  const runId = (await store.list({ limit: 1 })).runs[0]!.runId
  t.equal(failed.code, 'AGENT_ERROR')
  // another instance runs it (its record says so; this instance's registry does not know it)
  const record = (await store.get(runId))!
  await store.reopen({ record: { ...record, startedAt: new Date().toISOString() }, spec: { input: 1 }, ephemeral: false, detachable: false, lease: { owner: 'elsewhere', until: Date.now() + 60_000 } }, { exclusive: false })
  const inProgress = await runJson(app, 'stepper', { input: 1, resumeRunId: runId })
  t.equal(inProgress.statusCode, 409)
  t.match(inProgress.json(), { code: 'RUN_IN_PROGRESS' })
  await store.finish(runId, [{ seq: (await store.get(runId))!.lastSeq + 1, type: 'run.failed', data: '{}' }], { status: 'failed', endedAt: new Date().toISOString(), error: { code: 'INSTANCE_LOST', message: 'x' } }, 60_000, 'elsewhere')
  // a run of another instance holds the session: it stays busy for as long as the test needs
  await store.create({ record: { ...record, runId: 'elsewhere', status: 'running', lastSeq: 0 }, spec: { input: 1 }, ephemeral: false, detachable: false, lease: { owner: 'elsewhere', until: Date.now() + 60_000 } }, { exclusive: true })
  const busy = await runJson(app, 'stepper', { input: 1, resumeRunId: runId })
  t.equal(busy.statusCode, 409)
  t.match(busy.json(), { code: 'SESSION_BUSY' })
  // interrupt: the run in the way is asked to stop, but it is another instance's: a client tired of waiting leaves
  const controller = new AbortController()
  const waiting = fetch(`${url}/v1/agents/echo/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: 2, sessionId: record.sessionId, multitask: 'interrupt' }), signal: controller.signal
  }).catch((e: Error) => e)
  await eventually(async () => (await store.get('elsewhere'))!.status === 'running' && (await store.cancel('elsewhere', { status: 'cancelled', endedAt: new Date().toISOString() }, 1)).outcome === 'requested')
  await sleep(50)
  controller.abort()
  t.type(await waiting, Error)
  await sleep(50)
  t.equal((await store.listBySession(record.sessionId!, { limit: 10 })).runs.filter((r) => r.agent === 'echo').length, 0, 'the interrupting run was never stored')
})

t.test('an unserializable result with exposeErrors off says only Internal Server Error', async (t) => {
  const { app } = build(t, { agents: { big: { async run () { return { output: 10n } } } } })
  t.match((await runJson(app, 'big', { input: 1 })).json(), { code: 'AGENT_ERROR', message: 'Internal Server Error' })
})
