import { createHash, randomUUID } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import { Writable } from 'node:stream'
import t from 'tap'
import { PostgresIdempotencyStore, RedisIdempotencyStore, MemoryIdempotencyStore } from '../../lib/stores/index.js'
import type { IdempotencyStore } from '../../lib/stores/types.js'
import { decodedPath, readIdempotencyKey, scopedIdempotencyKey } from '../../lib/idempotency/keys.js'
import type { Agent, AgentServiceOptions } from '../../lib/core/types.js'
import type { AgentService } from '../../app/service.js'
import { build, eventually, idempotencyRecord, listen, parseSse, sleep } from '../helper.js'
import { pgUrl, redisUrl, requirePg, requireRedis, withPgSchema, withRedisPrefix } from '../helpers/services.js'
import { openSse } from '../helpers/streams.js'

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
  await eventually(() => worker.runs === 1, 10_000, 'the first run')
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

t.test('a streamed run\'s final event goes out once its response is recorded: a retry on seeing it is a replay', async (t) => {
  const memory = new MemoryIdempotencyStore()
  let recorded = false
  // a store slow to record: the old order (final event, then the record) left a window for a 409
  const slow: IdempotencyStore = {
    reserve: (...args) => memory.reserve(...args),
    renew: (...args) => memory.renew(...args),
    release: (...args) => memory.release(...args),
    complete: async (...args) => {
      await sleep(100)
      recorded = await memory.complete(...args)
      return recorded
    }
  }
  const streaming: Agent = { async * run () { yield 'done' } }
  const { url } = await listen(t, { agents: { work: streaming }, idempotency: { store: slow } })
  const stream = await openSse(url, RUNS, { input: 1 }, { 'idempotency-key': 'k' })
  const final = await stream.next('run.completed')
  t.ok(recorded, 'the record was written before the final event was sent')
  await stream.ended
  t.same(stream.events.map((e) => e.event), ['run.started', 'message.delta', 'run.completed'])
  const retry = await fetch(url + RUNS, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'idempotency-key': 'k' }, body: JSON.stringify({ input: 1 }) })
  t.equal(retry.status, 200)
  t.equal(retry.headers.get('idempotent-replayed'), 'true')
  t.same(parseSse(await retry.text()), [final])
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
  await eventually(() => w.runs === 1, 10_000, 'the run to start')
  req.destroy()
  const store = service.app.agentService.settings.idempotency!.store
  await eventually(async () => await idempotencyRecord(store, scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k')) === null, 10_000, 'the key to be released')
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
    renew: (...args) => memory.renew(...args),
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
  await eventually(() => answered === 19, 10_000, 'the other 19 answers')
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
  await eventually(() => answered === 19, 10_000, 'the other 19 answers')
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

// ---------------------------------------------------------------------------------------------------------
// the lock lease is renewed while the request runs

/**
 * The scenario of the renewal: a lease of OUTLIVED_LEASE_MS, a run of four leases (held until then, and until the
 * retry has its answer, so that a slow machine cannot end the run first), a retry with the same key after about
 * 2.7 leases on `second`. (With a 150 ms lease, renewed every 50 ms, a loaded machine's event loop held up a
 * renewal past the lease now and then: the retry took the key over.)
 */
const OUTLIVED_LEASE_MS = 400

async function outlivedLease (t: Parameters<typeof build>[0], first: AgentService, second: AgentService, w: ReturnType<typeof worker>): Promise<void> {
  await Promise.all([first.app.ready(), second.app.ready()])
  const store = first.app.agentService.settings.idempotency!.store
  const key = scopedIdempotencyKey('anonymous', 'POST', RUNS, 'long')
  w.hold()
  const started = Date.now()
  const running = run(first, 'long')
  await eventually(() => w.runs === 1, 10_000, 'the run to start')
  const reserved = await idempotencyRecord(store, key)
  await sleep(Math.max(0, started + Math.round(OUTLIVED_LEASE_MS * 8 / 3) - Date.now()))
  let answered = false
  const retrying = run(second, 'long').finally(() => { answered = true })
  // (were the key taken over, the retry's own run would wait for the release below)
  await eventually(() => answered || w.runs > 1, 10_000, "the retry's answer or a second run")
  t.equal(w.runs, 1, 'the retry did not run the agent')
  const held = await idempotencyRecord(store, key)
  t.ok(Date.parse(held!.lockedUntil) > Date.parse(reserved!.lockedUntil), 'the lease was renewed')
  t.ok(Date.parse(held!.lockedUntil) > Date.now(), 'and holds now')
  await sleep(Math.max(0, started + 4 * OUTLIVED_LEASE_MS - Date.now()))
  w.release()
  const retry = await retrying
  t.equal(retry.statusCode, 409, 'the retry, past the lease, finds the key still held')
  t.equal(retry.json().code, 'IDEMPOTENCY_IN_PROGRESS')
  const done = await running
  t.equal(done.statusCode, 200)
  t.equal(w.runs, 1, 'the agent ran once')
  for (const service of [second, first]) {
    const replay = await run(service, 'long')
    t.equal(replay.statusCode, 200)
    t.equal(replay.headers['idempotent-replayed'], 'true')
    t.equal(replay.body, done.body)
  }
  t.equal(w.runs, 1)
}

t.test('a run longer than the lock lease keeps its key: a retry during it is 409, the agent runs once (one instance)', async (t) => {
  const { service, worker } = idempotent(t, { idempotency: { lockLeaseMs: OUTLIVED_LEASE_MS } })
  await outlivedLease(t, service, service, worker)
})

t.test('a run longer than the lock lease keeps its key across two instances sharing PostgreSQL', async (t) => {
  if (!await requirePg(t)) return
  const schema = withPgSchema(t)
  const stores = [new PostgresIdempotencyStore(pgUrl(), { schema }), new PostgresIdempotencyStore(pgUrl(), { schema })]
  t.teardown(async () => { for (const store of stores) await store.close() })
  const w = worker()
  const one = build(t, { agents: { work: w.agent }, idempotency: { store: stores[0], lockLeaseMs: OUTLIVED_LEASE_MS } })
  const two = build(t, { agents: { work: w.agent }, idempotency: { store: stores[1], lockLeaseMs: OUTLIVED_LEASE_MS } })
  await outlivedLease(t, one, two, w)
})

t.test('a run longer than the lock lease keeps its key across two instances sharing Redis', async (t) => {
  if (!await requireRedis(t)) return
  const prefix = withRedisPrefix(t)
  const stores = [new RedisIdempotencyStore(redisUrl(), { prefix }), new RedisIdempotencyStore(redisUrl(), { prefix })]
  t.teardown(async () => { for (const store of stores) await store.close() })
  const w = worker()
  const one = build(t, { agents: { work: w.agent }, idempotency: { store: stores[0], lockLeaseMs: OUTLIVED_LEASE_MS } })
  const two = build(t, { agents: { work: w.agent }, idempotency: { store: stores[1], lockLeaseMs: OUTLIVED_LEASE_MS } })
  await outlivedLease(t, one, two, w)
})

/** A memory store that counts renewals and can be told to answer them otherwise. */
class RenewingStore extends MemoryIdempotencyStore {
  renewals = 0
  answer: (() => Promise<boolean>) | null = null

  override async renew (key: string, token: string, leaseMs: number): Promise<boolean> {
    this.renewals++
    return this.answer === null ? super.renew(key, token, leaseMs) : this.answer()
  }
}

/** Whether an agent run by `timed` takes `ms`, then fails or yields; streams when asked to. */
const timed: Agent = {
  async * run (input) {
    const { ms, fail } = input as { ms: number, fail?: boolean }
    yield 'a'
    await sleep(ms)
    if (fail === true) throw new Error('boom')
    yield 'b'
  }
}

/** The lines the idempotency plugin logs (the service logs its failed runs too). */
function logLines () {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({
    write (chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n')) {
        const entry = line === '' ? null : JSON.parse(line)
        if (/^idempotency/.test(entry?.msg)) lines.push(entry)
      }
      callback()
    }
  })
  return { lines, logger: { level: 'warn', stream } }
}

function renewing (t: Parameters<typeof build>[0], options: Partial<AgentServiceOptions> = {}) {
  const store = new RenewingStore()
  const log = logLines()
  // a 30 ms lease: a renewal every 10 ms
  const service = build(t, { agents: { work: timed }, idempotency: { store, lockLeaseMs: 30 }, logger: log.logger, ...options })
  return { service, store, lines: log.lines }
}

async function noRenewalAfter (t: Parameters<typeof build>[0], store: RenewingStore, what: string): Promise<void> {
  t.ok(store.renewals > 0, `renewed while it ran: ${what}`)
  const seen = store.renewals
  await sleep(100)
  t.equal(store.renewals, seen, `no renewal after the end: ${what}`)
}

t.test('the lease is renewed while the request runs, and the renewal stops however the request ends', async (t) => {
  const { service, store, lines } = renewing(t, { requestTimeoutMs: 1_000 })
  const sse = { accept: 'text/event-stream' }

  t.equal((await run(service, 'completed', { input: { ms: 100 } })).statusCode, 200)
  await noRenewalAfter(t, store, 'completed')
  t.equal((await run(service, 'failed', { input: { ms: 100, fail: true } })).statusCode, 500)
  await noRenewalAfter(t, store, 'a 5xx (released)')
  t.equal((await run(service, 'timed out', { input: { ms: 2_000 } })).statusCode, 504)
  await noRenewalAfter(t, store, 'a timeout')
  t.equal(parseSse((await run(service, 'streamed', { input: { ms: 100 } }, sse)).body).at(-1)!.event, 'run.completed')
  await noRenewalAfter(t, store, 'an SSE run completed')
  t.equal(parseSse((await run(service, 'stream failed', { input: { ms: 100, fail: true } }, sse)).body).at(-1)!.event, 'run.failed')
  await noRenewalAfter(t, store, 'an SSE run failed')

  // an error answered before the run starts (404 for a session that does not exist) is stored at once
  t.equal((await run(service, 'no session', { input: { ms: 100 }, sessionId: randomUUID() })).statusCode, 404)
  const before = store.renewals
  await sleep(100)
  t.equal(store.renewals, before, 'no renewal after the end: a 4xx')

  t.equal(await store.get(scopedIdempotencyKey('anonymous', 'POST', RUNS, 'failed')), null, 'the failed run was released')
  t.match(await store.get(scopedIdempotencyKey('anonymous', 'POST', RUNS, 'completed')), { state: 'completed' })
  t.same(lines, [], 'renewals of records completed or released meanwhile are not warned about')
})

t.test('the renewal stops when the client leaves, for JSON and for SSE', async (t) => {
  const store = new RenewingStore()
  const { service, url } = await listen(t, { agents: { work: timed }, idempotency: { store, lockLeaseMs: 30 } })
  for (const accept of ['application/json', 'text/event-stream']) {
    const key = `left-${accept}`
    const req = httpRequest(`${url}${RUNS}`, { method: 'POST', headers: { 'content-type': 'application/json', accept, 'idempotency-key': key } })
    req.on('error', () => {})
    req.end(JSON.stringify({ input: { ms: 2_000 } }))
    await eventually(() => store.renewals > 0, 10_000, 'a renewal')
    req.destroy()
    await eventually(async () => await store.get(scopedIdempotencyKey('anonymous', 'POST', RUNS, key)) === null, 10_000, 'the key to be released')
    await noRenewalAfter(t, store, `the client left (${accept})`)
  }
  t.equal(service.app.agentService.runs.size, 0)
})

t.test('a renewal that answers false is logged, stops the renewals, and the request goes on', async (t) => {
  const { service, store, lines } = renewing(t)
  store.answer = async () => false
  const res = await run(service, 'k', { input: { ms: 100 } })
  t.equal(res.statusCode, 200)
  t.equal(store.renewals, 1, 'no renewal after the key was lost')
  t.match(lines, [{ level: 40, msg: /idempotency reservation lost/, idempotencyKey: 'k' }])
  t.equal(lines.length, 1)
})

t.test('a renewal that throws is logged and retried, and the request goes on', async (t) => {
  const { service, store, lines } = renewing(t)
  store.answer = async () => { throw new Error('store down') }
  const res = await run(service, 'k', { input: { ms: 100 } })
  t.equal(res.statusCode, 200)
  t.ok(store.renewals >= 2, 'renewed again after a failure')
  t.ok(lines.length >= 2)
  t.ok(lines.every((line) => line.level === 40 && /failed to renew/.test(line.msg) && line.err.message === 'store down'))
  t.match(await idempotencyRecord(store, scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k')), { state: 'completed' })
})

t.test('one renewal at a time: a store that does not answer gets no pile of them', async (t) => {
  const { service, store, lines } = renewing(t)
  store.answer = () => new Promise(() => {})
  t.equal((await run(service, 'k', { input: { ms: 100 } })).statusCode, 200)
  t.equal(store.renewals, 1)
  t.same(lines, [])
})

t.test('a renewal answered after the request ended is not warned about, whatever the answer', async (t) => {
  const { service, store, lines } = renewing(t)
  for (const answer of [false, new Error('store down')]) {
    let answered = false
    store.answer = async () => {
      await sleep(100)
      answered = true
      if (answer instanceof Error) throw answer
      return answer
    }
    const renewals = store.renewals
    t.equal((await run(service, `late-${String(answer)}`, { input: { ms: 20 } })).statusCode, 200)
    t.equal(store.renewals, renewals + 1)
    await eventually(() => answered, 10_000, 'the late answer')
    await sleep(10)
  }
  t.same(lines, [])
})

// ---------------------------------------------------------------------------------------------------------
// through store faults (docs/auth-and-traffic.md)

t.test('the scope is the decoded path: /v1/agents/%77ork/runs is /v1/agents/work/runs', async (t) => {
  const { service, worker } = idempotent(t)
  t.equal((await run(service, 'k')).statusCode, 200)
  const encoded = await service.app.inject({
    method: 'POST', url: '/v1/agents/%77ork/runs', headers: { 'content-type': 'application/json', 'idempotency-key': 'k' }, payload: { input: 'hello' }
  })
  t.equal(encoded.statusCode, 200)
  t.equal(encoded.headers['idempotent-replayed'], 'true')
  t.equal(worker.runs, 1, 'one execution')
  t.equal(decodedPath('/v1/agents/%77ork/runs?x=%41'), '/v1/agents/work/runs')
  t.equal(decodedPath('/v1/agents/50%/runs'), '/v1/agents/50%/runs', 'not percent-encoding: as written')
})

/** A memory store whose completions fail (throw) while `down`, counting them. */
class FlakyStore extends MemoryIdempotencyStore {
  down = true
  completions = 0
  renewals = 0
  /** while set, the completions after the first wait for it before they fail or succeed (in flight until then) */
  held: Promise<void> | null = null

  override async complete (...args: Parameters<MemoryIdempotencyStore['complete']>): Promise<boolean> {
    this.completions++
    if (this.completions > 1 && this.held !== null) await this.held
    if (this.down) throw new Error('store down')
    return super.complete(...args)
  }

  override async renew (...args: Parameters<MemoryIdempotencyStore['renew']>): Promise<boolean> {
    this.renewals++
    if (this.renewalsDown) throw new Error('store down')
    return super.renew(...args)
  }

  /** whether renewals fail too (an outage of the whole store), not only completions */
  renewalsDown = false
}

function flaky (t: Parameters<typeof build>[0], idempotency: Record<string, number> = {}) {
  const store = new FlakyStore()
  const log = logLines()
  log.logger.level = 'info'
  const { service, worker } = idempotent(t, { idempotency: { store, lockLeaseMs: 60, ...idempotency }, logger: log.logger })
  return { service, worker, store, lines: log.lines }
}

t.test('a completion the store refuses is retried, the lease renewed, until written: a retry replays, one run', async (t) => {
  const { service, worker, store, lines } = flaky(t)
  const first = await run(service, 'k')
  const answeredAt = Date.now()
  t.equal(first.statusCode, 200, 'the answer does not wait for the store')
  // past several leases (without the renewals a retry would take the key over and run the agent again), and the
  // completion retried and the lease renewed meanwhile, by their timers, however late those fire
  await eventually(() => Date.now() - answeredAt >= 250 && store.completions >= 3 && store.renewals > 3, 10_000, 'retried and renewed')
  t.ok(store.completions >= 3, `retried (${store.completions} attempts)`)
  const during = await run(service, 'k')
  t.equal(during.statusCode, 409, 'still in progress while the response is not written')
  t.ok(store.renewals > 3, 'the lease was renewed meanwhile')
  store.down = false
  await eventually(async () => (await idempotencyRecord(store, scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k')))?.state === 'completed', 5_000, 'the record written')
  const renewals = store.renewals
  const retry = await run(service, 'k')
  t.equal(retry.headers['idempotent-replayed'], 'true')
  t.equal(retry.body, first.body)
  t.equal(worker.runs, 1)
  await sleep(100)
  t.ok(store.renewals <= renewals + 3, 'the renewals stop once it is written')
  t.match(lines.filter((line) => /failed to record/.test(line.msg)), [{ level: 50, err: { message: 'store down' } }])
  t.match(lines.at(-1), { level: 30, msg: /recorded after the store came back/, idempotencyKey: 'k' })
})

t.test('an outage longer than the lease: a retry at the instance holding the key never takes it over, running or recording', async (t) => {
  // Issue 23: renewals failing, the lease ran out in the store, and a retry here took the key over and ran the agent
  // a second time, while the first run went on, or while its response waited to be recorded
  const { service, worker, store } = flaky(t)
  store.renewalsDown = true
  worker.hold()
  const first = run(service, 'k')
  await eventually(() => worker.runs === 1, 5_000, 'the run')
  await sleep(150)
  const running = await run(service, 'k')
  t.equal(running.statusCode, 409, 'while the first runs, past its lease')
  t.equal(running.headers['retry-after'], '1')
  t.equal((await run(service, 'k', { input: 'other' })).statusCode, 422, 'another body: reused, as the store would say')
  worker.release()
  t.equal((await first).statusCode, 200)
  await sleep(150)
  const recording = await run(service, 'k')
  t.equal(recording.statusCode, 409, 'while its response cannot be recorded, past its lease')
  t.equal(worker.runs, 1)
  const attempts = store.completions
  store.down = false
  store.renewalsDown = false
  const replay = await run(service, 'k')
  t.equal(replay.headers['idempotent-replayed'], 'true', 'the retry records the response first, then replays it')
  t.equal(store.completions, attempts + 1, 'at once, not at the next retry')
  t.equal(worker.runs, 1)
})

t.test('a streamed run whose completion fails: the final event goes out, the completion is retried', async (t) => {
  const store = new FlakyStore()
  const streaming: Agent = { async * run () { yield 'done' } }
  let runs = 0
  const counting: Agent = { async * run (input, ctx) { runs++; yield * streaming.run(input, ctx) as AsyncIterable<string> } }
  const service = build(t, { agents: { work: counting }, idempotency: { store, lockLeaseMs: 60 } })
  const sse = { accept: 'text/event-stream' }
  const first = await run(service, 'k', { input: 1 }, sse)
  t.equal(parseSse(first.body).at(-1)!.event, 'run.completed')
  t.equal((await run(service, 'k', { input: 1 }, sse)).statusCode, 409)
  store.down = false
  await eventually(async () => (await run(service, 'k', { input: 1 }, sse)).headers['idempotent-replayed'] === 'true', 5_000, 'a replay')
  t.equal(runs, 1)
})

t.test('a completion retried past ttlMs gives up: the key is freed when its lease runs out', async (t) => {
  const { service, worker, store, lines } = flaky(t, { ttlMs: 150 })
  t.equal((await run(service, 'k')).statusCode, 200)
  await eventually(() => lines.some((line) => /never recorded \(its ttlMs passed\)/.test(line.msg)), 5_000, 'given up')
  const attempts = store.completions
  await sleep(150)
  t.equal(store.completions, attempts, 'no attempt after giving up')
  t.equal((await run(service, 'k')).statusCode, 200, 'past the replay window, a retry runs')
  t.equal(worker.runs, 2)
})

t.test('at close, a pending completion gets one last attempt', async (t) => {
  for (const comesBack of [true, false]) {
    const store = new FlakyStore()
    const log = logLines()
    const { service } = idempotent(t, { idempotency: { store, lockLeaseMs: 60 }, logger: log.logger })
    t.equal((await run(service, 'k')).statusCode, 200)
    await eventually(() => store.completions >= 2, 5_000, 'a retry')
    store.down = !comesBack
    const attempts = store.completions
    await service.app.close()
    t.ok(store.completions > attempts, 'the last attempt')
    if (comesBack) t.match(await idempotencyRecord(store, scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k')), { state: 'completed' })
    else t.match(log.lines.at(-1), { level: 50, msg: /never recorded \(the service closed\)/ })
  }
  // closed while a retry is in flight: the last attempt is made, the retry's outcome changes nothing
  {
    const store = new FlakyStore()
    const log = logLines()
    const { service } = idempotent(t, { idempotency: { store, lockLeaseMs: 60_000 }, logger: log.logger })
    let release!: () => void
    store.held = new Promise((resolve) => { release = resolve })
    t.equal((await run(service, 'k')).statusCode, 200)
    await eventually(() => store.completions === 2, 5_000, 'a retry in flight')
    store.down = false
    const closing = service.app.close()
    // the retry still in flight when the close makes its last attempt
    await eventually(() => store.completions === 3, 5_000, 'the last attempt')
    release()
    await closing
    await sleep(100)
    t.equal(store.completions, 3, 'the retry, then the last attempt; nothing after')
    t.match(await idempotencyRecord(store, scopedIdempotencyKey('anonymous', 'POST', RUNS, 'k')), { state: 'completed' })
  }
  // closed while a retry that fails is in flight: the last attempt fails too; no retry after
  {
    const store = new FlakyStore()
    const log = logLines()
    const { service } = idempotent(t, { idempotency: { store, lockLeaseMs: 60_000 }, logger: log.logger })
    let release!: () => void
    store.held = new Promise((resolve) => { release = resolve })
    t.equal((await run(service, 'k')).statusCode, 200)
    await eventually(() => store.completions === 2, 5_000, 'a retry in flight')
    const closing = service.app.close()
    await eventually(() => store.completions === 3, 5_000, 'the last attempt')
    release()
    await closing
    await sleep(200)
    t.equal(store.completions, 3, 'the retry, then the last attempt; nothing after')
    t.match(log.lines.at(-1), { level: 50, msg: /never recorded \(the service closed\)/ })
  }
  // a request answered while the service drains: its attempt, then the last one
  const store = new FlakyStore()
  const w = worker()
  const log = logLines()
  const { service } = idempotent(t, { idempotency: { store }, logger: log.logger }, w)
  w.hold()
  const answer = run(service, 'k')
  await eventually(() => w.runs === 1, 5_000, 'the run')
  const closing = service.app.close()
  await eventually(() => service.app.agentService.drain.draining, 5_000, 'the close begun')
  w.release()
  t.equal((await answer).statusCode, 200)
  await closing
  t.equal(store.completions, 2)
  t.match(log.lines.at(-1), { level: 50, msg: /never recorded \(the service closed\)/ })
})

t.test('a completion the store declines (the reservation is no longer ours) is logged, not retried', async (t) => {
  const store = new FlakyStore()
  store.down = false
  // what complete() answers for a record taken over, or expired, meanwhile
  Object.assign(store, { complete: async () => { store.completions++; return false } })
  const log = logLines()
  const { service } = idempotent(t, { idempotency: { store, lockLeaseMs: 60 }, logger: log.logger })
  t.equal((await run(service, 'k')).statusCode, 200)
  await sleep(100)
  t.equal(store.completions, 1)
  t.match(log.lines, [{ level: 40, msg: /reservation lost before its response was recorded/, idempotencyKey: 'k' }])
  t.equal(log.lines.length, 1)
})

t.test('a release the store refuses is logged: the key is freed when its lease runs out', async (t) => {
  const store = new MemoryIdempotencyStore()
  Object.assign(store, { release: async () => { throw new Error('store down') } })
  const log = logLines()
  log.logger.level = 'error'
  const service = build(t, { agents: { work: timed }, idempotency: { store, lockLeaseMs: 100 }, logger: log.logger })
  t.equal((await run(service, 'k', { input: { ms: 1, fail: true } })).statusCode, 500)
  t.match(log.lines, [{ level: 50, msg: 'idempotency store failed to release a key', err: { message: 'store down' } }])
  t.equal((await run(service, 'k', { input: { ms: 1, fail: true } })).statusCode, 409, 'locked while its lease holds')
  await sleep(150)
  const retry = await run(service, 'k', { input: { ms: 1 } })
  t.equal(retry.statusCode, 200, 'then free: the retry runs')
  t.equal(retry.headers['idempotent-replayed'], undefined)
})
