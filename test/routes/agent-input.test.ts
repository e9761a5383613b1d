// An agent's input schema (docs/agents.md, typed inputs): the run request's input is checked before anything runs, with the
// same 400 on every transport, and nothing is left behind (no session, no run, no agent call).
import t from 'tap'
import type { Test } from 'tap'
import { Type } from '@sinclair/typebox'
import { defineAgent } from '../../lib/runs/define-agent.js'
import type { AgentService } from '../../app/service.js'
import { build, listen } from '../helper.js'
import { openSse, openWs } from '../helpers/streams.js'

function booking (calls: unknown[]) {
  return defineAgent({
    input: Type.Object({
      city: Type.String({ minLength: 1 }),
      nights: Type.Integer({ minimum: 1 }),
      guests: Type.Optional(Type.Array(Type.String(), { maxItems: 2 }))
    }, { additionalProperties: false }),
    async run (input) {
      calls.push(input)
      return { output: `${input.nights} nights in ${input.city}` }
    }
  })
}

const bad: Array<[unknown, string]> = [
  ['Oslo', 'must be object'],
  [{ city: 'Oslo' }, "must have required property 'nights'"],
  [{ city: 'Oslo', nights: '2' }, '/nights must be integer'],
  [{ city: 'Oslo', nights: 0 }, '/nights must be >= 1'],
  [{ city: 'Oslo', nights: 1, pets: 1 }, '/pets is not allowed'],
  [{ city: 'Oslo', nights: 1, guests: ['a', 2] }, '/guests/1 must be string']
]

async function leftBehind (service: AgentService): Promise<{ sessions: number, runs: number }> {
  const { settings, runs } = service.app.agentService
  const { sessions } = await settings.sessionStore.list({ limit: 100 })
  return { sessions: sessions.length, runs: runs.size }
}

async function nothingLeft (t: Test, service: AgentService, calls: unknown[]): Promise<void> {
  t.same(await leftBehind(service), { sessions: 0, runs: 0 }, 'no session created, no run registered')
  t.same(calls, [], 'the agent was never called')
}

t.test('JSON: 400 FST_ERR_VALIDATION naming body/input/…, nothing created', async (t) => {
  const calls: unknown[] = []
  const service = build(t, { agents: { booking: booking(calls) } })
  for (const [input, problem] of bad) {
    const res = await service.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: { input } })
    t.equal(res.statusCode, 400, JSON.stringify(input))
    t.match(res.json(), { statusCode: 400, error: 'Bad Request', code: 'FST_ERR_VALIDATION', message: `body/input${problem.startsWith('/') ? '' : ' '}${problem}`, requestId: String, traceId: String })
  }
  await nothingLeft(t, service, calls)

  const ok = await service.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: { input: { city: 'Oslo', nights: 2 } } })
  t.equal(ok.statusCode, 200)
  t.equal(ok.json().output, '2 nights in Oslo')
  t.same(calls, [{ city: 'Oslo', nights: 2 }], 'validated as sent: nothing coerced or stripped')
})

t.test('the route body is still checked first, and a session or resume is not looked at for a bad input', async (t) => {
  const calls: unknown[] = []
  const service = build(t, { agents: { booking: booking(calls) } })
  const missing = await service.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: {} })
  t.match(missing.json(), { code: 'FST_ERR_VALIDATION', message: "body must have required property 'input'" })
  const unknownSession = await service.app.inject({
    method: 'POST', url: '/v1/agents/booking/runs', payload: { input: { city: 'Oslo' }, sessionId: 'no-such-session', resumeRunId: 'no-such-run' }
  })
  t.equal(unknownSession.statusCode, 400, 'the input is checked before the session or the checkpoint')
  t.equal(unknownSession.json().code, 'FST_ERR_VALIDATION')
  await nothingLeft(t, service, calls)
})

t.test('SSE: the same 400 as JSON, before the stream starts', async (t) => {
  const calls: unknown[] = []
  const { service, url } = await listen(t, { agents: { booking: booking(calls) } })
  const stream = await openSse(url, '/v1/agents/booking/runs', { input: { city: 'Oslo', nights: 1.5 } })
  t.equal(stream.status, 400)
  t.match(stream.headers.get('content-type'), /^application\/json/)
  const injected = await service.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: { input: { city: '', nights: 1 }, stream: true } })
  t.equal(injected.statusCode, 400)
  t.match(injected.json(), { code: 'FST_ERR_VALIDATION', message: 'body/input/city must NOT have fewer than 1 characters' })
  await nothingLeft(t, service, calls)
})

t.test('WebSocket: an error frame FST_ERR_VALIDATION naming message/input/…, with the ref; the connection stays open', async (t) => {
  const calls: unknown[] = []
  const { service, url } = await listen(t, { agents: { booking: booking(calls) }, websocket: true })
  const ws = await openWs(url)
  t.teardown(() => ws.socket.close())
  ws.send({ type: 'run.start', ref: 'b1', agent: 'booking', input: { city: 'Oslo', nights: -1 } })
  const error = await ws.next((frame) => frame.type === 'error')
  t.same(error, { type: 'error', ref: 'b1', error: { code: 'FST_ERR_VALIDATION', message: 'message/input/nights must be >= 1' } })
  await nothingLeft(t, service, calls)

  ws.send({ type: 'run.start', ref: 'b2', agent: 'booking', input: { city: 'Oslo', nights: 3 } })
  const completed = await ws.next((frame) => frame.type === 'run.completed')
  t.match(completed, { ref: 'b2', data: { output: '3 nights in Oslo' } })
})

t.test('an agent without a schema takes any input, as before', async (t) => {
  const { app } = build(t)
  for (const input of [null, 'x', { any: ['thing'] }]) {
    t.same((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input } })).json().output, input)
  }
})
