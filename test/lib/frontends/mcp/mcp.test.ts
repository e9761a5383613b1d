// /v1/mcp through @modelcontextprotocol/sdk's own Client and StreamableHTTPClientTransport (docs/front-ends.md, "MCP"):
// every agent a tool, a call a run (progress, cancel on close), a task a background run, an approval an elicitation.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { z } from 'zod'
import { CallToolResultSchema, CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js'
import { approver, slow, storyteller } from '../../../../app/demo-agents.js'
import type { Agent } from '../../../../lib/core/types.js'
import { memoryStores } from '../../../../lib/stores/memory.js'
import { auditEntries, build, echo, eventually, listen, principalFromHeader } from '../../../helper.js'
import { mcpClient, post } from './helpers.js'

const typed: Agent = {
  description: 'Adds two numbers',
  input: Type.Object({ a: Type.Number(), b: Type.Number() }, { additionalProperties: false }),
  output: Type.Object({ sum: Type.Number() }),
  async run (input) {
    const { a, b } = input as { a: number, b: number }
    return { output: { sum: a + b } }
  }
}

const texty: Agent = {
  input: Type.String({ minLength: 1 }),
  async run (input) {
    return { output: `got ${String(input)}` }
  }
}

const failing: Agent = {
  async run () {
    throw Object.assign(new Error('the tool broke'), { code: 'BROKEN' })
  }
}

/** Asks with nothing but an action (no payload, no reason). */
const asker: Agent = {
  async run (_input, ctx) {
    const decision = await ctx.requestApproval({ action: 'ask' })
    return { output: decision.approved ? 'yes' : 'no' }
  }
}

/** Its deltas at once, before the response's stream may be open. */
const burst: Agent = {
  async * run () {
    yield 'a'
    yield 'b'
    yield 'c'
  }
}

const agents = { typed, texty, failing, storyteller, approver, slow, asker, burst }

t.test('tools/list: one tool per agent, its schemas from the typed agent, tasks optional', async (t) => {
  const { url } = await listen(t, { agents })
  const { client } = await mcpClient(t, url)
  const { tools } = await client.listTools()
  t.same(tools.map((tool) => tool.name), Object.keys(agents))
  const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]))
  t.match(byName.typed, {
    description: 'Adds two numbers',
    inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
    outputSchema: { type: 'object', properties: { sum: { type: 'number' } } },
    execution: { taskSupport: 'optional' }
  })
  t.same(byName.texty!.inputSchema, { type: 'object', properties: { input: { type: 'string', minLength: 1 } }, required: ['input'] })
  t.same(byName.storyteller!.inputSchema, { type: 'object', properties: { input: {} }, required: ['input'] })
  t.equal(byName.storyteller!.outputSchema, undefined)
  t.equal(byName.failing!.description, undefined)
})

t.test('a tool typed in Zod: its library\'s JSON Schema listed, its arguments checked by Zod before any run', async (t) => {
  let ran = 0
  const booking: Agent = {
    input: z.object({ nights: z.number().int().min(1) }),
    async run (input) {
      ran++
      return { output: { nights: (input as { nights: number }).nights } }
    }
  }
  const { url } = await listen(t, { agents: { booking } })
  const { client } = await mcpClient(t, url)
  const { tools } = await client.listTools()
  t.match(tools[0]!.inputSchema, { type: 'object', properties: { nights: { type: 'integer', minimum: 1 } }, required: ['nights'] })
  t.same((await client.callTool({ name: 'booking', arguments: { nights: 2 } })).structuredContent, { nights: 2 })
  const refused = await client.callTool({ name: 'booking', arguments: { nights: 0 } }).catch((error: { code?: number, message?: string }) => error)
  t.match(refused, { code: -32602, message: /arguments\/nights/ }, 'the path Zod names')
  t.equal(ran, 1, 'no run for the refused call')
})

t.test('tools/call: the run\'s deltas as progress notifications, its output as the result, its ids in _meta', async (t) => {
  const { url, service } = await listen(t, { agents })
  const { client } = await mcpClient(t, url)
  const progress: Array<{ progress: number, message?: string | undefined }> = []
  const result = await client.callTool({ name: 'storyteller', arguments: { input: 'a lighthouse' } }, undefined, { onprogress: (p) => { progress.push(p) } })
  const text = (result.content as Array<{ text: string }>)[0]!.text
  t.match(text, /^Once upon a time there was a lighthouse\./)
  t.equal(result.isError, false)
  t.equal(progress.map((p) => p.message).join(''), text, 'every delta, in order')
  t.ok(progress.every((p, i) => i === 0 || p.progress > progress[i - 1]!.progress), 'progress increases')
  const meta = result._meta as { runId: string, sessionId: string, traceId: string }
  const record = await service.app.agentService.settings.runStore.get(meta.runId)
  t.match(record, { status: 'completed', agent: 'storyteller', sessionId: meta.sessionId, traceId: meta.traceId, background: false })

  const early: string[] = []
  await client.callTool({ name: 'burst', arguments: { input: null } }, undefined, { onprogress: (p) => { early.push(p.message ?? '') } })
  t.same(early, ['a', 'b', 'c'], 'deltas sent before the stream opened go first')

  const sum = await client.callTool({ name: 'typed', arguments: { a: 2, b: 3 } })
  t.same(sum.structuredContent, { sum: 5 }, 'an object output is the structured content too')
  t.same(sum.content, [{ type: 'text', text: '{"sum":5}' }])
  t.same((await client.callTool({ name: 'texty', arguments: { input: 'x' } })).content, [{ type: 'text', text: 'got x' }])

  const failed = await client.callTool({ name: 'failing', arguments: { input: null } })
  t.equal(failed.isError, true)
  t.match((failed.content as Array<{ text: string }>)[0]!.text, /^AGENT_ERROR: /)

  const next = await client.callTool({ name: 'storyteller', arguments: { input: 'again' }, _meta: { sessionId: meta.sessionId } })
  t.equal((next._meta as { sessionId: string }).sessionId, meta.sessionId, '_meta.sessionId continues one of the caller\'s sessions')
})

t.test('closing the request cancels the run, as a disconnect does', async (t) => {
  const { url, service } = await listen(t, { agents })
  const { client } = await mcpClient(t, url)
  const calling = client.callTool({ name: 'slow', arguments: { input: { ms: 30_000 } } }).catch((err: unknown) => err)
  const runId = await eventually(() => service.app.agentService.runs.ids()[0], 5_000, 'the run')
  await client.close()
  await calling
  const record = await eventually(async () => {
    const found = await service.app.agentService.settings.runStore.get(runId)
    return found?.status === 'cancelled' ? found : undefined
  }, 5_000, 'the run cancelled')
  t.equal(record.error?.code, 'CANCELLED')
})

t.test('tasks through the SDK\'s experimental API: created at once, polled, awaited, listed, cancelled', async (t) => {
  const { url, service } = await listen(t, { agents })
  const { client } = await mcpClient(t, url)
  const messages = []
  for await (const message of client.experimental.tasks.callToolStream({ name: 'storyteller', arguments: { input: 'a task' } }, undefined, { task: { ttl: 60_000 } })) {
    messages.push(message)
  }
  const created = messages[0]
  t.equal(created?.type, 'taskCreated')
  const taskId = created?.type === 'taskCreated' ? created.task.taskId : ''
  t.match(created, { task: { status: 'working', ttl: 60_000, pollInterval: Number } })
  const last = messages.at(-1)!
  t.equal(last.type, 'result')
  t.match(last.type === 'result' ? last.result : null, { isError: false, content: [{ type: 'text', text: /a task/ }] })
  t.match(await service.app.agentService.settings.runStore.get(taskId), { background: true, status: 'completed' }, 'a task is a background run')

  t.match(await client.experimental.tasks.getTask(taskId), { taskId, status: 'completed' })
  const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema)
  t.match(result, { isError: false, _meta: { 'io.modelcontextprotocol/related-task': { taskId }, runId: taskId } })

  const { task: long } = await client.request({ method: 'tools/call', params: { name: 'slow', arguments: { input: { ms: 30_000 } }, task: {} } }, CreateTaskResultSchema)
  t.equal(long.ttl, service.app.agentService.settings.runRetentionMs, 'the ttl is runRetentionMs by default')
  t.match(await client.experimental.tasks.listTasks(), { tasks: [{ taskId: long.taskId, status: 'working' }, { taskId, status: 'completed' }] }, 'most recent first')
  t.match(await client.experimental.tasks.cancelTask(long.taskId), { taskId: long.taskId, status: 'cancelled' })
  t.match(await client.experimental.tasks.getTask(long.taskId), { status: 'cancelled', statusMessage: /^CANCELLED: / })
  await t.rejects(client.experimental.tasks.cancelTask(long.taskId), { code: -32602, message: /already cancelled/ })
})

t.test('an approval is an elicitation: accept decides it with the form, decline rejects it', async (t) => {
  const { url, service } = await listen(t, { agents })
  const asked: unknown[] = []
  const { client } = await mcpClient(t, url, {
    elicit: (request) => {
      asked.push(request.params)
      return { action: 'accept', content: { approved: true, comment: 'fine' } }
    }
  })
  const result = await client.callTool({ name: 'approver', arguments: { input: { action: 'deploy' } } })
  t.same(result.content, [{ type: 'text', text: 'Approved by someone: did deploy.' }])
  t.match(asked, [{ mode: 'form', message: /approval to deploy/, requestedSchema: { properties: { approved: { type: 'boolean' }, comment: { type: 'string' } }, required: ['approved'] } }])
  const [approval] = await service.app.agentService.settings.approvalStore.listPending()
  t.equal(approval, undefined, 'nothing left pending')

  t.equal((await client.callTool({ name: 'asker', arguments: { input: null } })).structuredContent, undefined)
  t.match(asked[1], { message: /asks for approval to ask\. Payload:\nnull$/ }, 'nothing but the action')

  const { client: declining } = await mcpClient(t, url, { elicit: () => ({ action: 'decline' }) })
  const declined = await declining.callTool({ name: 'approver', arguments: { input: { action: 'drop' } } })
  t.same(declined.content, [{ type: 'text', text: 'Not done (rejected): drop.' }])
})

t.test('an approval of a task: input_required, then tasks/result asks for it with the task\'s related-task _meta', async (t) => {
  const { url } = await listen(t, { agents })
  const asked: Array<Record<string, unknown>> = []
  const { client } = await mcpClient(t, url, {
    elicit: (request) => {
      asked.push(request.params as Record<string, unknown>)
      return { action: 'accept', content: { approved: false } }
    }
  })
  const messages = []
  for await (const message of client.experimental.tasks.callToolStream({ name: 'approver', arguments: { input: { action: 'ship' } } }, undefined, { task: {} })) {
    messages.push(message)
  }
  t.match(messages.find((m) => m.type === 'taskStatus' && m.task.status === 'input_required'), { task: { statusMessage: 'ship' } })
  const taskId = messages[0]!.type === 'taskCreated' ? messages[0].task.taskId : ''
  t.match(messages.at(-1), { type: 'result', result: { content: [{ text: 'Not done (rejected): ship.' }] } })
  t.match(asked, [{ _meta: { 'io.modelcontextprotocol/related-task': { taskId } } }])
})

t.test('cancel leaves the approval pending; a client without the capability is never asked', async (t) => {
  const { url, service } = await listen(t, { agents })
  const { client } = await mcpClient(t, url, { elicit: () => ({ action: 'cancel' }) })
  const { client: plain } = await mcpClient(t, url)
  const approvals = service.app.agentService.settings.approvalStore
  for (const caller of [client, plain]) {
    const calling = caller.callTool({ name: 'approver', arguments: { input: { action: 'wait' } } })
    const [pending] = await eventually(async () => { const list = await approvals.listPending(); return list.length > 0 ? list : undefined }, 5_000, 'the approval')
    await service.app.agentService.settings.approvalStore.decide(pending!.id, { approved: true, comment: null, decidedBy: 'ops', decidedAt: new Date().toISOString() })
    t.same((await calling).content, [{ type: 'text', text: 'Approved by ops: did wait.' }], 'decided elsewhere')
  }
})

t.test('another principal\'s task is indistinguishable from an unknown one', async (t) => {
  const service = build(t, { agents })
  principalFromHeader(service.app)
  const { url } = await service.listen({ port: 0, host: '127.0.0.1' })
  const { client: alice } = await mcpClient(t, url, { headers: { 'x-test-principal': 'alice' } })
  const { client: bob } = await mcpClient(t, url, { headers: { 'x-test-principal': 'bob' } })
  const { task } = await alice.request({ method: 'tools/call', params: { name: 'slow', arguments: { input: { ms: 30_000 } }, task: {} } }, CreateTaskResultSchema)
  const errors = []
  for (const id of [task.taskId, '00000000-0000-4000-8000-000000000000']) {
    for (const call of [() => bob.experimental.tasks.getTask(id), () => bob.experimental.tasks.getTaskResult(id, CallToolResultSchema), () => bob.experimental.tasks.cancelTask(id)]) {
      const err = await call().catch((e: unknown) => e) as McpError
      t.ok(err instanceof McpError)
      errors.push({ code: err.code, message: err.message.replace(id, '<id>') })
    }
  }
  t.same(errors.slice(0, 3), errors.slice(3), 'the same errors for both')
  t.match(errors[0], { code: -32602 })
  t.same((await bob.experimental.tasks.listTasks()).tasks, [], 'bob lists none of alice\'s')
  t.match((await alice.experimental.tasks.listTasks()).tasks, [{ taskId: task.taskId }])
  await alice.experimental.tasks.cancelTask(task.taskId)
})

t.test('a call whose run is taken over elsewhere (its lease lapsed) follows it in the log to its end', async (t) => {
  const { url, service } = await listen(t, { agents })
  const { client } = await mcpClient(t, url)
  const calling = client.callTool({ name: 'slow', arguments: { input: { ms: 30_000 } } }, undefined, { onprogress: () => {} })
  const core = service.app.agentService
  const runId = await eventually(() => core.runs.ids()[0], 5_000, 'the run')
  // what another instance does with a run whose lease lapsed: ends it in the store; this one stops it without an end
  t.ok(await core.settings.runStore.abandon(runId, Date.now() + 60_000, {
    status: 'failed', endedAt: new Date().toISOString(), error: { code: 'INSTANCE_LOST', message: 'taken over' }
  }, 3_600_000))
  core.runs.get(runId)!.detach('INSTANCE_LOST', true)
  const result = await calling
  t.equal(result.isError, true)
  t.match((result.content as Array<{ text: string }>)[0]!.text, /^INSTANCE_LOST: /)
})

t.test('a store that fails: an internal error, its message hidden; a decision that cannot be made leaves the approval pending', async (t) => {
  const stores = memoryStores()
  const { url } = await listen(t, { agents, ...stores })
  const { client } = await mcpClient(t, url, { elicit: () => ({ action: 'accept', content: { approved: true } }) })
  const create = stores.runStore.create.bind(stores.runStore)
  stores.runStore.create = async () => { throw new Error('the disk is full') }
  const failed = await client.callTool({ name: 'typed', arguments: { a: 1, b: 2 } }).catch((e: unknown) => e) as McpError
  t.match(failed, { code: -32603, message: /: Internal error$/ })
  const exposing = await listen(t, { agents, ...memoryStores(), exposeErrors: true })
  const { client: shown } = await mcpClient(t, exposing.url)
  exposing.service.app.agentService.settings.runStore.create = async () => { throw new Error('the disk is full') }
  t.match(await shown.callTool({ name: 'typed', arguments: { a: 1, b: 2 } }).catch((e: unknown) => e), { code: -32603, message: /: the disk is full$/ }, 'exposeErrors')
  stores.runStore.create = async () => { throw Object.assign(new Error('no answer in time'), { code: 'STORE_UNAVAILABLE', statusCode: 503 }) }
  const coded = await client.callTool({ name: 'typed', arguments: { a: 1, b: 2 } }).catch((e: unknown) => e) as McpError
  t.match(coded, { code: -32603, message: /STORE_UNAVAILABLE: no answer in time$/, data: { code: 'STORE_UNAVAILABLE' } }, 'a code of ours is shown')
  stores.runStore.create = create

  const decide = stores.approvalStore.decide.bind(stores.approvalStore)
  let refused = 0
  stores.approvalStore.decide = async (...args) => {
    if (refused++ === 0) throw new Error('the approvals table is locked')
    return decide(...args)
  }
  const calling = client.callTool({ name: 'approver', arguments: { input: { action: 'retry' } } })
  const [pending] = await eventually(async () => { const list = await stores.approvalStore.listPending(); return refused > 0 && list.length > 0 ? list : undefined }, 5_000, 'the failed decision')
  t.equal(pending!.status, 'pending', 'still pending')
  await decide(pending!.id, { approved: true, comment: null, decidedBy: 'ops', decidedAt: new Date().toISOString() })
  t.same((await calling).content, [{ type: 'text', text: 'Approved by ops: did retry.' }])
})

t.test('a quota refuses a call before it runs: a JSON-RPC error with our code; a reader too far behind is cut', async (t) => {
  const { url, service } = await listen(t, { agents: { ...agents, echo }, quotas: { maxConcurrentRuns: 1 }, maxStreamBufferBytes: 1024 })
  const { client } = await mcpClient(t, url)
  const calling = client.callTool({ name: 'slow', arguments: { input: { ms: 500 } } })
  await eventually(() => service.app.agentService.runs.ids().length === 1, 5_000, 'the first run')
  const refused = await client.callTool({ name: 'typed', arguments: { a: 1, b: 1 } }).catch((e: unknown) => e) as McpError
  t.match(refused, { code: -32000, message: /QUOTA_EXCEEDED/, data: { code: 'QUOTA_EXCEEDED', statusCode: 429, headers: { 'retry-after': String } } })

  await calling

  const { client: reader } = await mcpClient(t, url)
  const big = await reader.callTool({ name: 'echo', arguments: { input: 'x'.repeat(4096) } }, undefined, { timeout: 2_000 }).catch((e: unknown) => e)
  t.ok(big instanceof Error, 'the answer never arrives whole')
  t.equal(service.app.agentService.stats.slowConsumers, 1)
})

t.test('a client that leaves while a handed-off call or a task\'s result is followed: nothing waits for it', async (t) => {
  const { url, service } = await listen(t, { agents })
  const core = service.app.agentService
  const { client } = await mcpClient(t, url)
  const calling = client.callTool({ name: 'slow', arguments: { input: { ms: 30_000 } } }).catch((e: unknown) => e)
  const runId = await eventually(() => core.runs.ids()[0], 5_000, 'the run')
  // stopped here without an end: the call follows the log, where nothing more comes
  core.runs.get(runId)!.detach('INSTANCE_LOST', true)
  await client.close()
  t.ok(await calling instanceof Error, 'the call ends with its client')

  let asked: () => void = () => {}
  const arrived = new Promise<void>((resolve) => { asked = resolve })
  const { client: tasks } = await mcpClient(t, url, { elicit: () => { asked(); return new Promise(() => {}) } })
  const { task } = await tasks.request({ method: 'tools/call', params: { name: 'approver', arguments: { input: { action: 'later' } }, task: {} } }, CreateTaskResultSchema)
  const waiting = tasks.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema).catch((e: unknown) => e)
  // asked for the approval: its tasks/result is open on the server
  await arrived
  const audited = (await auditEntries(service.app)).length
  await tasks.close()
  t.ok(await waiting instanceof Error)
  // its request ends on the server too (its one audit entry written)
  await eventually(async () => (await auditEntries(service.app)).length > audited, 5_000, 'the request ended')
  t.match(await core.settings.runStore.get(task.taskId), { status: 'running' }, 'a task outlives its client')
  await core.settings.runStore.cancel(task.taskId, { status: 'cancelled', endedAt: new Date().toISOString(), error: { code: 'CANCELLED', message: 'x' } }, 1_000)
  core.runs.get(task.taskId)?.abort('CANCELLED')
})

t.test('a busy session refuses a call before it runs; tasks/list pages through the runs', async (t) => {
  const { url } = await listen(t, { agents: { ...agents, echo } })
  const { client } = await mcpClient(t, url)
  const queued = await fetch(`${url}/v1/agents/slow/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: { ms: 400 }, background: true }) })
  const { sessionId } = await queued.json() as { sessionId: string }
  const busy = await client.callTool({ name: 'typed', arguments: { a: 1, b: 1 }, _meta: { sessionId } }).catch((e: unknown) => e) as McpError
  t.match(busy, { code: -32000, data: { code: 'SESSION_BUSY', statusCode: 409 } }, 'a busy session')
  t.equal((busy.data as Record<string, unknown>).headers, undefined)


  await Promise.all(Array.from({ length: 100 }, () => fetch(`${url}/v1/agents/echo/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"input":1}' })))
  const first = await client.experimental.tasks.listTasks()
  t.same(first.tasks, [], 'the last hundred runs hold no task')
  t.type(first.nextCursor, 'string')
  t.match(await client.experimental.tasks.listTasks(first.nextCursor), { tasks: [] })
  const answer = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 5, result: {} }), { 'mcp-protocol-version': '2025-11-25' })
  t.equal(answer.status, 202, 'a response to nothing of ours goes to the SDK, which ignores it')
})

t.test('the operator\'s view (the Admin API the console reads) shows a run started over MCP like any other', async (t) => {
  const { url, service } = await listen(t, { agents, adminApi: { enabled: true, bearerToken: 'an-admin-token-of-some-length' } })
  const { client } = await mcpClient(t, url)
  const result = await client.callTool({ name: 'typed', arguments: { a: 1, b: 1 } })
  const { runId } = result._meta as { runId: string }
  const listed = await service.app.inject({ url: '/admin/runs', headers: { authorization: 'Bearer an-admin-token-of-some-length' } })
  t.match(listed.json(), { runs: [{ runId, agent: 'typed', status: 'completed' }] })
})
