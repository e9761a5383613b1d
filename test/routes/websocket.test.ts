import { createHmac } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import Fastify from 'fastify'
import fastifyWebsocket from '@fastify/websocket'
import { WebSocket, WebSocketServer } from 'ws'
import { approver, slow, storyteller } from '../../app/demo-agents.js'
import { MemorySessionStore } from '../../lib/stores/memory.js'
import type { NewSession, SessionRecord } from '../../lib/stores/types.js'
import type { Agent } from '../../lib/core/types.js'
import { fastifyAgents } from '../../app/plugin.js'
import { WebSocketHeartbeat } from '../../lib/runs/websocket.js'
import { build, echo, eventually, listen, sleep } from '../helper.js'
import { openWs } from '../helpers/streams.js'
import type { Frame, WsClient } from '../helpers/streams.js'

const ofRef = (ref: string | number, type: string) => (frame: Frame) => frame.ref === ref && frame.type === type
const errorOf = (code: string) => (frame: Frame) => frame.type === 'error' && frame.error?.code === code

/** Starts a run and waits for its run.started frame. */
async function start (ws: WsClient, message: Record<string, unknown>): Promise<string> {
  const ref = message.ref as string
  ws.send({ type: 'run.start', ...message })
  return (await ws.next(ofRef(ref, 'run.started'))).runId!
}

t.test('the approval loop over WebSocket: run.start, approval.requested, decided over HTTP, run.completed', async (t) => {
  const { service, url } = await listen(t, { agents: { approver }, websocket: true })
  const app = service.app
  const ws = await openWs(url, { headers: { 'x-request-id': 'ws-upgrade-1', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } })
  t.equal(ws.upgrade.statusCode, 101)
  t.equal(ws.upgrade.headers['x-request-id'], 'ws-upgrade-1', 'X-Request-ID on the 101')

  ws.send({ type: 'run.start', ref: 'deploy-1', agent: 'approver', input: { action: 'deploy' } })
  const started = await ws.next(ofRef('deploy-1', 'run.started'))
  t.match(started, {
    type: 'run.started', ref: 'deploy-1', seq: 1,
    data: { runId: started.runId, agent: 'approver', sessionId: String, requestId: 'ws-upgrade-1', traceId: '0af7651916cd43dd8448eb211c80319c' }
  })
  const requested = await ws.next(ofRef('deploy-1', 'approval.requested'))
  const approval = requested.data.approval
  t.match(approval, { runId: started.runId, agent: 'approver', status: 'pending', action: 'deploy' })

  const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, decidedBy: 'ops' } })
  t.equal(decided.statusCode, 200)
  t.match(await ws.next(ofRef('deploy-1', 'approval.decided')), { data: { approval: { id: approval.id, status: 'approved' } } })
  const completed = await ws.next(ofRef('deploy-1', 'run.completed'))
  t.match(completed.data, { runId: started.runId, status: 'completed', output: 'Approved by ops: did deploy.', requestId: 'ws-upgrade-1', traceId: '0af7651916cd43dd8448eb211c80319c' })
  const frames = ws.frames.filter((f) => f.runId === started.runId)
  t.same(frames.map((f) => f.type), ['run.started', 'message.delta', 'approval.requested', 'approval.decided', 'run.completed'])
  t.same(frames.map((f) => f.seq), [1, 2, 3, 4, 5])
  t.ok(frames.every((f) => Object.keys(f).sort().join() === 'data,ref,runId,seq,type'), 'frames are { type, runId, ref, seq, data }')

  await app.agentService.audit.flush()
  const { entries } = await app.agentService.settings.auditStore.query({ limit: 50 })
  t.match(entries.find((e) => e.route === '/v1/ws'), { status: 101, method: 'GET', requestId: 'ws-upgrade-1', principal: 'anonymous' })
  ws.socket.close()
  t.equal((await ws.closed).code, 1005)
})

t.test('several runs on one connection, told apart by ref; frames without ref when none was given', async (t) => {
  const { url } = await listen(t, { agents: { echo, storyteller }, websocket: true })
  const ws = await openWs(url)
  t.match(ws.upgrade.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'a new request id when none was sent')
  ws.send({ type: 'run.start', ref: 7, agent: 'storyteller', input: 'a cat' })
  ws.send({ type: 'run.start', ref: 'echo', agent: 'echo', input: { hi: 1 } })
  ws.send({ type: 'run.start', agent: 'echo', input: 'no ref' })
  const story = await ws.next(ofRef(7, 'run.completed'))
  const echoed = await ws.next(ofRef('echo', 'run.completed'))
  const bare = await ws.next((f) => f.type === 'run.completed' && f.data.output === 'no ref')
  t.same(echoed.data.output, { hi: 1 })
  t.match(story.data.output, /^Once upon a time there was a cat\./)
  t.notOk('ref' in bare, 'no ref key at all')
  const storyFrames = ws.frames.filter((f) => f.ref === 7)
  t.same(storyFrames.map((f) => f.seq), storyFrames.map((_f, i) => i + 1), 'seq from 1 per run')
  t.ok(storyFrames.filter((f) => f.type === 'message.delta').length > 5)
  t.not(story.runId, echoed.runId)
})

t.test('sessions and resume over WebSocket', async (t) => {
  let calls = 0
  const flaky: Agent = {
    async run (_input, ctx) {
      calls++
      if (ctx.resume === undefined) {
        await ctx.checkpoint({ half: true })
        throw new Error('crash')
      }
      return { output: { resumed: ctx.resume, history: ctx.history.length } }
    }
  }
  const { url } = await listen(t, { agents: { flaky, echo }, websocket: true })
  const ws = await openWs(url)
  ws.send({ type: 'run.start', ref: 'first', agent: 'flaky', input: 1 })
  const failed = await ws.next(ofRef('first', 'run.failed'))
  t.match(failed.data, { error: { code: 'AGENT_ERROR' } })
  t.ok(ws.frames.some((f) => f.ref === 'first' && f.type === 'checkpoint.saved' && f.data.step === 1))

  ws.send({ type: 'run.start', ref: 'again', agent: 'flaky', input: 2, resumeRunId: failed.runId })
  const completed = await ws.next(ofRef('again', 'run.completed'))
  t.equal(completed.runId, failed.runId, 'the same runId')
  t.same(completed.data.output, { resumed: { step: 1, state: { half: true } }, history: 0 })

  ws.send({ type: 'run.start', ref: 'gone', agent: 'flaky', input: 3, resumeRunId: failed.runId })
  t.match(await ws.next(errorOf('RUN_NOT_FOUND')), { ref: 'gone', error: { message: `No resumable run "${failed.runId}"` } })

  ws.send({ type: 'run.start', ref: 'turn', agent: 'echo', input: 'x', sessionId: completed.data.sessionId })
  t.equal((await ws.next(ofRef('turn', 'run.completed'))).data.sessionId, completed.data.sessionId)
  ws.send({ type: 'run.start', ref: 'nosession', agent: 'echo', input: 'x', sessionId: 'nope' })
  t.match(await ws.next(errorOf('SESSION_NOT_FOUND')), { ref: 'nosession' })
  t.equal(calls, 2)
})

t.test('run.cancel ends the run with run.failed CANCELLED and cancels its approval; unknown runs are errors', async (t) => {
  const { service, url } = await listen(t, { agents: { approver }, websocket: true })
  const ws = await openWs(url)
  const runId = await start(ws, { ref: 'c', agent: 'approver', input: {} })
  const approval = (await ws.next(ofRef('c', 'approval.requested'))).data.approval
  ws.send({ type: 'run.cancel', runId })
  t.match(await ws.next(ofRef('c', 'run.failed')), { runId, data: { error: { code: 'CANCELLED', message: 'The run was cancelled' }, traceId: String } })
  t.equal(await eventually(async () => {
    const status = (await service.app.agentService.settings.approvalStore.get(approval.id))!.status
    return status === 'pending' ? undefined : status
  }), 'cancelled')

  ws.send({ type: 'run.cancel', runId, ref: 'late' })
  t.match(await ws.next(errorOf('RUN_NOT_FOUND')), { type: 'error', ref: 'late', error: { message: `No run "${runId}" in flight on this connection` } })

  // a run of another connection cannot be cancelled from this one
  const other = await openWs(url)
  const otherRun = await start(other, { ref: 'o', agent: 'approver', input: {} })
  ws.send({ type: 'run.cancel', runId: otherRun })
  t.match(await ws.next(errorOf('RUN_NOT_FOUND')), { error: { message: `No run "${otherRun}" in flight on this connection` } })
  t.equal(service.app.agentService.runs.has(otherRun), true)
  other.socket.close()
})

t.test('every bad message gets an error frame and the connection stays open', async (t) => {
  const { url } = await listen(t, { agents: { echo }, websocket: true })
  const ws = await openWs(url)
  const cases: Array<[unknown, string, RegExp, (string | number)?]> = [
    ['{not json', 'INVALID_JSON', /not valid JSON/],
    ['[1,2]', 'INVALID_MESSAGE', /must be a JSON object with a "type"/],
    ['"run.start"', 'INVALID_MESSAGE', /must be a JSON object/],
    ['null', 'INVALID_MESSAGE', /must be a JSON object/],
    [{ ref: 'r1' }, 'UNKNOWN_MESSAGE_TYPE', /unknown message type null: expected "run.start" or "run.cancel"/, 'r1'],
    [{ type: 'run.pause', ref: 2 }, 'UNKNOWN_MESSAGE_TYPE', /unknown message type "run.pause"/, 2],
    [{ type: 'x'.repeat(500) }, 'UNKNOWN_MESSAGE_TYPE', /^unknown message type "x{63}: expected/],
    [{ type: 'run.start', ref: 'r3', input: 1 }, 'INVALID_MESSAGE', /message must have required property 'agent'/, 'r3'],
    [{ type: 'run.start', ref: 'r4', agent: 'echo' }, 'INVALID_MESSAGE', /message must have required property 'input'/, 'r4'],
    [{ type: 'run.start', ref: 'r5', agent: 'echo', input: 1, extra: true }, 'INVALID_MESSAGE', /message\/extra is not allowed/, 'r5'],
    [{ type: 'run.start', ref: 'r6', agent: 'echo', input: 1, sessionId: 5 }, 'INVALID_MESSAGE', /message\/sessionId must be string/, 'r6'],
    [{ type: 'run.cancel', ref: 'r7' }, 'INVALID_MESSAGE', /message must have required property 'runId'/, 'r7'],
    [{ type: 'run.start', ref: { no: 1 }, agent: 'echo', input: 1 }, 'INVALID_MESSAGE', /message\/ref must be/],
    [{ type: 'run.start', ref: 'x'.repeat(129), agent: 'echo', input: 1 }, 'INVALID_MESSAGE', /message\/ref must/],
    [{ type: 'run.start', ref: 'r8', agent: 'nobody', input: 1 }, 'AGENT_NOT_FOUND', /Agent "nobody" not found/, 'r8']
  ]
  for (const [message, code, text, ref] of cases) {
    ws.send(message)
    const frame = await ws.next((f) => f.type === 'error')
    t.equal(frame.error!.code, code, JSON.stringify(message).slice(0, 60))
    t.match(frame.error!.message, text)
    if (ref === undefined) t.notOk('ref' in frame, 'no ref')
    else t.equal(frame.ref, ref)
  }
  ws.socket.send(Buffer.from('{"type":"run.start"}'), { binary: true })
  t.match(await ws.next((f) => f.type === 'error'), { error: { code: 'INVALID_MESSAGE', message: 'messages must be JSON text frames' } })

  ws.send({ type: 'run.start', ref: 'ok', agent: 'echo', input: 'still here' })
  t.equal((await ws.next(ofRef('ok', 'run.completed'))).data.output, 'still here')
  t.equal(ws.socket.readyState, WebSocket.OPEN)
})

t.test('at most 8 runs at once per connection: the 9th gets TOO_MANY_RUNS, a slot frees when a run ends', async (t) => {
  const { service, url } = await listen(t, { agents: { slow }, websocket: true })
  const ws = await openWs(url)
  // all nine at once: the runs still being set up count too
  for (let i = 1; i <= 9; i++) ws.send({ type: 'run.start', ref: i, agent: 'slow', input: { ms: 60_000 } })
  t.match(await ws.next(errorOf('TOO_MANY_RUNS')), { ref: 9, error: { message: 'at most 8 runs at once on one connection' } })
  const started = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map((i) => ws.next(ofRef(i, 'run.started'))))
  t.equal(service.app.agentService.runs.size, 8)

  // another connection has its own budget
  const other = await openWs(url)
  await start(other, { ref: 'other', agent: 'slow', input: { ms: 60_000 } })
  other.socket.close()

  ws.send({ type: 'run.cancel', runId: started[0]!.runId })
  await ws.next(ofRef(1, 'run.failed'))
  await eventually(() => service.app.agentService.runs.size === 8 ? true : undefined)
  ws.send({ type: 'run.start', ref: 10, agent: 'slow', input: { ms: 60_000 } })
  await ws.next(ofRef(10, 'run.started'))
  ws.send({ type: 'run.start', ref: 11, agent: 'slow', input: { ms: 60_000 } })
  t.match(await ws.next(errorOf('TOO_MANY_RUNS')), { ref: 11 })
})

t.test('a frame over 1 MiB closes the connection with 1009; exactly 1 MiB is fine', async (t) => {
  const { url } = await listen(t, { agents: { echo }, websocket: true })
  const ok = await openWs(url)
  const atCap = JSON.stringify({ type: 'run.start', ref: 'big', agent: 'echo', input: '' })
  ok.send(atCap.replace('"input":""', `"input":"${'x'.repeat(1024 * 1024 - atCap.length)}"`))
  t.equal((await ok.next(ofRef('big', 'run.completed'))).data.output.length, 1024 * 1024 - atCap.length)

  const ws = await openWs(url)
  ws.send(JSON.stringify({ type: 'run.start', agent: 'echo', input: 'x'.repeat(1024 * 1024) }))
  const closed = await ws.closed
  t.equal(closed.code, 1009)
  t.equal(ok.socket.readyState, WebSocket.OPEN, 'other connections are not affected')
})

t.test('closing the socket aborts its runs; the approval is cancelled', async (t) => {
  const { service, url } = await listen(t, { agents: { approver }, websocket: true })
  const ws = await openWs(url)
  const runId = await start(ws, { ref: 'a', agent: 'approver', input: {} })
  const approval = (await ws.next(ofRef('a', 'approval.requested'))).data.approval
  ws.socket.terminate()
  await eventually(() => service.app.agentService.runs.has(runId) ? undefined : true)
  t.equal(await eventually(async () => {
    const status = (await service.app.agentService.settings.approvalStore.get(approval.id))!.status
    return status === 'pending' ? undefined : status
  }), 'cancelled')
})

t.test('a connection closed while its run is being set up: the run starts only to end, nothing leaks', async (t) => {
  let signalled: AbortSignal | undefined
  const watched: Agent = {
    async run (_input, ctx) {
      signalled = ctx.signal
      return { output: null }
    }
  }
  let creating = false
  class SlowSessions extends MemorySessionStore {
    override async create (session: NewSession, ttlMs: number): Promise<SessionRecord> {
      creating = true
      await sleep(100)
      return super.create(session, ttlMs)
    }
  }
  const { service, url } = await listen(t, { agents: { watched }, websocket: true, sessionStore: new SlowSessions() })
  const ws = await openWs(url)
  ws.send({ type: 'run.start', agent: 'watched', input: 1 })
  // the client leaves while its run's session is being created
  await eventually(() => creating, 5_000, 'the session on its way')
  ws.socket.close()
  await ws.closed
  await eventually(() => signalled)
  t.equal(signalled!.aborted, true)
  await eventually(() => service.app.agentService.runs.size === 0 ? true : undefined)
})

t.test('a store failure while starting: INTERNAL_ERROR, message per exposeErrors, connection open', async (t) => {
  class Down extends MemorySessionStore {
    override async create (): Promise<SessionRecord> {
      throw new Error('sessions table is gone')
    }
  }
  class Weird extends MemorySessionStore {
    override async create (): Promise<SessionRecord> {
      throw 'not even an Error' // eslint-disable-line no-throw-literal
    }
  }
  class Nothing extends MemorySessionStore {
    override async create (): Promise<SessionRecord> {
      throw undefined // eslint-disable-line no-throw-literal
    }
  }
  const cases: Array<[MemorySessionStore, boolean, string]> = [
    [new Down(), false, 'Internal Server Error'],
    [new Down(), true, 'sessions table is gone'],
    [new Weird(), true, 'not even an Error'],
    [new Nothing(), false, 'Internal Server Error']
  ]
  for (const [sessionStore, exposeErrors, message] of cases) {
    const { url } = await listen(t, { agents: { echo }, websocket: true, sessionStore, exposeErrors })
    const ws = await openWs(url)
    ws.send({ type: 'run.start', ref: 'x', agent: 'echo', input: 1 })
    t.match(await ws.next(errorOf('INTERNAL_ERROR')), { ref: 'x', error: { message } })
    t.equal(ws.socket.readyState, WebSocket.OPEN)
    ws.socket.close()
  }
})

t.test('resuming a run in flight over WebSocket: RUN_IN_PROGRESS', async (t) => {
  const hanging: Agent = {
    async run (_input, ctx) {
      await ctx.checkpoint({ n: 1 })
      await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)))
      return { output: null }
    }
  }
  const { url } = await listen(t, { agents: { hanging }, websocket: true })
  const ws = await openWs(url)
  const runId = await start(ws, { ref: 'h', agent: 'hanging', input: 1 })
  await ws.next(ofRef('h', 'checkpoint.saved'))
  ws.send({ type: 'run.start', ref: 'again', agent: 'hanging', input: 1, resumeRunId: runId })
  t.match(await ws.next(errorOf('RUN_IN_PROGRESS')), { ref: 'again', error: { message: `Run "${runId}" is still in flight` } })
})

t.test('GET /v1/ws without an upgrade: 426 UPGRADE_REQUIRED; without websocket: true there is no /v1/ws', async (t) => {
  const { service } = await listen(t, { websocket: true })
  const res = await service.app.inject({ method: 'GET', url: '/v1/ws' })
  t.equal(res.statusCode, 426)
  t.match(res.json(), { statusCode: 426, code: 'UPGRADE_REQUIRED', message: 'This route only accepts WebSocket upgrades', requestId: res.headers['x-request-id'] })

  const { url } = await listen(t)
  const refused = await openWs(url).catch((error: Error) => error)
  t.match(refused, { message: 'Unexpected server response: 404' })
})

t.test('headers the hooks set go on the 101 too, except hop-by-hop, content and raw CR/LF ones', async (t) => {
  const service = build(t, { agents: { echo }, websocket: true })
  service.app.addHook('onRequest', (_request, reply, done) => {
    void reply.header('x-multi', ['a', 'b'])
    void reply.header('x-count', 3)
    void reply.header('content-type', 'text/html')
    void reply.header('x-split', 'a\r\nx-injected: 1')
    done()
  })
  const { url } = await service.listen({ port: 0, host: '127.0.0.1' })
  const ws = await openWs(url)
  const headers = ws.upgrade.headers
  t.match(headers['x-request-id'], /^[0-9a-f-]{36}$/)
  t.equal(headers['x-multi'], 'a, b')
  t.equal(headers['x-count'], '3')
  t.equal(headers['content-type'], undefined)
  t.equal(headers['x-split'], undefined)
  t.equal(headers['x-injected'], undefined)
  t.equal(headers.upgrade, 'websocket')
  ws.send({ type: 'run.start', ref: 1, agent: 'echo', input: 1 })
  await ws.next(ofRef(1, 'run.completed'))
  ws.socket.close()
})

t.test('drain: runs end with run.failed SHUTDOWN, sockets close with 1001, late run.start gets SHUTDOWN', async (t) => {
  const { service, url } = await listen(t, { agents: { slow, echo }, websocket: true })
  const busy = await openWs(url)
  const idle = await openWs(url)
  const runId = await start(busy, { ref: 's', agent: 'slow', input: { ms: 60_000 } })
  const quick = await openWs(url)
  await start(quick, { ref: 'q', agent: 'slow', input: { ms: 200 } })

  const closing = service.close(600)
  await eventually(() => service.app.agentService.drain.draining ? true : undefined)
  busy.send({ type: 'run.start', ref: 'late', agent: 'echo', input: 1 })
  t.match(await busy.next(errorOf('SHUTDOWN')), { ref: 'late', error: { message: 'The service is shutting down' } })
  t.match(await quick.next(ofRef('q', 'run.completed')), { data: { output: { sleptMs: 200 } } }, 'a run that ends before the deadline completes')
  t.match(await busy.next(ofRef('s', 'run.failed')), { runId, data: { error: { code: 'SHUTDOWN', message: 'The service is shutting down' } } })
  await closing
  for (const ws of [busy, idle, quick]) t.match(await ws.closed, { code: 1001, reason: 'The service is shutting down' })
  const last = busy.frames.at(-1)!
  t.equal(last.type, 'run.failed', 'nothing after the terminal event')
})

t.test('drain: a client that never answers the close frame is cut after the grace', async (t) => {
  const { service, url } = await listen(t, { agents: { echo }, websocket: true })
  const ws = await openWs(url)
  // a client whose socket stops reading: the close handshake never completes
  ;(ws.socket as unknown as { _socket: { pause(): void } })._socket.pause()
  const before = Date.now()
  await service.close(0)
  t.ok(Date.now() - before < 5_000)
})

function jwt (payload: Record<string, unknown>, secret: string): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const unsigned = `${part({ alg: 'HS256', typ: 'JWT' })}.${part(payload)}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}

t.test('auth at the upgrade: 401 without credentials, api key in a header or access_token', async (t) => {
  const key = 'k'.repeat(40)
  const { url } = await listen(t, { agents: { echo }, websocket: true, auth: { strategy: 'api-key', keys: [key] } })
  t.match(await openWs(url).catch((error: Error) => error), { message: 'Unexpected server response: 401' })
  t.match(await openWs(url, { path: '/v1/ws?access_token=wrong' }).catch((error: Error) => error), { message: 'Unexpected server response: 401' })
  for (const ws of [await openWs(url, { headers: { 'x-api-key': key } }), await openWs(url, { path: `/v1/ws?access_token=${key}` })]) {
    ws.send({ type: 'run.start', ref: 'a', agent: 'echo', input: 1 })
    t.equal((await ws.next(ofRef('a', 'run.completed'))).data.output, 1)
    ws.socket.close()
  }
})

t.test('JWT: the upgrade needs a run role; each run.start needs it for its agent (FORBIDDEN frame otherwise)', async (t) => {
  const secret = 's'.repeat(40)
  const { service, url } = await listen(t, { agents: { echo, approver }, websocket: true, auth: { strategy: 'jwt', secret } })
  const exp = Math.floor(Date.now() / 1000) + 600
  const reader = jwt({ sub: 'reader', roles: ['approvals:read'], exp }, secret)
  t.match(await openWs(url, { headers: { authorization: `Bearer ${reader}` } }).catch((error: Error) => error), { message: 'Unexpected server response: 403' })

  const echoOnly = jwt({ sub: 'alice', roles: ['agents:run:echo'], exp }, secret)
  const ws = await openWs(url, { path: `/v1/ws?access_token=${echoOnly}` })
  ws.send({ type: 'run.start', ref: 'e', agent: 'echo', input: 'ok' })
  t.equal((await ws.next(ofRef('e', 'run.completed'))).data.output, 'ok')
  ws.send({ type: 'run.start', ref: 'no', agent: 'approver', input: {} })
  t.match(await ws.next(errorOf('FORBIDDEN')), { ref: 'no', error: { message: 'The token lacks the role for run on agent "approver"' } })
  t.equal(service.app.agentService.runs.size, 0)

  const runner = jwt({ sub: 'bob', roles: ['agents:run'], exp }, secret)
  const full = await openWs(url, { headers: { authorization: `Bearer ${runner}` } })
  const runId = await start(full, { ref: 'a', agent: 'approver', input: {} })
  const approval = (await full.next(ofRef('a', 'approval.requested'))).data.approval
  t.equal(approval.principal, 'bob', 'runs run as the principal of the upgrade')
  const decider = jwt({ sub: 'carol', roles: ['approvals:decide'], exp }, secret)
  const res = await service.app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true }, headers: { authorization: `Bearer ${decider}` } })
  t.equal(res.statusCode, 200)
  t.equal(res.json().decision.decidedBy, 'carol', 'decidedBy defaults to the token sub')
  t.equal((await full.next(ofRef('a', 'run.completed'))).runId, runId)
  await service.app.agentService.audit.flush()
  const { entries } = await service.app.agentService.settings.auditStore.query({ limit: 50 })
  t.match(entries.find((e) => e.route === '/v1/approvals/:id'), { principal: 'carol', runId })
  t.notOk(entries.some((e) => e.url.includes(echoOnly)), 'the access_token is not audited')
})

t.test('a host app that mounted @fastify/websocket itself keeps it; ours shares its server', async (t) => {
  const app = Fastify({ logger: false })
  await app.register(fastifyWebsocket)
  app.get('/host-ws', { websocket: true }, (socket) => { socket.send('host') })
  await app.register(fastifyAgents, { agents: { echo, slow }, websocket: true })
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`

  const ws = await openWs(url)
  t.ok(ws.upgrade.headers['x-request-id'])
  ws.send({ type: 'run.start', ref: 'h', agent: 'echo', input: 'via the host' })
  t.equal((await ws.next(ofRef('h', 'run.completed'))).data.output, 'via the host')

  const host = new WebSocket(url.replace('http', 'ws') + '/host-ws')
  const message = await new Promise<string>((resolve) => host.once('message', (data) => resolve(String(data))))
  t.equal(message, 'host')
  host.close()

  // the host's preClose (registered first) closes every socket at once: the run is cancelled, not drained
  ws.send({ type: 'run.start', ref: 's', agent: 'slow', input: { ms: 60_000 } })
  await ws.next(ofRef('s', 'run.started'))
  await app.close()
  t.equal((await ws.closed).code, 1005)
  t.notOk(ws.frames.some((f) => f.ref === 's' && f.data?.error?.code === 'SHUTDOWN'))
})

t.test('the heartbeat pings every socket; one that missed the previous pong is cut', async (t) => {
  const server = new WebSocketServer({ port: 0, host: '127.0.0.1' })
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  await new Promise((resolve) => server.once('listening', resolve))
  const { port } = server.address() as AddressInfo
  const heartbeat = new WebSocketHeartbeat(40)
  t.equal(heartbeat.intervalMs, 40)
  server.on('connection', (socket) => heartbeat.add(socket))

  const alive = new WebSocket(`ws://127.0.0.1:${port}`)
  const deaf = new WebSocket(`ws://127.0.0.1:${port}`, { autoPong: false })
  let pings = 0
  alive.on('ping', () => { pings++ })
  const deafClosed = new Promise<number>((resolve) => deaf.once('close', (code) => resolve(code)))
  await Promise.all([new Promise((resolve) => alive.once('open', resolve)), new Promise((resolve) => deaf.once('open', resolve))])
  await eventually(() => heartbeat.size === 2 ? true : undefined)
  t.equal(await deafClosed, 1006, 'cut without a close frame')
  await eventually(() => pings >= 3 ? true : undefined)
  t.equal(heartbeat.size, 1)
  t.equal(alive.readyState, WebSocket.OPEN)

  const [socket] = [...server.clients].filter((s) => s.readyState === WebSocket.OPEN)
  heartbeat.delete(socket!)
  t.equal(heartbeat.size, 0)
  const seen = pings
  await sleep(120)
  t.equal(pings, seen, 'no socket, no timer')
  alive.close()
})

t.test('an upgrade refused by a hook (401, 429) closes its socket after the answer; close() does not wait on it', async (t) => {
  const key = 'k'.repeat(40)
  const { service, port } = await listen(t, {
    agents: { echo }, websocket: true, auth: { strategy: 'api-key', keys: [key] }, rateLimit: { maxRequests: 1, intervalMs: 60_000 }
  })
  const { connect } = await import('node:net')
  const refused = async (headers: string): Promise<{ answer: string, closed: boolean }> => {
    const socket = connect(port, '127.0.0.1')
    let answer = ''
    socket.on('data', (chunk) => { answer += chunk.toString() })
    const closed = new Promise<boolean>((resolve) => socket.once('close', () => resolve(true)))
    await new Promise((resolve) => socket.once('connect', resolve))
    socket.write(`GET /v1/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n${headers}\r\n`)
    const timeout = sleep(2_000).then(() => false)
    const result = { answer: '', closed: await Promise.race([closed, timeout]) }
    result.answer = answer
    socket.destroy()
    return result
  }
  const unauthenticated = await refused('')
  t.match(unauthenticated.answer, /^HTTP\/1\.1 401 /)
  t.equal(unauthenticated.closed, true, 'the 401 closed the socket')
  const first = await openWs(`http://127.0.0.1:${port}`, { headers: { 'x-api-key': key } })
  first.socket.close()
  const limited = await refused(`x-api-key: ${key}\r\n`)
  t.match(limited.answer, /^HTTP\/1\.1 429 /)
  t.equal(limited.closed, true, 'the 429 closed the socket')
  const started = Date.now()
  await service.close(1_000)
  t.ok(Date.now() - started < 1_000, 'no refused upgrade held the drain')
})

t.test('a WebSocket client that stays too far behind is cut; its connection-bound runs end', async (t) => {
  const big = 'z'.repeat(64 * 1024)
  const { url, service } = await listen(t, {
    websocket: true,
    maxStreamBufferBytes: 256 * 1024,
    agents: { firehose: { async * run () { for (;;) { yield big; await new Promise((resolve) => setImmediate(resolve)) } } } }
  })
  const ws = await openWs(url)
  ws.send({ type: 'run.start', ref: 'f', agent: 'firehose', input: null })
  await ws.next((frame) => frame.type === 'run.started')
  // the client stops reading: its socket fills, then the server's buffer
  ;(ws.socket as unknown as { _socket: { pause(): void } })._socket.pause()
  await eventually(() => service.app.agentService.stats.slowConsumers === 1, 20_000)
  await eventually(async () => (await service.app.agentService.settings.runStore.list({ limit: 1 })).runs[0]?.status === 'cancelled')
  ws.socket.terminate()
})
