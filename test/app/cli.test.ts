import { spawn } from 'node:child_process'
import { mkdtemp, readFile, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { buildServeOptions, closeStores, prettyLogStream, run, usage } from '../../app/cli.js'
import { demoAgents } from '../../app/demo-agents.js'
import { echo, parseSse } from '../helper.js'

// the compiled bin beside the compiled tests (npm test runs them from .build/)
const bin = fileURLToPath(new URL('../../bin/fastify-agents.js', import.meta.url))
import { pgUrl, redisUrl, requirePg, requireRedis } from '../helpers/services.js'

function collect (stream: PassThrough): () => string {
  let text = ''
  stream.on('data', (chunk: Buffer) => { text += chunk.toString() })
  return () => text
}

t.test('flags become options', async (t) => {
  const plan = buildServeOptions({}, { echo })
  t.match(plan, { port: 3000, host: '0.0.0.0', drainTimeoutMs: 30_000, stores: [] })
  t.same(plan.options.idempotency, {}, 'idempotency keys are honoured by default')
  t.equal(plan.options.auth, undefined)
  t.equal(plan.options.adminApi, undefined)
  t.equal(plan.options.websocket, undefined)
  const full = buildServeOptions({ port: '8080', host: '127.0.0.1', drainTimeout: '500', apiKeys: ['k1', 'k2'], adminToken: 'tok', db: '', redis: '', websocket: true }, { echo })
  t.equal(full.options.websocket, true)
  t.match(full, { port: 8080, host: '127.0.0.1', drainTimeoutMs: 500 })
  t.same(full.options.auth, { strategy: 'api-key', keys: ['k1', 'k2'] })
  t.same(full.options.adminApi, { enabled: true, bearerToken: 'tok' })
  t.throws(() => buildServeOptions({ port: 'http' }, { echo }), /--port must be an integer >= 0, got "http"/)
  t.throws(() => buildServeOptions({ drainTimeout: '-1' }, { echo }), /--drain-timeout must be an integer >= 0/)
  t.throws(() => buildServeOptions({ db: 'mysql://x' }, { echo }), /--db must be file:<path> or postgres:\/\/…, got "mysql:\/\/x"/)
})

t.test('--db file: backs every store and the health probe with SQLite', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fa-cli-'))
  const plan = buildServeOptions({ db: `file:${join(dir, 'data.db')}` }, { echo })
  t.teardown(() => closeStores(plan.stores))
  t.equal(plan.stores.length, 1)
  t.ok(plan.options.auditStore && plan.options.sessionStore && plan.options.approvalStore && plan.options.checkpointStore && plan.options.idempotency?.store && plan.options.runStore)
  t.equal(await (plan.options.db as { health: () => Promise<boolean> }).health(), true)
})

t.test('--db postgres:// and --redis', async (t) => {
  if (!await requirePg(t) || !await requireRedis(t)) return
  const plan = buildServeOptions({ db: pgUrl(), redis: redisUrl() }, { echo })
  t.teardown(() => closeStores(plan.stores))
  t.equal(plan.stores.length, 2)
  t.equal(plan.options.sessionStore, plan.stores[1]!.sessionStore, 'redis backs sessions')
  t.equal(plan.options.idempotency?.store, plan.stores[1]!.idempotency!.store, 'and idempotency')
  t.equal(plan.options.runStore, plan.stores[1]!.runStore, 'and runs')
  t.equal(plan.options.auditStore, plan.stores[0]!.auditStore, 'postgres backs the audit log')
})

t.test('closeStores closes each store once', async (t) => {
  let closed = 0
  const shared = { close: async () => { closed++ } }
  await closeStores([{ auditStore: shared as never, sessionStore: shared as never, checkpointStore: {} as never }, { idempotency: { store: shared as never } }])
  t.equal(closed, 1)
  const runs = { close: async () => { closed++ } }
  await closeStores([{ runStore: runs as never }, { runStore: runs as never }])
  t.equal(closed, 2, 'the run store too')
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

t.test('help, unknown commands and bad agent files', async (t) => {
  const out = new PassThrough()
  const text = collect(out)
  t.equal(await run(['--help'], out), null)
  t.equal(text(), usage + '\n')
  await t.rejects(run(['deploy'], out), /unknown command "deploy"/)
  const dir = await mkdtemp(join(tmpdir(), 'fa-cli-'))
  const bad = join(dir, 'bad.mjs')
  await writeFile(bad, 'export const nothing = 1\n')
  await t.rejects(run(['openapi', '--agents', bad], out), /must export its agents as `agents` or as the default export/)
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
  t.ok(document.paths['/v1/agents/{name}/runs'])
})

t.test('serve in process: the demo agents, pretty logs, env vars', async (t) => {
  const saved = { ...process.env }
  t.teardown(() => { process.env = saved })
  delete process.env.HOST
  process.env.API_KEYS = ' key-one , ,key-two'
  const out = new PassThrough()
  const text = collect(out)
  const server = (await run(['serve', '--port', '0', '--host', '127.0.0.1', '--pretty'], out))!
  t.teardown(() => server.stop())
  t.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/)
  t.same(Object.keys(Object.fromEntries(server.service.app.agentService.settings.agents)), Object.keys(demoAgents))
  const unauthorized = await fetch(`${server.url}/v1/agents`)
  t.equal(unauthorized.status, 401, 'API_KEYS turned api-key auth on')
  const res = await fetch(`${server.url}/v1/agents/storyteller/runs`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'x-api-key': 'key-two' }, body: JSON.stringify({ input: 'a cat' }) })
  const events = parseSse(await res.text())
  t.equal(events.at(-1)!.event, 'run.completed')
  t.match(events.at(-1)!.data.output, /a cat/)
  t.match(text(), /\d\d:\d\d:\d\d INFO Server listening at http:\/\/127\.0\.0\.1:/)
})

t.test('the bin drains on SIGTERM and exits 0', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, bin, 'serve', '--drain-timeout', '5000'], { env: { ...process.env, API_KEYS: '', HOST: '127.0.0.1', PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => child.kill('SIGKILL'))
  let logs = ''
  const listening = new Promise<string>((resolve) => {
    child.stdout.on('data', (chunk: Buffer) => {
      logs += chunk.toString()
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(logs)
      if (match !== null) resolve(match[1]!)
    })
  })
  const url = await listening
  const inFlight = fetch(`${url}/v1/agents/slow/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: { ms: 600 } }) })
  await new Promise((resolve) => setTimeout(resolve, 150))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  child.kill('SIGTERM')
  const res = await inFlight
  t.equal(res.status, 200, 'the request in flight finished')
  t.same(((await res.json()) as { output: unknown }).output, { sleptMs: 600 })
  t.equal(await exited, 0)
  t.match(logs, /"msg":"draining"/)
  t.match(logs, /"signal":"SIGTERM"/)
})

t.test('the bin exits 1 with the reason on stderr', async (t) => {
  const child = spawn(process.execPath, [...process.execArgv, bin, 'deploy'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  t.equal(code, 1)
  t.match(stderr, /^fastify-agents: unknown command "deploy"/)
})

t.test('openapi writes openapi.json by default', async (t) => {
  const dir = t.testdir({})
  t.chdir(dir)
  const out = new PassThrough()
  await run(['openapi'], out)
  t.equal(JSON.parse(await readFile(join(dir, 'openapi.json'), 'utf8')).openapi, '3.1.0')
})
