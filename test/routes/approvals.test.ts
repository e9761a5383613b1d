import { Writable } from 'node:stream'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { approver } from '../../app/demo-agents.js'
import { MemoryApprovalStore } from '../../lib/stores/memory.js'
import type { ApprovalDecision, ApprovalRecord } from '../../lib/stores/types.js'
import type { Agent, Decision, RunContext } from '../../lib/core/types.js'
import { auditEntries, build, eventually, keepAlive, listen, parseSse, principalFromHeader, sleep } from '../helper.js'
import { openSse } from '../helpers/streams.js'

/** Asks for approval with the given request and answers with the decision it got. */
function asking (request: Parameters<RunContext['requestApproval']>[0]): Agent {
  return {
    async run (_input, ctx) {
      const decision = await ctx.requestApproval(request)
      return { output: decision }
    }
  }
}

/**
 * The expiry timer is unref'ed (it must never keep a process up); with inject() and no socket, nothing
 * else would keep this test's process alive while a run waits.
 */
async function pendingApproval (app: FastifyInstance, query = ''): Promise<ApprovalRecord> {
  return eventually(async () => {
    const res = await app.inject({ method: 'GET', url: `/v1/approvals${query}` })
    return (res.json().approvals as ApprovalRecord[])[0]
  })
}

t.test('the approval loop over SSE with the demo approver: requested, listed, approved, finished', async (t) => {
  const { service, url } = await listen(t, { agents: { approver } })
  const app = service.app
  const stream = await openSse(url, '/v1/agents/approver/runs', { input: { action: 'ship it' } })
  t.equal(stream.status, 200)
  const started = await stream.next('run.started')
  const requested = await stream.next('approval.requested')
  const approval = requested.data.approval
  t.match(approval, {
    id: String,
    runId: started.data.runId,
    agent: 'approver',
    sessionId: started.data.sessionId,
    principal: 'anonymous',
    action: 'ship it',
    payload: { action: 'ship it' },
    reason: String,
    status: 'pending',
    requestedAt: String,
    expiresAt: String
  })
  t.equal(approval.decision, undefined)
  t.equal(Date.parse(approval.expiresAt) - Date.parse(approval.requestedAt), 10 * 60_000)

  const listed = await app.inject({ method: 'GET', url: '/v1/approvals' })
  t.equal(listed.statusCode, 200)
  t.same(listed.json(), { approvals: [approval] })
  t.same((await app.inject({ method: 'GET', url: `/v1/approvals?agent=approver&runId=${approval.runId}` })).json().approvals.length, 1)
  t.same((await app.inject({ method: 'GET', url: '/v1/approvals?agent=echo' })).json(), { approvals: [] })
  t.same((await app.inject({ method: 'GET', url: '/v1/approvals?runId=nope' })).json(), { approvals: [] })
  const one = await app.inject({ method: 'GET', url: `/v1/approvals/${approval.id}` })
  t.same(one.json(), approval)

  const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, comment: 'go' } })
  t.equal(decided.statusCode, 200)
  const body = decided.json()
  t.match(body, { ...approval, status: 'approved', decision: { approved: true, comment: 'go', decidedBy: null, decidedAt: String } })

  const decidedEvent = await stream.next('approval.decided')
  t.same(decidedEvent.data.approval, body)
  const completed = await stream.next('run.completed')
  t.equal(completed.data.output, 'Approved by someone: did ship it.')
  t.equal(completed.data.finishReason, 'stop')
  await stream.ended
  t.same(stream.events.map((e) => e.event), ['run.started', 'message.delta', 'approval.requested', 'approval.decided', 'run.completed'])
  t.same(stream.events.map((e) => e.id), [1, 2, 3, 4, 5])

  t.same((await app.inject({ method: 'GET', url: '/v1/approvals' })).json(), { approvals: [] }, 'no longer pending')
  t.equal((await app.inject({ method: 'GET', url: `/v1/approvals/${approval.id}` })).json().status, 'approved', 'still readable')

  const entries = await auditEntries(app)
  const decision = entries.find((e) => e.method === 'POST' && e.route === '/v1/approvals/:id')
  t.match(decision, { status: 200, principal: 'anonymous', agent: 'approver', runId: approval.runId, sessionId: approval.sessionId })
  const read = entries.find((e) => e.method === 'GET' && e.route === '/v1/approvals/:id')
  t.match(read, { status: 200, agent: 'approver', runId: approval.runId })
})

t.test('a rejection over a JSON run; decidedBy defaults to the principal and is audited with it', async (t) => {
  const { app } = build(t, { agents: { approver } })
  principalFromHeader(app)
  const run = app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: {} }, headers: { 'x-test-principal': 'key_runner' } })
  const approval = await pendingApproval(app)
  t.equal(approval.principal, 'key_runner', 'the principal that started the run')
  t.equal(approval.action, 'deploy')
  const res = await app.inject({
    method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: false }, headers: { 'x-test-principal': 'alice' }
  })
  t.equal(res.statusCode, 200)
  t.match(res.json(), { status: 'rejected', decision: { approved: false, comment: null, decidedBy: 'alice' } })
  const result = (await run).json()
  t.equal(result.output, 'Not done (rejected): deploy.')
  t.equal(result.finishReason, 'rejected')

  const entries = await auditEntries(app)
  t.match(entries.find((e) => e.route === '/v1/approvals/:id'), { principal: 'alice', agent: 'approver', runId: approval.runId })
})

t.test('an explicit decidedBy wins over the principal; the agent gets the whole decision', async (t) => {
  const { app } = build(t, { agents: { ask: asking({ action: 'pay', payload: { amount: 3 }, reason: 'costs money' }) } })
  principalFromHeader(app)
  const run = app.inject({ method: 'POST', url: '/v1/agents/ask/runs', payload: { input: null } })
  const approval = await pendingApproval(app)
  t.match(approval, { payload: { amount: 3 }, reason: 'costs money' })
  const res = await app.inject({
    method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, comment: 'fine', decidedBy: 'Bob (on call)' }, headers: { 'x-test-principal': 'alice' }
  })
  t.equal(res.json().decision.decidedBy, 'Bob (on call)')
  t.same((await run).json().output, { approved: true, comment: 'fine', decidedBy: 'Bob (on call)', status: 'approved', payload: { amount: 3 }, edited: false })
})

t.test('bad requests: 400 in the contract shape, 404 for unknown ids', async (t) => {
  const { app } = build(t)
  await app.ready()
  const approvalStore = app.agentService.settings.approvalStore
  const now = Date.now()
  await approvalStore.create({
    id: 'a1', runId: 'r1', agent: 'echo', sessionId: 's1', principal: 'anonymous', action: 'x', payload: null, reason: null,
    status: 'pending', requestedAt: new Date(now).toISOString(), expiresAt: new Date(now + 60_000).toISOString()
  })
  const bodies: Array<[unknown, RegExp]> = [
    [{}, /body must have required property 'approved'/],
    [{ approved: 'true' }, /body\/approved must be boolean/],
    [{ approved: true, extra: 1 }, /body\/extra is not allowed/],
    [{ approved: true, comment: 'x'.repeat(2001) }, /body\/comment must NOT have more than 2000 characters/],
    [{ approved: true, comment: 7 }, /body\/comment must be string/],
    [{ approved: true, decidedBy: 'x'.repeat(201) }, /body\/decidedBy must NOT have more than 200 characters/],
    [{ approved: true, decidedBy: '' }, /body\/decidedBy must NOT have fewer than 1 characters/],
    [[true], /body must be object/]
  ]
  for (const [payload, message] of bodies) {
    const res = await app.inject({ method: 'POST', url: '/v1/approvals/a1', payload: payload as object })
    t.equal(res.statusCode, 400, JSON.stringify(payload).slice(0, 60))
    t.match(res.json(), { statusCode: 400, error: 'Bad Request', code: 'FST_ERR_VALIDATION', message, requestId: res.headers['x-request-id'] })
  }
  const form = await app.inject({ method: 'POST', url: '/v1/approvals/a1', payload: 'approved=true', headers: { 'content-type': 'text/plain' } })
  t.equal(form.statusCode, 415)
  t.match(form.json(), { code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', message: 'Unsupported Media Type: send the body as JSON, with Content-Type: application/json' }, 'a 415 says what to send')
  t.equal((await app.inject({ method: 'GET', url: '/v1/approvals/a1' })).json().status, 'pending', 'none of them decided it')

  t.equal((await app.inject({ method: 'GET', url: `/v1/approvals/${'x'.repeat(129)}` })).statusCode, 414, 'Fastify: maxParamLength')
  t.equal((await app.inject({ method: 'GET', url: '/v1/approvals?agent=Not%20An%20Agent' })).statusCode, 400)
  for (const res of [
    await app.inject({ method: 'GET', url: '/v1/approvals/nope' }),
    await app.inject({ method: 'POST', url: '/v1/approvals/nope', payload: { approved: true } })
  ]) {
    t.equal(res.statusCode, 404)
    t.match(res.json(), { code: 'APPROVAL_NOT_FOUND', message: 'Approval "nope" not found' })
  }
  const wrongMethod = await app.inject({ method: 'DELETE', url: '/v1/approvals/a1' })
  t.equal(wrongMethod.statusCode, 405)
  t.equal(wrongMethod.headers.allow, 'GET, HEAD, POST')
})

t.test('20 concurrent decisions: exactly one 200, the rest 409 APPROVAL_ALREADY_DECIDED; the run gets the winner', async (t) => {
  const { app } = build(t, { agents: { ask: asking({ action: 'race' }) } })
  const run = app.inject({ method: 'POST', url: '/v1/agents/ask/runs', payload: { input: 1 } })
  const approval = await pendingApproval(app)
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => app.inject({
    method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: i % 2 === 0, decidedBy: `op-${i}` }
  })))
  const won = answers.filter((r) => r.statusCode === 200)
  const lost = answers.filter((r) => r.statusCode === 409)
  t.equal(won.length, 1)
  t.equal(lost.length, 19)
  for (const res of lost) t.match(res.json(), { code: 'APPROVAL_ALREADY_DECIDED', message: `Approval "${approval.id}" was already decided` })
  const winner = won[0]!.json()
  const output = (await run).json().output as Decision
  t.same(output, { approved: winner.decision.approved, comment: null, decidedBy: winner.decision.decidedBy, status: winner.status, payload: null, edited: false })
  const entries = await auditEntries(app)
  t.equal(entries.filter((e) => e.route === '/v1/approvals/:id' && e.status === 409 && e.runId === approval.runId).length, 19, 'losers audited too')
})

t.test('expiry: the run resolves { approved: false, status: expired }; deciding afterwards is 409 APPROVAL_EXPIRED', async (t) => {
  keepAlive(t)
  const { app } = build(t, { agents: { ask: asking({ action: 'hurry', timeoutMs: 50 }) } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/ask/runs', payload: { input: 1, stream: true } })
  const events = parseSse(res.body)
  t.same(events.map((e) => e.event), ['run.started', 'approval.requested', 'approval.decided', 'run.completed'])
  const approval = events[1]!.data.approval as ApprovalRecord
  t.equal(Date.parse(approval.expiresAt) - Date.parse(approval.requestedAt), 50)
  t.match(events[2]!.data.approval, { id: approval.id, status: 'expired' })
  t.same(events[3]!.data.output, { approved: false, status: 'expired' })

  const late = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })
  t.equal(late.statusCode, 409)
  t.match(late.json(), { code: 'APPROVAL_EXPIRED', message: `Approval "${approval.id}" has expired` })
  t.equal((await app.inject({ method: 'GET', url: `/v1/approvals/${approval.id}` })).json().status, 'expired')
})

t.test('a pending approval past its expiry is expired by whoever reads it first', async (t) => {
  const { app } = build(t)
  await app.ready()
  const past = Date.now() - 1_000
  await app.agentService.settings.approvalStore.create({
    id: 'old', runId: 'r', agent: 'echo', sessionId: 's', principal: 'anonymous', action: 'x', payload: null, reason: null,
    status: 'pending', requestedAt: new Date(past - 1_000).toISOString(), expiresAt: new Date(past).toISOString()
  })
  t.same((await app.inject({ method: 'GET', url: '/v1/approvals' })).json(), { approvals: [] })
  const res = await app.inject({ method: 'POST', url: '/v1/approvals/old', payload: { approved: true } })
  t.equal(res.statusCode, 409)
  t.equal(res.json().code, 'APPROVAL_EXPIRED')
})

t.test('a decision whose notification comes after the expiry timer still wins over the expiry', async (t) => {
  keepAlive(t)
  // as a PostgreSQL store whose NOTIFY is late: the waiter hears of nothing, only the abort
  class Deaf extends MemoryApprovalStore {
    override waitForDecision (_id: string, signal: AbortSignal): Promise<ApprovalRecord> {
      return new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }))
    }
  }
  // the decision must land before the expiry timer: 2 s leaves room for a loaded machine
  const { app } = build(t, { agents: { ask: asking({ action: 'x', timeoutMs: 2_000 }) }, approvalStore: new Deaf() })
  const run = app.inject({ method: 'POST', url: '/v1/agents/ask/runs', payload: { input: 1, stream: true } })
  const approval = await pendingApproval(app)
  const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, comment: 'just in time', decidedBy: 'carol' } })
  t.equal(decided.statusCode, 200)
  const events = parseSse((await run).body)
  t.match(events[2], { event: 'approval.decided', data: { approval: { status: 'approved' } } })
  t.same(events[3]!.data.output, { approved: true, comment: 'just in time', decidedBy: 'carol', status: 'approved', payload: null, edited: false })
})

t.test('an approval that vanished from the store while pending counts as expired', async (t) => {
  keepAlive(t)
  class Forgetful extends MemoryApprovalStore {
    override async expire (): Promise<ApprovalRecord | null> {
      return null
    }
  }
  const { app } = build(t, { agents: { ask: asking({ action: 'x', timeoutMs: 10 }) }, approvalStore: new Forgetful() })
  const events = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/ask/runs', payload: { input: 1, stream: true } })).body)
  t.same(events.map((e) => e.event), ['run.started', 'approval.requested', 'run.completed'])
  t.same(events[2]!.data.output, { approved: false, status: 'expired' })
})

t.test('the client closing the SSE stream aborts the run and cancels its approval', async (t) => {
  const { service, url } = await listen(t, { agents: { approver } })
  const stream = await openSse(url, '/v1/agents/approver/runs', { input: {} })
  const approval = (await stream.next('approval.requested')).data.approval as ApprovalRecord
  stream.close()
  const cancelled = await eventually(async () => {
    const res = await service.app.inject({ method: 'GET', url: `/v1/approvals/${approval.id}` })
    return res.json().status === 'cancelled' ? res.json() as ApprovalRecord : undefined
  })
  t.equal(cancelled.decision, undefined)
  await eventually(() => service.app.agentService.runs.size === 0 ? true : undefined)
  const late = await service.app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })
  t.equal(late.statusCode, 409)
  t.equal(late.json().code, 'APPROVAL_ALREADY_DECIDED')
  t.same((await service.app.inject({ method: 'GET', url: '/v1/approvals' })).json(), { approvals: [] })
})

t.test('a run that times out while waiting: 504, and the approval is cancelled', async (t) => {
  const { app } = build(t, { agents: { approver }, requestTimeoutMs: 200 })
  const run = app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: {} } })
  const approval = await pendingApproval(app)
  const res = await run
  t.equal(res.statusCode, 504)
  t.equal(res.json().code, 'AGENT_TIMEOUT')
  const status = await eventually(async () => {
    const current = await app.agentService.settings.approvalStore.get(approval.id)
    return current?.status === 'pending' ? undefined : current?.status
  })
  t.equal(status, 'cancelled')
})

t.test('a failing cancellation is logged; the run has ended all the same', async (t) => {
  class Stuck extends MemoryApprovalStore {
    override async cancel (): Promise<ApprovalRecord | null> {
      throw new Error('store down')
    }
  }
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({
    write (chunk, _encoding, callback) {
      lines.push(JSON.parse(String(chunk)))
      callback()
    }
  })
  const { app } = build(t, { agents: { approver }, requestTimeoutMs: 200, approvalStore: new Stuck(), logger: { level: 'error', stream } })
  const run = app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: {} } })
  const approval = await pendingApproval(app)
  t.equal((await run).statusCode, 504)
  const line = await eventually(() => lines.find((l) => l.msg === 'could not cancel approval'))
  t.match(line, { approvalId: approval.id, err: { message: 'store down' } })
  t.equal(app.agentService.runs.size, 0)
})

t.test('requestApproval checks its arguments: AGENT_ERROR naming the mistake', async (t) => {
  const cases: Array<[Parameters<RunContext['requestApproval']>[0], RegExp]> = [
    [{ action: '' }, /action must be a non-empty string/],
    [{ action: 7 as unknown as string }, /action must be a non-empty string/],
    [{ action: 'x', timeoutMs: -1 }, /timeoutMs must be an integer from 0 to 2147483647, got -1/],
    [{ action: 'x', timeoutMs: 1.5 }, /got 1.5/],
    [{ action: 'x', timeoutMs: 2 ** 31 }, /got 2147483648/],
    [{ action: 'x', timeoutMs: '5' as unknown as number }, /got 5/]
  ]
  const agents: Record<string, Agent> = {}
  cases.forEach(([request], i) => { agents[`a${i}`] = asking(request) })
  const { app } = build(t, { agents, exposeErrors: true })
  for (const [i, [, message]] of cases.entries()) {
    const res = await app.inject({ method: 'POST', url: `/v1/agents/a${i}/runs`, payload: { input: 1 } })
    t.equal(res.statusCode, 500)
    t.match(res.json(), { code: 'AGENT_ERROR', message })
  }
  t.same(await app.agentService.settings.approvalStore.listPending(), [], 'nothing stored')
})

t.test('an agent asking after its run was aborted is refused without storing an approval', async (t) => {
  let created = 0
  class Counting extends MemoryApprovalStore {
    override async create (approval: ApprovalRecord): Promise<void> {
      created++
      return super.create(approval)
    }
  }
  let refused: unknown
  let finished!: () => void
  const done = new Promise<void>((resolve) => { finished = resolve })
  const late: Agent = {
    async run (_input, ctx) {
      await sleep(80) // ignores its signal
      try {
        await ctx.requestApproval({ action: 'too late' })
      } catch (error) {
        refused = error
      }
      finished()
      return { output: null }
    }
  }
  const { app } = build(t, { agents: { late }, requestTimeoutMs: 20, approvalStore: new Counting() })
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/late/runs', payload: { input: 1 } })).statusCode, 504)
  await done
  t.match(refused, { name: 'RunAbortedError', code: 'AGENT_TIMEOUT' })
  t.equal(created, 0)
})

t.test('a store that fails while waiting fails the run with AGENT_ERROR', async (t) => {
  class Broken extends MemoryApprovalStore {
    override waitForDecision (): Promise<ApprovalRecord> {
      return Promise.reject(new Error('connection lost'))
    }
  }
  const { app } = build(t, { agents: { approver }, approvalStore: new Broken(), exposeErrors: true })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: 1 } })
  t.equal(res.statusCode, 500)
  t.match(res.json(), { code: 'AGENT_ERROR', message: 'connection lost' })
})

t.test('a decision is not a run: deciding needs nothing from the run but the store', async (t) => {
  const { app } = build(t)
  await app.ready()
  const store = app.agentService.settings.approvalStore
  const now = Date.now()
  await store.create({
    id: 'orphan', runId: 'gone', agent: 'echo', sessionId: 's', principal: 'p', action: 'x', payload: { a: [1, 'b'] }, reason: 'r',
    status: 'pending', requestedAt: new Date(now).toISOString(), expiresAt: new Date(now + 60_000).toISOString()
  })
  const decision: Partial<ApprovalDecision> = { approved: true, comment: 'c' }
  const res = await app.inject({ method: 'POST', url: '/v1/approvals/orphan', payload: decision })
  t.equal(res.statusCode, 200)
  t.same(Object.keys(res.json()).sort(), ['action', 'agent', 'decision', 'expiresAt', 'id', 'payload', 'principal', 'reason', 'requestedAt', 'runId', 'sessionId', 'status'])
  t.same(res.json().payload, { a: [1, 'b'] })
})

t.test('a failing approval store: 500 in the contract shape on every route, the message hidden', async (t) => {
  class Down extends MemoryApprovalStore {
    override async listPending (): Promise<ApprovalRecord[]> { throw new Error('db down: password=hunter2') }
    override async get (): Promise<ApprovalRecord | null> { throw new Error('db down: password=hunter2') }
    override async decide (): Promise<never> { throw new Error('db down: password=hunter2') }
  }
  const { app } = build(t, { approvalStore: new Down() })
  for (const res of [
    await app.inject({ method: 'GET', url: '/v1/approvals' }),
    await app.inject({ method: 'GET', url: '/v1/approvals/a' }),
    await app.inject({ method: 'POST', url: '/v1/approvals/a', payload: { approved: true } })
  ]) {
    t.equal(res.statusCode, 500)
    t.same(Object.keys(res.json()).sort(), ['error', 'message', 'requestId', 'statusCode', 'traceId'])
    t.equal(res.json().message, 'Internal Server Error')
  }
})
