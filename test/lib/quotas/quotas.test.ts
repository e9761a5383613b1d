// The `quotas` option (docs/auth-and-traffic.md) through the service: two instances in one process sharing memory stores enforce
// one principal's runs in progress across both, every way to start a run counts, a run's end frees its slot, the token
// window resets, the 429 says when to retry, and an idempotent replay is not refused. PostgreSQL: test/stores/quotas-postgres.test.ts.
import t from 'tap'
import type { Test } from 'tap'
import pino from 'pino'
import { createAgentService } from '../../../app/service.js'
import { Quotas, windowStart } from '../../../lib/quotas/quotas.js'
import type { Agent, AgentServiceOptions } from '../../../lib/core/types.js'
import { MemoryQuotaStore } from '../../../lib/stores/memory-quotas.js'
import { memoryStores } from '../../../lib/stores/memory.js'
import type { QuotaSlot, QuotaStore } from '../../../lib/stores/types.js'
import { MIN_RUN_LEASE_MS } from '../../../schemas/options.js'
import { build, eventually, listen, parseSse, sleep } from '../../helper.js'
import { openWs } from '../../helpers/streams.js'

const KEYS = { alice: 'alice-key-0123456789', bob: 'bob-key-0123456789' }
const as = (who: keyof typeof KEYS): Record<string, string> => ({ 'x-api-key': KEYS[who] })
const auth = { strategy: 'api-key' as const, keys: [KEYS.alice, KEYS.bob] }

/** An agent whose runs wait for `open()` (or their cancel); `started` counts them. */
function gated (): { agent: Agent, open: () => void, started: () => number } {
  let release!: () => void
  let gate = new Promise<void>((resolve) => { release = resolve })
  let started = 0
  const agent: Agent = {
    resumable: true,
    async run (input, ctx) {
      started++
      if (input === 'checkpoint' || input === 'fail') await ctx.checkpoint({ at: 1 })
      if (input === 'fail') throw new Error('failed after its checkpoint')
      await Promise.race([gate, new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }))])
      return { output: input, usage: { inputTokens: 1, outputTokens: 1 } }
    }
  }
  return {
    agent,
    open: () => {
      release()
      gate = new Promise<void>((resolve) => { release = resolve })
    },
    started: () => started
  }
}

type Service = ReturnType<typeof build>

function pair (t: Test, options: Partial<AgentServiceOptions>): [Service, Service] {
  const stores = memoryStores()
  return [build(t, { ...stores, auth, ...options }), build(t, { ...stores, auth, ...options })]
}

async function run (app: Service['app'], who: keyof typeof KEYS, payload: Record<string, unknown>, headers: Record<string, string> = {}) {
  return app.inject({ method: 'POST', url: '/v1/agents/held/runs', headers: { ...as(who), ...headers }, payload })
}

t.test('maxConcurrentRuns across two instances: background and foreground runs count, another principal does not, an end frees', async (t) => {
  const held = gated()
  const [a, b] = pair(t, { agents: { held: held.agent }, quotas: { maxConcurrentRuns: 2 } })
  await Promise.all([a.app.ready(), b.app.ready()])
  const background = await run(a.app, 'alice', { input: 1, background: true })
  t.equal(background.statusCode, 202)
  const foreground = run(b.app, 'alice', { input: 2 })
  await eventually(() => held.started() === 2)

  const refused = await run(b.app, 'alice', { input: 3 }, { 'x-request-id': 'refused-1' })
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.same(refused.json(), {
    statusCode: 429,
    error: 'Too Many Requests',
    code: 'QUOTA_EXCEEDED',
    message: 'Quota exceeded: at most 2 runs in progress at once: retry in 1 s',
    requestId: 'refused-1',
    traceId: refused.json().traceId
  })
  t.equal((await run(a.app, 'alice', { input: 3, background: true })).statusCode, 429, 'on the other instance too, background or not')
  t.equal(held.started(), 2, 'no agent ran for a refused run')
  const bobs = await run(a.app, 'bob', { input: 4, background: true })
  t.equal(bobs.statusCode, 202, 'another principal is not counted')

  held.open()
  t.equal((await foreground).statusCode, 200)
  await eventually(async () => (await a.app.inject({ url: `/v1/runs/${background.json().runId as string}`, headers: as('alice') })).json().status === 'completed')
  const again = run(a.app, 'alice', { input: 5 })
  await eventually(() => held.started() === 4)
  held.open()
  t.equal((await again).statusCode, 200, 'the ended runs gave their slots back')
})

t.test('every way to start a run counts: SSE, WebSocket, chat, resume; a failure after admission gives the slot back', async (t) => {
  const held = gated()
  const { service, url } = await listen(t, { agents: { held: held.agent }, quotas: { maxConcurrentRuns: 1 }, websocket: true, auth })
  const app = service.app
  const first = run(app, 'alice', { input: 1, stream: true })
  await eventually(() => held.started() === 1)
  const sse = await run(app, 'alice', { input: 1, stream: true })
  t.equal(sse.statusCode, 429)
  t.equal(sse.json().code, 'QUOTA_EXCEEDED')
  const chat = await app.inject({
    method: 'POST', url: '/v1/agents/held/chat', headers: as('alice'), payload: { id: 'c', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] }
  })
  t.equal(chat.statusCode, 429)
  t.equal(chat.headers['retry-after'], '1')
  const agUi = await app.inject({
    method: 'POST',
    url: '/v1/agents/held/ag-ui',
    headers: as('alice'),
    payload: { threadId: 't', runId: 'r', state: {}, messages: [{ id: 'u', role: 'user', content: 'hi' }], tools: [], context: [], forwardedProps: {} }
  })
  t.equal(agUi.statusCode, 429, 'AG-UI')
  t.equal(agUi.json().code, 'QUOTA_EXCEEDED')
  const ws = await openWs(url, { headers: as('alice') })
  t.teardown(() => ws.socket.close())
  ws.send({ type: 'run.start', ref: 'w1', agent: 'held', input: 1 })
  const frame = await ws.next((f) => f.type === 'error')
  t.match(frame, { ref: 'w1', error: { code: 'QUOTA_EXCEEDED', message: /at most 1 runs in progress/ } })

  held.open()
  t.equal(parseSse((await first).body).at(-1)!.event, 'run.completed')
  const failed = parseSse((await run(app, 'alice', { input: 'fail', stream: true })).body)
  t.equal(failed.at(-1)!.event, 'run.failed', 'failed after its checkpoint: resumable')
  const runId = failed[0]!.data.runId as string
  // a resume is a run: admitted like one
  const blocker = run(app, 'alice', { input: 'x' })
  await eventually(() => held.started() === 3)
  const resume = await run(app, 'alice', { input: 'again', resumeRunId: runId })
  t.equal(resume.statusCode, 429, 'a resume is refused like any run')
  held.open()
  t.equal((await blocker).statusCode, 200)

  const missing = await run(app, 'alice', { input: 1, sessionId: 'no-such-session' })
  t.equal(missing.statusCode, 404)
  const next = run(app, 'alice', { input: 2 })
  await eventually(() => held.started() === 4)
  held.open()
  t.equal((await next).statusCode, 200, 'the refused run (404) gave its slot back')
})

t.test('a resume racing the same run in progress on another instance keeps that run\'s slot', async (t) => {
  const held = gated()
  const [a, b] = pair(t, { agents: { held: held.agent }, quotas: { maxConcurrentRuns: 1 } })
  const first = await run(a.app, 'alice', { input: 'checkpoint', background: true })
  const runId = first.json().runId as string
  await eventually(() => held.started() === 1)
  // its checkpoint saved (a fixed 20 ms before): the resume has something to go on from
  await eventually(async () => await a.app.agentService.settings.checkpointStore.load(runId) !== null)
  const resumed = await run(b.app, 'alice', { input: 'again', resumeRunId: runId })
  t.equal(resumed.statusCode, 409)
  t.equal(resumed.json().code, 'RUN_IN_PROGRESS')
  t.equal((await run(b.app, 'alice', { input: 2 })).statusCode, 429, 'the run in progress still holds its slot')
  held.open()
  await eventually(async () => (await a.app.inject({ url: `/v1/runs/${runId}`, headers: as('alice') })).json().status === 'completed')
})

t.test('a queued run cancelled before it runs gives its slot back (HTTP cancel, A2A CancelTask)', async (t) => {
  const held = gated()
  const [a, b] = pair(t, { agents: { held: held.agent }, quotas: { maxConcurrentRuns: 3 } })
  await Promise.all([a.app.ready(), b.app.ready()])
  const first = await run(a.app, 'alice', { input: 1, background: true })
  const sessionId = first.json().sessionId as string
  await eventually(() => held.started() === 1)
  // queued behind the first in its session
  const queued = await run(a.app, 'alice', { input: 2, background: true, sessionId, multitask: 'enqueue' })
  const queued2 = await run(a.app, 'alice', { input: 3, background: true, sessionId, multitask: 'enqueue' })
  t.equal((await run(b.app, 'alice', { input: 4, background: true })).statusCode, 429)
  const cancelled = await b.app.inject({ method: 'POST', url: `/v1/runs/${queued.json().runId as string}/cancel`, headers: as('alice') })
  t.equal(cancelled.statusCode, 202)
  t.equal(cancelled.json().status, 'cancelled')
  const fourth = await run(b.app, 'alice', { input: 4, sessionId, multitask: 'enqueue', background: true })
  t.equal(fourth.statusCode, 202, 'the cancelled run\'s slot was given back')
  const rpc = await a.app.inject({
    method: 'POST', url: '/v1/a2a/held', headers: as('alice'), payload: { jsonrpc: '2.0', id: 1, method: 'CancelTask', params: { id: queued2.json().runId } }
  })
  t.equal(rpc.statusCode, 200)
  t.notOk(rpc.json().error)
  t.equal((await run(a.app, 'alice', { input: 5, sessionId, multitask: 'enqueue', background: true })).statusCode, 202, 'so was the one cancelled over A2A')
  const a2a = await a.app.inject({
    method: 'POST',
    url: '/v1/a2a/held',
    headers: as('alice'),
    payload: { jsonrpc: '2.0', id: 2, method: 'SendMessage', params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'hi' }] } } }
  })
  t.match(a2a.json(), { id: 2, error: { message: /Quota exceeded/ } }, 'A2A: a JSON-RPC error naming the quota')
  for (let i = 0; i < 3; i++) {
    held.open()
    await sleep(20)
  }
})

t.test('tokens: the window\'s usage refuses new runs until the next window; retry-after is the window\'s end', async (t) => {
  const intervalMs = 1_000
  const [a, b] = pair(t, { agents: { held: { async run (input) { return { output: input, usage: { inputTokens: 2, outputTokens: 1 } } } } }, quotas: { tokens: { limit: 5, intervalMs } } })
  await Promise.all([a.app.ready(), b.app.ready()])
  // The first three runs must fall in one window, each counted in the window it ends in. They start as a window
  // begins; a try that straddles two all the same (a loaded machine) is made again from the start of one it left unused.
  let used = windowStart(Date.now(), intervalMs)
  for (let tries = 1; ; tries++) {
    await eventually(() => windowStart(Date.now(), intervalMs) > used, 5_000, 'a window nothing was counted in')
    const window = windowStart(Date.now(), intervalMs)
    const first = await run(a.app, 'alice', { input: 1 })
    const second = await run(b.app, 'alice', { input: 2 })
    const refused = await run(a.app, 'alice', { input: 3 })
    used = windowStart(Date.now(), intervalMs)
    if (used !== window && tries < 10) continue
    t.equal(first.statusCode, 200)
    t.equal(second.statusCode, 200, '3 of 5 used: still under the limit')
    t.equal(refused.statusCode, 429)
    t.equal(refused.headers['retry-after'], '1')
    t.match(refused.json(), { code: 'QUOTA_EXCEEDED', message: 'Quota exceeded: 5 tokens per 1000 ms used: retry in 1 s' })
    break
  }
  t.equal((await run(b.app, 'bob', { input: 4, background: true })).statusCode, 202, 'bob has his own window')
  await eventually(async () => (await run(b.app, 'alice', { input: 5 })).statusCode === 200, 5_000, 'the next window')
})

t.test('tokens and runs at once: a failed run counts no tokens; an hour window says so in retry-after', async (t) => {
  const [a] = pair(t, {
    agents: { held: { async run (input) { if (input === 'fail') throw new Error('no'); return { output: input, usage: { inputTokens: 0, outputTokens: 1 } } } } },
    quotas: { maxConcurrentRuns: 1, tokens: { limit: 1, intervalMs: 3_600_000 } }
  })
  t.equal((await run(a.app, 'alice', { input: 'fail' })).statusCode, 500)
  t.equal((await run(a.app, 'alice', { input: 1 })).statusCode, 200, 'the failed run counted nothing')
  const refused = await run(a.app, 'alice', { input: 2 })
  t.equal(refused.statusCode, 429)
  const retryAfter = Number(refused.headers['retry-after'])
  t.ok(retryAfter >= 1 && retryAfter <= 3600, `retry-after ${retryAfter} s: the end of the hour`)
})

t.test('an idempotent replay of an admitted run is not refused; a refused request with a key runs when retried', async (t) => {
  const held = gated()
  const stores = memoryStores()
  const options = { ...stores, auth, agents: { held: held.agent }, quotas: { maxConcurrentRuns: 1 }, idempotency: stores.idempotency }
  const [a, b] = [build(t, options), build(t, options)]
  const done = run(a.app, 'alice', { input: 1 }, { 'idempotency-key': 'k1' })
  await eventually(() => held.started() === 1)
  held.open()
  t.equal((await done).statusCode, 200)
  const blocking = run(a.app, 'alice', { input: 2 })
  await eventually(() => held.started() === 2)
  const replay = await run(b.app, 'alice', { input: 1 }, { 'idempotency-key': 'k1' })
  t.equal(replay.statusCode, 200)
  t.equal(replay.headers['idempotent-replayed'], 'true', 'replayed while the principal is at its quota')
  const refused = await run(b.app, 'alice', { input: 3 }, { 'idempotency-key': 'k2' })
  t.equal(refused.statusCode, 429)
  held.open()
  t.equal((await blocking).statusCode, 200)
  const retried = run(b.app, 'alice', { input: 3 }, { 'idempotency-key': 'k2' })
  await eventually(() => held.started() === 3)
  held.open()
  const answer = await retried
  t.equal(answer.statusCode, 200)
  t.equal(answer.headers['idempotent-replayed'], undefined, 'the 429 was not kept for replay')
})

t.test('slots are renewed while their runs last longer than the lease', async (t) => {
  const held = gated()
  const [a, b] = pair(t, { agents: { held: held.agent }, quotas: { maxConcurrentRuns: 1 }, runLeaseMs: MIN_RUN_LEASE_MS })
  await Promise.all([a.app.ready(), b.app.ready()])
  const background = await run(a.app, 'alice', { input: 1, background: true })
  await eventually(() => held.started() === 1)
  // what is asserted is that time passing changes nothing: a wait, not a condition
  await sleep(2 * MIN_RUN_LEASE_MS + 200)
  t.equal((await run(b.app, 'alice', { input: 2 })).statusCode, 429, 'still held after two leases')
  held.open()
  await eventually(async () => (await a.app.inject({ url: `/v1/runs/${background.json().runId as string}`, headers: as('alice') })).json().status === 'completed')
  // the admitting instance and the claiming one renewed it; both forget it once it is given back (the slot goes
  // back just after the record ends: the next run is admitted once it has)
  const next = await eventually(async () => {
    const res = await run(b.app, 'alice', { input: 3, background: true })
    return res.statusCode === 202 && res
  }, 5_000, 'the slot given back')
  await eventually(() => held.started() === 2)
  held.open()
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${next.json().runId as string}`, headers: as('alice') })).json().status === 'completed')
})

t.test('a run handed off at a drain keeps its slot on the instance that claims it', async (t) => {
  const held = gated()
  const [a, b] = pair(t, { agents: { held: held.agent }, quotas: { maxConcurrentRuns: 1 } })
  await a.app.ready()
  const queued = await run(a.app, 'alice', { input: 1, background: true })
  const runId = queued.json().runId as string
  await eventually(() => held.started() === 1)
  // the drain's deadline at once: the resumable background run is requeued for another instance
  await a.close(0)
  await b.app.ready()
  await eventually(() => held.started() === 2)
  t.match((await b.app.inject({ url: `/v1/runs/${runId}`, headers: as('alice') })).json(), { status: 'running', attempt: 2 })
  t.equal((await run(b.app, 'alice', { input: 2 })).statusCode, 429, 'the requeued run still holds the one slot')
  held.open()
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${runId}`, headers: as('alice') })).json().status === 'completed')
  const next = run(b.app, 'alice', { input: 3 })
  await eventually(() => held.started() === 3)
  held.open()
  t.equal((await next).statusCode, 200)
})

t.test('an instance that stops renewing (it died) leaves its slots to expire within a lease', async (t) => {
  const held = gated()
  const [a, b] = pair(t, { agents: { held: { ...held.agent, resumable: false } }, quotas: { maxConcurrentRuns: 1 }, runLeaseMs: MIN_RUN_LEASE_MS })
  await Promise.all([a.app.ready(), b.app.ready()])
  const first = await run(a.app, 'alice', { input: 1, background: true })
  await eventually(() => held.started() === 1)
  t.equal((await run(b.app, 'alice', { input: 2, background: true })).statusCode, 429)
  // no more renewals (nor claims) from the first instance, as if it had died
  a.app.agentService.worker.stop()
  const admitted = await eventually(async () => {
    const res = await run(b.app, 'alice', { input: 2, background: true })
    return res.statusCode === 202 && res
  }, MIN_RUN_LEASE_MS + 3_000, 'the dead instance\'s slot expiring')
  t.equal(admitted.statusCode, 202)
  // and the other instance ends its run, whose lease lapsed with it
  await eventually(async () => (await b.app.inject({ url: `/v1/runs/${first.json().runId as string}`, headers: as('alice') })).json().error?.code === 'INSTANCE_LOST')
  held.open()
})

/** A memory store whose calls fail while `failing` names them. */
class FlakyQuotaStore extends MemoryQuotaStore implements QuotaStore {
  failing = new Set<string>()
  #check (name: string): void {
    if (this.failing.has(name)) throw Object.assign(new Error(`${name} failed`), { code: 'E_TEST' })
  }

  override async acquire (slot: QuotaSlot, max: number, now: number, until: number): Promise<boolean> {
    this.#check(max === Number.MAX_SAFE_INTEGER ? 'keep' : 'acquire')
    return super.acquire(slot, max, now, until)
  }

  override async renew (slots: readonly QuotaSlot[], until: number): Promise<string[]> {
    // slower than the timer (a sixth of the lease): the next tick finds this renewal still on its way
    if (this.failing.has('slow')) await sleep(MIN_RUN_LEASE_MS / 4)
    this.#check('renew')
    return super.renew(slots, until)
  }

  override async release (slot: QuotaSlot): Promise<void> {
    this.#check('release')
    return super.release(slot)
  }

  override async addTokens (principal: string, window: { start: number, end: number }, n: number): Promise<void> {
    this.#check('addTokens')
    return super.addTokens(principal, window, n)
  }

  override async purge (now: number, batch: number): Promise<number> {
    this.#check('purge')
    return super.purge(now, batch)
  }
}

t.test('a failing quota store: admission fails closed (the store\'s error); the rest is logged and the runs go on', async (t) => {
  const held = gated()
  const store = new FlakyQuotaStore()
  const logs: string[] = []
  const logger = { level: 'warn', stream: { write: (line: string) => { logs.push(JSON.parse(line).msg as string) } } }
  const service = createAgentService({ logger, agents: { held: held.agent }, auth, quotas: { maxConcurrentRuns: 1, tokens: { limit: 100, intervalMs: 60_000 } }, quotaStore: store, runLeaseMs: MIN_RUN_LEASE_MS })
  t.teardown(() => service.close(0))
  const app = service.app
  await app.ready()
  ;(app.agentService as unknown as { startPurging: (log: unknown, ms: number) => void }).startPurging(app.log, 20)

  store.failing.add('acquire')
  const refused = await run(app, 'alice', { input: 1 })
  t.equal(refused.statusCode, 500, 'a store that fails to count: the run is not admitted')
  store.failing.clear()

  store.failing.add('keep')
  store.failing.add('slow')
  store.failing.add('renew')
  store.failing.add('release')
  store.failing.add('addTokens')
  store.failing.add('purge')
  const background = await run(app, 'alice', { input: 1, background: true })
  await eventually(() => held.started() === 1)
  await eventually(() => logs.includes('could not renew this instance\'s quota slots'))
  held.open()
  await eventually(async () => (await app.inject({ url: `/v1/runs/${background.json().runId as string}`, headers: as('alice') })).json().status === 'completed')
  await eventually(() => logs.includes('could not purge expired quota counts'))
  for (const message of [
    'could not take a claimed run\'s quota slot: the run is not counted',
    'could not renew this instance\'s quota slots',
    'could not give a quota slot back',
    'could not count a run\'s tokens against its quota'
  ]) t.ok(logs.includes(message), message)
})

t.test('options: positive integers, one quota at least, a store with the methods; the store is probed and left out when unused', async (t) => {
  const bad = [
    [{ maxConcurrentRuns: 0 }, '/quotas/maxConcurrentRuns must be >= 1'],
    [{ maxConcurrentRuns: 1.5 }, '/quotas/maxConcurrentRuns must be integer'],
    [{ tokens: { limit: 0, intervalMs: 1000 } }, '/quotas/tokens/limit must be >= 1'],
    [{ tokens: { limit: 10 } }, '/quotas/tokens must have required property \'intervalMs\''],
    [{ tokens: { limit: 10, intervalMs: 0.5 } }, '/quotas/tokens/intervalMs must be integer'],
    [{ maxRuns: 1 }, '/quotas/maxRuns is not a known option'],
    [{}, '/quotas must set maxConcurrentRuns, tokens or both']
  ] as const
  for (const [quotas, message] of bad) {
    t.throws(() => createAgentService({ logger: false, agents: { held: gated().agent }, quotas: quotas as never }), { code: 'FST_AGENTS_INVALID_OPTIONS', message: new RegExp(message.replace(/[/[\]()]/g, '\\$&')) }, message)
  }
  t.throws(() => createAgentService({ logger: false, agents: { held: gated().agent }, quotas: { maxConcurrentRuns: 1 }, quotaStore: {} as never }),
    { message: /\/quotaStore must have methods acquire\(\), renew\(\), release\(\), addTokens\(\), tokens\(\), purge\(\)/ })

  const probed = new MemoryQuotaStore() as MemoryQuotaStore & { probe: () => Promise<void> }
  probed.probe = async () => {}
  const used = build(t, { agents: { held: gated().agent }, quotas: { maxConcurrentRuns: 1 }, quotaStore: probed })
  t.match((await used.app.inject({ url: '/health' })).json(), { checks: { quotaStore: { status: 'ok' } } })
  const unused = build(t, { quotaStore: probed })
  t.notOk(JSON.stringify((await unused.app.inject({ url: '/health' })).json()).includes('quotaStore'), 'without quotas the store is not used')
  t.equal(unused.app.agentService.quotas, null)
  t.equal((await unused.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })).statusCode, 200)
})

t.test('Quotas.renew: a slot given back elsewhere (or expired) is forgotten here', async (t) => {
  const store = new MemoryQuotaStore()
  const quotas = new Quotas({ store, maxConcurrentRuns: 2, tokens: null }, 1_000, pino({ level: 'silent' }))
  t.equal(await quotas.admit('p', 'r1'), true)
  t.equal(await quotas.admit('p', 'r2'), true)
  await store.release({ principal: 'p', slotId: 'r1' })
  let renewed: string[] = []
  class Spy extends MemoryQuotaStore {
    override async renew (slots: readonly QuotaSlot[], until: number): Promise<string[]> {
      return (renewed = await super.renew(slots, until))
    }
  }
  const spy = new Spy()
  const watched = new Quotas({ store: spy, maxConcurrentRuns: 2, tokens: null }, 1_000, pino({ level: 'silent' }))
  await watched.admit('p', 'r3')
  await spy.release({ principal: 'p', slotId: 'r3' })
  await watched.renew()
  t.same(renewed, [], 'r3 was given back elsewhere')
  renewed = ['not called']
  await watched.renew()
  t.same(renewed, ['not called'], 'forgotten: nothing left to renew')
  await quotas.renew()
  t.equal(await store.acquire({ principal: 'p', slotId: 'r4' }, 2, Date.now(), Date.now() + 1_000), true, 'r2 held, r4 the second')
  t.equal(await store.acquire({ principal: 'p', slotId: 'r5' }, 2, Date.now(), Date.now() + 1_000), false)
})

t.test('a durable step under a quota: the quota\'s sink passes the step\'s acknowledgement on (docs/durable-agents.md)', async (t) => {
  let calls = 0
  const [a] = pair(t, { agents: { held: { async run (_input, ctx) { return { output: await ctx.step('count', async () => ++calls) } } } }, quotas: { maxConcurrentRuns: 1 } })
  const res = await run(a.app, 'alice', { input: 1 })
  t.equal(res.statusCode, 200)
  t.equal(res.json().output, 1)
  const events = (await a.app.inject({ url: `/v1/runs/${res.json().runId}/events?after=0`, headers: as('alice') }))
  t.match(events.body, /step\.completed/, 'the step journaled')
})
