// The OpenAI-shaped routes at their edges: roles, runs made elsewhere seen as responses, long logs, a conversation
// still busy, a client gone from a JSON response, the drain, a store that fails, quotas, odd input items.
import t from 'tap'
import OpenAI from 'openai'
import type { Test } from 'tap'
import type { Agent, AgentEvent, RunContext } from '../../../../lib/core/types.js'
import { MemoryRunStore } from '../../../../lib/stores/memory-runs.js'
import type { CancelRunResult, RunEnd, RunRecord } from '../../../../lib/stores/types.js'
import { approver } from '../../../../app/demo-agents.js'
import { auditEntries, echo, eventually, listen } from '../../../helper.js'
import { signJwt } from '../../../helpers/jwt.js'

let release: () => void = () => {}
let cancelled = 0
const waiter: Agent = {
  async * run (_input: unknown, ctx: RunContext): AsyncGenerator<string | AgentEvent> {
    yield 'started'
    await new Promise<void>((resolve, reject) => {
      release = resolve
      ctx.signal.addEventListener('abort', () => { cancelled++; reject(ctx.signal.reason) }, { once: true })
    })
  }
}

/** 300 deltas (more than a page of the log), an approval, then more. */
const long: Agent = {
  async * run (_input: unknown, ctx: RunContext) {
    for (let i = 0; i < 300; i++) yield 'x'
    const decision = await ctx.requestApproval({ action: 'go' })
    yield decision.approved ? ' yes' : ' no'
  }
}

/** Asks twice. */
const twice: Agent = {
  async run (_input: unknown, ctx: RunContext) {
    const first = await ctx.requestApproval({ action: 'first' })
    const second = await ctx.requestApproval({ action: 'second' })
    return { output: `${first.approved} ${second.approved}` }
  }
}

const historian: Agent = {
  async run (input: unknown, ctx: RunContext) {
    return { output: JSON.stringify({ input, history: ctx.history.map((m) => [m.role, m.content]) }) }
  }
}

const agents = { echo, waiter, long, historian, approver, twice }

async function serve (t: Test, options: Record<string, unknown> = {}) {
  const { url, service } = await listen(t, { agents, ...options })
  const clientFor = (apiKey = 'none'): OpenAI => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 })
  return { url, service, client: clientFor(), clientFor }
}

function post (url: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
}

const failure = (err: unknown): InstanceType<typeof OpenAI.APIError> => err as InstanceType<typeof OpenAI.APIError>

t.test('JWT roles: models as the roles allow; a model or a response of an agent one may not run is a 403', async (t) => {
  const secret = 'a-secret-of-at-least-32-characters!!'
  const { clientFor } = await serve(t, { auth: { strategy: 'jwt', secret } })
  const token = (roles: string[]): string => signJwt({ sub: 'alice', roles, exp: Math.floor(Date.now() / 1000) + 600 }, { alg: 'HS256', secret })
  const all = clientFor(token(['agents:run']))
  const echoOnly = clientFor(token(['agents:run:echo']))
  t.same((await echoOnly.models.list()).data.map((m) => m.id), ['echo'])
  const model = failure(await echoOnly.models.retrieve('historian').catch((err: unknown) => err))
  t.equal(model.status, 403)
  t.match(model.error, { type: 'permission_error', code: 'FORBIDDEN' })
  t.equal(failure(await echoOnly.responses.create({ model: 'historian', input: 'x' }).catch((err: unknown) => err)).status, 403)
  t.equal(failure(await echoOnly.chat.completions.create({ model: 'historian', messages: [{ role: 'user', content: 'x' }] }).catch((err: unknown) => err)).status, 403)
  const theirs = await all.responses.create({ model: 'historian', input: 'x' })
  t.equal(failure(await echoOnly.responses.retrieve(theirs.id).catch((err: unknown) => err)).status, 403, 'the same principal, without the role')
  t.equal(failure(await echoOnly.responses.create({ model: 'echo', input: 'x', previous_response_id: theirs.id }).catch((err: unknown) => err)).status, 403)
  t.equal((await echoOnly.responses.create({ model: 'echo', input: 'y' })).output_text, 'y')
})

t.test('a run made on another route is a response too; a long log is read in pages', async (t) => {
  const { client, url } = await serve(t)
  const plain = await (await post(url, '/v1/agents/echo/runs', { input: 'plain' })).json() as { runId: string }
  const seen = await client.responses.retrieve(`resp_${plain.runId}`)
  t.match(seen, { status: 'completed', output_text: 'plain', metadata: {}, instructions: null, previous_response_id: null })

  const asked = await client.responses.create({ model: 'long', input: 'x' })
  t.equal(asked.output_text, 'x'.repeat(300))
  t.equal((await client.responses.retrieve(asked.id)).output_text, 'x'.repeat(300), 'retrieved over two pages')
  const request = asked.output.at(-1)!
  const rest = await client.responses.create({ model: 'long', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: request.id!, approve: true }] })
  t.equal(rest.output_text, ' yes')
  const again = await client.responses.retrieve(rest.id)
  t.equal(again.previous_response_id, asked.id, 'the previous response found past a page of the log')

  const one = await client.responses.create({ model: 'twice', input: 'x' })
  const two = await client.responses.create({ model: 'twice', previous_response_id: one.id, input: [{ type: 'mcp_approval_response', approval_request_id: one.output.at(-1)!.id!, approve: true }] })
  t.match(two.output, [{ type: 'mcp_approval_request', name: 'second' }])
  const three = await client.responses.create({ model: 'twice', previous_response_id: two.id, input: [{ type: 'mcp_approval_response', approval_request_id: two.output.at(-1)!.id!, approve: false }] })
  t.equal(three.output_text, 'true false')
  t.equal((await client.responses.retrieve(three.id)).previous_response_id, two.id, 'a response after the second approval follows the one after the first')
})

t.test('a conversation still busy: the new response replaces the run in progress; conversation as an object', async (t) => {
  const { client } = await serve(t)
  const busy = await client.responses.create({ model: 'waiter', input: 'x', background: true })
  await eventually(async () => (await client.responses.retrieve(busy.id)).status === 'in_progress', 5_000, 'running')
  const next = await client.responses.create({ model: 'historian', input: 'y', previous_response_id: busy.id })
  t.equal(next.status, 'completed')
  t.equal((await client.responses.retrieve(busy.id)).status, 'cancelled', 'interrupted')
  const third = await client.responses.create({ model: 'historian', input: 'z', conversation: { id: next.conversation!.id } } as never) as unknown as OpenAI.Responses.Response
  t.same(JSON.parse(third.output_text).history, [['user', 'y'], ['assistant', next.output_text]])
})

t.test('store: false: it cannot be continued; its run cannot be named either', async (t) => {
  const { client, url } = await serve(t)
  const res = await post(url, '/v1/responses', { model: 'echo', input: 'x', store: false, previous_response_id: 'resp_x' })
  t.match(await res.json(), { error: { param: 'previous_response_id' } })
  const stream = await client.responses.create({ model: 'waiter', input: 'x', store: false, stream: true })
  let id = ''
  for await (const event of stream) {
    if (event.type === 'response.created') id = event.response.id
    if (event.type === 'response.output_text.delta') break
  }
  // (the run is cancelled by the client leaving: named while it still runs, or once gone)
  const named = await post(url, '/v1/responses', { model: 'echo', input: 'x', previous_response_id: id })
  t.equal(named.status, 400)
  t.match(await named.json(), { error: { param: 'previous_response_id' } })
})

t.test('a client that leaves a JSON response cancels its run; a cancel the store refuses is logged', async (t) => {
  class RefusingCancel extends MemoryRunStore {
    refuse = false
    override async cancel (runId: string, end: RunEnd, retentionMs: number): Promise<CancelRunResult> {
      if (this.refuse) throw new Error('store down')
      return super.cancel(runId, end, retentionMs)
    }
  }
  const runStore = new RefusingCancel()
  const { client } = await serve(t, { runStore })
  const before = cancelled
  const controller = new AbortController()
  const pending = client.responses.create({ model: 'waiter', input: 'x' }, { signal: controller.signal }).catch(() => null)
  await eventually(async () => (await runStore.list({ limit: 1 })).runs[0]?.status === 'running', 5_000, 'running')
  controller.abort()
  await pending
  t.ok(await eventually(() => cancelled === before + 1, 5_000, 'the run cancelled'))

  runStore.refuse = true
  const second = new AbortController()
  const refused = client.responses.create({ model: 'waiter', input: 'x' }, { signal: second.signal }).catch(() => null)
  await eventually(async () => (await runStore.list({ limit: 1 })).runs[0]?.status === 'running' && (await runStore.list({ limit: 1 })).runs[0], 5_000, 'running')
  second.abort()
  await refused
  runStore.refuse = false
  t.equal((await runStore.list({ limit: 1 })).runs[0]!.status, 'running', 'the cancel refused: the run goes on')
  release()
})

t.test('the drain: a JSON response in progress ends failed (SHUTDOWN), a chat completion is a 503; both close the connection', async (t) => {
  const { service, client } = await serve(t)
  const response = client.responses.create({ model: 'waiter', input: 'x' }).withResponse()
  const completion = client.chat.completions.create({ model: 'waiter', messages: [{ role: 'user', content: 'x' }] }).withResponse().catch((err: unknown) => err)
  await eventually(async () => (await service.app.agentService.settings.runStore.list({ limit: 5 })).runs.filter((r: RunRecord) => r.status === 'running').length === 2, 5_000, 'both running')
  const closing = service.close(100)
  const { data, response: raw } = await response
  t.match(data, { status: 'failed', error: { code: 'SHUTDOWN' } })
  t.equal(raw.headers.get('connection'), 'close')
  const refused = failure(await completion)
  t.equal(refused.status, 503)
  t.match(refused.error, { code: 'SHUTDOWN', type: 'server_error' })
  await closing
})

t.test('errors: a body without a required field names none; a store that fails is a 500; a quota\'s 429 carries retry-after', async (t) => {
  class FailingGet extends MemoryRunStore {
    failing = false
    override async get (runId: string): Promise<RunRecord | null> {
      if (this.failing) throw new Error('store down')
      return super.get(runId)
    }
  }
  const runStore = new FailingGet()
  const { url, client } = await serve(t, { runStore, quotas: { maxConcurrentRuns: 1 } })
  const missing = await post(url, '/v1/responses', {})
  t.equal(missing.status, 400)
  t.match(await missing.json(), { error: { code: 'FST_ERR_VALIDATION', param: null, message: /model/ } })
  runStore.failing = true
  const down = await fetch(`${url}/v1/responses/resp_00000000-0000-4000-8000-000000000000`)
  t.equal(down.status, 500)
  t.same(await down.json(), { error: { message: 'Internal Server Error', type: 'server_error', param: null, code: null } })
  runStore.failing = false
  const busy = await client.responses.create({ model: 'waiter', input: 'x', background: true })
  await eventually(async () => (await client.responses.retrieve(busy.id)).status === 'in_progress', 5_000, 'running')
  const over = await post(url, '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'x' }] })
  t.equal(over.status, 429)
  t.ok(over.headers.get('retry-after'))
  t.match(await over.json(), { error: { code: 'QUOTA_EXCEEDED', type: 'rate_limit_error' } })
  await client.responses.cancel(busy.id)
})

t.test('input items: an assistant\'s refusal is what it said, earlier turns\' items are skipped; odd items are refused', async (t) => {
  const { url, client } = await serve(t)
  const ok = await client.responses.create({
    model: 'historian',
    input: [
      { role: 'user', content: 'a' },
      { type: 'reasoning', summary: [] } as never,
      { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c', output: 'r' },
      { type: 'message', role: 'assistant', content: [{ type: 'refusal', refusal: 'no' }] } as never,
      { role: 'developer', content: 'be kind' },
      { role: 'user', content: 'b' }
    ]
  })
  t.same(JSON.parse(ok.output_text), { input: 'b', history: [['user', 'a'], ['assistant', 'no']] })
  const asked = await client.responses.create({ model: 'approver', input: 'go' })
  const id = asked.output.at(-1)!.id!
  const refusals: Array<[unknown, string]> = [
    [[{ role: 'tool', content: 'x' }], 'input/0/role'],
    [[{ type: 'mcp_approval_response', approval_request_id: id, approve: true, reason: 5 }], 'input/0/reason'],
    [[{ type: 'mcp_approval_response', approval_request_id: id, approve: true, reason: 'r'.repeat(2001) }], 'input/0/reason'],
    [[{ type: 'mcp_approval_response', approval_request_id: '', approve: true }], 'input/0/approval_request_id'],
    [[{ type: 'mcp_approval_response', approval_request_id: id, approve: 'yes' }], 'input/0/approve'],
    [[{ type: 'mcp_approval_response', approval_request_id: id, approve: true }, { role: 'user', content: 'x' }], 'input/1']
  ]
  for (const [input, param] of refusals) {
    const res = await post(url, '/v1/responses', { model: 'approver', previous_response_id: asked.id, input })
    t.equal(res.status, 400, param)
    t.match(await res.json(), { error: { param } }, param)
  }
  const answered = await client.responses.create({
    model: 'approver', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: id, approve: true, reason: null } as never]
  })
  t.equal(answered.output_text, 'Approved by someone: did deploy.')
})

t.test('idempotency keys on the POSTs: a repeat replays the answer without running again; another body is a 422; the audit names the run', async (t) => {
  const { url, service } = await serve(t, { idempotency: {} })
  const headers = { 'idempotency-key': 'k-1' }
  const first = await post(url, '/v1/responses', { model: 'historian', input: 'x' }, headers)
  const again = await post(url, '/v1/responses', { model: 'historian', input: 'x' }, headers)
  t.equal(again.headers.get('idempotent-replayed'), 'true')
  const body = await first.json() as { id: string }
  t.same(await again.json(), body, 'the same response')
  const reused = await post(url, '/v1/responses', { model: 'historian', input: 'y' }, headers)
  t.equal(reused.status, 422)
  t.match(await reused.json(), { error: { code: 'IDEMPOTENCY_KEY_REUSED', type: 'invalid_request_error' } })
  const chat = await post(url, '/v1/chat/completions', { model: 'historian', messages: [{ role: 'user', content: 'x' }] }, headers)
  t.equal(chat.status, 200, 'the key is scoped by path')
  await eventually(async () => (await service.app.agentService.settings.runStore.list({ limit: 10, agent: 'historian' })).runs.length === 1, 5_000, 'the completion\'s ephemeral run gone')
  t.same((await service.app.agentService.settings.runStore.list({ limit: 10, agent: 'historian' })).runs.map((r) => r.runId), [body.id.slice('resp_'.length)], 'the response ran once')
  const entries = await auditEntries(service.app)
  t.match(entries.find((e) => e.route === '/v1/responses' && e.replayed === false), { agent: 'historian', runId: body.id.slice('resp_'.length), idempotencyKey: 'k-1' })
})
