import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { mkdtemp, readFile, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import t from 'tap'
import type { Test } from 'tap'
import { buildServeOptions, isLoopback, probeStores, prettyLogStream, redact, run, usage } from '../../app/cli.js'
import { demoAgents } from '../../app/demo-agents.js'
import { closeStores, echo, eventually, parseSse } from '../helper.js'

// the compiled bin beside the compiled tests (npm test runs them from .build/)
const bin = fileURLToPath(new URL('../../bin/fastify-agents.js', import.meta.url))
// every bin this file starts is a process loading the whole service: on a busy machine more than the suite's 60 s
t.setTimeout(180_000)
import { pgUrl, redisUrl, requirePg, requireRedis, withPgSchema, withRedisPrefix } from '../helpers/services.js'

function collect (stream: PassThrough): () => string {
  let text = ''
  stream.on('data', (chunk: Buffer) => { text += chunk.toString() })
  return () => text
}

t.test('flags become options', async (t) => {
  const plan = buildServeOptions({}, { echo })
  t.match(plan, { port: 3000, host: '0.0.0.0', drainTimeoutMs: 30_000, stores: [], portSource: '--port' })
  t.same(plan.options.idempotency, {}, 'idempotency keys are honoured by default')
  t.equal(plan.options.auth, undefined)
  t.equal(plan.options.adminApi, undefined)
  t.equal(plan.options.websocket, undefined)
  const full = buildServeOptions({
    port: '8080', host: '127.0.0.1', drainTimeout: '500', apiKeys: ['k1', 'k2'], adminToken: 'tok', db: '', redis: '', websocket: true,
    cors: 'https://app.example', docs: true, publicUrl: 'https://api.example', requestTimeout: '2000', rateLimit: '100/60000', storeTimeout: '750'
  }, { echo })
  t.match(full, { port: 8080, host: '127.0.0.1', drainTimeoutMs: 500 })
  t.match(full.options, {
    websocket: true, cors: 'https://app.example', docs: true, publicUrl: 'https://api.example', requestTimeoutMs: 2000,
    rateLimit: { maxRequests: 100, intervalMs: 60_000 }, storeTimeoutMs: 750
  })
  t.same(full.options.auth, { strategy: 'api-key', keys: ['k1', 'k2'] })
  t.same(full.options.adminApi, { enabled: true, bearerToken: 'tok' })
  t.same(buildServeOptions({ jwtSecret: 's3cret' }, { echo }).options.auth, { strategy: 'jwt', secret: 's3cret' })
  const keyFile = join(t.testdir({ 'key.pem': 'PEM' }), 'key.pem')
  t.same(buildServeOptions({ jwtPublicKey: keyFile }, { echo }).options.auth, { strategy: 'jwt', publicKey: 'PEM' })

  t.throws(() => buildServeOptions({ port: 'http' }, { echo }), /^--port must be an integer from 0 to 65535, got "http"$/)
  t.throws(() => buildServeOptions({ port: '70000' }, { echo }), /--port must be an integer from 0 to 65535/)
  t.throws(() => buildServeOptions({ port: 'abc' }, { echo }, { port: 'PORT' }), /^PORT must be an integer/, 'the variable that was used')
  t.throws(() => buildServeOptions({ drainTimeout: '-1' }, { echo }), /--drain-timeout must be an integer from 0 up/)
  t.throws(() => buildServeOptions({ requestTimeout: '0' }, { echo }, { requestTimeout: 'REQUEST_TIMEOUT_MS' }), /REQUEST_TIMEOUT_MS must be an integer from 1 up, got "0"/)
  t.throws(() => buildServeOptions({ storeTimeout: '5s' }, { echo }), /--store-timeout must be an integer/)
  t.throws(() => buildServeOptions({ rateLimit: '100' }, { echo }, { rateLimit: 'RATE_LIMIT' }), /RATE_LIMIT must be <requests>\/<milliseconds>, e.g. 100\/60000, got "100"/)
  t.throws(() => buildServeOptions({ rateLimit: '0/1000' }, { echo }), /--rate-limit must be/)
  t.throws(() => buildServeOptions({ db: 'mysql://u:pw@x' }, { echo }), /--db must be file:<path> or postgres:\/\/…, got "mysql:\/\/u:\*\*\*@x"/, 'without the password')
  t.throws(() => buildServeOptions({ redis: 'http://x' }, { echo }, { redis: 'REDIS_URL' }), /REDIS_URL must be redis:\/\/… or rediss:\/\/…/)
  t.throws(() => buildServeOptions({ apiKeys: ['k'], jwtSecret: 's' }, { echo }), /--api-key and --jwt-secret are two auth strategies: choose one/)
  t.throws(() => buildServeOptions({ apiKeys: ['k'], jwtPublicKey: keyFile }, { echo }), /--api-key and --jwt-public-key/)
  t.throws(() => buildServeOptions({ jwtSecret: 's', jwtPublicKey: keyFile }, { echo }), /--jwt-secret and --jwt-public-key: choose one/)
  t.throws(() => buildServeOptions({ jwtPublicKey: '/nope.pem' }, { echo }, { jwtPublicKey: 'JWT_PUBLIC_KEY_FILE' }), /JWT_PUBLIC_KEY_FILE \/nope\.pem: ENOENT/)
  t.equal(redact('postgres://user:secret@db:5432/x'), 'postgres://user:***@db:5432/x')
  t.equal(redact('redis://:pw@cache'), 'redis://:***@cache')
  t.equal(redact('file:./data.db'), 'file:./data.db')
})

t.test('--db file: backs every store and the health probe with SQLite', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fa-cli-'))
  const plan = buildServeOptions({ db: `file:${join(dir, 'data.db')}` }, { echo })
  t.teardown(() => closeStores(plan.stores.map((s) => s.set)))
  t.equal(plan.stores.length, 1)
  t.ok(plan.options.auditStore && plan.options.sessionStore && plan.options.approvalStore && plan.options.checkpointStore && plan.options.idempotency?.store && plan.options.runStore)
  t.equal(await (plan.options.db as { health: () => Promise<boolean> }).health(), true)
  await probeStores(plan.stores, 1000)
})

t.test('probeStores names the flag of a store that cannot be used', async (t) => {
  const plan = buildServeOptions({ db: 'file:/dev/null/nowhere/data.db' }, { echo }, { db: 'DATABASE_URL' })
  t.teardown(() => closeStores(plan.stores.map((s) => s.set)))
  await t.rejects(probeStores(plan.stores, 1000), /^DATABASE_URL file:\/dev\/null\/nowhere\/data\.db cannot be used: /)
  const hanging = [{ source: '--redis', url: 'redis://x', set: { sessionStore: { probe: () => new Promise(() => {}) } as never } }]
  await t.rejects(probeStores(hanging, 50), /^--redis redis:\/\/x cannot be used: no answer within 50 ms$/)
})

t.test('--db postgres:// and --redis, in a schema and under a key prefix of their own', async (t) => {
  if (!await requirePg(t) || !await requireRedis(t)) return
  const dbSchema = withPgSchema(t)
  const redisPrefix = withRedisPrefix(t)
  const plan = buildServeOptions({ db: pgUrl(), dbSchema, redis: redisUrl(), redisPrefix }, { echo })
  t.teardown(() => closeStores(plan.stores.map((s) => s.set)))
  t.match(plan.options.auditStore, { schema: dbSchema, tablePrefix: 'fa_' }, '--db-schema')
  t.match(plan.options.runStore, { prefix: redisPrefix }, '--redis-prefix')
  t.equal(plan.stores.length, 2)
  t.equal(plan.options.sessionStore, plan.stores[1]!.set.sessionStore, 'redis backs sessions')
  t.equal(plan.options.idempotency?.store, plan.stores[1]!.set.idempotency!.store, 'and idempotency')
  t.equal(plan.options.runStore, plan.stores[1]!.set.runStore, 'and runs')
  t.equal(plan.options.auditStore, plan.stores[0]!.set.auditStore, 'postgres backs the audit log')
  t.equal(plan.options.webhookStore, undefined, 'no webhooks served: no outbox opened')
  t.ok(plan.stores.every((s) => s.set.webhookStore === undefined))
  t.ok(plan.stores.every((s) => s.set.quotaStore === undefined), 'no quotas: no quota store opened')
  await probeStores(plan.stores, 2000)
  const client = new pg.Client(pgUrl())
  await client.connect()
  t.teardown(() => client.end())
  const tables = await client.query<{ name: string }>('SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1', [dbSchema])
  t.ok(tables.rows.some((row) => row.name === 'fa_audit'), 'the tables are in that schema')
})

t.test('--db-schema and --redis-prefix (or their variables): only with the store they name; a bad schema names the flag', async (t) => {
  t.throws(() => buildServeOptions({ dbSchema: 'app' }, { echo }), /^--db-schema names a PostgreSQL schema: it needs --db postgres:\/\/…$/)
  t.throws(() => buildServeOptions({ db: 'file:./x.db', dbSchema: 'app' }, { echo }, { dbSchema: 'DATABASE_SCHEMA', db: 'DATABASE_URL' }),
    /^DATABASE_SCHEMA names a PostgreSQL schema: it needs DATABASE_URL postgres:\/\/…$/)
  t.throws(() => buildServeOptions({ redisPrefix: 'app:' }, { echo }, { redisPrefix: 'REDIS_PREFIX' }), /^REDIS_PREFIX needs --redis redis:\/\/…$/)
  t.throws(() => buildServeOptions({ db: 'postgres://x/y', dbSchema: 'no-dashes' }, { echo }), /^--db-schema: schema must be letters, digits and _/)
  const defaults = buildServeOptions({ db: 'postgres://x/y', redis: 'redis://x' }, { echo })
  t.teardown(() => closeStores(defaults.stores.map((s) => s.set)))
  t.match(defaults.options.auditStore, { schema: 'public' }, 'by default, the defaults (nothing opened: nothing made)')
  t.match(defaults.options.sessionStore, { prefix: 'fa:' })
  t.match(usage, /\[--db-schema NAME\] \[--redis redis:\/\/…\] \[--redis-prefix PREFIX\][^]*DATABASE_SCHEMA[^]*REDIS_PREFIX/)
})

t.test('serve reads DATABASE_SCHEMA and REDIS_PREFIX', async (t) => {
  if (!await requirePg(t) || !await requireRedis(t)) return
  const saved = { ...process.env }
  t.teardown(() => { process.env = saved })
  Object.assign(process.env, { DATABASE_URL: pgUrl(), DATABASE_SCHEMA: withPgSchema(t), REDIS_URL: redisUrl(), REDIS_PREFIX: withRedisPrefix(t) })
  const server = (await run(['serve', '--port', '0', '--host', '127.0.0.1'], new PassThrough()))!
  t.teardown(() => server.stop())
  const { settings } = server.service.app.agentService
  t.equal((await fetch(`${server.url}/v1/agents/echo/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"input":1}' })).status, 200)
  t.match(settings.auditStore, { schema: process.env.DATABASE_SCHEMA })
  t.match(settings.sessionStore, { prefix: process.env.REDIS_PREFIX })
})

t.test('--pretty log lines', async (t) => {
  const out = new PassThrough()
  const text = collect(out)
  const stream = prettyLogStream(out)
  stream.write(JSON.stringify({ level: 30, time: Date.UTC(2026, 0, 1, 12, 34, 56), pid: 1, hostname: 'h', msg: 'hello', reqId: 'r1', res: { statusCode: 200 } }) + '\n')
  stream.write(JSON.stringify({ level: 35, time: 0 }) + '\nnot json\n\n')
  await new Promise((resolve) => stream.end(resolve))
  t.equal(text(), '12:34:56 INFO hello reqId=r1 res={"statusCode":200}\n00:00:00 35 \nnot json\n')
})

t.test('help, unknown commands and agent files that cannot be loaded', async (t) => {
  const out = new PassThrough()
  const text = collect(out)
  t.equal(await run(['--help'], out), null)
  t.equal(text(), usage + '\n')
  await t.rejects(run(['deploy'], out), /unknown command "deploy"/)
  const dir = await mkdtemp(join(tmpdir(), 'fa-cli-'))
  const write = async (name: string, source: string): Promise<string> => { await writeFile(join(dir, name), source); return join(dir, name) }
  const nothing = await write('bad.mjs', 'export const nothing = 1\n')
  await t.rejects(run(['openapi', '--agents', nothing], out), { message: `--agents ${nothing} must export its agents as \`agents\` or as the default export` })
  await t.rejects(run(['openapi', '--agents', join(dir, 'missing.mjs')], out), { message: `--agents ${join(dir, 'missing.mjs')}: no such file (${join(dir, 'missing.mjs')})` })
  const syntax = await write('syntax.mjs', 'export const agents = {\n  echo: { run: async () => ({ output: 1 }) },,\n}\n')
  await t.rejects(run(['openapi', '--agents', syntax], out), { message: `--agents ${syntax}:2: SyntaxError: Unexpected token ','` }, 'the line of a syntax error')
  const parsing = await write('parses.mjs', "export const agents = JSON.parse('{')\n")
  await t.rejects(run(['openapi', '--agents', parsing], out), { message: /^--agents [^:]+parses\.mjs: SyntaxError: / }, 'a SyntaxError thrown at run time has no line')
  const throwing = await write('throws.mjs', "throw new Error('no API key for the model')\n")
  await t.rejects(run(['openapi', '--agents', throwing], out), { message: `--agents ${throwing}: Error: no API key for the model` })
})

t.test('openapi writes the document', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fa-cli-'))
  const agentsFile = join(dir, 'agents.mjs')
  await writeFile(agentsFile, "export default { hello: { description: 'hi', run: async () => ({ output: 'hi' }) } }\n")
  const file = join(dir, 'openapi.json')
  const out = new PassThrough()
  const text = collect(out)
  t.equal(await run(['openapi', '--agents', agentsFile, '--out', file], out), null)
  t.equal(text(), `wrote ${file}\n`)
  const document = JSON.parse(await readFile(file, 'utf8'))
  t.equal(document.openapi, '3.1.0')
  t.ok(document.paths['/v1/agents/hello/runs'])
  t.same(document.security, [], 'no auth unless asked')
  t.notOk(Object.keys(document.paths).some((path) => path.startsWith('/admin')), 'nor the Admin API')

  const read = async (...flags: string[]): Promise<any> => {
    await run(['openapi', '--out', file, ...flags], out)
    return JSON.parse(await readFile(file, 'utf8'))
  }
  const withKeys = await read('--api-key', 'x', '--admin-token', 'y', '--public-url', 'https://api.example')
  t.same(withKeys.security, [{ apiKey: [] }])
  t.ok(withKeys.paths['/admin/stats'], 'the Admin API when asked')
  t.same(withKeys.servers, [{ url: 'https://api.example', description: 'fastify-agents' }])
  const jwt = await read('--auth', 'jwt', '--admin', '--websocket')
  t.same(jwt.security, [{ bearerJwt: [] }])
  t.same(jwt.paths['/admin/stats'].get.security, [{ adminBearer: [] }])
  t.ok(jwt.paths['/v1/ws'])
  t.same((await read('--auth', 'api-key')).security, [{ apiKey: [] }])
  t.same((await read('--jwt-secret', 's')).security, [{ bearerJwt: [] }])
  await t.rejects(run(['openapi', '--auth', 'basic', '--out', file], out), /--auth must be api-key or jwt, got "basic"/)
})

t.test('serve in process: the demo agents, pretty logs, env vars', async (t) => {
  const saved = { ...process.env }
  t.teardown(() => { process.env = saved })
  delete process.env.HOST
  process.env.API_KEYS = ' key-one , ,key-two'
  Object.assign(process.env, { CORS_ORIGIN: 'https://app.example', DOCS: 'true', REQUEST_TIMEOUT_MS: '9000', RATE_LIMIT: '1000/60000', STORE_TIMEOUT_MS: '1500', WEBSOCKET: 'false' })
  const out = new PassThrough()
  const text = collect(out)
  const server = (await run(['serve', '--port', '0', '--host', '127.0.0.1', '--pretty'], out))!
  t.teardown(() => server.stop())
  t.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/)
  const { settings } = server.service.app.agentService
  t.same(Object.keys(Object.fromEntries(settings.agents)), Object.keys(demoAgents))
  t.match(settings, { cors: 'https://app.example', docs: true, requestTimeoutMs: 9000, rateLimit: { maxRequests: 1000, intervalMs: 60_000 }, storeTimeoutMs: 1500, websocket: false })
  const unauthorized = await fetch(`${server.url}/v1/agents`)
  t.equal(unauthorized.status, 401, 'API_KEYS turned api-key auth on')
  const res = await fetch(`${server.url}/v1/agents/storyteller/runs`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'x-api-key': 'key-two' }, body: JSON.stringify({ input: 'a cat' }) })
  const events = parseSse(await res.text())
  t.equal(events.at(-1)!.event, 'run.completed')
  t.match(events.at(-1)!.data.output, /a cat/)
  t.equal((await fetch(`${server.url}/docs/json`)).status, 200, 'DOCS=true')
  t.match(text(), /\d\d:\d\d:\d\d INFO Server listening at http:\/\/127\.0\.0\.1:/)
})

/** Runs the bin with `args` and `env` (over a clean slate of our variables) until it exits or says it listens. */
function startBin (t: Test, args: string[], env: Record<string, string> = {}): { child: ReturnType<typeof spawn>, listening: Promise<string>, exited: Promise<number | null>, output: () => { stdout: string, stderr: string } } {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !ourVariables.includes(name)))
  const child = spawn(process.execPath, [bin, ...args], { env: { ...clean, HOST: '127.0.0.1', PORT: '0', ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const listening = new Promise<string>((resolve) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)
      if (match !== null) resolve(match[1]!)
    })
  })
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
  return { child, listening, exited, output: () => ({ stdout, stderr }) }
}

const ourVariables = ['PORT', 'HOST', 'DATABASE_URL', 'DATABASE_SCHEMA', 'REDIS_URL', 'REDIS_PREFIX', 'ADMIN_TOKEN', 'API_KEYS', 'JWT_SECRET', 'JWT_PUBLIC_KEY_FILE', 'CORS_ORIGIN',
  'DOCS', 'PUBLIC_URL', 'REQUEST_TIMEOUT_MS', 'RATE_LIMIT', 'STORE_TIMEOUT_MS', 'DRAIN_TIMEOUT_MS', 'WEBSOCKET', 'HEADERS_TIMEOUT_MS', 'BODY_TIMEOUT_MS',
  'RUN_LEASE_MS', 'RUN_CONCURRENCY', 'MAX_RUN_ATTEMPTS', 'OPENAI_COMPAT']

t.test('the bin drains on SIGTERM, closes its stores and exits 0', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fa-cli-'))
  const db = join(dir, 'data.db')
  const { child, listening, exited, output } = startBin(t, ['serve', '--drain-timeout', '5000', '--db', `file:${db}`])
  const url = await listening
  t.equal((await fetch(`${url}/v1/agents/echo/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"input":1}' })).status, 200)
  t.ok(existsSync(db + '-wal'), 'the database is open (WAL)')
  const inFlight = fetch(`${url}/v1/agents/slow/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: { ms: 600 } }) })
  // SIGTERM once the server has the request (a busy machine may take a while to deliver it)
  await eventually(() => output().stdout.includes('"url":"/v1/agents/slow/runs"'), 10_000, 'the request reaching the server')
  child.kill('SIGTERM')
  const res = await inFlight
  t.equal(res.status, 200, 'the request in flight finished')
  t.same(((await res.json()) as { output: unknown }).output, { sleptMs: 600 })
  t.equal(await exited, 0)
  t.match(output().stdout, /"msg":"draining"/)
  t.match(output().stdout, /"signal":"SIGTERM"/)
  t.notOk(existsSync(db + '-wal'), 'and closed after the drain (SQLite removes the WAL file on close)')
})

t.test('the bin exits non-zero before serving, naming the flag or variable used', async (t) => {
  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ['an unknown command', ['deploy'], {}, /^fastify-agents: unknown command "deploy"/],
    ['PORT=abc', ['serve'], { PORT: 'abc' }, /^fastify-agents: PORT must be an integer from 0 to 65535, got "abc"/],
    ['--port abc', ['serve', '--port', 'abc'], { PORT: '3000' }, /^fastify-agents: --port must be an integer from 0 to 65535, got "abc"/],
    ['a database that refuses', ['serve', '--db', 'postgres://user:pw@127.0.0.1:1/db'], {}, /^fastify-agents: --db postgres:\/\/user:\*\*\*@127\.0\.0\.1:1\/db cannot be used: .*ECONNREFUSED/],
    ['DATABASE_URL that refuses', ['serve'], { DATABASE_URL: 'postgres://127.0.0.1:1/db' }, /^fastify-agents: DATABASE_URL postgres:\/\/127\.0\.0\.1:1\/db cannot be used/],
    ['a --db file that cannot be written', ['serve', '--db', 'file:/dev/null/data.db'], {}, /^fastify-agents: --db file:\/dev\/null\/data\.db cannot be used: /],
    ['a bad --rate-limit', ['serve', '--rate-limit', 'lots'], {}, /^fastify-agents: --rate-limit must be <requests>\/<milliseconds>/]
  ]
  // side by side: each is a process of its own
  const started = cases.map(([, args, env]) => startBin(t, args, env))
  const codes = await Promise.all(started.map(({ exited }) => exited))
  cases.forEach(([name, , , message], i) => {
    t.equal(codes[i], 1, name)
    t.match(started[i]!.output().stderr, message, name)
    t.notMatch(started[i]!.output().stdout, /Server listening|draining/, `${name}: nothing served, nothing drained`)
  })
})

t.test('a port in use: exit 1 naming --port, not a drain', async (t) => {
  const taken = createServer()
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
  t.teardown(() => taken.close())
  const port = String((taken.address() as { port: number }).port)
  const { exited, output } = startBin(t, ['serve', '--port', port])
  const viaEnv = startBin(t, ['serve'], { PORT: port })
  t.equal(await exited, 1)
  t.match(output().stderr, new RegExp(`^fastify-agents: --port ${port}: cannot listen on 127\\.0\\.0\\.1:${port}: listen EADDRINUSE`))
  t.notMatch(output().stdout, /draining/)
  t.equal(await viaEnv.exited, 1)
  t.match(viaEnv.output().stderr, new RegExp(`^fastify-agents: PORT ${port}: cannot listen`))
})

t.test('openapi writes openapi.json by default', async (t) => {
  const dir = t.testdir({})
  t.chdir(dir)
  const out = new PassThrough()
  await run(['openapi'], out)
  t.equal(JSON.parse(await readFile(join(dir, 'openapi.json'), 'utf8')).openapi, '3.1.0')
})

t.test('--headers-timeout and --body-timeout (or their variables) become options; a stalled body gets 408 from the bin', async (t) => {
  t.match(buildServeOptions({ headersTimeout: '2000', bodyTimeout: '9000' }, { echo }).options, { headersTimeoutMs: 2000, bodyTimeoutMs: 9000 })
  t.throws(() => buildServeOptions({ bodyTimeout: '0' }, { echo }, { bodyTimeout: 'BODY_TIMEOUT_MS' }), /^BODY_TIMEOUT_MS must be an integer from 1 up, got "0"/)
  t.throws(() => buildServeOptions({ headersTimeout: 'x' }, { echo }), /^--headers-timeout must be an integer/)
  t.match(usage, /--headers-timeout MS\] \[--body-timeout MS\][^]*HEADERS_TIMEOUT_MS, BODY_TIMEOUT_MS/)
  const { child, listening, exited } = startBin(t, ['serve'], { HEADERS_TIMEOUT_MS: '200', BODY_TIMEOUT_MS: '400' })
  const port = Number(new URL(await listening).port)
  const text = await new Promise<string>((resolve, reject) => {
    let received = ''
    const socket = connect(port, '127.0.0.1', () => {
      socket.write('POST /v1/agents/echo/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"in')
    })
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { received += chunk })
    socket.once('error', reject)
    socket.once('close', () => resolve(received))
  })
  t.match(text, /^HTTP\/1\.1 408 Request Timeout\r\n[^]*"code":"REQUEST_TIMEOUT"/)
  child.kill('SIGTERM')
  t.equal(await exited, 0)
})

t.test('--run-lease, --run-concurrency, --max-run-attempts, --no-openai-compat (or their variables) become options', async (t) => {
  t.match(buildServeOptions({ runLease: '5000', runConcurrency: '8', maxRunAttempts: '5', openaiCompat: false }, { echo }).options,
    { runLeaseMs: 5000, runConcurrency: 8, maxRunAttempts: 5, openaiCompat: false })
  const defaults = buildServeOptions({ openaiCompat: true }, { echo }).options
  t.same([defaults.runLeaseMs, defaults.runConcurrency, defaults.maxRunAttempts, defaults.openaiCompat], [undefined, undefined, undefined, undefined], 'the service\'s defaults')
  t.throws(() => buildServeOptions({ runLease: '500' }, { echo }, { runLease: 'RUN_LEASE_MS' }), /^RUN_LEASE_MS must be an integer from 1000 up, got "500"$/)
  t.throws(() => buildServeOptions({ runConcurrency: '0' }, { echo }), /^--run-concurrency must be an integer from 1 up, got "0"$/)
  t.throws(() => buildServeOptions({ maxRunAttempts: 'three' }, { echo }), /^--max-run-attempts must be an integer from 1 up, got "three"$/)
  t.match(usage, /\[--run-lease MS\] \[--run-concurrency N\] \[--max-run-attempts N\] \[--no-openai-compat\][^]*RUN_LEASE_MS, RUN_CONCURRENCY,\nMAX_RUN_ATTEMPTS, OPENAI_COMPAT=false/)

  const saved = { ...process.env }
  t.teardown(() => { process.env = saved })
  Object.assign(process.env, { RUN_LEASE_MS: '4000', RUN_CONCURRENCY: '3', MAX_RUN_ATTEMPTS: '2', OPENAI_COMPAT: 'false', HOST: '127.0.0.1' })
  const server = (await run(['serve', '--port', '0', '--run-concurrency', '4'], new PassThrough()))!
  t.teardown(() => server.stop())
  t.match(server.service.app.agentService.settings, { runLeaseMs: 4000, runConcurrency: 4, maxRunAttempts: 2 }, 'a flag wins over its variable')
  t.equal((await fetch(`${server.url}/v1/models`)).status, 404, 'OPENAI_COMPAT=false: no OpenAI routes')
  process.env.OPENAI_COMPAT = 'true'
  const compat = (await run(['serve', '--port', '0'], new PassThrough()))!
  t.teardown(() => compat.stop())
  t.equal((await fetch(`${compat.url}/v1/models`)).status, 200, 'OPENAI_COMPAT=true: the default')
  const off = (await run(['serve', '--port', '0', '--no-openai-compat'], new PassThrough()))!
  t.teardown(() => off.stop())
  t.equal((await fetch(`${off.url}/v1/models`)).status, 404, '--no-openai-compat')
})

t.test('the demo agents listen on 127.0.0.1 unless a host is asked for; a host others can reach without auth is warned about', async (t) => {
  const saved = { ...process.env }
  t.teardown(() => { process.env = saved })
  for (const name of ourVariables) delete process.env[name]
  t.ok(isLoopback('127.0.0.1') && isLoopback('127.1.2.3') && isLoopback('::1') && isLoopback('localhost'))
  t.notOk(isLoopback('0.0.0.0') || isLoopback('::') || isLoopback('10.0.0.1') || isLoopback('127.0.0.1.example'))

  const quiet = new PassThrough()
  const quietText = collect(quiet)
  const demo = (await run(['serve', '--port', '0'], quiet))!
  t.teardown(() => demo.stop())
  t.match(demo.url, /^http:\/\/127\.0\.0\.1:\d+$/, 'npm start (the demo agents, no --host): loopback only')
  t.notMatch(quietText(), /without auth/, 'no warning on loopback')

  const agentsFile = join(t.testdir({ 'agents.mjs': 'export const agents = { echo: { async run (input) { return { output: input } } } }\n' }), 'agents.mjs')
  const open = new PassThrough()
  const openText = collect(open)
  const served = (await run(['serve', '--port', '0', '--agents', agentsFile], open))!
  t.teardown(() => served.stop())
  t.equal(served.service.app.server.address() !== null && (served.service.app.server.address() as { address: string }).address, '0.0.0.0', 'your agents: every interface, as before')
  const warning = openText().split('\n').map((line) => line === '' ? {} : JSON.parse(line) as { level?: number, msg?: string }).find((line) => line.level === 40)
  t.match(warning?.msg, /^serving 0\.0\.0\.0 without auth: anyone who can reach http:\/\/[^ ]+ can run the agents; set --api-key or --jwt-secret, or --host 127\.0\.0\.1$/)

  const keyed = new PassThrough()
  const keyedText = collect(keyed)
  process.env.API_KEYS = 'k'
  const withKey = (await run(['serve', '--port', '0', '--host', '0.0.0.0'], keyed))!
  t.teardown(() => withKey.stop())
  t.notMatch(keyedText(), /without auth/, 'with auth, no warning')
})
