// GET /v1/a2a/:name/.well-known/agent-card.json and POST /v1/a2a/:name (docs/front-ends.md), driven by @a2a-js/sdk's own
// clients against a listening service: the v1.0 Client from its ClientFactory (card resolution, JSON-RPC transport)
// and the v0.3 LegacyJsonRpcTransport. A task is a run, its context a session.
import t from 'tap'
import type { Test } from 'tap'
import { spawnSync } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { Role, TaskState } from '@a2a-js/sdk'
import type { Message, Part, SendMessageRequest, StreamResponse, Task } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client'
import type { Client } from '@a2a-js/sdk/client'
import { LegacyJsonRpcTransport, isLegacyAgentCard, parseLegacyAgentCard } from '@a2a-js/sdk/compat/v0_3/client'
import { loadA2a } from '../../lib/frontends/a2a/run-port.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { auditEntries, build, collect, eventually, injected, listen } from '../helper.js'
import { scripted } from '../helpers/frontends.js'

const KEYS = { alice: 'alice-key-0123456789', bob: 'bob-key-0123456789' }

async function serve (t: Test) {
  const helper = scripted()
  const bare = { async run () { return { output: 'bare' } } }
  const { service, url } = await listen(t, { agents: { helper: helper.agent, bare }, auth: { strategy: 'api-key', keys: [KEYS.alice, KEYS.bob] } })
  return { ...helper, service, url, app: service.app, base: `${url}/v1/a2a/helper` }
}

/** fetch with the caller's credential: what an A2A client is given to authenticate. */
function fetchAs (who: keyof typeof KEYS): typeof fetch {
  return async (input, init) => {
    const headers = new Headers(init?.headers)
    headers.set('x-api-key', KEYS[who])
    return fetch(input, { ...init, headers })
  }
}

async function v1Client (base: string, who: keyof typeof KEYS = 'alice'): Promise<Client> {
  const fetchImpl = fetchAs(who)
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl })
  }))
  // the card path is resolved relative to the base: it ends with a slash
  return await factory.createFromUrl(`${base}/`)
}

function part (value: string | object): Part {
  return typeof value === 'string'
    ? { content: { $case: 'text', value }, mediaType: 'text/plain', filename: '', metadata: {} }
    : { content: { $case: 'data', value }, mediaType: 'application/json', filename: '', metadata: {} }
}

function request (parts: Part[], ids: { taskId?: string, contextId?: string } = {}, returnImmediately = false): SendMessageRequest {
  const message: Message = {
    messageId: `m-${Math.random()}`,
    contextId: ids.contextId ?? '',
    taskId: ids.taskId ?? '',
    role: Role.ROLE_USER,
    parts,
    metadata: {},
    extensions: [],
    referenceTaskIds: []
  }
  return { tenant: '', message, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately }, metadata: {} }
}

/** Each response as `case:state` or `artifact:<text>` (`+` appended, `!` last chunk), for compact assertions. */
function shape (responses: StreamResponse[]): string[] {
  return responses.map((response) => {
    const payload = response.payload!
    switch (payload.$case) {
      case 'task': return `task:${TaskState[payload.value.status!.state]}`
      case 'statusUpdate': return `status:${TaskState[payload.value.status!.state]}`
      case 'artifactUpdate': {
        const { artifact, append, lastChunk } = payload.value
        return `artifact:${JSON.stringify(artifact!.parts.map((p) => p.content!.value))}${append ? '+' : ''}${lastChunk ? '!' : ''}`
      }
      default: return payload.$case
    }
  })
}

function outputOf (task: Task): unknown {
  return task.artifacts[0]!.parts[0]!.content!.value
}

t.test('the agent card: v1.0 for the v1.0 client, v0.3 without A2A-Version; both name the endpoint and the bearer scheme', async (t) => {
  const { url, base } = await serve(t)
  const client = await v1Client(base)
  t.equal(client.protocolVersion, '1.0')
  const card = await client.getAgentCard()
  t.match(card, { name: 'helper', description: 'A scripted helper', capabilities: { streaming: true, pushNotifications: false } })
  t.same(card.supportedInterfaces.map((i) => [i.url, i.protocolVersion]), [[base, '1.0'], [base, '0.3']])
  t.match(card.securitySchemes, { bearer: { scheme: { $case: 'httpAuthSecurityScheme' } } })

  const res = await fetch(`${base}/.well-known/agent-card.json`, { headers: { 'x-api-key': KEYS.alice } })
  t.equal(res.headers.get('vary'), 'A2A-Version')
  const legacy = await res.json()
  t.ok(isLegacyAgentCard(legacy))
  t.match(parseLegacyAgentCard(legacy), { name: 'helper', supportedInterfaces: [{ url: base }] })
  t.equal((await fetch(`${base}/.well-known/agent-card.json`)).status, 401, 'the card needs a credential like every route')
  t.equal((await fetch(`${url}/v1/a2a/nope/.well-known/agent-card.json`, { headers: { 'x-api-key': KEYS.alice } })).status, 404)
  const bare = await fetch(`${url}/v1/a2a/bare/.well-known/agent-card.json`, { headers: { 'x-api-key': KEYS.alice, 'a2a-version': '1.0' } })
  t.equal(bare.status, 200)
  t.match(new DefaultAgentCardResolver().normalizeAgentCard(await bare.json()), { name: 'bare', description: '' }, 'an agent without a description')
})

t.test('SendMessage and GetTask: the task is the run, its context the session; another message in the context has its history', async (t) => {
  const { base, app, seen } = await serve(t)
  const client = await v1Client(base)
  const task = await client.sendMessage(request([part('hello')])) as Task
  t.equal(task.id, seen[0]!.runId)
  t.equal(task.contextId, seen[0]!.sessionId)
  t.equal(task.status!.state, TaskState.TASK_STATE_COMPLETED)
  t.equal(outputOf(task), 'echo: hello')
  const record = await app.inject({ url: `/v1/runs/${task.id}`, headers: { 'x-api-key': KEYS.alice } })
  t.match(record.json(), { status: 'completed', agent: 'helper', sessionId: task.contextId })
  t.same(await client.getTask({ tenant: '', id: task.id }), task, 'GetTask folds the same log into the same task')

  const next = await client.sendMessage(request([part({ n: 1 })], { contextId: task.contextId })) as Task
  t.equal(next.contextId, task.contextId)
  t.same(seen[1]!.input, { n: 1 }, 'a data part is the input')
  t.match(seen[1]!.history, [{ role: 'user', content: 'hello' }, { role: 'assistant', content: 'echo: hello' }])
  const audit = await auditEntries(app)
  t.match(audit.find((entry) => entry.route === '/v1/a2a/:name' && entry.runId === task.id), { agent: 'helper', sessionId: task.contextId, status: 200 })

  // any run of the caller's is a task, one started over HTTP without a session (store: false) too: its own context
  const ephemeral = await app.inject({ method: 'POST', url: '/v1/agents/helper/runs', headers: { 'x-api-key': KEYS.alice }, payload: { input: 'x', store: false } })
  const runId = ephemeral.json().runId
  t.match(await client.getTask({ tenant: '', id: runId }), { id: runId, contextId: runId, status: { state: TaskState.TASK_STATE_COMPLETED } })
})

t.test('SendStreamingMessage: task, working, text chunks and progress, the whole output, completed', async (t) => {
  const { base } = await serve(t)
  const client = await v1Client(base)
  const responses = await collect(client.sendMessageStream(request([part('full')])))
  t.same(shape(responses), [
    'task:TASK_STATE_SUBMITTED', 'status:TASK_STATE_WORKING',
    'artifact:["Hello"]', 'artifact:[", world"]+', 'status:TASK_STATE_WORKING',
    'status:TASK_STATE_WORKING', 'status:TASK_STATE_WORKING', 'status:TASK_STATE_WORKING', 'status:TASK_STATE_WORKING',
    'artifact:["Done."]+', 'artifact:["Hello, world. Done."]!', 'status:TASK_STATE_COMPLETED'
  ])
  t.match(responses[4]!.payload!.value, { status: { message: { parts: [{ content: { value: { type: 'progress.step', data: { n: 1 } } } }] } } })
})

t.test('an approval is input-required; the answer to the task decides it and streams the rest; POST /v1/approvals/:id works too', async (t) => {
  const { base, app } = await serve(t)
  const client = await v1Client(base)
  const first = await collect(client.sendMessageStream(request([part('mail')])))
  t.equal(shape(first).at(-1), 'status:TASK_STATE_INPUT_REQUIRED', 'the stream ends at input-required')
  const task = (first[0]!.payload!.value as Task)
  const asked = first.at(-1)!.payload!.value as { status: { message: Message } }
  const approvalId = (asked.status.message.parts[1]!.content!.value as { approval: { id: string } }).approval.id
  t.equal((await client.getTask({ tenant: '', id: task.id })).status!.state, TaskState.TASK_STATE_INPUT_REQUIRED)

  const rest = await collect(client.sendMessageStream(request([part({ approved: true, comment: 'fine' })], { taskId: task.id })))
  t.equal(shape(rest).at(-1), 'status:TASK_STATE_COMPLETED')
  const approval = await app.inject({ url: `/v1/approvals/${approvalId}`, headers: { 'x-api-key': KEYS.alice } })
  t.match(approval.json(), { status: 'approved', decision: { comment: 'fine', decidedBy: String } })

  const second = await client.sendMessage(request([part('mail')])) as Task
  t.equal(second.status!.state, TaskState.TASK_STATE_INPUT_REQUIRED, 'a blocking send returns at input-required')
  const secondApproval = (second.status!.message!.parts[1]!.content!.value as { approval: { id: string } }).approval.id
  const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${secondApproval}`, headers: { 'x-api-key': KEYS.alice }, payload: { approved: false } })
  t.equal(decided.statusCode, 200)
  await eventually(async () => (await client.getTask({ tenant: '', id: second.id })).status!.state === TaskState.TASK_STATE_COMPLETED)
  t.equal(outputOf(await client.getTask({ tenant: '', id: second.id })), 'not sent')
  await t.rejects(client.sendMessage(request([part('yes')], { taskId: second.id })), { name: 'UnsupportedOperationError' })
})

t.test('CancelTask ends a running task; a resubscribed stream sees it end; a failed run is a failed task', async (t) => {
  const { base, app } = await serve(t)
  const client = await v1Client(base)
  const submitted = await client.sendMessage(request([part('wait')], {}, true)) as Task
  t.equal(submitted.status!.state, TaskState.TASK_STATE_SUBMITTED, 'returnImmediately: the task as submitted, the run going on')
  await eventually(async () => (await client.getTask({ tenant: '', id: submitted.id })).artifacts.length > 0)
  const watching = collect(client.resubscribeTask({ tenant: '', id: submitted.id }))
  await eventually(() => app.agentService.heartbeat.size > 0)
  const cancelled = await client.cancelTask({ tenant: '', id: submitted.id, metadata: {} })
  t.equal(cancelled.status!.state, TaskState.TASK_STATE_CANCELED)
  t.same(shape(await watching), ['task:TASK_STATE_WORKING', 'status:TASK_STATE_CANCELED'])
  const record = await app.inject({ url: `/v1/runs/${submitted.id}`, headers: { 'x-api-key': KEYS.alice } })
  t.equal(record.json().status, 'cancelled')
  t.equal((await client.cancelTask({ tenant: '', id: submitted.id, metadata: {} })).status!.state, TaskState.TASK_STATE_CANCELED)

  const failed = await client.sendMessage(request([part('fail')])) as Task
  t.equal(failed.status!.state, TaskState.TASK_STATE_FAILED)
  t.match(failed.metadata, { error: { code: 'AGENT_ERROR', message: 'Internal Server Error' } })
  await t.rejects(client.cancelTask({ tenant: '', id: failed.id, metadata: {} }), { name: 'TaskNotCancelableError' })
  await t.rejects(collect(client.resubscribeTask({ tenant: '', id: failed.id })), { name: 'UnsupportedOperationError' })
})

t.test('a task resumed with resumeRunId: a stream that reads its first attempt\'s end and the resume at once goes on to the second attempt\'s end', async (t) => {
  const helper = scripted()
  const store = new MemoryRunStore()
  const { service, url } = await listen(t, { agents: { helper: helper.agent }, runStore: store, auth: { strategy: 'api-key', keys: [KEYS.alice, KEYS.bob] } })
  const client = await v1Client(`${url}/v1/a2a/helper`)
  const submitted = await client.sendMessage(request([part('checkpoint-wait-fail')], {}, true)) as Task
  const taskId = submitted.id
  await eventually(async () => await service.app.agentService.settings.checkpointStore.load(taskId) !== null, 5_000, 'its checkpoint')
  // the stream's follower (the watcher of the task's run from now on) has its first read held until the log has
  // the first attempt's end and the second attempt's start
  let following = false
  let held: { reached: () => void, released: Promise<void> } | null = null
  let release!: () => void
  const reached = new Promise<void>((resolve) => {
    held = { reached: resolve, released: new Promise((resolve) => { release = resolve }) }
  })
  t.teardown(() => release())
  const watch = store.watch.bind(store)
  store.watch = (runId, listener) => {
    if (runId === taskId) following = true
    return watch(runId, listener)
  }
  const events = store.events.bind(store)
  store.events = async (...args) => {
    const hold = held
    if (following && args[0] === taskId && hold !== null) {
      held = null
      hold.reached()
      await hold.released
    }
    return await events(...args)
  }
  const stream = client.resubscribeTask({ tenant: '', id: taskId })[Symbol.asyncIterator]()
  t.same(shape([(await stream.next()).value as StreamResponse]), ['task:TASK_STATE_WORKING'], 'the task as it stands')
  const rest = (async () => {
    const responses: StreamResponse[] = []
    for (let next = await stream.next(); next.done !== true; next = await stream.next()) responses.push(next.value)
    return responses
  })()
  await reached
  helper.release()
  await eventually(async () => (await store.get(taskId))?.status === 'failed', 5_000, 'the first attempt\'s end')
  const resumed = fetch(`${url}/v1/agents/helper/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': KEYS.alice }, body: JSON.stringify({ input: 'wait', resumeRunId: taskId })
  })
  await eventually(async () => (await events(taskId, 0, 100)).some((e) => e.type === 'message.delta' && e.data.includes('tick')), 5_000, 'the second attempt streaming')
  release()
  helper.release()
  const responses = await rest
  t.same(shape(responses), [
    'status:TASK_STATE_WORKING', 'status:TASK_STATE_WORKING', 'status:TASK_STATE_WORKING',
    'artifact:["tick"]+', 'artifact:[" tock"]+', 'artifact:["tick tock"]!', 'status:TASK_STATE_COMPLETED'
  ], 'the first attempt\'s end and the resume as progress, then the second attempt to its end')
  t.match(responses[0]!.payload!.value, { status: { message: { parts: [{ content: { value: { type: 'run.failed', data: { error: { code: 'AGENT_ERROR' } } } } }] } } })
  t.match(responses[1]!.payload!.value, { status: { message: { parts: [{ content: { value: { type: 'run.requeued', data: { attempt: 2, reason: 'RESUMED' } } } }] } } })
  t.equal((await resumed).status, 200)
  const task = await client.getTask({ tenant: '', id: taskId })
  t.equal(task.status!.state, TaskState.TASK_STATE_COMPLETED)
  t.equal(outputOf(task), 'tick tock')
  t.notOk('error' in task.metadata!, 'the first attempt\'s error is not the completed task\'s')
})

t.test('a client that leaves a stream does not stop its task', async (t) => {
  const { base, app, release } = await serve(t)
  const client = await v1Client(base)
  let taskId = ''
  for await (const response of client.sendMessageStream(request([part('wait')]))) {
    if (response.payload?.$case === 'task') taskId = response.payload.value.id
    if (response.payload?.$case === 'artifactUpdate') break
  }
  await eventually(() => app.agentService.heartbeat.size === 0)
  release()
  await eventually(async () => (await client.getTask({ tenant: '', id: taskId })).status!.state === TaskState.TASK_STATE_COMPLETED)
})

t.test('another principal\'s tasks and contexts do not exist for it', async (t) => {
  const { base } = await serve(t)
  const alice = await v1Client(base, 'alice')
  const bob = await v1Client(base, 'bob')
  const task = await alice.sendMessage(request([part('mail')])) as Task
  await t.rejects(bob.getTask({ tenant: '', id: task.id }), { name: 'TaskNotFoundError' })
  await t.rejects(bob.cancelTask({ tenant: '', id: task.id, metadata: {} }), { name: 'TaskNotFoundError' })
  await t.rejects(bob.sendMessage(request([part('yes')], { taskId: task.id })), { name: 'TaskNotFoundError' })
  await t.rejects(bob.sendMessage(request([part('hi')], { contextId: task.contextId })), { name: 'RequestMalformedError', message: /not found/ })
  t.equal((await alice.getTask({ tenant: '', id: task.id })).status!.state, TaskState.TASK_STATE_INPUT_REQUIRED, 'still waiting for alice')
})

t.test('the v0.3 client: message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe', async (t) => {
  const { base, app } = await serve(t)
  const legacy = new LegacyJsonRpcTransport({ endpoint: base, fetchImpl: fetchAs('alice') })
  const done = await legacy.sendMessage({ ...request([part('hello')]), configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: false } }) as Task
  t.equal(done.status!.state, TaskState.TASK_STATE_COMPLETED)
  t.equal(outputOf(done), 'echo: hello')

  const streamed = await collect(legacy.sendMessageStream(request([part('mail')])))
  t.equal(shape(streamed).at(-1), 'status:TASK_STATE_INPUT_REQUIRED')
  const taskId = (streamed[0]!.payload!.value as Task).id
  const rest = await collect(legacy.sendMessageStream(request([part('reject')], { taskId })))
  t.equal(shape(rest).at(-1), 'status:TASK_STATE_COMPLETED')
  t.equal(outputOf(await legacy.getTask({ tenant: '', id: taskId })), 'not sent')

  const waiting = await legacy.sendMessage(request([part('wait')], {}, true)) as Task
  const watching = collect(legacy.resubscribeTask({ tenant: '', id: waiting.id }))
  await eventually(() => app.agentService.heartbeat.size > 0)
  const cancelled = await legacy.cancelTask({ tenant: '', id: waiting.id, metadata: {} })
  t.equal(cancelled.status!.state, TaskState.TASK_STATE_CANCELED)
  t.equal(shape(await watching).at(-1), 'status:TASK_STATE_CANCELED')
  await t.rejects(legacy.getTask({ tenant: '', id: 'nope' }), { name: 'TaskNotFoundError' })
})

t.test('returnImmediately (v1.0) and blocking (v0.3): at once with the task submitted, else when it ends; v0.3 waits without blocking', async (t) => {
  const { base, url } = await serve(t)
  const client = await v1Client(base)
  t.equal((await client.sendMessage(request([part('hello')], {}, false)) as Task).status!.state, TaskState.TASK_STATE_COMPLETED, 'returnImmediately: false waits')
  const submitted = await client.sendMessage(request([part('hello')], {}, true)) as Task
  t.equal(submitted.status!.state, TaskState.TASK_STATE_SUBMITTED, 'returnImmediately: true answers at once')
  await eventually(async () => (await client.getTask({ tenant: '', id: submitted.id })).status!.state === TaskState.TASK_STATE_COMPLETED)
  t.equal(outputOf(await client.getTask({ tenant: '', id: submitted.id })), 'echo: hello', 'and the run went on')

  const legacy = new LegacyJsonRpcTransport({ endpoint: base, fetchImpl: fetchAs('alice') })
  t.equal((await legacy.sendMessage(request([part('hello')], {}, true)) as Task).status!.state, TaskState.TASK_STATE_SUBMITTED, 'the v0.3 client: blocking: false')
  t.equal((await legacy.sendMessage(request([part('hello')], {}, false)) as Task).status!.state, TaskState.TASK_STATE_COMPLETED, 'blocking: true')

  // what v0.3 clients of other SDKs send: a configuration with or without blocking, or none
  const send = async (configuration?: object): Promise<string> => {
    const params = { message: { kind: 'message', messageId: `m-${Math.random()}`, role: 'user', parts: [{ kind: 'text', text: 'hello' }] }, ...(configuration === undefined ? {} : { configuration }) }
    const res = await fetchAs('alice')(`${url}/v1/a2a/helper`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params }) })
    return ((await res.json()) as { result: { status: { state: string } } }).result.status.state
  }
  t.equal(await send({ acceptedOutputModes: ['text/plain'] }), 'completed', 'a configuration without blocking waits')
  t.equal(await send(), 'completed', 'so does none')
  t.equal(await send({ acceptedOutputModes: [], blocking: false }), 'submitted', 'blocking: false answers at once')
  t.equal(await send({ blocking: true }), 'completed')
})

t.test('requests refused before the JSON-RPC layer: credentials, the agent, the body', async (t) => {
  const { app } = await serve(t)
  const rpc = { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } }
  t.equal((await app.inject({ method: 'POST', url: '/v1/a2a/helper', payload: rpc })).statusCode, 401)
  const headers = { 'x-api-key': KEYS.alice }
  t.match((await app.inject({ method: 'POST', url: '/v1/a2a/nope', headers, payload: rpc })).json(), { statusCode: 404, code: 'AGENT_NOT_FOUND' })
  const junk = await app.inject({ method: 'POST', url: '/v1/a2a/helper', headers: { ...headers, 'content-type': 'application/json' }, payload: '[1]' })
  t.match(junk.json(), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
  const unknown = await app.inject({ method: 'POST', url: '/v1/a2a/helper', headers, payload: { jsonrpc: '2.0', id: 2, method: 'nope', params: {} } })
  t.match(unknown.json(), { jsonrpc: '2.0', id: 2, error: { code: Number, message: String } }, 'a JSON-RPC error is the SDK\'s, answered 200')
})

t.test('without @a2a-js/sdk: the A2A routes answer 501 A2A_UNAVAILABLE, naming the package; nothing else changes', async (t) => {
  const a2aLoader = async (): Promise<never> => {
    throw Object.assign(new Error('Cannot find package \'@a2a-js/sdk\' imported from /x/a2a.js'), { code: 'ERR_MODULE_NOT_FOUND' })
  }
  const { app } = build(t, { agents: { helper: scripted().agent }, ...injected({ a2aLoader }) })
  for (const res of [
    await app.inject({ url: '/v1/a2a/helper/.well-known/agent-card.json' }),
    await app.inject({ method: 'POST', url: '/v1/a2a/helper', payload: { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } } })
  ]) {
    t.equal(res.statusCode, 501)
    t.match(res.json(), { code: 'A2A_UNAVAILABLE', message: 'A2A needs the optional peer dependency @a2a-js/sdk: npm install @a2a-js/sdk' })
  }
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/helper/runs', payload: { input: 'x' } })).statusCode, 200)

  await t.rejects(loadA2a(async () => { throw new Error('a broken install') }), /a broken install/, 'an SDK that is there but fails to load says so')
  t.ok((await loadA2a()).RunTaskHandler, 'the process\'s own loader is untouched: the real module loads')
  const other = build(t, { agents: { helper: scripted().agent } })
  t.equal((await other.app.inject({ url: '/v1/a2a/helper/.well-known/agent-card.json' })).statusCode, 200, 'another service in the process has A2A')
})

t.test('import \'fastify-agents\' never loads @a2a-js/sdk: a process where it cannot be found serves everything else', async (t) => {
  const index = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '../../index.js')).href
  const hook = 'export async function resolve (specifier, context, next) {' +
    ' if (specifier.startsWith(\'@a2a-js/sdk\')) throw Object.assign(new Error("Cannot find package \'" + specifier + "\' imported from " + context.parentURL), { code: \'ERR_MODULE_NOT_FOUND\' });' +
    ' return next(specifier, context) }'
  const script = `
    import { register } from 'node:module'
    register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}))
    const { createAgentService } = await import(${JSON.stringify(index)})
    const service = createAgentService({ logger: false, agents: { echo: { async run (input) { return { output: input } } } } })
    const run = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'x' } })
    const chat = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/chat', payload: { id: 'c', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] } })
    const card = await service.app.inject({ url: '/v1/a2a/echo/.well-known/agent-card.json' })
    console.log(JSON.stringify({ run: run.statusCode, chat: chat.statusCode, card: card.statusCode, code: card.json().code }))
    await service.close(0)
  `
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 })
  t.equal(child.status, 0, child.stderr)
  t.same(JSON.parse(child.stdout.trim().split('\n').at(-1)!), { run: 200, chat: 200, card: 501, code: 'A2A_UNAVAILABLE' })
})
