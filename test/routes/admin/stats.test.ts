import t from 'tap'
import type { Agent, AgentEvent, RunContext } from '../../../lib/core/types.js'
import { build, echo, listen, parseSse, settle, sleep } from '../../helper.js'

function sleepUnlessAborted (ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms)
    signal.addEventListener('abort', () => { clearTimeout(timer); reject(signal.reason) }, { once: true })
  })
}

const agents: Record<string, Agent> = {
  echo,
  failing: { async run () { throw new Error('broken') } },
  slow: { async run (_input: unknown, ctx: RunContext) { await sleepUnlessAborted(30_000, ctx.signal); return { output: 'late' } } },
  streamer: {
    run: async function * (): AsyncGenerator<string | AgentEvent, { output: string, usage: { inputTokens: number, outputTokens: number } }> {
      yield 'a'
      yield 'b'
      return { output: 'ab', usage: { inputTokens: 5, outputTokens: 7 } }
    }
  },
  'stream-fail': {
    run: async function * (): AsyncGenerator<string> {
      yield 'x'
      throw new Error('mid-stream')
    }
  }
}

const zeroAgent = { runs: 0, completed: 0, failed: 0, inFlight: 0, tokens: { input: 0, output: 0, total: 0 }, latencyMs: { p50: 0, p95: 0, p99: 0 } }

t.test('stats after a known mix of runs equal the expected numbers exactly', async (t) => {
  const service = build(t, { agents, requestTimeoutMs: 100, adminApi: { enabled: true, bearerToken: 'tok' } })
  const app = service.app
  const admin = { authorization: 'Bearer tok' }
  const run = (name: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
    app.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload, headers })

  const before = (await app.inject({ url: '/admin/stats', headers: admin })).json()
  t.same(before.agents, { echo: zeroAgent, failing: zeroAgent, slow: zeroAgent, streamer: zeroAgent, 'stream-fail': zeroAgent })
  t.same(before.runs, { started: 0, completed: 0, failed: 0, timedOut: 0, inFlight: 0 })

  t.equal((await run('echo', { input: 1 })).statusCode, 200) // completed, 1 + 2 tokens
  t.equal((await run('echo', { input: 2 })).statusCode, 200) // completed, 1 + 2 tokens
  t.equal((await run('failing', { input: 1 })).statusCode, 500) // failed, a 5xx
  const timedOut = await run('slow', { input: 1 })
  t.equal(timedOut.statusCode, 504) // failed and timed out, a 5xx
  t.equal(timedOut.json().code, 'AGENT_TIMEOUT')

  const streamed = await run('streamer', { input: 1 }, { accept: 'text/event-stream' }) // completed over SSE, 5 + 7 tokens
  t.equal(streamed.statusCode, 200)
  t.equal(parseSse(streamed.body).at(-1)!.event, 'run.completed')
  const streamFailed = await run('stream-fail', { input: 1, stream: true }) // a 200 whose run failed: an error
  t.equal(streamFailed.statusCode, 200)
  t.match(parseSse(streamFailed.body).at(-1), { event: 'run.failed', data: { error: { code: 'AGENT_ERROR' } } })
  const streamTimedOut = await run('slow', { input: 1, stream: true }) // streamed, timed out: an error
  t.match(parseSse(streamTimedOut.body).at(-1), { event: 'run.failed', data: { error: { code: 'AGENT_TIMEOUT' } } })

  t.equal((await app.inject('/v1/agents/nope')).statusCode, 404) // no run
  t.equal((await run('echo', {})).statusCode, 400) // no run: invalid body
  t.equal((await app.inject('/v1/agents')).statusCode, 200)

  // watching: none of this may change the service's figures
  await app.inject({ url: '/admin/stats', headers: admin })
  await app.inject({ url: '/admin/audit', headers: admin })
  await app.inject({ url: '/admin/stats' }) // 401
  await app.inject({ method: 'POST', url: '/admin/stats', headers: admin }) // 405
  await app.inject({ url: '/admin/nope', headers: admin }) // 404
  await app.inject({ url: '/admin/health', headers: admin })
  await settle(service)

  const stats = (await app.inject({ url: '/admin/stats', headers: admin })).json()
  t.same(Object.keys(stats).sort(), ['admin', 'agents', 'auditFailures', 'errors', 'latencyMs', 'requests', 'runs', 'since', 'tokens', 'uptimeSeconds'])
  t.same(stats.requests, { total: 10, byStatus: { '2xx': 6, '3xx': 0, '4xx': 2, '5xx': 2 } })
  t.equal(stats.errors, 4, 'two 5xx plus two streams that ended in run.failed')
  t.same(stats.runs, { started: 7, completed: 3, failed: 4, timedOut: 2, inFlight: 0 })
  t.same(stats.tokens, { input: 7, output: 11, total: 18 })
  t.same(stats.admin, { requests: 7 }, 'the first read, six more; this one is counted after its response')
  t.equal(stats.auditFailures, 0)
  t.equal(stats.since, app.agentService.stats.since)
  t.ok(stats.latencyMs.p50 > 0 && stats.latencyMs.p50 <= stats.latencyMs.p95 && stats.latencyMs.p95 <= stats.latencyMs.p99)
  t.ok(stats.latencyMs.p99 >= 100, 'the timed-out runs waited for the deadline')

  const figures = (name: string) => { const { latencyMs, ...rest } = stats.agents[name]; return rest }
  t.same(figures('echo'), { runs: 2, completed: 2, failed: 0, inFlight: 0, tokens: { input: 2, output: 4, total: 6 } })
  t.same(figures('failing'), { runs: 1, completed: 0, failed: 1, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } })
  t.same(figures('slow'), { runs: 2, completed: 0, failed: 2, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } })
  t.same(figures('streamer'), { runs: 1, completed: 1, failed: 0, inFlight: 0, tokens: { input: 5, output: 7, total: 12 } })
  t.same(figures('stream-fail'), { runs: 1, completed: 0, failed: 1, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } })
  t.ok(stats.agents.slow.latencyMs.p50 >= 100)
  t.same(Object.keys(stats.agents.echo.latencyMs).sort(), ['p50', 'p95', 'p99'])

  // the agents endpoint shows the same per-agent figures
  const listed = (await app.inject({ url: '/admin/agents', headers: admin })).json().agents
  t.same(listed.map((a: { name: string, stats: unknown }) => [a.name, a.stats]), [
    ['echo', { runs: 2, failed: 0, inFlight: 0, tokens: { input: 2, output: 4, total: 6 } }],
    ['failing', { runs: 1, failed: 1, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } }],
    ['slow', { runs: 2, failed: 2, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } }],
    ['streamer', { runs: 1, failed: 0, inFlight: 0, tokens: { input: 5, output: 7, total: 12 } }],
    ['stream-fail', { runs: 1, failed: 1, inFlight: 0, tokens: { input: 0, output: 0, total: 0 } }]
  ])

  // and another round of watching leaves everything but the admin count as it was
  await settle(service)
  const again = (await app.inject({ url: '/admin/stats', headers: admin })).json()
  const { admin: adminAgain, uptimeSeconds: _u1, ...restAgain } = again
  const { admin: adminBefore, uptimeSeconds: _u2, ...restBefore } = stats
  t.same(restAgain, restBefore)
  t.equal(adminAgain.requests, adminBefore.requests + 2)
})

t.test('runs in flight are counted as such', async (t) => {
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  const waiting: Agent = { async run () { await gate; return { output: 'done', usage: { inputTokens: 3 } } } }
  const service = build(t, { agents: { waiting }, adminApi: { enabled: true } })
  const running = [1, 2].map((input) => service.app.inject({ method: 'POST', url: '/v1/agents/waiting/runs', payload: { input } }))
  let stats = (await service.app.inject('/admin/stats')).json()
  while (stats.runs.inFlight < 2) {
    await sleep(2) // let the runs' bodies be read: injected GETs alone never leave the microtask queue
    stats = (await service.app.inject('/admin/stats')).json()
  }
  t.same(stats.runs, { started: 2, completed: 0, failed: 0, timedOut: 0, inFlight: 2 })
  t.equal(stats.agents.waiting.inFlight, 2)
  t.equal((await service.app.inject('/admin/agents')).json().agents[0].stats.inFlight, 2)
  release()
  await Promise.all(running)
  stats = (await service.app.inject('/admin/stats')).json()
  t.same(stats.runs, { started: 2, completed: 2, failed: 0, timedOut: 0, inFlight: 0 })
  t.same(stats.tokens, { input: 6, output: 0, total: 6 }, 'missing usage counts as zero')
})

t.test('admin requests answered by an outer hook (rate limit, drain) are still counted apart', async (t) => {
  const limited = build(t, { rateLimit: { maxRequests: 2, intervalMs: 60_000 }, adminApi: { enabled: true } })
  const statuses: number[] = []
  for (const url of ['/admin/stats', '/admin/stats', '/admin/stats', '/admin/nope']) statuses.push((await limited.app.inject(url)).statusCode)
  t.same(statuses, [200, 200, 429, 429])

  const draining = build(t, { adminApi: { enabled: true } })
  await draining.app.ready()
  // the drain's own entry point (close() would close the app before we could ask it anything)
  await draining.app.agentService.drain.begin(0)
  const drained = await draining.app.inject('/admin/health')
  t.equal(drained.statusCode, 503)
  t.equal(drained.json().code, 'SHUTDOWN')

  for (const [service, expected] of [[limited, [[429, true], [429, true], [200, true], [200, true]]], [draining, [[503, true]]]] as const) {
    await settle(service)
    const snapshot = service.app.agentService.stats.snapshot()
    t.same(snapshot.requests, { total: 0, byStatus: { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 } })
    t.equal(snapshot.errors, 0)
    t.equal(snapshot.admin.requests, expected.length)
    const entries = (await service.app.agentService.settings.auditStore.query({ limit: 10 })).entries
    t.same(entries.map((e) => [e.status, e.admin]), expected)
  }
})

t.test('over a real socket: each streamed run is one request, a failed one an error', async (t) => {
  const { service, url } = await listen(t, { agents, adminApi: { enabled: true } })
  for (const name of ['streamer', 'stream-fail']) {
    const response = await fetch(`${url}/v1/agents/${name}/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ input: name })
    })
    t.equal(response.headers.get('content-type'), 'text/event-stream; charset=utf-8')
    await response.text()
  }
  await settle(service)
  const stats = (await (await fetch(`${url}/admin/stats`)).json()) as { requests: unknown, errors: number, runs: unknown }
  t.same(stats.requests, { total: 2, byStatus: { '2xx': 2, '3xx': 0, '4xx': 0, '5xx': 0 } })
  t.equal(stats.errors, 1)
  t.same(stats.runs, { started: 2, completed: 1, failed: 1, timedOut: 0, inFlight: 0 })
  const entries = (await service.app.agentService.settings.auditStore.query({ limit: 10 })).entries
  t.same(entries.filter((e) => e.admin !== true).map((e) => [e.agent, e.status]), [['stream-fail', 200], ['streamer', 200]], 'one entry per stream')
})
