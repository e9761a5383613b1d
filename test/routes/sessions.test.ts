// GET /v1/sessions: the caller's own sessions (never another principal's), most recently active first, of one agent
// when asked, paged by the listings' cursors. The stores' side is the conformance suite's (listByPrincipal).
import t from 'tap'
import { build, echo, principalFromHeader, sleep } from '../helper.js'

const alice = { 'x-test-principal': 'alice' }
const bob = { 'x-test-principal': 'bob' }

t.test('the caller\'s own sessions, most recently active first, of one agent when asked, paged', async (t) => {
  const { app } = build(t, { agents: { echo, other: echo } })
  principalFromHeader(app)
  const create = async (headers: Record<string, string>, payload: Record<string, unknown>): Promise<string> => {
    const response = await app.inject({ method: 'POST', url: '/v1/sessions', headers, payload })
    await sleep(3)
    return response.json().id
  }
  const a1 = await create(alice, { agent: 'echo', metadata: { title: 'first' } })
  const a2 = await create(alice, { agent: 'other' })
  const a3 = await create(alice, {})
  await create(bob, { agent: 'echo' })
  // a run in a1 makes it the most recently active
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', headers: alice, payload: { input: 1, sessionId: a1 } })

  const all = await app.inject({ url: '/v1/sessions', headers: alice })
  t.equal(all.statusCode, 200)
  t.same(all.json().sessions.map((s: { id: string }) => s.id), [a1, a3, a2])
  t.match(all.json().sessions[0], { id: a1, agent: 'echo', principal: 'alice', turns: 1, metadata: { title: 'first' } })
  t.notOk('messages' in all.json().sessions[0], 'without messages')
  t.equal(all.json().nextCursor, null)

  t.same((await app.inject({ url: '/v1/sessions?agent=echo', headers: alice })).json().sessions.map((s: { id: string }) => s.id), [a1])
  t.same((await app.inject({ url: '/v1/sessions?agent=other', headers: alice })).json().sessions.map((s: { id: string }) => s.id), [a2])
  t.same((await app.inject({ url: '/v1/sessions', headers: { 'x-test-principal': 'carol' } })).json(), { sessions: [], nextCursor: null })

  const first = (await app.inject({ url: '/v1/sessions?limit=2', headers: alice })).json()
  t.same(first.sessions.map((s: { id: string }) => s.id), [a1, a3])
  t.type(first.nextCursor, 'string')
  const rest = (await app.inject({ url: `/v1/sessions?limit=2&cursor=${first.nextCursor as string}`, headers: alice })).json()
  t.same(rest, { sessions: [all.json().sessions[2]], nextCursor: null })
  // another principal holding alice's cursor pages through their own sessions only
  t.same((await app.inject({ url: `/v1/sessions?cursor=${first.nextCursor as string}`, headers: bob })).json().sessions, [])
})

t.test('bad input: a 400 naming it, an unknown agent 404, before any store is read', async (t) => {
  const { app } = build(t)
  const bad = async (url: string) => (await app.inject({ url })).json()
  t.match(await bad('/v1/sessions?cursor=garbage'), { statusCode: 400, code: 'FA_INVALID_CURSOR', message: 'cursor must be the nextCursor of a previous page, as it came' })
  t.match(await bad('/v1/sessions?limit=0'), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
  t.match(await bad('/v1/sessions?limit=101'), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
  t.match(await bad('/v1/sessions?agent=Not%20An%20Agent'), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
  t.match(await bad('/v1/sessions?sort=asc'), { statusCode: 400 })
  t.match(await bad('/v1/sessions?agent=nobody'), { statusCode: 404, code: 'AGENT_NOT_FOUND' })
})

t.test('under api-key auth each key lists its own; without one, 401', async (t) => {
  const keys = ['alice-key-0123456789', 'bob-key-0123456789']
  const { app } = build(t, { auth: { strategy: 'api-key', keys } })
  const created = (await app.inject({ method: 'POST', url: '/v1/sessions', headers: { 'x-api-key': keys[0]! }, payload: {} })).json()
  t.same((await app.inject({ url: '/v1/sessions', headers: { 'x-api-key': keys[0]! } })).json().sessions.map((s: { id: string }) => s.id), [created.id])
  t.same((await app.inject({ url: '/v1/sessions', headers: { 'x-api-key': keys[1]! } })).json().sessions, [])
  t.equal((await app.inject({ url: '/v1/sessions' })).statusCode, 401)
})

t.test('the OpenAPI document has GET /v1/sessions and a chat\'s messages, with their schemas', async (t) => {
  const { app } = build(t, { docs: true })
  const doc = (await app.inject('/docs/json')).json()
  const sessions = doc.paths['/v1/sessions'].get
  t.same(sessions.parameters.map((p: { name: string }) => p.name).sort(), ['agent', 'cursor', 'limit'])
  t.equal(sessions.responses['200'].content['application/json'].schema.$ref, '#/components/schemas/SessionPage')
  t.ok(sessions.responses['400'])
  const messages = doc.paths['/v1/agents/{name}/chat/{id}/messages'].get
  t.equal(messages.responses['200'].content['application/json'].schema.$ref, '#/components/schemas/ChatMessages')
  t.match(doc.components.schemas.ChatMessages, { type: 'array', items: { properties: { role: {}, parts: {} } } })
})
