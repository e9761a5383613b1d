import t from 'tap'
import Fastify from 'fastify'
import agentService, { agentsPlugin, corePlugin, healthPlugin, requestContextPlugin, sessionsPlugin } from '../../index.js'
import { echo, parseSse } from '../helper.js'

t.test('mounts into an existing app without touching its routes, validator or 404s', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  app.post('/host/items', {
    schema: {
      querystring: { type: 'object', properties: { n: { type: 'integer' } } },
      body: { type: 'object', properties: { name: { type: 'string' } }, additionalProperties: false }
    }
  }, async (request) => ({ query: request.query, body: request.body }))
  await app.register(agentService, { agents: { echo } })

  const host = await app.inject({ method: 'POST', url: '/host/items?n=5', payload: { name: 'x', extra: true } })
  t.equal(host.statusCode, 200)
  t.same(host.json(), { query: { n: 5 }, body: { name: 'x' } }, "the host keeps Fastify's default Ajv (coercion, stripping)")
  t.equal(host.headers['x-request-id'], undefined, 'the host routes are not ours to decorate')

  const strict = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, extra: true } })
  t.equal(strict.statusCode, 400, 'our routes stay strict')
  t.ok(strict.headers['x-request-id'])

  const hostMissing = await app.inject({ method: 'GET', url: '/host/missing' })
  t.equal(hostMissing.statusCode, 404)
  t.same(Object.keys(hostMissing.json()).sort(), ['error', 'message', 'statusCode'], "the host's own 404 elsewhere")
  const ourMissing = await app.inject({ method: 'GET', url: '/v1/missing' })
  t.match(ourMissing.json(), { statusCode: 404, code: 'ROUTE_NOT_FOUND', requestId: ourMissing.headers['x-request-id'] })

  t.ok(app.agentService, 'the shared state is a decorator on the host')
  t.ok(app.hasPlugin('fastify-agents'))
  const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'hi' }, headers: { accept: 'text/event-stream' } })
  t.equal(parseSse(res.body).at(-1)!.event, 'run.completed')
})

t.test('the host app drains runs on close()', async (t) => {
  const app = Fastify({ logger: false })
  let aborted = false
  await app.register(agentService, {
    agents: { stuck: { run: (_i, ctx) => new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => { aborted = true; reject(ctx.signal.reason) })) } },
    drainTimeoutMs: 50
  })
  await app.ready()
  const reply = app.inject({ method: 'POST', url: '/v1/agents/stuck/runs', payload: { input: 1 } })
  await new Promise((resolve) => setTimeout(resolve, 20))
  await app.close()
  const res = await reply
  t.ok(aborted)
  t.equal(res.statusCode, 503)
  t.equal(res.json().code, 'SHUTDOWN')
})

t.test('the plugins register on their own, on top of the core', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, { agents: { echo } })
  await app.register(requestContextPlugin)
  await app.register(healthPlugin, { prefix: '/ready' })
  await app.register(async (api) => {
    await api.register(agentsPlugin)
    await api.register(sessionsPlugin)
  }, { prefix: '/api' })
  t.equal((await app.inject({ method: 'GET', url: '/ready' })).json().status, 'ok')
  const run = await app.inject({ method: 'POST', url: '/api/agents/echo/runs', payload: { input: 'solo' } })
  t.equal(run.json().output, 'solo')
  t.ok(run.headers['x-request-id'])
  t.equal((await app.inject({ method: 'GET', url: `/api/sessions/${run.json().sessionId}` })).json().turns, 1)
})

t.test('a plugin without the core names what is missing', async (t) => {
  const app = Fastify({ logger: false })
  await t.rejects(async () => { await app.register(agentsPlugin) }, /The dependency 'fastify-agents-core' of plugin 'fastify-agents-agents' is not registered/)
})
