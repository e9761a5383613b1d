// Webhooks (docs/webhooks.md) end to end: a real endpoint (test/helpers/webhook-receiver.ts) that verifies every
// delivery with standardwebhooks' own Webhook.verify; the outbox in memory here (the shared ones: webhooks-*.test.ts).
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import type { Test } from 'tap'
import { buildOpenApiDocument } from '../../../app/openapi.js'
import { createAgentService } from '../../../app/service.js'
import { DEFAULT_WEBHOOK_TUNING, describeFailure, retryDelay, webhookId, webhookPayload } from '../../../lib/webhooks/dispatcher.js'
import type { WebhookTuning } from '../../../lib/webhooks/dispatcher.js'
import { MemoryWebhookStore } from '../../../lib/stores/memory-webhooks.js'
import type { WebhookStore } from '../../../lib/stores/types.js'
import type { Agent, AgentServiceOptions } from '../../../lib/core/types.js'
import { build, echo, eventually, injected, sleep } from '../../helper.js'
import { newSecret, receiver } from '../../helpers/webhook-receiver.js'
import type { Receiver } from '../../helpers/webhook-receiver.js'

const approver: Agent = {
  async run (_input, ctx) {
    const decision = await ctx.requestApproval({ action: 'deploy', payload: { version: 2 } })
    return { output: { approved: decision.approved } }
  }
}
const failing: Agent = { async run () { throw new Error('boom') } }
const chatty: Agent = {
  async * run (_input, ctx) {
    yield 'hello'
    ctx.emit('my.custom', { x: 1, runId: 'not-this-run', principal: 'someone-else' })
    ctx.emit('my.custom', 5)
    ctx.emit('my.custom')
    yield { type: 'my.custom', data: [1, 2] }
    yield { type: 'other.custom', data: {} }
  }
}

// each test's services retry on its own timings, held by those services alone
const tunings = new WeakMap<Test, Partial<WebhookTuning>>()
function tune (t: Test, changes: Partial<WebhookTuning>): void {
  tunings.set(t, changes)
}

function service (t: Test, hook: Receiver, options: Partial<AgentServiceOptions> = {}, logs?: Array<Record<string, unknown>>): ReturnType<typeof build> {
  const logger = logs === undefined ? false : { level: 'info', stream: { write: (line: string) => { logs.push(JSON.parse(line) as Record<string, unknown>) } } }
  return build(t, {
    agents: { echo, approver, failing, chatty },
    webhooks: { url: hook.url, secret: hook.secret },
    adminApi: { enabled: true },
    logger,
    ...injected({ webhookTuning: tunings.get(t) ?? {} }),
    ...options
  })
}

const run = (agent: string, input: unknown = 'hi') => ({ method: 'POST' as const, url: `/v1/agents/${agent}/runs`, payload: { input } })

t.test('the default events, signed and shaped as the contract says', async (t) => {
  const hook = await receiver(t)
  const { app } = service(t, hook)
  const pending = app.inject(run('approver'))
  const asked = await eventually(() => hook.deliveries.find((d) => d.payload?.type === 'approval.requested'), 10_000, 'approval.requested delivered')
  const approval = asked.payload.data.approval
  t.equal((await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })).statusCode, 200)
  const completed = (await pending).json()
  t.equal((await app.inject(run('failing'))).statusCode, 500)
  await eventually(() => hook.deliveries.length >= 3, 10_000, 'three deliveries')
  await sleep(200)
  t.equal(hook.deliveries.length, 3, 'only the subscribed events: no run.started, no approval.decided')

  for (const delivery of hook.deliveries) {
    t.ok(delivery.verified, `${delivery.payload?.type}: Webhook.verify accepts it (${delivery.verifyError})`)
    t.match(delivery.id, /^msg_[A-Za-z0-9_-]{32}$/)
    t.ok(Math.abs(Number(delivery.timestamp) - Date.now() / 1000) < 30, 'webhook-timestamp: seconds, now')
    t.match(delivery.signature, /^v1,[A-Za-z0-9+/]+=*$/)
    t.equal(delivery.contentType, 'application/json')
    t.same(Object.keys(delivery.payload), ['type', 'timestamp', 'data'])
    t.ok(!Number.isNaN(Date.parse(delivery.payload.timestamp)))
  }
  const byType = new Map(hook.deliveries.map((d) => [d.payload.type, d.payload]))
  t.same([...byType.keys()].sort(), ['approval.requested', 'run.completed', 'run.failed'])
  const identity = { runId: completed.runId, agent: 'approver', sessionId: completed.sessionId, principal: 'anonymous' }
  t.same(byType.get('run.completed')!.data, { ...completed, ...identity }, 'the JSON result')
  t.same(Object.keys(byType.get('run.completed')!.data).slice(0, 4), ['runId', 'agent', 'sessionId', 'principal'], 'who the run is, first')
  t.match(byType.get('approval.requested')!.data, { ...identity, approval: { id: approval.id, action: 'deploy', payload: { version: 2 }, status: 'pending' } })
  t.match(byType.get('run.failed')!.data, { agent: 'failing', principal: 'anonymous', error: { code: 'AGENT_ERROR' } })

  t.same(Object.fromEntries(app.agentService.stats.webhookDeliveries()), { delivered: 3 })
  const listed = (await app.inject({ method: 'GET', url: '/admin/webhooks' })).json()
  t.equal(listed.nextCursor, null)
  t.same(listed.attempts.map((a: { event: string }) => a.event).sort(), ['approval.requested', 'run.completed', 'run.failed'])
  for (const attempt of listed.attempts) {
    t.match(attempt, { attempt: 1, status: 204, error: null, outcome: 'delivered' })
    t.ok(hook.deliveries.some((d) => d.id === attempt.webhookId && d.payload.data.runId === attempt.runId))
  }
})

t.test('custom events: the types listed, custom ones included, data of any shape', async (t) => {
  const hook = await receiver(t)
  const { app } = service(t, hook, { webhooks: { url: hook.url, secret: hook.secret, events: ['run.started', 'my.custom'] } })
  const result = (await app.inject(run('chatty'))).json()
  await eventually(() => hook.deliveries.length >= 5, 10_000, 'five deliveries')
  await sleep(200)
  t.equal(hook.deliveries.length, 5, 'run.started and the four my.custom, nothing else')
  t.ok(hook.deliveries.every((d) => d.verified))
  const identity = { runId: result.runId, agent: 'chatty', sessionId: result.sessionId, principal: 'anonymous' }
  const byJson = (a: unknown, b: unknown): number => JSON.stringify(a).localeCompare(JSON.stringify(b))
  t.match(hook.deliveries.find((d) => d.payload.type === 'run.started')!.payload.data, { ...identity, requestId: String, attempt: 1 })
  const customs = hook.deliveries.filter((d) => d.payload.type === 'my.custom').map((d) => d.payload.data)
  t.same(customs.sort(byJson), [identity, { ...identity, value: [1, 2] }, { ...identity, value: 5 }, { ...identity, x: 1 }].sort(byJson),
    'the run\'s own identity wins over the event\'s fields')
  t.equal(new Set(hook.deliveries.map((d) => d.id)).size, 5, 'one id per event')
})

t.test('an endpoint down for a while, then up: each event delivered, one webhook-id across its attempts, all listed', async (t) => {
  tune(t, { firstRetryMs: 100, pollMs: 20 })
  const hook = await receiver(t)
  await hook.down()
  const { app } = service(t, hook)
  const runs = [(await app.inject(run('echo', 'one'))).json().runId, (await app.inject(run('echo', 'two'))).json().runId]
  const failedAttempts = async (): Promise<any[]> => (await app.inject({ method: 'GET', url: '/admin/webhooks?outcome=retried&limit=500' })).json().attempts
  await eventually(async () => (await failedAttempts()).length >= 4, 10_000, 'two failed attempts each')
  for (const attempt of await failedAttempts()) {
    t.match(attempt, { event: 'run.completed', status: null, error: /ECONNREFUSED/, outcome: 'retried' })
  }
  await hook.up()
  await eventually(() => hook.deliveries.length >= 2, 10_000, 'both delivered once the endpoint is up')
  await sleep(300)
  t.equal(hook.deliveries.length, 2, 'delivered once each')
  t.ok(hook.deliveries.every((d) => d.verified), 'signatures verify (made afresh at each attempt)')
  t.same(hook.deliveries.map((d) => d.payload.data.runId).sort(), [...runs].sort())

  for (const runId of runs) {
    const { attempts } = (await app.inject({ method: 'GET', url: `/admin/webhooks?runId=${runId}` })).json()
    t.ok(attempts.length >= 3)
    t.same(attempts.map((a: { attempt: number }) => a.attempt), attempts.map((_: unknown, i: number) => attempts.length - i), 'most recent first, numbered from 1')
    t.equal(new Set(attempts.map((a: { webhookId: string }) => a.webhookId)).size, 1, 'one webhook-id across its attempts')
    t.equal(attempts[0].webhookId, hook.deliveries.find((d) => d.payload.data.runId === runId)!.id, 'the one the endpoint got')
    t.match(attempts[0], { outcome: 'delivered', status: 204 })
    t.ok(attempts.slice(1).every((a: { outcome: string }) => a.outcome === 'retried'))
  }
  // paging through every attempt, two at a time
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const page: { attempts: Array<{ webhookId: string, attempt: number }>, nextCursor: string | null } =
      (await app.inject({ method: 'GET', url: `/admin/webhooks?limit=2${cursor === null ? '' : `&cursor=${cursor}`}` })).json()
    seen.push(...page.attempts.map((a) => `${a.webhookId}/${a.attempt}`))
    cursor = page.nextCursor
  } while (cursor !== null)
  const all = (await app.inject({ method: 'GET', url: '/admin/webhooks?limit=500' })).json().attempts
  t.same(seen, all.map((a: { webhookId: string, attempt: number }) => `${a.webhookId}/${a.attempt}`), 'pages: no gaps, no duplicates')
  t.equal((await app.inject({ method: 'GET', url: '/admin/webhooks?outcome=delivered&event=run.completed' })).json().attempts.length, 2)
  const figures = Object.fromEntries(app.agentService.stats.webhookDeliveries())
  t.equal(figures.delivered, 2)
  t.equal(figures.retried, all.length - 2)
})

t.test('a 500, then no answer within the timeout: both retried, then delivered', async (t) => {
  tune(t, { firstRetryMs: 50, pollMs: 20, attemptTimeoutMs: 300 })
  const hook = await receiver(t, (_delivery, n) => n === 0 ? 500 : n === 1 ? 'hang' : 200)
  const { app } = service(t, hook)
  const { runId } = (await app.inject(run('echo'))).json()
  await eventually(() => hook.deliveries.length >= 3, 10_000, 'three attempts')
  await sleep(200)
  t.equal(hook.deliveries.length, 3)
  t.equal(new Set(hook.deliveries.map((d) => d.id)).size, 1, 'one webhook-id')
  t.ok(hook.deliveries.every((d) => d.verified))
  const { attempts } = (await app.inject({ method: 'GET', url: `/admin/webhooks?runId=${runId}` })).json()
  t.match(attempts.reverse(), [
    { attempt: 1, status: 500, error: null, outcome: 'retried' },
    { attempt: 2, status: null, error: 'no answer within 300 ms', outcome: 'retried' },
    { attempt: 3, status: 200, error: null, outcome: 'delivered' }
  ])
  t.ok(attempts[1].durationMs >= 250, `the timeout took its time (${attempts[1].durationMs} ms)`)
})

t.test('given up once the window has passed', async (t) => {
  tune(t, { firstRetryMs: 50, pollMs: 20, windowMs: 500 })
  const hook = await receiver(t, () => 503)
  const logs: Array<Record<string, unknown>> = []
  const { app } = service(t, hook, {}, logs)
  await app.inject(run('echo'))
  await eventually(() => logs.some((line) => line.msg === 'webhook delivery given up: no 2xx answer within the retry window'), 10_000, 'given up')
  const count = hook.deliveries.length
  await sleep(300)
  t.equal(hook.deliveries.length, count, 'no attempt after that')
  const { attempts } = (await app.inject({ method: 'GET', url: '/admin/webhooks' })).json()
  t.equal(attempts[0].outcome, 'failed')
  t.ok(attempts.slice(1).every((a: { outcome: string, status: number }) => a.outcome === 'retried' && a.status === 503))
  t.equal(app.agentService.stats.webhookDeliveries().get('failed'), 1)
  t.ok(logs.some((line) => line.msg === 'webhook attempt failed: it will be retried' && line.status === 503))
})

t.test('a redirect is not a delivery: 302 and 307 are failed attempts, retried, never followed, then given up', async (t) => {
  tune(t, { firstRetryMs: 50, pollMs: 20, windowMs: 600 })
  const elsewhere = await receiver(t)
  const hook = await receiver(t, (_delivery, n) => ({ status: n % 2 === 0 ? 302 : 307, headers: { location: elsewhere.url } }))
  const logs: Array<Record<string, unknown>> = []
  const { app } = service(t, hook, {}, logs)
  const { runId } = (await app.inject(run('echo'))).json()
  // given up, or (the bug) counted as delivered
  await eventually(() => logs.some((line) => line.msg === 'webhook delivery given up: no 2xx answer within the retry window') ||
    app.agentService.stats.webhookDeliveries().has('delivered'), 10_000, 'the delivery settled')
  const { attempts } = (await app.inject({ method: 'GET', url: `/admin/webhooks?runId=${runId}` })).json()
  t.notOk(attempts.some((a: { outcome: string }) => a.outcome === 'delivered'), 'no attempt counted as delivered')
  t.ok(attempts.length >= 2, `attempted again (${attempts.length} attempts)`)
  t.same(attempts.reverse().map((a: { status: number }) => a.status), attempts.map((_: unknown, i: number) => i % 2 === 0 ? 302 : 307), 'each answer recorded')
  t.ok(attempts.slice(0, -1).every((a: { outcome: string }) => a.outcome === 'retried'), 'every attempt but the last: retried')
  t.equal(attempts.at(-1).outcome, 'failed', 'the last: given up')
  t.equal(hook.deliveries.length, attempts.length, 'the endpoint got every attempt')
  t.equal(elsewhere.deliveries.length, 0, 'the Location was never followed')
  t.same(Object.fromEntries(app.agentService.stats.webhookDeliveries()), { retried: attempts.length - 1, failed: 1 })
})

t.test('a drain stops the claims; the attempt on its way goes on', async (t) => {
  tune(t, { maxInFlight: 1, attemptTimeoutMs: 300, pollMs: 20 })
  const hook = await receiver(t, () => 'hang')
  const store = new MemoryWebhookStore()
  let claims = 0
  const outbox: WebhookStore = {
    enqueue: (deliveries) => store.enqueue(deliveries),
    claim: (...args) => { claims++; return store.claim(...args) },
    record: (...args) => store.record(...args),
    attempts: (query) => store.attempts(query),
    purge: (now, batch) => store.purge(now, batch)
  }
  // the run the drain waits for ends once the attempt's timeout has come (however late a loaded machine's timer)
  let release!: () => void
  const released = new Promise<void>((resolve) => { release = resolve })
  t.teardown(() => release())
  const held: Agent = { async run () { await released; return { output: 'released' } } }
  const svc = service(t, hook, { webhookStore: outbox, agents: { echo, held } })
  await svc.app.inject(run('echo', 'one'))
  await svc.app.inject(run('echo', 'two'))
  await eventually(() => hook.deliveries.length === 1, 10_000, 'the first attempt on its way')
  const heldRun = svc.app.inject(run('held'))
  await eventually(() => svc.app.agentService.runs.ids().length === 1, 10_000, 'a run in flight')
  const closing = svc.close(60_000)
  await eventually(() => svc.app.agentService.drain.draining, 10_000, 'the drain begun')
  const claimsAtDrain = claims
  const recorded = await eventually(async () => (await store.attempts({ limit: 10 })).attempts[0], 10_000, 'the attempt recorded')
  t.match(recorded, { attempt: 1, status: null, error: 'no answer within 300 ms', outcome: 'retried' }, 'its timeout came during the drain')
  // the claim a finished attempt makes room for would go out in the same tick
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(claims, claimsAtDrain, 'nothing was claimed after the drain began')
  t.equal(hook.deliveries.length, 1, 'nothing attempted after it')
  release()
  await heldRun
  await closing
  t.equal(hook.deliveries.length, 1)
  const { attempts } = await store.attempts({ limit: 10 })
  t.match(attempts, [{ attempt: 1, status: null, error: 'no answer within 300 ms', outcome: 'retried' }])
  const left = await store.claim({ owner: 'test', until: Date.now() + 60_000 }, Date.now() + 60_000, 10)
  t.same(left.map((d) => d.attempt).sort(), [1, 1, 2], 'the other two (one enqueued during the drain) wait for an instance that stays')
})

t.test('close cuts an attempt on its way: recorded, and due again at once', async (t) => {
  const hook = await receiver(t, () => 'hang')
  const store = new MemoryWebhookStore()
  const svc = service(t, hook, { webhookStore: store })
  await svc.app.inject(run('echo'))
  await eventually(() => hook.deliveries.length === 1, 10_000, 'the attempt on its way')
  const started = Date.now()
  await svc.close(0)
  t.ok(Date.now() - started < 5_000, 'close does not wait for the endpoint\'s 10 s')
  t.match((await store.attempts({ limit: 10 })).attempts, [{ attempt: 1, status: null, error: 'the instance closed during the attempt', outcome: 'retried' }])
  const [again] = await store.claim({ owner: 'test', until: Date.now() + 60_000 }, Date.now(), 10)
  t.equal(again!.attempt, 2)
})

t.test('close cuts an attempt on its way after a garbage collection: the attempt holds its signal (undici holds it weakly)', async (t) => {
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const hook = await receiver(t, () => 'hang')
  const store = new MemoryWebhookStore()
  const svc = service(t, hook, { webhookStore: store })
  await svc.app.inject(run('echo'))
  await eventually(() => hook.deliveries.length === 1, 10_000, 'the attempt on its way')
  // collected, and its finalizers run, before the close that aborts it
  for (let i = 0; i < 3; i++) {
    gc()
    await sleep(10)
  }
  const started = Date.now()
  await svc.close(0)
  t.ok(Date.now() - started < 5_000, 'close does not wait for the endpoint\'s 10 s')
  t.match((await store.attempts({ limit: 10 })).attempts, [{ attempt: 1, status: null, error: 'the instance closed during the attempt', outcome: 'retried' }])
})

/** A memory outbox whose calls fail while `failing` says so. */
function flaky (failing: { enqueue: number, claim: number, record: number, lost: boolean }): WebhookStore {
  const store = new MemoryWebhookStore()
  return {
    enqueue: async (deliveries) => {
      if (failing.enqueue-- > 0) throw new Error('outbox down')
      return store.enqueue(deliveries)
    },
    claim: async (...args) => {
      if (failing.claim-- > 0) throw new Error('outbox down')
      return store.claim(...args)
    },
    record: async (attempt, owner, next) => {
      if (failing.record-- > 0) throw new Error('outbox down')
      const held = await store.record(attempt, owner, next)
      return failing.lost ? false : held
    },
    attempts: (query) => store.attempts(query),
    purge: (now, batch) => store.purge(now, batch)
  }
}

t.test('an outbox that fails: enqueues, claims and records are tried again; an overflowing backlog is lost and counted', async (t) => {
  tune(t, { pollMs: 20, firstRetryMs: 50, maxBacklog: 2 })
  const hook = await receiver(t)
  const failing = { enqueue: Infinity, claim: 2, record: 1, lost: false }
  const logs: Array<Record<string, unknown>> = []
  const { app } = service(t, hook, { webhookStore: flaky(failing), webhooks: { url: hook.url, secret: hook.secret, events: ['run.started', 'run.completed'] } }, logs)
  const one = (await app.inject(run('echo', 'one'))).json().runId
  const two = (await app.inject(run('echo', 'two'))).json().runId
  await eventually(() => app.agentService.stats.webhookDeliveries().get('lost') === 2, 10_000, 'four told, at most two kept')
  t.ok(logs.some((line) => line.msg === 'could not put webhook deliveries in the outbox: tried again shortly'))
  t.ok(logs.some((line) => line.msg === 'webhook deliveries lost: the outbox refused them for too long'))
  failing.enqueue = 0
  await eventually(() => hook.deliveries.length >= 2, 10_000, 'delivered once the outbox answers')
  await sleep(200)
  t.same(hook.deliveries.map((d) => d.payload.data.runId), [two, two], 'the latest kept, the oldest lost')
  t.not(one, two)
  t.ok(logs.some((line) => line.msg === 'could not claim webhook deliveries'))
  t.ok(logs.some((line) => line.msg === 'could not record a webhook attempt'), 'its lease runs out, and it is attempted again')

  failing.lost = true
  await app.inject(run('echo', 'three'))
  await eventually(() => logs.some((line) => String(line.msg).startsWith('webhook attempt recorded, but its delivery had been claimed again')), 10_000, 'a lease lost')
})

t.test('what the outbox refused until close is lost, and counted', async (t) => {
  const hook = await receiver(t)
  const logs: Array<Record<string, unknown>> = []
  const svc = service(t, hook, { webhookStore: flaky({ enqueue: 1_000, claim: 0, record: 0, lost: false }) }, logs)
  await svc.app.inject(run('echo'))
  await svc.close(0)
  t.equal(svc.app.agentService.stats.webhookDeliveries().get('lost'), 1)
  t.equal(hook.deliveries.length, 0)
})

t.test('the Admin listing: limits and cursors checked, and empty without webhooks', async (t) => {
  const hook = await receiver(t)
  const { app } = service(t, hook)
  for (const url of ['/admin/webhooks?limit=0', '/admin/webhooks?limit=501', '/admin/webhooks?outcome=lost', '/admin/webhooks?other=1']) {
    t.equal((await app.inject({ method: 'GET', url })).statusCode, 400, url)
  }
  const bad = await app.inject({ method: 'GET', url: '/admin/webhooks?cursor=bad!' })
  t.match(bad, { statusCode: 400 })
  t.match(bad.json(), { code: 'FA_INVALID_CURSOR' })
  const plain = build(t, { adminApi: { enabled: true } })
  t.same((await plain.app.inject({ method: 'GET', url: '/admin/webhooks?cursor=anything' })).json(), { attempts: [], nextCursor: null })
})

t.test('the core purges ended deliveries past their retention, and logs a purge that fails', async (t) => {
  const hook = await receiver(t)
  const store = new MemoryWebhookStore()
  const { app } = service(t, hook, { webhookStore: store, webhooks: { url: hook.url, secret: hook.secret, retentionMs: 1 } })
  await app.inject(run('echo'))
  await eventually(async () => (await store.attempts({ limit: 10 })).attempts.length === 1, 10_000, 'delivered')
  const warnings: string[] = []
  app.agentService.stopPurging()
  app.agentService.startPurging({ warn: (_o: unknown, message: string) => warnings.push(message) } as never, 5)
  await eventually(async () => (await store.attempts({ limit: 10 })).attempts.length === 0, 5_000, 'purged')
  store.purge = async () => { throw new Error('outbox down') }
  await eventually(() => warnings.includes('could not purge ended webhook deliveries'), 5_000, 'a failed purge logged')
  app.agentService.stopPurging()
})

t.test('the OpenAPI document has the Admin listing; building it delivers nothing from the outbox', async (t) => {
  const touched: string[] = []
  const outbox = new Proxy(new MemoryWebhookStore(), {
    get (target, property) {
      touched.push(String(property))
      return Reflect.get(target, property, target)
    }
  })
  const document = await buildOpenApiDocument({
    agents: { echo }, adminApi: { enabled: true, bearerToken: 'token' }, webhooks: { url: 'https://example.com', secret: newSecret() }, webhookStore: outbox
  }) as any
  t.same(touched, [], 'the outbox untouched')
  const operation = document.paths['/admin/webhooks'].get
  t.equal(operation.operationId, 'listWebhookAttempts')
  t.same(operation.security, [{ adminBearer: [] }])
  t.same(operation.parameters.map((p: { name: string }) => p.name).sort(), ['cursor', 'event', 'limit', 'outcome', 'runId'])
  t.ok(document.components.schemas.WebhookAttempt)
  t.ok(document.components.schemas.AdminWebhookAttemptPage)
  t.ok(operation.responses['400'])
})

t.test('bad options: every problem named by its path, before anything is bound', async (t) => {
  const secret = newSecret()
  const invalid = (webhooks: unknown, extra: Partial<AgentServiceOptions> = {}): string => {
    try {
      createAgentService({ agents: { echo }, logger: false, webhooks: webhooks as AgentServiceOptions['webhooks'], ...extra })
    } catch (error) {
      t.equal((error as { code?: string }).code, 'FST_AGENTS_INVALID_OPTIONS')
      return (error as Error).message
    }
    throw new Error('accepted')
  }
  t.match(invalid({ url: 'ftp://example.com/hook', secret }), '/webhooks/url must be an http:// or https:// URL')
  t.match(invalid({ url: 'not a url', secret }), '/webhooks/url must be an http:// or https:// URL')
  for (const bad of ['abc', 'whsec_', 'whsec_abc', `whsec_${Buffer.alloc(16).toString('base64')}`,  `whsec_${'A'.repeat(10)}==`, `whsec_${'*'.repeat(40)}`]) {
    t.match(invalid({ url: 'https://example.com/hook', secret: bad }), /\/webhooks\/secret must be "whsec_" followed by the base64 of at least 24 random bytes/, bad)
  }
  const message = invalid({ url: 'http://example.com', secret: 'nope', events: ['run.completed', 'run.exploded', 'Bad Type', 'my.custom', 'x'.repeat(65)] })
  t.match(message, '/webhooks/secret must be')
  t.match(message, '/webhooks/events/1 "run.exploded" is not an event type')
  t.match(message, '/webhooks/events/2 "Bad Type" is not an event type')
  t.match(message, '/webhooks/events/4 "xxx')
  t.notMatch(message, '/webhooks/events/0')
  t.notMatch(message, '/webhooks/events/3')
  t.match(invalid({ secret }), "/webhooks must have required property 'url'")
  t.match(invalid({ url: 'https://example.com', secret, events: [] }), '/webhooks/events must NOT have fewer than 1 items')
  t.match(invalid({ url: 'https://example.com', secret, events: ['run.failed', 'run.failed'] }), '/webhooks/events must NOT have duplicate items')
  t.match(invalid({ url: 'https://example.com', secret, headers: {} }), '/webhooks/headers is not a known option')
  t.match(invalid({ url: 'https://example.com', secret }, { webhookStore: {} as WebhookStore }), '/webhookStore must have methods enqueue(), claim(), record(), attempts(), purge()')
  t.match(invalid('https://example.com'), '/webhooks must be object')
  t.doesNotThrow(() => createAgentService({ agents: { echo }, logger: false, webhooks: { url: 'https://user:pw@example.com:8443/hooks?x=1', secret, events: ['tool.call', 'a-b_c.d'], retentionMs: 1 } }))
})

t.test('the pieces: ids, bodies, backoff, failures described', async (t) => {
  const event = { seq: 3, type: 'run.completed', data: '{"output":1}' }
  t.equal(webhookId('run-1', event), webhookId('run-1', { ...event }), 'stable')
  t.not(webhookId('run-1', event), webhookId('run-2', event))
  t.not(webhookId('run-1', event), webhookId('run-1', { ...event, seq: 4 }))
  t.not(webhookId('run-1', event), webhookId('run-1', { ...event, data: '{"output":2}' }), 'a run id reused after its retention gets new ids')
  const run = { runId: 'r', agent: 'a', sessionId: null, principal: 'p' }
  t.same(JSON.parse(webhookPayload(run, event, 0)), { type: 'run.completed', timestamp: '1970-01-01T00:00:00.000Z', data: { ...run, output: 1 } })
  t.same(JSON.parse(webhookPayload(run, { ...event, data: '"text"' }, 0)).data, { ...run, value: 'text' })

  t.equal(DEFAULT_WEBHOOK_TUNING.attemptTimeoutMs, 10_000, 'no answer within 10 s fails an attempt (the contract)')
  t.ok(retryDelay(1, DEFAULT_WEBHOOK_TUNING, 1) <= 30_000, 'the first retry within 30 s (the contract)')
  t.equal(DEFAULT_WEBHOOK_TUNING.windowMs, 24 * 3_600_000, 'for up to 24 h (the contract)')
  t.ok(DEFAULT_WEBHOOK_TUNING.leaseMs >= 5 * DEFAULT_WEBHOOK_TUNING.attemptTimeoutMs, 'a lease outlasts an attempt')
  t.same([1, 2, 3, 4].map((n) => retryDelay(n, DEFAULT_WEBHOOK_TUNING, 0.5)), [10_000, 20_000, 40_000, 80_000], 'doubling')
  t.equal(retryDelay(30, DEFAULT_WEBHOOK_TUNING, 0.5), 3_600_000, 'at most an hour apart')
  t.equal(retryDelay(5_000, DEFAULT_WEBHOOK_TUNING, 0.5), 3_600_000)
  t.equal(retryDelay(1, DEFAULT_WEBHOOK_TUNING, 0), 8_000, 'give or take 20 %')
  t.equal(retryDelay(1, DEFAULT_WEBHOOK_TUNING, 1), 12_000)
  t.ok(retryDelay(1) > 0, 'with the tuning in force and a random spread')

  t.equal(describeFailure(Object.assign(new Error('x'), { name: 'TimeoutError' }), 10), 'no answer within 10 ms')
  t.equal(describeFailure(new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:1') }), 10), 'connect ECONNREFUSED 127.0.0.1:1')
  t.equal(describeFailure(new TypeError('fetch failed', { cause: 'odd' }), 10), 'fetch failed')
  t.equal(describeFailure(new Error('plain'), 10), 'plain')
})
