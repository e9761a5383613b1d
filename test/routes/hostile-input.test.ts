import t from 'tap'
import type * as Tap from 'tap'
import Fastify from 'fastify'
import { fastifyAgents } from '../../app/plugin.js'
import type { Agent } from '../../lib/core/types.js'
import { jsonDeeperThan } from '../../lib/core/validation.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { build, listen } from '../helper.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { openWs } from '../helpers/streams.js'

const hasPg = await requirePg(t)

function counting (): Agent & { runs: number } {
  const agent = { runs: 0, async run (input: unknown) { agent.runs++; return { output: input } } }
  return agent
}

const nested = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth)

t.test('JSON nested deeper than maxJsonDepth is 400 JSON_TOO_DEEP before any agent runs', async (t) => {
  const agent = counting()
  const service = build(t, { agents: { agent } })
  const post = (body: string) => service.app.inject({ method: 'POST', url: '/v1/agents/agent/runs', headers: { 'content-type': 'application/json' }, body })
  const deep = await post(`{"input":${nested(10_000)}}`)
  t.equal(deep.statusCode, 400)
  t.match(deep.json(), { code: 'JSON_TOO_DEEP', message: 'The JSON is nested deeper than 64 levels', requestId: String })
  t.equal(deep.headers['x-request-id'], deep.json().requestId)
  t.equal(agent.runs, 0, 'no agent ran')
  // the body's object is a level: 63 more fit
  t.equal((await post(`{"input":${nested(63)}}`)).statusCode, 200)
  t.equal((await post(`{"input":${nested(64)}}`)).json().code, 'JSON_TOO_DEEP')
  t.equal((await post(`{"input":"${'['.repeat(1_000)}\\"${'{'.repeat(1_000)}"}`)).statusCode, 200, 'brackets in strings are not nesting')
  t.equal(agent.runs, 2)
  t.equal((await post('{"input":')).json().code, 'FST_ERR_CTP_INVALID_JSON_BODY', 'what is not JSON is still the parser\'s to refuse')
  t.equal((await post('{"input":1,"__proto__":{"x":1}}')).statusCode, 400, 'prototype poisoning is still refused')
  t.equal((await service.app.inject({ method: 'POST', url: '/v1/agents/agent/runs', headers: { 'content-type': 'application/json' } })).json().code, 'FST_ERR_CTP_EMPTY_JSON_BODY')
})

t.test('maxJsonDepth is an option; in plugin mode only the service\'s routes are checked', async (t) => {
  const agent = counting()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyAgents, { agents: { agent }, maxJsonDepth: 3 })
  app.post('/host', async (request) => request.body)
  const post = (url: string, body: string) => app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, body })
  t.equal((await post('/v1/agents/agent/runs', `{"input":${nested(2)}}`)).statusCode, 200)
  t.equal((await post('/v1/agents/agent/runs', `{"input":${nested(3)}}`)).json().code, 'JSON_TOO_DEEP')
  t.equal((await post('/host', nested(100))).statusCode, 200, 'the host\'s own routes keep the host\'s parser')
})

t.test('a WebSocket message nested too deep is an error frame; the connection stays', async (t) => {
  const agent = counting()
  const { url } = await listen(t, { agents: { agent }, websocket: true, maxJsonDepth: 8 })
  const ws = await openWs(url)
  t.teardown(() => ws.socket.close())
  ws.send(`{"type":"run.start","ref":"r","agent":"agent","input":${nested(20)}}`)
  const frame = await ws.next((f) => f.type === 'error')
  t.match(frame, { error: { code: 'JSON_TOO_DEEP' } })
  ws.send({ type: 'run.start', ref: 'ok', agent: 'agent', input: 1 })
  await ws.next((f) => f.type === 'run.completed')
  t.equal(agent.runs, 1)
})

/** Text no store keeps as it is, at every place a request carries it; each refused before the agent runs. */
const hostile: Array<[string, string, string]> = [
  ['NUL in the input', '{"input":"a\\u0000b"}', 'body/input'],
  ['a lone surrogate in the metadata', '{"input":1,"metadata":{"k":"\\ud800"}}', 'body/metadata/k'],
  ['NUL in a key', '{"input":{"a\\u0000":1}}', 'body/input/a\u0000'],
  ['a lone low surrogate in the session id', '{"input":1,"sessionId":"\\udc00x"}', 'body/sessionId']
]

async function refusesHostileText (t: Tap.Test, service: ReturnType<typeof build>, agent: { runs: number }): Promise<void> {
  for (const [name, body, path] of hostile) {
    const res = await service.app.inject({ method: 'POST', url: '/v1/agents/agent/runs', headers: { 'content-type': 'application/json', 'idempotency-key': `k-${name}` }, body })
    t.equal(res.statusCode, 400, name)
    t.match(res.json(), { code: 'FA_UNSTORABLE_TEXT', message: `${path} cannot be stored: it holds ${name.startsWith('NUL') ? 'a NUL character' : 'a lone surrogate'}` }, name)
  }
  const query = await service.app.inject({ method: 'GET', url: '/v1/agents?x=a%00b' })
  t.match(query.json(), { statusCode: 400, code: 'FA_UNSTORABLE_TEXT', message: 'querystring/x cannot be stored: it holds a NUL character' })
  const param = await service.app.inject({ method: 'GET', url: '/v1/sessions/a%00b' })
  t.match(param.json(), { statusCode: 400, code: 'FA_UNSTORABLE_TEXT' })
  t.equal(agent.runs, 0, 'no agent ran')
  const fine = await service.app.inject({ method: 'POST', url: '/v1/agents/agent/runs', headers: { 'content-type': 'application/json' }, body: '{"input":"caf\\u00e9 \\ud83d\\ude00"}' })
  t.equal(fine.statusCode, 200)
  t.equal(fine.json().output, 'café 😀', 'escapes that are text are kept')
}

t.test('NUL and lone surrogates in input, metadata, ids, keys and query parameters: 400 before the agent runs', async (t) => {
  const agent = counting()
  await refusesHostileText(t, build(t, { agents: { agent }, idempotency: {} }), agent)
})

t.test('the same with the PostgreSQL stores (which cannot keep NUL): 400, never a 500 after the run', { skip: !hasPg }, async (t) => {
  const stores = postgresStores({ connectionString: pgUrl(), schema: withPgSchema(t) })
  t.teardown(async () => { await Promise.all(Object.values(stores).map((s) => ('store' in s ? s.store : s).close?.())) })
  const agent = counting()
  const { webhookStore: _outbox, ...used } = stores
  await refusesHostileText(t, build(t, { agents: { agent }, ...used }), agent)
})

t.test('a WebSocket message holding NUL is an error frame', async (t) => {
  const agent = counting()
  const { url } = await listen(t, { agents: { agent }, websocket: true })
  const ws = await openWs(url)
  t.teardown(() => ws.socket.close())
  ws.send('{"type":"run.start","ref":"r","agent":"agent","input":"\\u0000"}')
  t.match(await ws.next((f) => f.type === 'error'), { error: { code: 'FA_UNSTORABLE_TEXT' } })
  t.equal(agent.runs, 0)
})

t.test('jsonDeeperThan', async (t) => {
  t.equal(jsonDeeperThan('{"a":[{"b":[]}]}', 4), false)
  t.equal(jsonDeeperThan('{"a":[{"b":[]}]}', 3), true)
  t.equal(jsonDeeperThan('["\\\\", [[]]]', 2), true, 'an escaped backslash ends before the quote')
  t.equal(jsonDeeperThan('"[[[[', 1), false, 'an unterminated string')
  t.equal(jsonDeeperThan('["a\\"[[[", [[]]]', 2), true, 'an escaped quote does not end the string')
  t.equal(jsonDeeperThan('["a\\"[[[", [[]]]', 3), false)
})
