import { spawn } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import Database from 'better-sqlite3'
import Fastify from 'fastify'
import agentService, { agentsPlugin, corePlugin, healthPlugin, requestPipelinePlugin, sessionsPlugin, sqliteStores } from '../../index.js'
import { echo, eventually, parseSse } from '../helper.js'
import { pgChildEnv, pgUrl, requirePg, withPgSchema } from '../helpers/services.js'

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
  // closed once the run is in flight (on a busy machine the request takes a while to get there)
  await eventually(() => app.agentService.runs.size === 1, 10_000, 'the run in flight')
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
  await app.register(requestPipelinePlugin)
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

t.test('app.close() closes the stores the plugin was given that opened their own connection, never yours', async (t) => {
  const dir = t.testdir({})
  const owned = sqliteStores(join(dir, 'owned.db'))
  const database = new Database(join(dir, 'yours.db'))
  t.teardown(() => database.close())
  const yours = sqliteStores(database)
  const app = Fastify({ logger: false })
  await app.register(agentService, { agents: { echo }, ...owned, idempotency: yours.idempotency, approvalStore: yours.approvalStore })
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 }, headers: { 'idempotency-key': 'k' } })).statusCode, 200)
  await app.close()
  await t.rejects(owned.sessionStore.get('x'), { code: 'FA_STORE_CLOSED' }, 'a store made from a filename is closed')
  t.equal(database.open, true, 'your Database stays open')
  t.same(await yours.approvalStore.listPending(), [], 'and the stores on it usable')
})

// The plugin in a process of its own: after app.close() nothing of a store opened from a URL (its pool, the client
// listening for approval decisions) keeps the process alive.
const exitScript = (url: string, schema: string): string => `
import Fastify from 'fastify'
import agentService from ${JSON.stringify(new URL('../../app/plugin.js', import.meta.url).href)}
import { PostgresApprovalStore } from ${JSON.stringify(new URL('../../lib/stores/postgres.js', import.meta.url).href)}
const asker = { async run (_input, ctx) { const decision = await ctx.requestApproval({ action: 'x', timeoutMs: 200 }); return { output: decision.status } } }
const app = Fastify({ logger: false })
await app.register(agentService, { agents: { asker }, approvalStore: new PostgresApprovalStore(${JSON.stringify(url)}, { schema: ${JSON.stringify(schema)} }) })
const res = await app.inject({ method: 'POST', url: '/v1/agents/asker/runs', payload: { input: 1 } })
if (res.json().output !== 'expired') throw new Error(res.body)
await app.close()
console.log('closed')
`

t.test('plugin mode: app.close() lets the process exit with a PostgreSQL approval store made from a URL', async (t) => {
  if (!await requirePg(t)) return
  const schema = withPgSchema(t)
  const child = spawn(process.execPath, ['--input-type=module', '-e', exitScript(pgUrl(), schema)], { env: { ...process.env, ...pgChildEnv(schema) }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  let closedAt = 0
  child.stdout.on('data', (chunk: Buffer) => { if (chunk.toString().includes('closed')) closedAt = Date.now() })
  const code = await Promise.race([
    new Promise<number | null>((resolve) => child.once('exit', resolve)),
    new Promise<string>((resolve) => setTimeout(() => resolve('still running'), 60_000).unref())
  ])
  t.equal(code, 0)
  // the pool's idle clients would keep it for 10 s (pg's idleTimeoutMillis), the listening one for ever
  t.ok(closedAt > 0 && Date.now() - closedAt < 5_000, `exited ${Date.now() - closedAt} ms after app.close()`)
})

t.test('a background run\'s Location sits under the agents plugin\'s own prefix, with or without a trailing slash', async (t) => {
  for (const prefix of ['/api', '/api/']) {
    const app = Fastify({ logger: false })
    t.teardown(() => app.close())
    await app.register(corePlugin, { agents: { echo } })
    await app.register(requestPipelinePlugin)
    await app.register(agentsPlugin, { prefix })
    await app.ready()
    const res = await app.inject({ method: 'POST', url: '/api/agents/echo/runs', payload: { input: 1, background: true } })
    t.equal(res.statusCode, 202, prefix)
    t.equal(res.headers.location, `/api/runs/${res.json().runId}`, prefix)
  }
})
