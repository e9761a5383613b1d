// docs/operations.md: {adminPrefix}/metrics in Prometheus' text format, its counters equal to the runs performed.
import t from 'tap'
import { Counter, Registry } from 'prom-client'
import { MemoryRunStore } from '../../../lib/stores/memory-runs.js'
import type { Agent } from '../../../lib/core/types.js'
import { build, eventually } from '../../helper.js'

const TOKEN = 'metrics-token'
const auth = { authorization: `Bearer ${TOKEN}` }

/** `name{a="b",c="d"}` → value, for every sample of a text exposition. */
function parse (text: string): Map<string, number> {
  const samples = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const space = line.lastIndexOf(' ')
    samples.set(line.slice(0, space), Number(line.slice(space + 1)))
  }
  return samples
}

const failing: Agent = { async run () { throw new Error('no') } }
const waiter: Agent = {
  run (_input, ctx) {
    return new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)))
  }
}
const approver: Agent = {
  async run (_input, ctx) {
    const decision = await ctx.requestApproval({ action: 'ship' })
    return { output: decision.approved }
  }
}

t.test('the admin token is required; the counters equal the runs performed', async (t) => {
  const { app } = build(t, { agents: { echo: { async run (input) { return { output: input, usage: { inputTokens: 1, outputTokens: 2 } } } }, failing, waiter, approver }, adminApi: { enabled: true, bearerToken: TOKEN } })
  t.equal((await app.inject({ method: 'GET', url: '/admin/metrics' })).statusCode, 401)

  const N = 7
  for (let i = 0; i < N; i++) t.equal((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: i } })).statusCode, 200)
  for (let i = 0; i < 2; i++) t.equal((await app.inject({ method: 'POST', url: '/v1/agents/failing/runs', payload: { input: i } })).statusCode, 500)

  // one run cancelled while it waits, one waiting for an approval while scraped
  const waiting = app.inject({ method: 'POST', url: '/v1/agents/waiter/runs', payload: { input: 'x' } })
  const approving = app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: 'x' } })
  const approval = await eventually(async () => (await app.inject({ method: 'GET', url: '/v1/approvals' })).json().approvals[0])
  const runs = (await app.inject({ method: 'GET', url: '/admin/runs?status=running&agent=waiter', headers: auth })).json().runs
  const during = await app.inject({ method: 'GET', url: '/admin/metrics', headers: auth })
  t.equal(during.statusCode, 200)
  t.match(during.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  let m = parse(during.body)
  t.equal(m.get('fastify_agents_approvals_pending'), 1)
  t.equal(m.get('fastify_agents_runs_in_flight{agent="waiter"}'), 1)
  t.equal(m.get('fastify_agents_runs_in_flight{agent="approver"}'), 1)

  t.equal((await app.inject({ method: 'POST', url: `/v1/runs/${runs[0].runId}/cancel` })).statusCode, 202)
  await waiting
  await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })
  t.equal((await approving).json().output, true)
  app.agentService.stats.recordWebhookDelivery('delivered')
  app.agentService.stats.recordQueueWait(0.25)

  m = parse((await app.inject({ method: 'GET', url: '/admin/metrics', headers: auth })).body)
  const expected: Record<string, number> = {
    'fastify_agents_runs_total{agent="echo",status="completed"}': N,
    'fastify_agents_runs_total{agent="echo",status="failed"}': 0,
    'fastify_agents_runs_total{agent="failing",status="failed"}': 2,
    'fastify_agents_runs_total{agent="waiter",status="cancelled"}': 1,
    'fastify_agents_runs_total{agent="waiter",status="timed_out"}': 0,
    'fastify_agents_runs_total{agent="approver",status="completed"}': 1,
    'fastify_agents_runs_in_flight{agent="waiter"}': 0,
    'fastify_agents_tokens_total{agent="echo",kind="input"}': N,
    'fastify_agents_tokens_total{agent="echo",kind="output"}': 2 * N,
    'fastify_agents_run_duration_seconds_count{agent="echo"}': N,
    'fastify_agents_run_duration_seconds_count{agent="failing"}': 2,
    'fastify_agents_time_to_first_event_seconds_count{agent="echo"}': N,
    'fastify_agents_approvals_pending': 0,
    'fastify_agents_approval_wait_seconds_count': 1,
    'fastify_agents_requests_total{route="/v1/agents/:name/runs",status_class="2xx"}': N + 1,
    'fastify_agents_requests_total{route="/v1/runs/:runId/cancel",status_class="2xx"}': 1,
    'fastify_agents_audit_failures_total': 0,
    'fastify_agents_stream_followers': 0,
    'fastify_agents_slow_consumers_total': 0,
    'fastify_agents_runs_queued': 0,
    'fastify_agents_queue_wait_seconds_count': 1,
    'fastify_agents_webhook_deliveries_total{outcome="delivered"}': 1
  }
  for (const [name, value] of Object.entries(expected)) t.equal(m.get(name), value, name)
  t.ok(m.has('process_cpu_user_seconds_total'), 'prom-client\'s process metrics')
  t.notOk([...m.keys()].some((k) => k.includes('/admin/')), 'the Admin API\'s own requests are not counted')
})

t.test('a host Registry: the service adds its metrics to it; one Registry per service', async (t) => {
  const registry = new Registry()
  const host = new Counter({ name: 'host_things_total', help: 'the host\'s own', registers: [registry] })
  host.inc(3)
  const { app } = build(t, { adminApi: { enabled: true }, metrics: { registry } })
  const m = parse((await app.inject({ method: 'GET', url: '/admin/metrics' })).body)
  t.equal(m.get('host_things_total'), 3)
  t.equal(m.get('fastify_agents_runs_total{agent="echo",status="completed"}'), 0)
  t.ok(registry.getSingleMetric('process_cpu_user_seconds_total'))

  const second = build(t, { adminApi: { enabled: true }, metrics: { registry } })
  await t.rejects(async () => { await second.app.ready() }, { code: 'FST_AGENTS_INVALID_OPTIONS', message: /\/metrics\/registry already has the fastify-agents metrics/ })
})

t.test('a scrape goes on when the run store cannot count the queue', async (t) => {
  const runStore = new MemoryRunStore()
  const { app } = build(t, { adminApi: { enabled: true }, runStore })
  runStore.list = async () => { throw new Error('down') }
  const res = await app.inject({ method: 'GET', url: '/admin/metrics' })
  t.equal(res.statusCode, 200)
  t.equal(parse(res.body).get('fastify_agents_runs_queued'), 0, 'what it last knew')
})

t.test('metrics.registry must be a Registry', async (t) => {
  t.throws(() => build(t, { metrics: { registry: {} as Registry } }), { message: /\/metrics\/registry must have methods/ })
})
