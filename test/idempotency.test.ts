import { createHash, randomUUID } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import t from 'tap'
import { PostgresIdempotencyStore, RedisIdempotencyStore, MemoryIdempotencyStore } from '../lib/stores/index.js'
import type { IdempotencyStore } from '../lib/stores/types.js'
import { readIdempotencyKey, scopedIdempotencyKey } from '../lib/idempotency.js'
import type { Agent, AgentServiceOptions } from '../lib/types.js'
import type { AgentService } from '../lib/service.js'
import { build, listen, parseSse, sleep } from './helper.js'
import { pgUrl, redisUrl, requirePg, requireRedis, withPgSchema, withRedisPrefix } from './helpers/services.js'

const RUNS = '/v1/agents/work/runs'

/** An agent that counts its runs and, while `hold` is set, waits for `release()`. */
function worker () {
  let runs = 0
  let gate: Promise<void> = Promise.resolve()
  let open: () => void = () => {}
  const agent: Agent = {
    async run (input) {
      runs++
      await gate
      return { output: input, usage: { inputTokens: 1, outputTokens: 1 } }
    }
  }
  return {
    agent,
    get runs () { return runs },
    hold () { gate = new Promise((resolve) => { open = resolve }) },
    release () { open() }
  }
}

function idempotent (t: Parameters<typeof build>[0], options: Partial<AgentServiceOptions> = {}, w = worker()) {
  const service = build(t, { agents: { work: w.agent }, idempotency: {}, ...options })
  return { service, worker: w }
}

function run (service: AgentService, key: string | undefined, payload: unknown = { input: 'hello' }, headers: Record<string, string> = {}) {
  const body = typeof payload === 'string' ? payload : JSON.stringify(payload)
  return service.app.inject({
    method: 'POST',
    url: RUNS,
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers },
    payload: body
  })
}

async function until (check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return
    await sleep(10)
  }
  throw new Error(`timed out waiting for ${what}`)
}

t.test('a repeat replays the stored response with Idempotent-Replayed and does not run the agent again', async (t) => {
  const { service, worker } = idempotent(t)
  const first = await run(service, 'key-1')
  t.equal(first.statusCode, 200)
  t.equal(first.headers['idempotent-replayed'], undefined)
  const again = await run(service, 'key-1')
  t.equal(again.statusCode, 200)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.body, first.body, 'the same body, byte for byte')
  t.match(again.headers['content-type'], 'application/json')
  t.not(again.headers['x-request-id'], first.headers['x-request-id'], 'the replay is a request of its own')
  t.equal(worker.runs, 1)

  await service.app.agentService.audit.flush()
  const { entries } = await service.app.agentService.settings.auditStore.query({ limit: 10 })
  t.match(entries.map((e) => ({ key: e.idempotencyKey, replayed: e.replayed })), [{ key: 'key-1', replayed: true }, { key: 'key-1', replayed: false }])
})

t.test('X-Idempotency-Key is the same key', async (t) => {
  const { service, worker } = idempotent(t)
  t.equal((await run(service, undefined, { input: 1 }, { 'x-idempotency-key': 'k' })).statusCode, 200)
  const again = await run(service, 'k', { input: 1 })
  t.equal(again.headers['idempotent-replayed'], 'true')
  const both = await run(service, 'k', { input: 1 }, { 'x-idempotency-key': 'k' })
  t.equal(both.headers['idempotent-replayed'], 'true')
  t.equal(worker.runs, 1)
})

t.test('the same key with another body is 422 IDEMPOTENCY_KEY_REUSED; the fingerprint is of the bytes sent', async (t) => {
  const { service, worker } = idempotent(t)
  t.equal((await run(service, 'k', '{"input":"a"}')).statusCode, 200)
  const other = await run(service, 'k', '{"input":"b"}')
  t.equal(other.statusCode, 422)
  t.match(other.json(), { code: 'IDEMPOTENCY_KEY_REUSED', statusCode: 422 })
  t.equal((await run(service, 'k', '{ "input": "a" }')).statusCode, 422, 'other bytes, even if the same JSON')
  t.equal((await run(service, 'k', '{"input":"a"}')).headers['idempotent-replayed'], 'true')
  t.equal(worker.runs, 1)
})

t.test('a repeat while the first still runs is 409 IDEMPOTENCY_IN_PROGRESS', async (t) => {
  const { service, worker } = idempotent(t)
  worker.hold()
  const first = run(service, 'k')
  await until(() => worker.runs === 1, 'the first run')
  const second = await run(service, 'k')
  t.equal(second.statusCode, 409)
  t.match(second.json(), { code: 'IDEMPOTENCY_IN_PROGRESS' })
  t.equal(second.headers['retry-after'], '1')
  worker.release()
  t.equal((await first).statusCode, 200)
  t.equal((await run(service, 'k')).headers['idempotent-replayed'], 'true')
  t.equal(worker.runs, 1)
})

t.test('keys are scoped by principal and path', async (t) => {
  const service = build(t, { agents: { work: worker().agent, other: worker().agent }, idempotency: {}, auth: { strategy: 'api-key', keys: ['key-a', 'key-b'] } })
  const as = (apiKey: string, url = RUNS) => service.app.inject({ method: 'POST', url, headers: { 'x-api-key': apiKey, 'idempotency-key': 'shared' }, payload: { input: 1 } })
  const a = await as('key-a')
  const b = await as('key-b')
  t.equal(b.headers['idempotent-replayed'], undefined, "another principal's key is not replayed")
  t.not(a.json().runId, b.json().runId)
  const otherPath = await as('key-a', '/v1/agents/other/runs')
  t.equal(otherPath.headers['idempotent-replayed'], undefined)
  t.equal((await as('key-a')).json().runId, a.json().runId)
})

t.test('keys must be 1-255 printable ASCII characters', async (t) => {
  const { service, worker } = idempotent(t)
  const bad: Record<string, string> = {
    empty: '',
    '256 characters': 'k'.repeat(256),
    'non-ASCII': 'clé',
    'a control character': 'a\u0001b',
    DEL: 'a\u007fb'
  }
  for (const [name, key] of Object.entries(bad)) {
    const res = await run(service, key)
    t.equal(res.statusCode, 400, name)
    t.equal(res.json().code, 'IDEMPOTENCY_KEY_INVALID', name)
  }
  const differ = await run(service, 'one', { input: 1 }, { 'x-idempotency-key': 'two' })
  t.equal(differ.statusCode, 400)
  t.equal(differ.json().message, 'Idempotency-Key and X-Idempotency-Key differ')
  t.equal(worker.runs, 0)
  t.equal((await run(service, 'k'.repeat(255))).statusCode, 200)
  t.equal((await run(service, ' ~!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}')).statusCode, 200, 'every printable character')
  t.equal(worker.runs, 2)
})

t.test('a 5xx releases the key: the retry runs again', async (t) => {
  let calls = 0
  const flaky: Agent = {
    async run (input) {
      calls++
      if (calls === 1) throw new Error('upstream down')
      return { output: input }
    }
  }
  const service = build(t, { agents: { work: flaky }, idempotency: {} })
  const failed = await run(service, 'k')
  t.equal(failed.statusCode, 500)
  const retried = await run(service, 'k')
  t.equal(retried.statusCode, 200)
  t.equal(retried.headers['idempotent-replayed'], undefined)
  t.equal((await run(service, 'k')).headers['idempotent-replayed'], 'true')
  t.equal(calls, 2)
})

t.test('a timeout (504) releases the key too', async (t) => {
  const { service, worker } = idempotent(t, { requestTimeoutMs: 50 })
  worker.hold()
  t.equal((await run(service, 'k')).statusCode, 504)
  worker.release()
  t.equal((await run(service, 'k')).statusCode, 200)
  t.equal(worker.runs, 2)
})

t.test('a 4xx is stored and replayed', async (t) => {
  const { service, worker } = idempotent(t)
  const payload = { input: 1, sessionId: randomUUID() }
  const missing = await run(service, 'k', payload)
  t.equal(missing.statusCode, 404)
  t.equal(missing.json().code, 'SESSION_NOT_FOUND')
  const again = await run(service, 'k', payload)
  t.equal(again.statusCode, 404)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.body, missing.body)
  t.equal(worker.runs, 0)
})

t.test('a streamed run is replayed as SSE with only its final event', async (t) => {
  const streaming: Agent = {
    async * run () {
      yield 'Hel'
      yield 'lo'
    }
  }
  const service = build(t, { agents: { work: streaming }, idempotency: {} })
  const sse = { accept: 'text/event-stream' }
  const first = await run(service, 'k', { input: 1 }, sse)
  const events = parseSse(first.body)
  t.same(events.map((e) => e.event), ['run.started', 'message.delta', 'message.delta', 'run.completed'])
  const replay = await run(service, 'k', { input: 1 }, sse)
  t.equal(replay.statusCode, 200)
  t.equal(replay.headers['idempotent-replayed'], 'true')
  t.match(replay.headers['content-type'], 'text/event-stream')
  t.equal(replay.headers['cache-control'], 'no-cache')
  const replayed = parseSse(replay.body)
  t.equal(replayed.length, 1)
  t.same(replayed[0], events.at(-1), 'the same final event, with its id')
  t.equal(replayed[0]!.data.output, 'Hello')
})

t.test('a streamed run that fails releases the key', async (t) => {
  let calls = 0
  const flaky: Agent = {
    async * run () {
      calls++
      yield 'partial'
      if (calls === 1) throw new Error('boom')
    }
  }
  const service = build(t, { agents: { work: flaky }, idempotency: {} })
  const sse = { accept: 'text/event-stream' }
  const failed = await run(service, 'k', { input: 1 }, sse)
  t.equal(parseSse(failed.body).at(-1)!.event, 'run.failed')
  const retried = await run(service, 'k', { input: 1 }, sse)
  t.equal(retried.headers['idempotent-replayed'], undefined)
  t.equal(parseSse(retried.body).at(-1)!.event, 'run.completed')
  t.equal(calls, 2)
})

t.test('a key held by a process that died is taken over after the lock lease, not the TTL', async (t) => {
  const store = new MemoryIdempotencyStore()
  const { service, worker } = idempotent(t, { idempotency: { store, lockLeaseMs: 500, ttlMs: 60_000 } })
  await service.app.ready()
  const body = '{"input":"x"}'
  // what a crashed instance leaves behind: a reservation that nobody completes
  const fingerprint = createHash('sha256').update(body).digest('hex')
  await store.reserve(scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k'), fingerprint, { ttlMs: 60_000, leaseMs: 500 })
  t.equal((await run(service, 'k', body)).statusCode, 409)
  await sleep(600)
  const res = await run(service, 'k', body)
  t.equal(res.statusCode, 200)
  t.equal(res.headers['idempotent-replayed'], undefined)
  t.equal(worker.runs, 1)
})

t.test('after ttlMs the key is forgotten', async (t) => {
  const { service, worker } = idempotent(t, { idempotency: { ttlMs: 150 } })
  t.equal((await run(service, 'k')).statusCode, 200)
  t.equal((await run(service, 'k')).headers['idempotent-replayed'], 'true')
  await sleep(200)
  t.equal((await run(service, 'k')).headers['idempotent-replayed'], undefined)
  t.equal(worker.runs, 2)
})

t.test('requests without a key are never replayed', async (t) => {
  const { service, worker } = idempotent(t)
  t.equal((await run(service, undefined)).statusCode, 200)
  t.equal((await run(service, undefined)).headers['idempotent-replayed'], undefined)
  t.equal(worker.runs, 2)
  t.throws(() => readIdempotencyKey({ 'idempotency-key': ['a', 'b'] }), { code: 'IDEMPOTENCY_KEY_INVALID', message: 'Send one Idempotency-Key header' })
  t.equal(readIdempotencyKey({}), undefined)
})

t.test('without the idempotency option the header is ignored', async (t) => {
  const w = worker()
  const service = build(t, { agents: { work: w.agent } })
  t.equal((await run(service, 'k')).statusCode, 200)
  t.equal((await run(service, 'k')).headers['idempotent-replayed'], undefined)
  t.equal((await run(service, '')).statusCode, 200)
  t.equal(w.runs, 3)
})

t.test('a client that leaves before its answer releases the key', async (t) => {
  const w = worker()
  const { service, url } = await listen(t, { agents: { work: w.agent }, idempotency: {} })
  w.hold()
  const req = httpRequest(`${url}${RUNS}`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'k' } })
  req.on('error', () => {})
  req.end('{"input":"hello"}')
  await until(() => w.runs === 1, 'the run to start')
  req.destroy()
  const store = service.app.agentService.settings.idempotency!.store
  await until(async () => await store.get(scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k')) === null, 'the key to be released')
  w.release()
  const retried = await run(service, 'k')
  t.equal(retried.statusCode, 200)
  t.equal(retried.headers['idempotent-replayed'], undefined)
  t.equal(w.runs, 2)
})

t.test('a store that fails to record the response: the answer still goes out, the key stays locked', async (t) => {
  const memory = new MemoryIdempotencyStore()
  const failing: IdempotencyStore = {
    reserve: (...args) => memory.reserve(...args),
    get: (key) => memory.get(key),
    release: async () => { throw new Error('store down') },
    complete: async () => { throw new Error('store down') }
  }
  const { service, worker } = idempotent(t, { idempotency: { store: failing } })
  t.equal((await run(service, 'k')).statusCode, 200)
  t.equal((await run(service, 'k')).statusCode, 409, 'no second run while the lease holds')
  t.equal(worker.runs, 1)
})

t.test('approval decisions honour idempotency keys', async (t) => {
  const service = build(t, { idempotency: {} })
  await service.app.ready()
  const store = service.app.agentService.settings.approvalStore
  const now = Date.now()
  await store.create({
    id: 'ap-1', runId: 'r', agent: 'echo', sessionId: 's', principal: 'anonymous', action: 'pay', payload: null, reason: null,
    status: 'pending', requestedAt: new Date(now).toISOString(), expiresAt: new Date(now + 60_000).toISOString()
  })
  const decide = (key: string) => service.app.inject({ method: 'POST', url: '/v1/approvals/ap-1', headers: { 'idempotency-key': key }, payload: { approved: true } })
  const first = await decide('d1')
  t.equal(first.statusCode, 200)
  const retry = await decide('d1')
  t.equal(retry.statusCode, 200, 'a retried decision is a replay, not a 409')
  t.equal(retry.headers['idempotent-replayed'], 'true')
  t.equal((await decide('d2')).statusCode, 409, 'another key is another decision')
})

t.test('the OpenAPI document names the idempotency headers', async (t) => {
  const { service } = idempotent(t)
  await service.app.ready()
  const doc = service.app.agentService.openApiDocument() as { paths: Record<string, Record<string, { parameters?: Array<{ name: string, in: string }> }>> }
  const names = (doc.paths['/v1/agents/{name}/runs']!.post!.parameters ?? []).filter((p) => p.in === 'header').map((p) => p.name)
  t.same(names.sort(), ['idempotency-key', 'x-idempotency-key'])
})

t.test('N concurrent identical requests run the agent exactly once (one instance)', async (t) => {
  const { service, worker } = idempotent(t)
  worker.hold()
  let answered = 0
  const responses = Promise.all(Array.from({ length: 20 }, () => run(service, 'burst').then((r) => { answered++; return r })))
  // while the one run is held, every other request is answered: none of them waits for it
  await until(() => answered === 19, 'the other 19 answers')
  worker.release()
  const statuses = (await responses).map((r) => r.statusCode).sort()
  t.same(statuses, [200, ...Array(19).fill(409)])
  t.equal(worker.runs, 1)
  // without holding the agent: every answer is the run or its replay, or 409, and there is one run
  const fast = idempotent(t)
  const quick = await Promise.all(Array.from({ length: 20 }, () => run(fast.service, 'burst')))
  t.ok(quick.every((r) => r.statusCode === 200 || r.statusCode === 409))
  t.equal(new Set(quick.filter((r) => r.statusCode === 200).map((r) => r.json().runId)).size, 1)
  t.equal(fast.worker.runs, 1)
})

async function acrossInstances (t: Parameters<typeof build>[0], stores: [IdempotencyStore, IdempotencyStore]): Promise<void> {
  const w = worker()
  const one = build(t, { agents: { work: w.agent }, idempotency: { store: stores[0] } })
  const two = build(t, { agents: { work: w.agent }, idempotency: { store: stores[1] } })
  w.hold()
  let answered = 0
  const responses = Promise.all(Array.from({ length: 20 }, (_, i) => run(i % 2 === 0 ? one : two, 'shared-key').then((r) => { answered++; return r })))
  await until(() => answered === 19, 'the other 19 answers')
  t.equal(w.runs, 1)
  w.release()
  const all = await responses
  t.same(all.map((r) => r.statusCode).sort(), [200, ...Array(19).fill(409)])
  t.equal(w.runs, 1)
  const winner = all.find((r) => r.statusCode === 200)!
  for (const service of [one, two]) {
    const replay = await run(service, 'shared-key')
    t.equal(replay.headers['idempotent-replayed'], 'true')
    t.equal(replay.body, winner.body)
  }
  const mismatch = await run(two, 'shared-key', { input: 'other' })
  t.equal(mismatch.statusCode, 422)
  t.equal(w.runs, 1)
}

t.test('N concurrent identical requests on two instances sharing PostgreSQL run the agent once', async (t) => {
  if (!await requirePg(t)) return
  const schema = withPgSchema(t)
  // one pool each, as two processes would have
  const stores: [PostgresIdempotencyStore, PostgresIdempotencyStore] = [
    new PostgresIdempotencyStore(pgUrl(), { schema }), new PostgresIdempotencyStore(pgUrl(), { schema })
  ]
  t.teardown(async () => { for (const store of stores) await store.close() })
  await acrossInstances(t, stores)
})

t.test('N concurrent identical requests on two instances sharing Redis run the agent once', async (t) => {
  if (!await requireRedis(t)) return
  const prefix = withRedisPrefix(t)
  const stores: [RedisIdempotencyStore, RedisIdempotencyStore] = [
    new RedisIdempotencyStore(redisUrl(), { prefix }), new RedisIdempotencyStore(redisUrl(), { prefix })
  ]
  t.teardown(async () => { for (const store of stores) await store.close() })
  await acrossInstances(t, stores)
})
