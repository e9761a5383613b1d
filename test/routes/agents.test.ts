import t from 'tap'
import { build, eventually, listen, parseSse, sleep } from '../helper.js'
import type { Agent, RunContext } from '../../lib/core/types.js'

t.test('a JSON run answers the contract result', async (t) => {
  const { app } = build(t)
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: { q: 'hi' }, metadata: { a: 1 } } })
  t.equal(res.statusCode, 200)
  const body = res.json()
  t.match(body, {
    runId: String, agent: 'echo', sessionId: String, status: 'completed', output: { q: 'hi' },
    usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 }, finishReason: 'stop', requestId: res.headers['x-request-id'], traceId: /^[0-9a-f]{32}$/
  })
  t.same(Object.keys(body).sort(), ['agent', 'finishReason', 'output', 'requestId', 'runId', 'sessionId', 'status', 'traceId', 'usage'])
})

t.test('the run context', async (t) => {
  let ctx: RunContext | undefined
  const { app } = build(t, { agents: { probe: { async run (_input, c) { ctx = c; return { output: null } } } } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/probe/runs', payload: { input: 1, metadata: { tenant: 't1' } } })
  const body = res.json()
  t.equal(ctx!.runId, body.runId)
  t.equal(ctx!.agent, 'probe')
  t.equal(ctx!.sessionId, body.sessionId)
  t.equal(ctx!.principal, 'anonymous')
  t.equal(ctx!.requestId, body.requestId)
  t.same(ctx!.metadata, { tenant: 't1' })
  t.same(ctx!.history, [])
  t.equal(ctx!.signal.aborted, false)
  t.type(ctx!.log.info, 'function')
  t.equal(ctx!.resume, undefined)
  t.equal(body.output, null)
})

t.test('results are normalised: missing usage is zero, missing finishReason is stop, odd usage ignored', async (t) => {
  const { app } = build(t, {
    agents: {
      bare: { async run () { return { output: undefined } } },
      odd: { async run () { return { output: 'x', usage: { inputTokens: -3, outputTokens: 2.7 }, finishReason: 'length' } } },
      nan: { async run () { return { output: 'x', usage: { inputTokens: Number.NaN, outputTokens: '7' as unknown as number } } } }
    }
  })
  const bare = (await app.inject({ method: 'POST', url: '/v1/agents/bare/runs', payload: { input: 1 } })).json()
  t.same(bare.usage, { inputTokens: 0, outputTokens: 0, totalTokens: 0 })
  t.equal(bare.finishReason, 'stop')
  t.equal(bare.output, null)
  const odd = (await app.inject({ method: 'POST', url: '/v1/agents/odd/runs', payload: { input: 1 } })).json()
  t.same(odd.usage, { inputTokens: 0, outputTokens: 2, totalTokens: 2 })
  t.equal(odd.finishReason, 'length')
  const nan = (await app.inject({ method: 'POST', url: '/v1/agents/nan/runs', payload: { input: 1 } })).json()
  t.same(nan.usage, { inputTokens: 0, outputTokens: 0, totalTokens: 0 })
})

t.test('a failing agent: 500 AGENT_ERROR, message hidden unless exposeErrors', async (t) => {
  const agents: Record<string, Agent> = {
    boom: { async run () { throw new Error('database password is hunter2') } },
    sync: { run () { throw new Error('thrown synchronously') } },
    shapeless: { run: async () => 'just a string' as never },
    'not-an-event': { async * run () { yield 42 as never } },
    'rejects-with-string': { run: () => Promise.reject('a string') } // eslint-disable-line prefer-promise-reject-errors
  }
  const hidden = build(t, { agents }).app
  for (const name of Object.keys(agents)) {
    const res = await hidden.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1 } })
    t.equal(res.statusCode, 500, name)
    t.match(res.json(), { statusCode: 500, error: 'Internal Server Error', message: 'Internal Server Error', code: 'AGENT_ERROR' })
  }
  const exposed = build(t, { agents, exposeErrors: true }).app
  const messages: Record<string, RegExp> = {
    boom: /hunter2/,
    sync: /thrown synchronously/,
    shapeless: /must resolve to \{ output \}/,
    'not-an-event': /yielded 42: expected a string or \{ type, data \}/,
    'rejects-with-string': /a string/
  }
  for (const [name, message] of Object.entries(messages)) {
    const res = await exposed.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1 } })
    t.equal(res.statusCode, 500)
    t.match(res.json(), { message, code: 'AGENT_ERROR' }, name)
  }
})

t.test('an unhandled error outside a run: 500, message per exposeErrors, internal codes kept out', async (t) => {
  // a store's own failure (an outage, ECONNREFUSED, would be 503 STORE_UNAVAILABLE: test/stores/deadlines.test.ts)
  const failing = { create: async () => { throw Object.assign(new Error('relation "fa_sessions" does not exist'), { code: '42P01' }) } }
  const sessionStore = { get: async () => null, appendTurn: async () => true, touch: async () => true, delete: async () => true, list: async () => ({ sessions: [], nextCursor: null }), listByPrincipal: async () => ({ sessions: [], nextCursor: null }), ...failing }
  const hidden = build(t, { sessionStore }).app
  const res = await hidden.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })
  t.equal(res.statusCode, 500)
  t.same(Object.keys(res.json()).sort(), ['error', 'message', 'requestId', 'statusCode', 'traceId'])
  t.equal(res.json().message, 'Internal Server Error')
  const exposed = build(t, { sessionStore, exposeErrors: true }).app
  const body = (await exposed.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })).json()
  t.match(body, { statusCode: 500, message: 'relation "fa_sessions" does not exist', code: '42P01' })
})

t.test('504 AGENT_TIMEOUT for an agent that honours its signal', async (t) => {
  let aborted: unknown
  const polite: Agent = {
    run: (_input, ctx) => new Promise((_resolve, reject) => {
      ctx.signal.addEventListener('abort', () => { aborted = ctx.signal.reason; reject(ctx.signal.reason) })
    })
  }
  const { app } = build(t, { agents: { polite }, requestTimeoutMs: 100 })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/polite/runs', payload: { input: 1 } })
  t.equal(res.statusCode, 504)
  t.match(res.json(), { statusCode: 504, error: 'Gateway Timeout', code: 'AGENT_TIMEOUT', message: 'Agent "polite" did not finish within 100 ms' })
  t.match(aborted, { name: 'RunAbortedError', code: 'AGENT_TIMEOUT' })
})

t.test('504 at the deadline for an agent that ignores its signal (promise and generator)', async (t) => {
  let finallyRan = false
  const agents: Record<string, Agent> = {
    deaf: { run: () => new Promise(() => {}) },
    'deaf-stream': {
      async * run () {
        try {
          yield 'first'
          await sleep(300) // deaf to its signal for a while, then back at a yield where return() lands
          yield 'second'
        } finally { finallyRan = true }
      }
    },
    'late-result': { run: () => new Promise((resolve) => setTimeout(() => resolve({ output: 'late' }), 300)) }
  }
  const { app } = build(t, { agents, requestTimeoutMs: 100 })
  // deaf would never answer and late-result would answer 200 at 300 ms: a 504 from each is the deadline's
  for (const name of Object.keys(agents)) {
    const res = await app.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1 } })
    t.equal(res.statusCode, 504, name)
  }
  const stream = await app.inject({ method: 'POST', url: '/v1/agents/deaf-stream/runs', payload: { input: 1, stream: true } })
  const events = parseSse(stream.body)
  t.same(events.map((e) => e.event), ['run.started', 'message.delta', 'run.failed'])
  t.same(events.at(-1)!.data.error, { code: 'AGENT_TIMEOUT', message: 'Agent "deaf-stream" did not finish within 100 ms' })
  // (late-result, whose timer was set before, has resolved by then, after its run settled: nothing happens)
  t.ok(await eventually(() => finallyRan, 5_000), 'the generator was told to return, and its finally ran when it next yielded')
})

t.test('SSE: event order, ids from 1, custom events, final result', async (t) => {
  const agents: Record<string, Agent> = {
    chatty: {
      async * run (_input, ctx) {
        yield 'Hel'
        ctx.emit('tool.call', { toolCallId: 'c1', name: 'search', input: {} })
        yield { type: 'message.delta', data: { text: 'lo' } }
        yield { type: 'progress' }
        return { output: 'custom', usage: { inputTokens: 3, outputTokens: 4 } }
      }
    },
    plain: { async * run () { yield 'a'; yield 'b' } }
  }
  const { app } = build(t, { agents })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/chatty/runs', payload: { input: 'x' }, headers: { accept: 'text/event-stream' } })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], 'text/event-stream')
  const events = parseSse(res.body)
  t.same(events.map((e) => e.event), ['run.started', 'message.delta', 'tool.call', 'message.delta', 'progress', 'run.completed'])
  t.same(events.map((e) => e.id), [1, 2, 3, 4, 5, 6])
  t.same(events[1]!.data, { text: 'Hel' })
  t.same(events[2]!.data, { toolCallId: 'c1', name: 'search', input: {} })
  t.equal(events[4]!.data, null)
  t.match(events[0]!.data, { runId: String, agent: 'chatty', sessionId: String, requestId: String, traceId: String })
  t.match(events.at(-1)!.data, { status: 'completed', output: 'custom', usage: { totalTokens: 7 }, runId: events[0]!.data.runId })

  const plain = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/plain/runs', payload: { input: 'x', stream: true } })).body)
  t.equal(plain.at(-1)!.data.output, 'ab', 'without a returned result the output is the text deltas')
  const json = (await app.inject({ method: 'POST', url: '/v1/agents/plain/runs', payload: { input: 'x' } })).json()
  t.equal(json.output, 'ab', 'a generator agent answers JSON too')
  const explicit = await app.inject({ method: 'POST', url: '/v1/agents/plain/runs', payload: { input: 'x', stream: false }, headers: { accept: 'text/event-stream' } })
  t.match(explicit.headers['content-type'], 'application/json', 'stream: false wins over Accept')
})

t.test('SSE: a failing agent ends with run.failed AGENT_ERROR', async (t) => {
  const agents: Record<string, Agent> = { fails: { async * run () { yield 'partial'; throw new Error('secret detail') } } }
  const hidden = build(t, { agents }).app
  const events = parseSse((await hidden.inject({ method: 'POST', url: '/v1/agents/fails/runs', payload: { input: 1, stream: true } })).body)
  t.same(events.map((e) => e.event), ['run.started', 'message.delta', 'run.failed'])
  t.same(events.at(-1)!.data.error, { code: 'AGENT_ERROR', message: 'Internal Server Error' })
  t.match(events.at(-1)!.data.traceId, /^[0-9a-f]{32}$/)
  const exposed = build(t, { agents, exposeErrors: true }).app
  const shown = parseSse((await exposed.inject({ method: 'POST', url: '/v1/agents/fails/runs', payload: { input: 1, stream: true } })).body)
  t.equal(shown.at(-1)!.data.error.message, 'secret detail')
})

t.test('nothing is emitted after the terminal event', async (t) => {
  let late: (() => void) | undefined
  const agents: Record<string, Agent> = {
    lingering: { async run (_input, ctx) { late = () => ctx.emit('too.late', {}); return { output: 1 } } }
  }
  const { app } = build(t, { agents })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/lingering/runs', payload: { input: 1, stream: true } })
  late!()
  t.same(parseSse(res.body).map((e) => e.event), ['run.started', 'run.completed'])
})

t.test('sessions: history across two runs, ownership, 404s', async (t) => {
  const histories: unknown[] = []
  const agents: Record<string, Agent> = { memo: { async run (input, ctx) { histories.push(ctx.history); return { output: `re: ${String(input)}` } } } }
  const { app } = build(t, { agents })
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/memo/runs', payload: { input: 'one' } })).json()
  const second = (await app.inject({ method: 'POST', url: '/v1/agents/memo/runs', payload: { input: 'two', sessionId: first.sessionId, stream: true } }))
  const secondResult = parseSse(second.body).at(-1)!.data
  t.equal(secondResult.sessionId, first.sessionId)
  t.same(histories[0], [])
  t.match(histories[1], [
    { role: 'user', content: 'one', runId: first.runId, at: String },
    { role: 'assistant', content: 're: one', runId: first.runId, at: String }
  ])
  const session = (await app.inject({ method: 'GET', url: `/v1/sessions/${first.sessionId}` })).json()
  t.equal(session.turns, 2)
  t.equal(session.agent, 'memo')
  t.same(session.messages.map((m: { content: string }) => m.content), ['one', 're: one', 'two', 're: two'])

  const unknown = await app.inject({ method: 'POST', url: '/v1/agents/memo/runs', payload: { input: 'x', sessionId: 'nope' } })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().code, 'SESSION_NOT_FOUND')
  const unknownStream = await app.inject({ method: 'POST', url: '/v1/agents/memo/runs', payload: { input: 'x', sessionId: 'nope' }, headers: { accept: 'text/event-stream' } })
  t.equal(unknownStream.statusCode, 404, 'an unknown session is a 404 before any stream starts')
})

t.test('session routes', async (t) => {
  const { app } = build(t)
  const created = await app.inject({ method: 'POST', url: '/v1/sessions', payload: { agent: 'echo', metadata: { user: 'u1' } } })
  t.equal(created.statusCode, 201)
  const session = created.json()
  t.match(session, { id: String, agent: 'echo', principal: 'anonymous', createdAt: String, lastActiveAt: String, turns: 0, metadata: { user: 'u1' } })
  const empty = await app.inject({ method: 'POST', url: '/v1/sessions' })
  t.equal(empty.statusCode, 201, 'no body is an empty session')
  t.equal(empty.json().agent, null)
  t.equal((await app.inject({ method: 'POST', url: '/v1/sessions', payload: { agent: 'nope' } })).json().code, 'AGENT_NOT_FOUND')
  t.equal((await app.inject({ method: 'POST', url: '/v1/sessions', payload: { agent: 'echo', extra: 1 } })).statusCode, 400)
  const got = (await app.inject({ method: 'GET', url: `/v1/sessions/${session.id}` })).json()
  t.same(got.messages, [])
  t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${session.id}` })).statusCode, 204)
  const gone = await app.inject({ method: 'GET', url: `/v1/sessions/${session.id}` })
  t.equal(gone.statusCode, 404)
  t.equal(gone.json().code, 'SESSION_NOT_FOUND')
  t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${session.id}` })).statusCode, 404)
  const absurd = await app.inject({ method: 'GET', url: `/v1/sessions/${'x'.repeat(200)}` })
  t.equal(absurd.statusCode, 414, 'an absurd id is refused by the router')
  t.match(absurd.json(), { statusCode: 414, code: 'FST_ERR_MAX_PARAM_LENGTH', requestId: absurd.headers['x-request-id'] })
  const malformed = await app.inject({ method: 'GET', url: '/v1/sessions/%E0%A4%A', headers: { 'x-request-id': 'bad-url' } })
  t.equal(malformed.statusCode, 400)
  t.match(malformed.json(), { code: 'FST_ERR_BAD_URL', requestId: 'bad-url' })
  t.equal(malformed.headers['x-request-id'], 'bad-url')
})

t.test('sessions expire after sessionTtlMs of idleness', async (t) => {
  const { app } = build(t, { sessionTtlMs: 60 })
  const { sessionId } = (await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })).json()
  t.equal((await app.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).statusCode, 200)
  await sleep(120)
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, sessionId } })).statusCode, 404)
})

t.test('agents list and get', async (t) => {
  const { app } = build(t, { agents: { echo: { description: 'echoes', metadata: { v: 1 }, run: async () => ({ output: 1 }) }, bare: { run: async () => ({ output: 1 }) } } })
  t.same((await app.inject({ method: 'GET', url: '/v1/agents' })).json(), {
    agents: [{ name: 'echo', description: 'echoes', metadata: { v: 1 } }, { name: 'bare', description: '', metadata: {} }]
  })
  t.same((await app.inject({ method: 'GET', url: '/v1/agents/bare' })).json(), { name: 'bare', description: '', metadata: {} })
  const missing = await app.inject({ method: 'GET', url: '/v1/agents/ghost' })
  t.match(missing.json(), { statusCode: 404, code: 'AGENT_NOT_FOUND', message: 'Agent "ghost" not found' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/ghost/runs', payload: { input: 1 } })).json().code, 'AGENT_NOT_FOUND')
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents/Bad%20Name' })).statusCode, 400)
})

t.test('a client that disconnects aborts its run (JSON and SSE)', async (t) => {
  const aborted: string[] = []
  const started: Array<() => void> = []
  const waiting: Agent = {
    run: (input, ctx) => new Promise((_resolve, reject) => {
      started.shift()?.()
      ctx.signal.addEventListener('abort', () => { aborted.push(`${String(input)}:${(ctx.signal.reason as { code: string }).code}`); reject(ctx.signal.reason) })
    })
  }
  const { url, service } = await listen(t, { agents: { waiting } })
  for (const mode of ['json', 'sse']) {
    const controller = new AbortController()
    const running = new Promise<void>((resolve) => started.push(resolve))
    const request = fetch(`${url}/v1/agents/waiting/runs`, {
      method: 'POST', signal: controller.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: mode, stream: mode === 'sse' })
    }).then(async (res) => { await res.text() })
    await running
    controller.abort()
    await request.catch(() => {})
    t.ok(await eventually(() => aborted.includes(`${mode}:CANCELLED`), 5_000), `${mode}: the run saw its signal abort`)
  }
  t.equal(service.app.agentService.runs.size, 0, 'no run left in flight')
})

t.test('validation is strict: no coercion, no silent stripping', async (t) => {
  const { app } = build(t)
  const cases: Array<[unknown, RegExp]> = [
    [{ input: 1, stream: 'true' }, /body\/stream must be boolean/],
    [{ input: 1, sessionId: 42 }, /body\/sessionId must be string/],
    [{ input: 1, metadata: [] }, /body\/metadata must be object/],
    [{ input: 1, unknown: true }, /body\/unknown is not allowed/],
    [{}, /body must have required property 'input'/],
    [[1, 2], /body must be object/]
  ]
  for (const [payload, message] of cases) {
    const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: payload as object })
    t.equal(res.statusCode, 400)
    t.match(res.json(), { statusCode: 400, error: 'Bad Request', code: 'FST_ERR_VALIDATION', message })
  }
  const broken = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: '{"input":', headers: { 'content-type': 'application/json' } })
  t.equal(broken.statusCode, 400)
  t.equal(broken.json().requestId, broken.headers['x-request-id'])
  const empty = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' } })
  t.equal(empty.statusCode, 400)
})

t.test('a run that times out while its completion is being saved answers the timeout', async (t) => {
  const { memoryStores } = await import('../../lib/stores/memory.js')
  const sessions = memoryStores().sessionStore
  let saved = false
  const sessionStore = {
    create: sessions.create.bind(sessions),
    get: sessions.get.bind(sessions),
    delete: sessions.delete.bind(sessions),
    list: sessions.list.bind(sessions),
    listByPrincipal: sessions.listByPrincipal.bind(sessions),
    appendTurn: async (...args: Parameters<typeof sessions.appendTurn>) => {
      await sleep(300)
      saved = true
      return sessions.appendTurn(...args)
    }
  }
  const { app } = build(t, { sessionStore, requestTimeoutMs: 100 })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true } })
  const events = parseSse(res.body)
  t.same(events.map((e) => e.event), ['run.started', 'run.failed'], 'no run.completed after the deadline')
  t.equal(events[1]!.data.error.code, 'AGENT_TIMEOUT')
  t.ok(await eventually(() => saved, 5_000), 'the turn already on its way is still saved')
})

t.test('a session deleted while its run goes on: the run completes, its turn is dropped with a warning', async (t) => {
  const { Writable } = await import('node:stream')
  const lines: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  let started = false
  const waiter: Agent = { async run (input) { started = true; await gate; return { output: input } } }
  const { app } = build(t, { agents: { waiter }, logger: { level: 'warn', stream } as never })
  const created = await app.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
  const sessionId = created.json().id as string
  const running = app.inject({ method: 'POST', url: '/v1/agents/waiter/runs', payload: { input: 'x', sessionId } })
  // the run has found its session (it is running): deleting the session now is deleting it under the run
  await eventually(() => started)
  t.equal((await app.inject({ method: 'DELETE', url: `/v1/sessions/${sessionId}` })).statusCode, 204)
  release()
  const res = await running
  t.equal(res.statusCode, 200)
  t.equal(res.json().output, 'x')
  t.equal((await app.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).statusCode, 404)
  t.ok(lines.some((l) => l.includes('the session was gone when the run completed') && l.includes(sessionId)))
})
