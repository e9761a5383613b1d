import t from 'tap'
import Fastify from 'fastify'
import { createAgentService } from '../../app/service.js'
import { resolveSettings } from '../../lib/service/settings.js'
import { fastifyAgents } from '../../app/plugin.js'
import type { AgentServiceOptions } from '../../lib/core/types.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { echo } from '../helper.js'

function invalid (options: unknown): string {
  try {
    resolveSettings(options as AgentServiceOptions)
  } catch (err) {
    t.equal((err as { code: string }).code, 'FST_AGENTS_INVALID_OPTIONS')
    return (err as Error).message
  }
  throw new Error('expected the options to be rejected')
}

const store = (...methods: string[]): Record<string, () => Promise<void>> => Object.fromEntries(methods.map((m) => [m, async () => {}]))

t.test('every invalid option is named by its JSON pointer', async (t) => {
  const cases: Array<[string, unknown, string | RegExp]> = [
    ['not an object', null, 'invalid options: / must be object'],
    ['no agents', {}, "/ must have required property 'agents'"],
    ['empty agents', { agents: {} }, '/agents must NOT have fewer than 1 properties'],
    ['agent without run', { agents: { echo: { description: 'x' } } }, '/agents/echo must have method run()'],
    ['agent not an object', { agents: { echo: 42 } }, '/agents/echo must be object'],
    ['bad agent name', { agents: { 'Bad Name': echo } }, '/agents/Bad Name is not a valid agent name'],
    ['agent name with a slash', { agents: { 'a/b': echo } }, '/agents/a~1b is not a valid agent name'],
    ['agent name too long', { agents: { ['a'.repeat(65)]: echo } }, /is not a valid agent name/],
    ['unknown option', { agents: { echo }, colour: 'red' }, '/colour is not a known option'],
    ['cors', { agents: { echo }, cors: 42 }, '/cors must be string'],
    ['websocket', { agents: { echo }, websocket: 'yes' }, '/websocket must be boolean'],
    ['requestTimeoutMs', { agents: { echo }, requestTimeoutMs: 0 }, '/requestTimeoutMs must be >= 1'],
    ['requestTimeoutMs float', { agents: { echo }, requestTimeoutMs: 1.5 }, '/requestTimeoutMs must be integer'],
    ['host', { agents: { echo }, host: '' }, '/host must NOT have fewer than 1 characters'],
    ['exposeErrors', { agents: { echo }, exposeErrors: 1 }, '/exposeErrors must be boolean'],
    ['healthTimeoutMs', { agents: { echo }, healthTimeoutMs: -1 }, '/healthTimeoutMs must be >= 1'],
    ['sessionTtlMs', { agents: { echo }, sessionTtlMs: '1h' }, '/sessionTtlMs must be integer'],
    ['bodyLimit', { agents: { echo }, bodyLimit: 0 }, '/bodyLimit must be >= 1'],
    // shorter leases lose runs of live instances on a loaded machine (README, "Background runs, leases and recovery")
    ['runLeaseMs below its minimum', { agents: { echo }, runLeaseMs: 999 }, '/runLeaseMs must be >= 1000'],
    ['trustProxy', { agents: { echo }, trustProxy: 'yes' }, '/trustProxy must be boolean'],
    ['docs', { agents: { echo }, docs: 'on' }, '/docs must be boolean'],
    ['logger', { agents: { echo }, logger: 'info' }, /\/logger must be boolean/],
    ['db shape', { agents: { echo }, db: { query: 1 } }, '/db must have health(), or be a pg Pool, a better-sqlite3 Database or an ioredis client'],
    ['db type', { agents: { echo }, db: 'postgres://x' }, '/db must be object'],
    ['auditStore', { agents: { echo }, auditStore: store('append') }, '/auditStore must have method query()'],
    ['sessionStore', { agents: { echo }, sessionStore: {} }, '/sessionStore must have methods create(), get(), appendTurn(), delete(), list(), listByPrincipal()'],
    ['approvalStore', { agents: { echo }, approvalStore: store('create', 'get', 'listPending', 'decide', 'expire', 'cancel') }, '/approvalStore must have method waitForDecision()'],
    ['checkpointStore', { agents: { echo }, checkpointStore: [] }, /\/checkpointStore must be object/],
    ['rateLimit missing', { agents: { echo }, rateLimit: { intervalMs: 1000 } }, "/rateLimit must have required property 'maxRequests'"],
    ['rateLimit', { agents: { echo }, rateLimit: { maxRequests: 0, intervalMs: 1000 } }, '/rateLimit/maxRequests must be >= 1'],
    ['rateLimit extra', { agents: { echo }, rateLimit: { maxRequests: 1, intervalMs: 1, burst: 2 } }, '/rateLimit/burst is not a known option'],
    ['rateLimit redis', { agents: { echo }, rateLimit: { maxRequests: 1, intervalMs: 1, redis: {} } }, '/rateLimit/redis must have method eval()'],
    ['idempotency', { agents: { echo }, idempotency: { ttlMs: 0 } }, '/idempotency/ttlMs must be >= 1'],
    ['idempotency store', { agents: { echo }, idempotency: { store: {} } }, '/idempotency/store must have methods reserve(), renew(), complete(), release()'],
    ['auth type', { agents: { echo }, auth: 'api-key' }, '/auth must be object'],
    ['auth strategy', { agents: { echo }, auth: { strategy: 'basic' } }, '/auth/strategy must be "api-key" or "jwt"'],
    ['api keys empty', { agents: { echo }, auth: { strategy: 'api-key', keys: [] } }, '/auth/keys must NOT have fewer than 1 items'],
    ['api key with whitespace', { agents: { echo }, auth: { strategy: 'api-key', keys: ['a key'] } }, '/auth/keys/0 must match pattern'],
    ['jwt without a key', { agents: { echo }, auth: { strategy: 'jwt' } }, '/auth must have secret (HS256) or publicKey (RS/ES/EdDSA)'],
    ['jwt bad algorithm', { agents: { echo }, auth: { strategy: 'jwt', secret: 's', algorithms: ['none'] } }, /\/auth\/algorithms\/0 must be equal to constant/],
    ['jwt secret with RS', { agents: { echo }, auth: { strategy: 'jwt', secret: 's', algorithms: ['RS256'] } }, '/auth/algorithms must be HS* with a secret'],
    ['jwt key with HS', { agents: { echo }, auth: { strategy: 'jwt', publicKey: 'k', algorithms: ['HS256'] } }, '/auth/algorithms must not be HS* with a publicKey'],
    ['jwt unknown field', { agents: { echo }, auth: { strategy: 'jwt', secret: 's', roles: [] } }, '/auth/roles is not a known option'],
    ['adminApi type', { agents: { echo }, adminApi: 'yes' }, '/adminApi must be true or an object'],
    ['adminApi false', { agents: { echo }, adminApi: false }, '/adminApi must be true or an object'],
    ['adminApi prefix start', { agents: { echo }, adminApi: { enabled: true, prefix: 'admin' } }, '/adminApi/prefix must start with "/"'],
    ['adminApi prefix end', { agents: { echo }, adminApi: { enabled: true, prefix: '/admin/' } }, '/adminApi/prefix must not end with "/"'],
    ['adminApi prefix root', { agents: { echo }, adminApi: { enabled: true, prefix: '/' } }, '/adminApi/prefix must not end with "/"'],
    ['adminApi prefix /v1', { agents: { echo }, adminApi: { enabled: true, prefix: '/v1' } }, '/adminApi/prefix must not clash with /v1'],
    ['adminApi prefix under /v1', { agents: { echo }, adminApi: { enabled: true, prefix: '/v1/admin' } }, '/adminApi/prefix must not clash with /v1'],
    ['adminApi prefix /health', { agents: { echo }, adminApi: { enabled: true, prefix: '/health' } }, '/adminApi/prefix must not clash with /health'],
    ['adminApi token', { agents: { echo }, adminApi: { enabled: true, bearerToken: '' } }, '/adminApi/bearerToken must NOT have fewer than 1 characters'],
    ['adminApi unknown', { agents: { echo }, adminApi: { enabled: true, token: 'x' } }, '/adminApi/token is not a known option'],
    ['adminApi store', { agents: { echo }, adminApi: { enabled: true, auditStore: {} } }, '/adminApi/auditStore must have methods append(), query()'],
    ['maxRetainedRuns', { agents: { echo }, maxRetainedRuns: 0 }, '/maxRetainedRuns must be >= 1'],
    ['maxRetainedRuns with runStore', { agents: { echo }, maxRetainedRuns: 5, runStore: new MemoryRunStore() },
      '/maxRetainedRuns bounds the memory run store the service makes: with runStore, give the bound to that store (memoryStores({ maxRetainedRuns }))']
  ]
  for (const [name, options, expected] of cases) {
    const message = invalid(options)
    if (typeof expected === 'string') t.ok(message.includes(expected), `${name}: ${message}`)
    else t.match(message, expected, name)
  }
})

t.test('several problems are reported together, in one message', async (t) => {
  const message = invalid({ agents: { echo }, requestTimeoutMs: 0, rateLimit: { maxRequests: 0, intervalMs: 1 }, adminApi: { prefix: 'x/' } })
  t.match(message, /^invalid options: /)
  for (const part of ['/requestTimeoutMs must be >= 1', '/rateLimit/maxRequests must be >= 1', '/adminApi/prefix must start with "/"', '/adminApi/prefix must not end with "/"']) {
    t.ok(message.includes(part), part)
  }
})

t.test('valid options resolve to frozen settings with defaults', async (t) => {
  const settings = resolveSettings({ agents: { echo } })
  t.ok(Object.isFrozen(settings))
  t.match(settings, {
    requestTimeoutMs: null, host: '0.0.0.0', exposeErrors: false, healthTimeoutMs: 2000, sessionTtlMs: 1_800_000,
    bodyLimit: 1_048_576, trustProxy: false, docs: false, websocket: false, adminApi: null, auth: null, rateLimit: null, cors: null, idempotency: null, dbProbe: null
  })
  const withIdempotency = resolveSettings({ agents: { echo }, idempotency: {} })
  t.match(withIdempotency.idempotency, { ttlMs: 86_400_000, lockLeaseMs: 60_000 })
  t.ok(withIdempotency.idempotency?.store)
})

t.test('the audit source rule: the admin API reads what the service writes', async (t) => {
  const a = store('append', 'query')
  const b = store('append', 'query')
  // the stores are used through their deadline wrapper (lib/stores/deadline.ts): one wrapper per store
  const onlyAdmin = resolveSettings({ agents: { echo }, adminApi: { enabled: true, auditStore: a as never } })
  t.equal(onlyAdmin.adminApi?.auditStore, onlyAdmin.auditStore, 'the service writes to adminApi.auditStore when it has no auditStore')
  t.equal(onlyAdmin.stores[0], a)
  const onlyService = resolveSettings({ agents: { echo }, auditStore: b as never, adminApi: { enabled: true } })
  t.equal(onlyService.adminApi?.auditStore, onlyService.auditStore, 'the admin API reads the service store')
  t.equal(onlyService.stores[0], b)
  const disabled = resolveSettings({ agents: { echo }, adminApi: { enabled: false, prefix: '/ops' } })
  t.equal(disabled.adminApi, null)
})

t.test('createAgentService throws synchronously; the plugin rejects at registration; no port is bound', async (t) => {
  t.throws(() => createAgentService({ agents: {} }), { code: 'FST_AGENTS_INVALID_OPTIONS', message: /\/agents must NOT have fewer than 1 properties/ })
  const app = Fastify({ logger: false })
  await t.rejects(async () => { await app.register(fastifyAgents, { agents: { echo }, requestTimeoutMs: -5 }) }, { message: /\/requestTimeoutMs must be >= 1/ })
  t.equal(app.server.listening, false)
})

t.test('issue 23: maxRetainedRuns is a top-level option, bounding the memory run store the service makes', async (t) => {
  const service = createAgentService({ agents: { echo }, logger: false, maxRetainedRuns: 2 })
  t.teardown(() => service.close(0))
  const runIds: string[] = []
  for (let i = 0; i < 3; i++) {
    const res = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: i } })
    runIds.push(res.json().runId)
  }
  const statuses = await Promise.all(runIds.map(async (runId) => (await service.app.inject(`/v1/runs/${runId}`)).statusCode))
  t.same(statuses, [404, 200, 200], 'the longest-ended dropped past the bound')
})

t.test('resumable agents whose runs are shared but whose checkpoints stay in memory: a warning once the app is ready', async (t) => {
  const shared = store('create', 'reopen', 'start', 'claim', 'append', 'finish', 'renew', 'lapsed', 'requeue', 'abandon', 'get', 'spec', 'events', 'cancel', 'watch', 'watchSession', 'watchQueue', 'listBySession', 'list', 'purge', 'delete')
  const checkpoints = store('save', 'load', 'delete', 'list')
  const resumable = { ...echo, resumable: true }
  t.match(resolveSettings({ agents: { echo, resumable }, runStore: shared as never }).warnings, [/agents resumable are resumable and their runs shared with other instances \(runStore\), but checkpoints are kept in this process's memory/])
  t.same(resolveSettings({ agents: { echo, resumable }, runStore: shared as never, checkpointStore: checkpoints as never }).warnings, [], 'a checkpoint store of their own')
  t.same(resolveSettings({ agents: { echo, resumable } }).warnings, [], 'runs in this process\'s memory too')
  t.same(resolveSettings({ agents: { echo }, runStore: shared as never }).warnings, [], 'nothing resumable')

  const lines: string[] = []
  // a run store that is not the memory one (a SQLite file's, in memory here)
  const { runStore } = sqliteStores(':memory:')
  const service = createAgentService({ agents: { resumable }, runStore, logger: { level: 'warn', stream: { write: (line: string) => lines.push(line) } } as never })
  t.teardown(() => service.close(0))
  await service.app.ready()
  t.match(lines.map((line) => JSON.parse(line) as { level: number, msg: string }), [{ level: 40, msg: /^agents resumable are resumable/ }], 'logged once, as a warning')
})
