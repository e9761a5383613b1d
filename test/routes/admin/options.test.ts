import { Writable } from 'node:stream'
import Fastify from 'fastify'
import t from 'tap'
import { pino } from 'pino'
import { createAgentService } from '../../../app/service.js'
import { resolveSettings } from '../../../lib/service/settings.js'
import { MemoryAuditStore, MemoryCheckpointStore } from '../../../lib/stores/memory.js'
import { adminApiPlugin } from '../../../routes/admin.js'
import { corePlugin } from '../../../plugins/core.js'
import { requestPipelinePlugin } from '../../../app/pipeline.js'
import { fastifyAgents } from '../../../app/plugin.js'
import { build, echo } from '../../helper.js'

function optionsError (adminApi: unknown): string {
  try {
    resolveSettings({ agents: { echo }, adminApi: adminApi as never })
  } catch (err) {
    return (err as Error).message
  }
  return 'no error'
}

/** A pino logger whose lines land in `lines`, to count what the service logs. */
function capturingLogger (): { logger: ReturnType<typeof pino>, lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line))
      done()
    }
  })
  return { logger: pino({ level: 'info' }, stream), lines }
}

const OPEN_WARNING = /has no adminApi\.bearerToken/

t.test('adminApi prefix rules: each one a clear error at registration', async (t) => {
  const cases: Array<[string, string]> = [
    ['', '/adminApi/prefix must start with "/"'],
    ['admin', '/adminApi/prefix must start with "/"'],
    ['/admin/', '/adminApi/prefix must not end with "/"'],
    ['/', '/adminApi/prefix must not end with "/"'],
    ['admin/', '/adminApi/prefix must start with "/"; /adminApi/prefix must not end with "/"'],
    ['/v1', '/adminApi/prefix must not clash with /v1'],
    ['/v1/admin', '/adminApi/prefix must not clash with /v1'],
    ['/health', '/adminApi/prefix must not clash with /health'],
    ['/health/deep', '/adminApi/prefix must not clash with /health'],
    ['/docs', '/adminApi/prefix must not clash with /docs']
  ]
  for (const [prefix, message] of cases) {
    t.equal(optionsError({ enabled: true, prefix }), `invalid options: ${message}`, JSON.stringify(prefix))
  }
  const segments = '/adminApi/prefix must be "/"-separated segments of A-Z a-z 0-9 . _ ~ - (no empty, "." or ".." segment)'
  for (const prefix of ['/:id', '/ops/*', '//admin', '/ad min', '/a/../b', '/.', '/admin?x=1']) {
    t.equal(optionsError({ enabled: true, prefix }), `invalid options: ${segments}`, JSON.stringify(prefix))
  }
  for (const prefix of ['/admin', '/ops/admin', '/v1x', '/healthz', '/_a-b.c~d']) {
    t.equal(optionsError({ enabled: true, prefix }), 'no error', JSON.stringify(prefix))
  }
  // checked even while disabled: a wrong option is wrong whether or not it is used yet
  t.equal(optionsError({ enabled: false, prefix: '/v1' }), 'invalid options: /adminApi/prefix must not clash with /v1')
})

t.test('adminApi option values', async (t) => {
  t.equal(optionsError(false), 'invalid options: /adminApi must be true or an object')
  t.equal(optionsError('yes'), 'invalid options: /adminApi must be true or an object')
  t.equal(optionsError({ enabled: true, token: 'x' }), 'invalid options: /adminApi/token is not a known option')
  t.equal(optionsError({ enabled: 'yes' }), 'invalid options: /adminApi/enabled must be boolean')
  t.equal(optionsError({ enabled: true, bearerToken: '' }), 'invalid options: /adminApi/bearerToken must NOT have fewer than 1 characters')
  t.equal(optionsError({ enabled: true, bearerToken: 'two words' }), 'invalid options: /adminApi/bearerToken must not contain whitespace')
  t.equal(optionsError({ enabled: true, auditStore: { append () {} } }), 'invalid options: /adminApi/auditStore must have method query()')
  t.equal(optionsError({ enabled: true, checkpointStore: {}, prefix: 'x' }),
    'invalid options: /adminApi/checkpointStore must have methods save(), load(), delete(), list()')
  // one message for every offending path, the admin API's and the others'
  t.throws(() => resolveSettings({ agents: { echo }, adminApi: { enabled: true, prefix: 'x' }, bodyLimit: 0 }),
    { message: 'invalid options: /bodyLimit must be >= 1; /adminApi/prefix must start with "/"' })
  // createAgentService throws synchronously; the plugin form rejects at registration
  t.throws(() => createAgentService({ agents: { echo }, adminApi: { enabled: true, prefix: '/v1' } }), { code: 'FST_AGENTS_INVALID_OPTIONS' })
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await t.rejects(async () => { await app.register(fastifyAgents, { agents: { echo }, adminApi: { enabled: true, prefix: '/health' } }) }, {
    message: 'invalid options: /adminApi/prefix must not clash with /health'
  })
})

t.test('settings: disabled unless enabled: true; prefix, token and stores resolved', async (t) => {
  t.equal(resolveSettings({ agents: { echo } }).adminApi, null)
  t.equal(resolveSettings({ agents: { echo }, adminApi: { prefix: '/ops', bearerToken: 'x' } }).adminApi, null)
  t.equal(resolveSettings({ agents: { echo }, adminApi: { enabled: false } }).adminApi, null)
  const settings = resolveSettings({ agents: { echo }, adminApi: { enabled: true } })
  t.match(settings.adminApi, { prefix: '/admin', bearerToken: null })
  t.equal(settings.adminApi!.auditStore, settings.auditStore, 'one ring buffer, written and read')
  t.equal(settings.adminApi!.checkpointStore, settings.checkpointStore)
  t.ok(Object.isFrozen(settings.adminApi))
})

t.test('audit and checkpoint sources: the admin API reads what the service writes', async (t) => {
  const service = new MemoryAuditStore()
  const adminOnly = new MemoryAuditStore()
  const checkpoints = new MemoryCheckpointStore()
  const adminCheckpoints = new MemoryCheckpointStore()

  let s = resolveSettings({ agents: { echo }, auditStore: service, checkpointStore: checkpoints, adminApi: { enabled: true } })
  t.equal(s.auditStore, service)
  t.equal(s.adminApi!.auditStore, service)
  t.equal(s.adminApi!.checkpointStore, checkpoints)

  s = resolveSettings({ agents: { echo }, adminApi: { enabled: true, auditStore: adminOnly, checkpointStore: adminCheckpoints } })
  t.equal(s.auditStore, adminOnly, 'the service writes to the store named under adminApi')
  t.equal(s.adminApi!.auditStore, adminOnly)
  t.equal(s.checkpointStore, adminCheckpoints, 'runs checkpoint where the admin API reads')
  t.equal(s.adminApi!.checkpointStore, adminCheckpoints)

  // both named: the contract's rule, adminApi.auditStore ?? auditStore for reading, auditStore ?? … for writing
  s = resolveSettings({ agents: { echo }, auditStore: service, adminApi: { enabled: true, auditStore: adminOnly } })
  t.equal(s.auditStore, service)
  t.equal(s.adminApi!.auditStore, adminOnly)

  // an admin-only audit store still receives the service's entries while the API is disabled
  s = resolveSettings({ agents: { echo }, adminApi: { enabled: false, auditStore: adminOnly } })
  t.equal(s.auditStore, adminOnly)
  t.equal(s.adminApi, null)
})

t.test('end to end: entries written through adminApi.auditStore are read back by the admin API', async (t) => {
  const store = new MemoryAuditStore()
  const service = build(t, { adminApi: { enabled: true, auditStore: store } })
  await service.app.inject('/v1/agents')
  await service.app.agentService.audit.flush()
  t.equal(await store.count(), 1)
  const page = (await service.app.inject('/admin/audit')).json()
  t.equal(page.entries.length, 1)
  t.equal(page.entries[0].route, '/v1/agents')
})

t.test('two different audit or checkpoint stores: a warning, since the admin API would not see the service\'s writes', async (t) => {
  const { logger, lines } = capturingLogger()
  const service = build(t, {
    logger,
    auditStore: new MemoryAuditStore(),
    checkpointStore: new MemoryCheckpointStore(),
    adminApi: { enabled: true, bearerToken: 'x', auditStore: new MemoryAuditStore(), checkpointStore: new MemoryCheckpointStore() }
  })
  await service.app.ready()
  const warned = lines.filter((l) => /is not the service's/.test(String(l.msg))).map((l) => l.option)
  t.same(warned, ['adminApi.auditStore', 'adminApi.checkpointStore'])

  const same = new MemoryAuditStore()
  const quiet = capturingLogger()
  const agreeing = build(t, { logger: quiet.logger, auditStore: same, adminApi: { enabled: true, bearerToken: 'x', auditStore: same } })
  await agreeing.app.ready()
  t.equal(quiet.lines.filter((l) => l.level === 40).length, 0, 'the same store twice is fine')
})

t.test('disabled: the admin paths do not exist', async (t) => {
  for (const adminApi of [undefined, { enabled: false }, { prefix: '/ops', bearerToken: 'secret' }]) {
    const service = build(t, adminApi === undefined ? {} : { adminApi })
    for (const path of ['/admin/health', '/admin/stats', '/admin/audit', '/ops/stats']) {
      const response = await service.app.inject({ url: path, headers: { authorization: 'Bearer secret' } })
      t.equal(response.statusCode, 404, `${JSON.stringify(adminApi)} ${path}`)
      t.equal(response.json().code, 'ROUTE_NOT_FOUND')
    }
    const response = await service.app.inject({ method: 'POST', url: '/admin/stats' })
    t.equal(response.statusCode, 404, 'no 405 either')
  }
})

t.test('a custom prefix moves every endpoint', async (t) => {
  const service = build(t, { adminApi: { enabled: true, prefix: '/ops/admin' } })
  for (const name of ['health', 'agents', 'audit', 'sessions', 'approvals', 'checkpoints', 'stats']) {
    t.equal((await service.app.inject(`/ops/admin/${name}`)).statusCode, 200, name)
    t.equal((await service.app.inject(`/admin/${name}`)).statusCode, 404, `not at /admin/${name}`)
  }
})

t.test('no bearerToken: open, and exactly one warning through the app\'s logger', async (t) => {
  const { logger, lines } = capturingLogger()
  const service = build(t, { logger, adminApi: { enabled: true, prefix: '/ops' } })
  await service.app.ready()
  await service.app.inject('/ops/stats')
  await service.app.inject('/ops/health')
  const warnings = lines.filter((l) => OPEN_WARNING.test(String(l.msg)))
  t.equal(warnings.length, 1)
  t.equal(warnings[0]!.level, 40, 'warn')
  t.equal(warnings[0]!.prefix, '/ops')
  t.match(warnings[0]!.msg, /Admin API at \/ops has no adminApi\.bearerToken/)

  const guarded = capturingLogger()
  const closed = build(t, { logger: guarded.logger, adminApi: { enabled: true, bearerToken: 'secret' } })
  await closed.app.ready()
  t.equal(guarded.lines.filter((l) => OPEN_WARNING.test(String(l.msg))).length, 0, 'no warning with a token')
})

t.test('plugin form: mounted in a host app, warning through the host app\'s logger', async (t) => {
  const { logger, lines } = capturingLogger()
  const app = Fastify({ loggerInstance: logger })
  t.teardown(() => app.close())
  await app.register(fastifyAgents, { agents: { echo }, adminApi: { enabled: true } })
  app.get('/mine', async () => ({ mine: true }))
  const stats = await app.inject('/admin/stats')
  t.equal(stats.statusCode, 200)
  t.equal(stats.json().admin.requests, 0, 'counted after its response')
  t.same((await app.inject('/mine')).json(), { mine: true })
  t.equal((await app.inject({ method: 'DELETE', url: '/admin/stats' })).headers.allow, 'GET')
  t.equal(lines.filter((l) => OPEN_WARNING.test(String(l.msg))).length, 1)
})

t.test('adminApiPlugin on its own needs adminApi enabled in the core options', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, { agents: { echo } })
  await app.register(requestPipelinePlugin)
  await t.rejects(async () => { await app.register(adminApiPlugin, { prefix: '/admin' }) }, {
    code: 'FST_AGENTS_INVALID_OPTIONS',
    message: 'invalid options: /adminApi must be { enabled: true } to register the Admin API'
  })
})

t.test('adminApiPlugin on its own: its own 404/405 under its prefix', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(corePlugin, { agents: { echo }, adminApi: { enabled: true, bearerToken: 'secret' } })
  await app.register(requestPipelinePlugin)
  await app.register(adminApiPlugin, { prefix: '/admin' })
  const auth = { authorization: 'Bearer secret' }
  t.equal((await app.inject({ url: '/admin/stats', headers: auth })).statusCode, 200)
  const wrongMethod = await app.inject({ method: 'PUT', url: '/admin/stats', headers: auth })
  t.equal(wrongMethod.statusCode, 405)
  t.equal(wrongMethod.headers.allow, 'GET')
  t.equal((await app.inject({ url: '/admin/nothing', headers: auth })).statusCode, 404)
  t.equal((await app.inject({ url: '/admin/nothing' })).statusCode, 401, 'auth first')
})

// Last: the warning is once per process, so no test above may use the boolean form.
t.test('legacy adminApi: true works, with one deprecation warning per process', async (t) => {
  const warnings: Error[] = []
  const onWarning = (warning: Error): void => { warnings.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })

  const first = build(t, { adminApi: true })
  const second = build(t, { adminApi: true })
  t.same(resolveSettings({ agents: { echo }, adminApi: true }).adminApi?.prefix, '/admin')
  for (const service of [first, second]) {
    const response = await service.app.inject('/admin/stats')
    t.equal(response.statusCode, 200, 'enabled, at /admin, open')
  }
  await new Promise((resolve) => setImmediate(resolve))
  const ours = warnings.filter((w) => (w as Error & { code?: string }).code === 'FASTIFY_AGENTS_DEP001')
  t.equal(ours.length, 1)
  t.equal(ours[0]!.name, 'DeprecationWarning')
  t.equal(ours[0]!.message, 'adminApi: true is deprecated; use adminApi: { enabled: true }')
})

t.test('adminApiPlugin without the core names what is missing', async (t) => {
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await t.rejects(async () => { await app.register(adminApiPlugin, { prefix: '/admin' }) }, { message: /fastify-agents-core/ })
})
