// The edges of what the front-end routes share (lib/frontends): following a run's log (long logs, a signal, a run
// that is gone), deciding answers, the A2A port's own checks, a store that fails under a stream, a reader too far
// behind, a socket that needs draining. The protocols themselves are tested with their clients in test/routes/.
import type { Socket } from 'node:net'
import t from 'tap'
import type { FastifyRequest, LightMyRequestResponse } from 'fastify'
import type { AgentService } from '../../../app/service.js'
import type { AgentServiceCore } from '../../../lib/service/service.js'
import { ApprovalNotFoundError } from '../../../lib/core/errors.js'
import { ServiceRunPort } from '../../../lib/frontends/a2a/run-port.js'
import { followRun, storedEvents } from '../../../lib/frontends/follow.js'
import { cancelRun, conversationSessionId, decideAnswers, decisionError } from '../../../lib/frontends/runs.js'
import type { Agent } from '../../../lib/core/types.js'
import { MemoryApprovalStore } from '../../../lib/stores/memory.js'
import { MemoryRunStore } from '../../../lib/stores/memory-runs.js'
import type { ApprovalRecord, RunRecord, RunStore, StoredEvent } from '../../../lib/stores/types.js'
import { build, eventually, listen, principalFromHeader } from '../../helper.js'

function record (runId: string): RunRecord {
  const now = new Date().toISOString()
  return { runId, agent: 'a', sessionId: null, principal: 'p', status: 'running', background: false, attempt: 1, lastSeq: 0, createdAt: now, startedAt: now, requestId: 'r', traceId: 't' }
}

function events (from: number, count: number): StoredEvent[] {
  return Array.from({ length: count }, (_, i) => ({ seq: from + i, type: 'message.delta', data: JSON.stringify({ text: String(from + i) }) }))
}

async function all<T> (iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const item of iterable) out.push(item)
  return out
}

t.test('followRun and storedEvents: logs longer than a page, a signal, a run that is gone', async (t) => {
  const store = new MemoryRunStore()
  await store.create({ record: record('long'), spec: { input: null }, ephemeral: false, detachable: false, lease: { owner: 'me', until: Date.now() + 60_000 } }, { exclusive: false })
  await store.append('long', events(1, 600), 'me')
  t.equal((await storedEvents(store, 'long')).length, 600, 'every page')
  const stop = new AbortController()
  stop.abort()
  t.equal((await all(followRun(store, 'long', 0, stop.signal))).length, 16, 'an aborted signal ends the follower after the page it read (its first: 16 events)')

  const live = followRun(store, 'long', 0)
  for (let i = 0; i < 600; i++) await live.next()
  const next = live.next()
  await store.finish('long', [{ seq: 601, type: 'run.completed', data: '{"output":1}' }], { status: 'completed', endedAt: new Date().toISOString() }, 60_000, 'me')
  t.match(await next, { value: { seq: 601, type: 'run.completed', data: { output: 1 } } }, 'page after page, then live')
  t.match(await live.next(), { done: true }, 'the terminal event ends it')
  t.same(await all(followRun(store, 'nope', 0)), [], 'a run the store does not have ends at once')
})

t.test('followRun and storedEvents: a run resumed under its id is read on past an attempt\'s end, which comes marked goesOn', async (t) => {
  // an attempt's end that ends the follower's full first page (16 events): whether the log goes on is read then
  const firstAttempt = [...events(1, 15), { seq: 16, type: 'run.failed', data: '{"error":{"code":"AGENT_ERROR","message":"boom"}}' }]
  const resumed = [...firstAttempt, { seq: 17, type: 'run.requeued', data: '{"attempt":2,"reason":"RESUMED"}' }, { seq: 18, type: 'run.completed', data: '{"output":1}' }]
  const over = (log: StoredEvent[]): RunStore => ({
    events: async (_runId: string, after: number, limit: number) => log.filter((event) => event.seq > after).slice(0, limit),
    watch: () => () => {},
    get: async () => record('resumed')
  }) as unknown as RunStore
  const followed = await all(followRun(over(resumed), 'resumed', 0))
  t.same(followed.map((event) => event.seq), Array.from({ length: 18 }, (_, i) => i + 1), 'to the last attempt\'s end')
  t.same(followed.filter((event) => event.goesOn === true).map((event) => event.seq), [16], 'the first attempt\'s end: goesOn')
  const whole = await storedEvents(over(resumed), 'resumed')
  t.same(whole.filter((event) => event.goesOn === true).map((event) => event.seq), [16], 'read whole: the same')
  const ended = await all(followRun(over(firstAttempt), 'resumed', 0))
  t.equal(ended.length, 16, 'nothing after it: the end')
  t.notOk('goesOn' in ended.at(-1)!)
})

t.test('decideAnswers: a run\'s answered approvals, earliest first; a failing store is not "not found"', async (t) => {
  const approvalStore = new MemoryApprovalStore()
  const service = { settings: { approvalStore } } as unknown as AgentServiceCore
  const owner = { sessionId: 's', principal: 'p', agent: 'a' }
  const approval = (id: string, at: string, runId = 'run'): ApprovalRecord => ({
    id, runId, agent: 'a', sessionId: 's', principal: 'p', action: 'x', payload: null, reason: null, status: 'pending',
    requestedAt: at, expiresAt: new Date(Date.now() + 60_000).toISOString()
  })
  await approvalStore.create(approval('late', '2030-01-01T00:00:02.000Z'))
  await approvalStore.create(approval('early', '2030-01-01T00:00:01.000Z'))
  await approvalStore.create(approval('same-time', '2030-01-01T00:00:02.000Z'))
  await approvalStore.create(approval('stale', '2030-01-01T00:00:00.000Z', 'older-run'))
  const answered = await decideAnswers(service, [
    { id: 'late', decision: { approved: true } }, { id: 'other', decision: { approved: true } }, { id: 'stale', decision: { approved: true } },
    { id: 'same-time', decision: { approved: true } }, { id: 'early', decision: { approved: false } }
  ], owner)
  t.same(answered.map((a) => a.id), ['early', 'late', 'same-time'], 'the run of the first answer, earliest requested first')
  t.equal((await approvalStore.get('stale'))!.status, 'approved', 'an answer for another run is decided all the same')
  await t.rejects(decideAnswers(service, [{ id: 'other', decision: { approved: true } }], owner), ApprovalNotFoundError)

  const failing = { settings: { approvalStore: { get: async () => { throw new Error('store down') } } } } as unknown as AgentServiceCore
  await t.rejects(decideAnswers(failing, [{ id: 'x', decision: { approved: true } }], owner), /store down/)
  const vanishing = { settings: { approvalStore: { get: async () => approval('gone', '2030-01-01T00:00:00.000Z'), decide: async () => ({ outcome: 'not_found' }) } } } as unknown as AgentServiceCore
  await t.rejects(decideAnswers(vanishing, [{ id: 'gone', decision: { approved: true } }], owner), ApprovalNotFoundError, 'deleted between the read and the decision')
  t.match(decisionError('a', 'expired'), { code: 'APPROVAL_EXPIRED', statusCode: 409 })
  t.match(decisionError('a', 'already_decided'), { code: 'APPROVAL_ALREADY_DECIDED', statusCode: 409 })
})

t.test('cancelRun: a run the store does not have, one that has ended', async (t) => {
  const outcomes = ['not_found', 'ended']
  const service = { settings: { runRetentionMs: 1, runStore: { cancel: async () => ({ outcome: outcomes.shift() }) } } } as unknown as AgentServiceCore
  await t.rejects(cancelRun(service, 'r'), { code: 'RUN_NOT_FOUND', statusCode: 404 })
  await t.rejects(cancelRun(service, 'r'), { code: 'RUN_ALREADY_ENDED', statusCode: 409 })
})

t.test('the A2A port checks ownership itself, and answers a lost compare-and-set with its code', async (t) => {
  const asks: Agent = { async run (_input, ctx) { await ctx.requestApproval({ action: 'x' }); return { output: 'ok' } } }
  const { app } = build(t, { agents: { helper: asks } })
  principalFromHeader(app)
  const port = (request: FastifyRequest): ServiceRunPort => new ServiceRunPort(app.agentService, request, 'helper')
  app.post<{ Params: { runId: string } }>('/probe/cancel/:runId', async (request) => { await port(request).cancel(request.params.runId); return {} })
  app.post<{ Params: { id: string } }>('/probe/decide/:id', async (request) => { await port(request).decide(request.params.id, { approved: true }); return {} })
  await app.ready()
  const started = app.inject({ method: 'POST', url: '/v1/agents/helper/runs', headers: { 'x-test-principal': 'alice' }, payload: { input: 1 } })
  const [approval] = await eventually(async () => {
    const pending = await app.agentService.settings.approvalStore.listPending()
    return pending.length > 0 && pending
  })
  t.match((await app.inject({ method: 'POST', url: `/probe/cancel/${approval!.runId}`, headers: { 'x-test-principal': 'bob' } })).json(), { code: 'RUN_NOT_FOUND' })
  t.match((await app.inject({ method: 'POST', url: `/probe/decide/${approval!.id}`, headers: { 'x-test-principal': 'bob' } })).json(), { code: 'APPROVAL_NOT_FOUND' })
  await app.agentService.settings.approvalStore.decide(approval!.id, { approved: false, comment: null, decidedBy: null, decidedAt: new Date().toISOString() })
  t.match((await app.inject({ method: 'POST', url: `/probe/decide/${approval!.id}`, headers: { 'x-test-principal': 'alice' } })).json(), { statusCode: 409, code: 'APPROVAL_ALREADY_DECIDED' })
  t.equal((await started).statusCode, 200)
})

t.test('a run store that fails under a resumed stream cuts the connection (the client may resume again)', async (t) => {
  class FailingEvents extends MemoryRunStore {
    failing = false
    override async events (runId: string, afterSeq: number, limit: number): Promise<StoredEvent[]> {
      if (this.failing) throw new Error('store down')
      return super.events(runId, afterSeq, limit)
    }
  }
  const runStore = new FailingEvents()
  let release!: () => void
  const waits: Agent = { async * run () { yield 'tick'; await new Promise<void>((resolve) => { release = resolve }) } }
  const { url } = await listen(t, { agents: { helper: waits }, runStore })
  const body = JSON.stringify({ id: 'c', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'x' }] }] })
  const first = await fetch(`${url}/v1/agents/helper/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
  const reader = first.body!.getReader()
  await reader.read()
  runStore.failing = true
  const resumed = await fetch(`${url}/v1/agents/helper/chat/c/stream`)
  t.equal(resumed.status, 200)
  await t.rejects(resumed.text(), 'the connection is cut')
  runStore.failing = false
  release()
  await reader.cancel()
})

function chatOn (url: string, text: string, id: string): Promise<Response> {
  return fetch(`${url}/v1/agents/helper/chat`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id, messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text }] }] })
  })
}

t.test('a client that leaves a resumed stream while the run waits: the follower stops, the run goes on', async (t) => {
  let release: (() => void) | undefined
  const waits: Agent = { async * run () { yield 'tick'; await new Promise<void>((resolve) => { release = resolve }); return { output: 'done' } } }
  const { url, service } = await listen(t, { agents: { helper: waits } })
  const live = await chatOn(url, 'wait', 'leave')
  const reader = live.body!.getReader()
  await reader.read()
  const leaving = new AbortController()
  const resumed = await fetch(`${url}/v1/agents/helper/chat/leave/stream`, { signal: leaving.signal })
  await resumed.body!.getReader().read()
  const heartbeat = service.app.agentService.heartbeat
  t.equal(heartbeat.size, 2)
  leaving.abort()
  await eventually(() => heartbeat.size === 1)
  release!()
  t.ok((await reader.read()).value, 'the run went on')
  await reader.cancel()
})

t.test('a response holding more than maxStreamBufferBytes unsent is cut (the chat run goes on)', async (t) => {
  const floods: Agent = { async * run () { yield 'x'.repeat(64 * 1024); return { output: 'done' } } }
  const { url, service } = await listen(t, { agents: { helper: floods }, maxStreamBufferBytes: 32 * 1024 })
  await t.rejects(chatOn(url, 'go', 'cut').then((res) => res.text()), 'the connection is cut (here before its head was sent)')
  t.equal(service.app.agentService.stats.slowConsumers, 1)
  await eventually(async () => (await service.app.agentService.settings.runStore.list({ limit: 1 })).runs[0]?.status === 'completed')
})

t.test('a resume of a log with an event larger than the socket takes at once is written at the socket\'s pace', async (t) => {
  const big = 'x'.repeat(1024 * 1024)
  let release: (() => void) | undefined
  const waits: Agent = { async * run () { yield big; await new Promise<void>((resolve) => { release = resolve }); return { output: 'done' } } }
  const { url } = await listen(t, { agents: { helper: waits } })
  const live = await chatOn(url, 'wait', 'drain')
  const reader = live.body!.getReader()
  await reader.read()
  const resumed = await fetch(`${url}/v1/agents/helper/chat/drain/stream`)
  const text = resumed.text()
  await eventually(() => release !== undefined)
  release!()
  t.ok((await text).includes(big))
  await reader.cancel()
})

/** A2A `SendStreamingMessage` to the helper agent: its stream. */
async function a2aStream (url: string, signal: AbortSignal): Promise<Response> {
  return await fetch(`${url}/v1/a2a/helper`, {
    method: 'POST',
    signal,
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'a2a-version': '1.0' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'SendStreamingMessage', params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'go' }] } } })
  })
}

/** The helper's run in the chat `conversation`'s session, started as a JSON run (a chat response of megabytes would be cut). */
async function chatRun (service: AgentService, conversation: string): Promise<LightMyRequestResponse> {
  const sessionId = conversationSessionId('chat', 'anonymous', 'helper', conversation)
  await service.app.agentService.settings.sessionStore.create({ id: sessionId, agent: 'helper', principal: 'anonymous', metadata: {} }, 60_000)
  return await service.app.inject({ method: 'POST', url: '/v1/agents/helper/runs', payload: { input: 'go', sessionId } })
}

t.test('a client that leaves while its log is read: the resumed chat stream and the A2A stream write nothing more', async (t) => {
  const waiting: Array<() => void> = []
  const wait = async (): Promise<void> => await new Promise<void>((resolve) => { waiting.push(resolve) })
  const stepwise: Agent = { async * run () { yield 'a'; await wait(); yield 'b'; await wait(); return { output: 'done' } } }
  const { url, service } = await listen(t, { agents: { helper: stepwise } })
  const heartbeat = service.app.agentService.heartbeat
  // a read of the log, once held, waits until the client's socket has closed on the server: its page (the run's
  // next event) comes after the client left
  const store = service.app.agentService.settings.runStore
  const events = store.events.bind(store)
  let held: Promise<void> | null = null
  let reading = false
  let left = (): void => {}
  service.app.server.on('connection', (socket: Socket) => socket.on('close', () => setImmediate(() => left())))
  store.events = async (...args) => {
    if (held !== null) {
      reading = true
      await held
    }
    return events(...args)
  }
  const leaveMidRead = async (client: AbortController, body: ReadableStream<Uint8Array>): Promise<void> => {
    await body.getReader().read()
    held = new Promise<void>((resolve) => { left = resolve })
    reading = false
    waiting.shift()!()
    await eventually(() => reading, 5_000, 'a read of the run\'s next event, held')
    client.abort()
    await eventually(() => heartbeat.size === 0, 5_000, 'the stream is gone')
    held = null
  }

  const run = chatRun(service, 'read-leave')
  await eventually(() => waiting.length === 1)
  const leaving = new AbortController()
  const resumed = await fetch(`${url}/v1/agents/helper/chat/read-leave/stream`, { signal: leaving.signal })
  t.equal(resumed.status, 200)
  await leaveMidRead(leaving, resumed.body!)
  waiting.shift()!()
  t.equal((await run).statusCode, 200)

  const a2a = new AbortController()
  const streaming = await a2aStream(url, a2a.signal)
  t.equal(streaming.status, 200)
  await eventually(() => waiting.length === 1)
  await leaveMidRead(a2a, streaming.body!)
  for (const release of waiting) release()
})

t.test('a client that leaves while its socket drains: the resumed chat stream and the A2A stream stop writing', async (t) => {
  // more than the socket takes at once, so that the writers wait for 'drain' and see the client leave meanwhile
  const big = 'x'.repeat(6 * 1024 * 1024)
  const waiting: Array<() => void> = []
  const floods: Agent = {
    async * run () {
      yield big
      yield big
      yield big
      await new Promise<void>((resolve) => { waiting.push(resolve) })
      return { output: 'done' }
    }
  }
  const { url, service } = await listen(t, { agents: { helper: floods } })
  const heartbeat = service.app.agentService.heartbeat
  const run = chatRun(service, 'drain-leave')
  await eventually(() => waiting.length === 1)

  const leaving = new AbortController()
  const resumed = await fetch(`${url}/v1/agents/helper/chat/drain-leave/stream`, { signal: leaving.signal })
  t.equal(resumed.status, 200)
  leaving.abort()
  await eventually(() => heartbeat.size === 0, 5_000, 'the resumed stream is gone')

  const a2a = new AbortController()
  const streaming = await a2aStream(url, a2a.signal)
  t.equal(streaming.status, 200)
  await eventually(() => heartbeat.size === 1)
  a2a.abort()
  await eventually(() => heartbeat.size === 0, 5_000, 'the A2A stream is gone')
  for (const release of waiting) release()
  t.equal((await run).statusCode, 200)
})
