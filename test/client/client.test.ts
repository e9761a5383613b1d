// fastify-agents/client against a real service on 127.0.0.1 (port 0): every method typed as the routes answer,
// errors as AgentsClientError with the service's code, and run streams that rejoin by Last-Event-ID after a dropped
// connection (a socket destroyed by the server, a body cut mid-frame, a store that failed) with each event once.
import type { Socket } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { AgentsClient, AgentsClientError, StreamLostError, createClient } from '../../client/index.js'
import type { RunStreamEvent } from '../../client/index.js'
import type { Agent } from '../../lib/core/types.js'
import { echo, eventually, listen, parseSse } from '../helper.js'

const KEY = 'client-key-0123456789'

/** An agent that streams `n` words, waiting at `pauseAt` until released; `approve` asks for an approval first. */
function stepper () {
  let release!: () => void
  let gate = new Promise<void>((resolve) => { release = resolve })
  const agent: Agent = {
    description: 'streams words',
    async * run (input, ctx) {
      const { n, pauseAt, approve } = input as { n: number, pauseAt?: number, approve?: boolean }
      if (approve === true) {
        const decision = await ctx.requestApproval({ action: 'go', payload: { n } })
        if (!decision.approved) return { output: 'refused' }
      }
      for (let i = 0; i < n; i++) {
        if (i === pauseAt) await Promise.race([gate, new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }))])
        yield `w${i} `
      }
      yield { type: 'progress.done', data: { n } }
      return { output: `${n} words`, usage: { inputTokens: 1, outputTokens: n } }
    }
  }
  return {
    agent,
    release: () => {
      release()
      gate = new Promise<void>((resolve) => { release = resolve })
    }
  }
}

async function serve (t: Test) {
  const steps = stepper()
  const { service, url } = await listen(t, { agents: { echo, steps: steps.agent }, auth: { strategy: 'api-key', keys: [KEY] } })
  const sockets: Socket[] = []
  service.app.server.on('connection', (socket: Socket) => { sockets.push(socket) })
  const client = createClient({ baseUrl: url, apiKey: KEY })
  /** Destroys, server side, every connection open now. */
  const cut = (): void => { for (const socket of sockets.splice(0)) socket.destroy() }
  return { service, url, client, cut, ...steps }
}

/** The run's whole log as the service keeps it: the reference a rejoined stream must equal. */
async function logOf (url: string, runId: string): Promise<Array<{ id: number, event: string, data: unknown }>> {
  const response = await fetch(`${url}/v1/runs/${runId}/events`, { headers: { 'x-api-key': KEY } })
  return parseSse(await response.text())
}

function asLog (events: RunStreamEvent[]): Array<{ id: number, event: string, data: unknown }> {
  return events.map((e) => ({ id: e.id, event: e.type === 'custom' ? e.name : e.type, data: e.data }))
}

t.test('runs: create, background, get, join, cancel; agents; typed as the routes answer', async (t) => {
  const { client, release } = await serve(t)
  t.same((await client.agents.list()).map((a) => a.name), ['echo', 'steps'])
  t.match(await client.agents.get('steps'), { name: 'steps', description: 'streams words' })

  const result = await client.runs.create('echo', { input: { hi: 1 }, metadata: { from: 'test' } })
  t.match(result, { status: 'completed', agent: 'echo', output: { hi: 1 }, usage: { totalTokens: 3 } })
  t.match(await client.runs.get(result.runId), { runId: result.runId, status: 'completed', result: { output: { hi: 1 } } })

  const queued = await client.runs.background('steps', { input: { n: 3, pauseAt: 1 } }, { idempotencyKey: 'bg-1' })
  t.equal(queued.status, 'queued')
  await eventually(async () => (await client.runs.get(queued.runId)).status === 'running')
  const joined: RunStreamEvent[] = []
  const joining = (async () => { for await (const event of client.runs.join(queued.runId)) joined.push(event) })()
  await eventually(() => joined.length >= 2)
  release()
  await joining
  t.same(joined.map((e) => e.type), ['run.started', 'message.delta', 'message.delta', 'message.delta', 'custom', 'run.completed'])
  t.match(joined.at(-2), { type: 'custom', name: 'progress.done', data: { n: 3 } })
  const from4: RunStreamEvent[] = []
  for await (const event of client.runs.join(queued.runId, { after: 4 })) from4.push(event)
  t.same(from4.map((e) => e.id), [5, 6], 'from a seq of the caller\'s')

  const waiting = await client.runs.background('steps', { input: { n: 2, pauseAt: 0 } })
  await eventually(async () => (await client.runs.get(waiting.runId)).status === 'running')
  t.match(await client.runs.cancel(waiting.runId), { runId: waiting.runId, status: 'running' })
  const events: RunStreamEvent[] = []
  for await (const event of client.runs.join(waiting.runId)) events.push(event)
  t.match(events.at(-1), { type: 'run.failed', data: { error: { code: 'CANCELLED' } } })
  const ended = await client.runs.cancel(waiting.runId).catch((error: unknown) => error)
  t.ok(ended instanceof AgentsClientError)
  t.match(ended, { status: 409, code: 'RUN_ALREADY_ENDED', requestId: /.+/ })
})

t.test('a stream yields typed events; narrowing by type gives each event\'s data', async (t) => {
  const { client } = await serve(t)
  let text = ''
  let runId = ''
  let output: unknown
  const types: string[] = []
  for await (const event of client.runs.stream('steps', { input: { n: 3 } })) {
    types.push(event.type)
    if (event.type === 'run.started') runId = event.data.runId
    if (event.type === 'message.delta') text += event.data.text
    if (event.type === 'run.completed') output = event.data.output
  }
  t.equal(text, 'w0 w1 w2 ')
  t.equal(output, '3 words')
  t.same(types, ['run.started', 'message.delta', 'message.delta', 'message.delta', 'custom', 'run.completed'])
  t.match(await client.runs.get(runId), { status: 'completed' })
})

t.test('a connection the server destroys mid-stream: the stream rejoins by Last-Event-ID, without duplicates or gaps', async (t) => {
  const { client, cut, release, url } = await serve(t)
  const seen: RunStreamEvent[] = []
  const requests: Array<{ url: string, lastEventId: string | null }> = []
  const watched = new AgentsClient({
    baseUrl: url,
    apiKey: KEY,
    fetch: async (input, init) => {
      requests.push({ url: String(input), lastEventId: new Headers(init?.headers).get('last-event-id') })
      return fetch(input, init)
    }
  })
  const reading = (async () => { for await (const event of watched.runs.stream('steps', { input: { n: 6, pauseAt: 3 } }, { retryDelayMs: 10, signal: new AbortController().signal })) seen.push(event) })()
  await eventually(() => seen.length === 4, 5_000, 'the events before the pause')
  cut()
  // the run goes on (the client asks onDisconnect: continue) while the client rejoins
  await eventually(() => requests.length === 2, 5_000, 'a rejoin')
  release()
  await reading
  const runId = (seen[0] as { data: { runId: string } }).data.runId
  t.same(requests.map((r) => r.url.replace(url, '')), ['/v1/agents/steps/runs', `/v1/runs/${runId}/events`])
  t.equal(requests[1]!.lastEventId, '4', 'from the last event received')
  t.same(seen.map((e) => e.id), [1, 2, 3, 4, 5, 6, 7, 8, 9], 'each seq once, in order')
  t.same(asLog(seen), await logOf(url, runId), 'the run\'s log, event for event')
  t.match(await client.runs.get(runId), { status: 'completed' })
})

/**
 * A fetch whose first stream's body is cut after `bytes` bytes (a connection lost mid-frame); `rewind`: the rejoin asks
 * for one event more than the client did (as a proxy replaying one might), which the client must not yield twice.
 */
function cutAfter (bytes: number, rewind = false) {
  let first = true
  const calls: string[] = []
  const fetchCut: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers)
    calls.push(`${init?.method ?? 'GET'} ${String(input)} ${headers.get('last-event-id') ?? ''}`)
    if (rewind && headers.has('last-event-id')) headers.set('last-event-id', String(Number(headers.get('last-event-id')) - 1))
    const response = await fetch(input, { ...init, headers })
    if (!first || response.body === null) return response
    first = false
    const reader = response.body.getReader()
    let sent = 0
    const body = new ReadableStream<Uint8Array>({
      async pull (controller) {
        const { done, value } = await reader.read()
        if (done) return controller.close()
        const room = bytes - sent
        if (value.length < room) {
          sent += value.length
          return controller.enqueue(value)
        }
        controller.enqueue(value.subarray(0, room))
        await reader.cancel()
        controller.error(new TypeError('terminated'))
      }
    })
    return new Response(body, { status: response.status, headers: response.headers })
  }
  return { fetchCut, calls }
}

t.test('a body cut in the middle of a frame: the partial frame is dropped and read again whole', async (t) => {
  const { url } = await serve(t)
  const whole = await (await fetch(`${url}/v1/agents/steps/runs`, {
    method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: JSON.stringify({ input: { n: 5 }, stream: true })
  })).text()
  // halfway through the third event's frame
  const third = whole.indexOf('id: 3')
  for (const rewind of [false, true]) {
    const { fetchCut, calls } = cutAfter(third + 12, rewind)
    const client = new AgentsClient({ baseUrl: url, apiKey: KEY, fetch: fetchCut })
    const seen: RunStreamEvent[] = []
    for await (const event of client.runs.stream('steps', { input: { n: 5 } }, { retryDelayMs: 1 })) seen.push(event)
    t.equal(calls.length, 2)
    t.match(calls[1], / 2$/, 'rejoined after the last whole event')
    t.same(seen.map((e) => e.id), [1, 2, 3, 4, 5, 6, 7, 8], rewind ? 'an event sent again is not yielded again' : 'each event once')
    const runId = (seen[0] as { data: { runId: string } }).data.runId
    t.same(asLog(seen), await logOf(url, runId))
  }
})

t.test('a follower whose store fails ends with an error event: the client rejoins from its last event', async (t) => {
  const { client, service, release } = await serve(t)
  const queued = await client.runs.background('steps', { input: { n: 3, pauseAt: 1 } })
  await eventually(async () => (await client.runs.get(queued.runId)).status === 'running')
  const store = service.app.agentService.settings.runStore
  const events = store.events.bind(store)
  let failures = 0
  store.events = async (runId, afterSeq, limit) => {
    // the follower's read of the live events, once: the store is away for a moment
    if (afterSeq >= 2 && failures === 0) {
      failures++
      throw Object.assign(new Error('connection reset'), { code: 'ECONNRESET' })
    }
    return events(runId, afterSeq, limit)
  }
  const seen: RunStreamEvent[] = []
  const reading = (async () => { for await (const event of client.runs.join(queued.runId, { retryDelayMs: 1 })) seen.push(event) })()
  await eventually(() => seen.length === 2)
  release()
  await reading
  t.equal(failures, 1)
  t.same(seen.map((e) => e.id), [1, 2, 3, 4, 5, 6])
})

t.test('rejoins that keep failing give up with StreamLostError, naming the run and the last event', async (t) => {
  const { url, cut } = await serve(t)
  let streams = 0
  const client = new AgentsClient({
    baseUrl: url,
    apiKey: KEY,
    fetch: async (input, init) => {
      if (String(input).endsWith('/events') && ++streams > 0) throw new TypeError('fetch failed')
      return fetch(input, init)
    }
  })
  const seen: RunStreamEvent[] = []
  const reading = (async () => { for await (const event of client.runs.stream('steps', { input: { n: 3, pauseAt: 1 } }, { retries: 2, retryDelayMs: 1 })) seen.push(event) })()
  await eventually(() => seen.length === 2)
  cut()
  const error = await reading.catch((error: unknown) => error)
  t.ok(error instanceof StreamLostError)
  const runId = (seen[0] as { data: { runId: string } }).data.runId
  t.match(error, { name: 'StreamLostError', runId, lastEventId: 2, message: `The stream of run ${runId} was lost after event 2 and could not be rejoined` })
  t.equal(streams, 2, 'two rejoins, then it gave up')
})

t.test('a stream lost before its first event cannot be rejoined: StreamLostError without a run id', async (t) => {
  const { url } = await serve(t)
  const client = new AgentsClient({
    baseUrl: url,
    apiKey: KEY,
    fetch: async () => new Response('', { status: 200, headers: { 'content-type': 'text/event-stream' } })
  })
  const error = await (async () => { for await (const _event of client.runs.stream('steps', { input: { n: 1 } })) t.fail('no event') })().catch((error: unknown) => error)
  t.match(error, { name: 'StreamLostError', runId: undefined, lastEventId: 0, message: /before its first event/ })
})

t.test('a rejoin the service refuses (the run is gone) is thrown as it came', async (t) => {
  const { url, service, cut } = await serve(t)
  const client = new AgentsClient({ baseUrl: url, apiKey: KEY })
  const seen: RunStreamEvent[] = []
  const reading = (async () => { for await (const event of client.runs.stream('steps', { input: { n: 3, pauseAt: 1 } }, { retryDelayMs: 50 })) seen.push(event) })()
  await eventually(() => seen.length === 2)
  const store = service.app.agentService.settings.runStore
  store.get = async () => null
  cut()
  const error = await reading.catch((error: unknown) => error)
  t.ok(error instanceof AgentsClientError)
  t.match(error, { status: 404, code: 'RUN_NOT_FOUND' })
})

t.test('an aborted signal ends the stream, reading or waiting to rejoin; breaking off leaves the run going', async (t) => {
  const { client, cut, release, url } = await serve(t)
  const reading = new AbortController()
  const seen: RunStreamEvent[] = []
  const first = (async () => { for await (const event of client.runs.stream('steps', { input: { n: 3, pauseAt: 1 } }, { signal: reading.signal })) seen.push(event) })()
  await eventually(() => seen.length === 2)
  reading.abort()
  t.match(await first.catch((error: unknown) => error), { name: 'AbortError' })

  const waiting = new AbortController()
  const second: RunStreamEvent[] = []
  const rejoining = (async () => { for await (const event of client.runs.stream('steps', { input: { n: 3, pauseAt: 1 } }, { signal: waiting.signal, retryDelayMs: 60_000 })) second.push(event) })()
  await eventually(() => second.length === 2)
  cut()
  await new Promise((resolve) => setTimeout(resolve, 50))
  waiting.abort(new Error('the page went away'))
  t.match(await rejoining.catch((error: unknown) => error), { message: 'the page went away' })
  const during = new AbortController()
  const aborting = new AgentsClient({
    baseUrl: url,
    apiKey: KEY,
    fetch: async (input, init) => {
      if (!String(input).endsWith('/events')) return fetch(input, init)
      during.abort(new Error('aborted while rejoining'))
      throw during.signal.reason
    }
  })
  const third: RunStreamEvent[] = []
  const fetching = (async () => { for await (const event of aborting.runs.stream('steps', { input: { n: 3, pauseAt: 1 } }, { signal: during.signal, retryDelayMs: 1 })) third.push(event) })()
  await eventually(() => third.length === 2)
  cut()
  t.match(await fetching.catch((error: unknown) => error), { message: 'aborted while rejoining' })
  const gone = new AbortController()
  gone.abort(new Error('already gone'))
  t.match(await (async () => { for await (const _event of client.runs.join('x', { signal: gone.signal })) t.fail('no event') })().catch((error: unknown) => error), { message: 'already gone' })

  let runId = ''
  for await (const event of client.runs.stream('steps', { input: { n: 3, pauseAt: 1 } })) {
    if (event.type === 'run.started') runId = event.data.runId
    if (event.type === 'message.delta') break
  }
  await eventually(async () => (await client.runs.get(runId)).status === 'running')
  release()
  await eventually(async () => (await client.runs.get(runId)).status === 'completed', 5_000, 'the run went on without its reader')
})

t.test('sessions and chats: list (own, by agent, paged), create, get, runs, delete, a chat\'s messages', async (t) => {
  const { client, url } = await serve(t)
  const session = await client.sessions.create({ agent: 'echo', metadata: { title: 't' } })
  const other = await client.sessions.create()
  const run = await client.runs.create('echo', { input: 'hi', sessionId: session.id })
  t.same((await client.sessions.list()).sessions.map((s) => s.id), [session.id, other.id])
  t.same((await client.sessions.list({ agent: 'echo' })).sessions.map((s) => s.id), [session.id])
  const page = await client.sessions.list({ limit: 1 })
  t.equal(page.sessions.length, 1)
  t.same((await client.sessions.list({ limit: 1, cursor: page.nextCursor! })).sessions.map((s) => s.id), [other.id])
  t.match(await client.sessions.get(session.id), { id: session.id, turns: 1, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hi' }] })
  t.same((await client.sessions.runs(session.id, { limit: 5 })).runs.map((r) => r.runId), [run.runId])
  await client.sessions.delete(other.id)
  t.match(await client.sessions.get(other.id).catch((error: unknown) => error), { status: 404, code: 'SESSION_NOT_FOUND' })
  t.match(await client.sessions.list({ cursor: 'garbage' }).catch((error: unknown) => error), { status: 400, code: 'FA_INVALID_CURSOR' })

  await fetch(`${url}/v1/agents/echo/chat`, {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ id: 'c1', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hello' }] }] })
  }).then(async (response) => response.text())
  const messages = await client.sessions.chatMessages('echo', 'c1')
  t.match(messages, [{ role: 'user', parts: [{ type: 'text', text: 'hello' }] }, { role: 'assistant', parts: [], metadata: { usage: { totalTokens: 3 } } }])
})

t.test('approvals: list, get, decide; a second decision is a 409 with its code', async (t) => {
  const { client } = await serve(t)
  const seen: RunStreamEvent[] = []
  const reading = (async () => { for await (const event of client.runs.stream('steps', { input: { n: 1, approve: true } })) seen.push(event) })()
  const [pending] = await eventually(async () => { const list = await client.approvals.list({ agent: 'steps' }); return list.length === 1 && list })
  t.match(pending, { action: 'go', payload: { n: 1 }, status: 'pending' })
  t.same(await client.approvals.get(pending!.id), pending)
  t.match(await client.approvals.decide(pending!.id, { approved: true, comment: 'fine' }), { status: 'approved', decision: { comment: 'fine' } })
  t.match(await client.approvals.decide(pending!.id, { approved: false }, { idempotencyKey: 'k' }).catch((error: unknown) => error), { status: 409, code: 'APPROVAL_ALREADY_DECIDED' })
  await reading
  t.same(seen.map((e) => e.type), ['run.started', 'approval.requested', 'approval.decided', 'message.delta', 'custom', 'run.completed'])
})

t.test('errors: the service\'s code; an answer that is not the service\'s JSON keeps its status; credentials and options', async (t) => {
  const { url } = await serve(t)
  const anonymous = new AgentsClient({ baseUrl: `${url}/` })
  t.match(await anonymous.agents.list().catch((error: unknown) => error), { name: 'AgentsClientError', status: 401, code: 'UNAUTHORIZED' })
  const client = createClient({ baseUrl: url, headers: () => ({ 'x-api-key': KEY }) })
  const missing = await client.runs.create('nobody', { input: 1 }).catch((error: unknown) => error) as AgentsClientError
  t.match(missing, { status: 404, code: 'AGENT_NOT_FOUND', message: /nobody/, body: { statusCode: 404 } })
  t.type(missing.traceId, 'string')
  t.match(await client.runs.create('steps', { input: null }).catch((error: unknown) => error), { status: 500, code: 'AGENT_ERROR' })
  const proxy = new AgentsClient({ baseUrl: url, fetch: async () => new Response('<html>bad gateway</html>', { status: 502, statusText: 'Bad Gateway' }) })
  t.match(await proxy.agents.list().catch((error: unknown) => error), { status: 502, code: undefined, body: undefined, message: '502 Bad Gateway' })
  const jsonButNot = new AgentsClient({ baseUrl: url, fetch: async () => new Response('null', { status: 503, statusText: 'Unavailable' }) })
  t.match(await jsonButNot.agents.list().catch((error: unknown) => error), { status: 503, body: undefined })
  const bearer = new AgentsClient({ baseUrl: url, token: 'not-a-key', headers: { 'x-extra': '1' } })
  t.match(await bearer.agents.list().catch((error: unknown) => error), { status: 401 })
  t.throws(() => createClient({ baseUrl: 'localhost:3000' }), { name: 'TypeError', message: /baseUrl must be an http\(s\) URL/ })
  const prefixed = new AgentsClient({ baseUrl: url, prefix: '/v2', apiKey: KEY })
  t.match(await prefixed.agents.list().catch((error: unknown) => error), { status: 404 })
})
