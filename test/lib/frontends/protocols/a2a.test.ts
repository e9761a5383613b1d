// A2A over runs, driven by @a2a-js/sdk's own clients: the v1.0 Client from its ClientFactory (card
// resolution, JSON-RPC transport) and the v0.3 LegacyJsonRpcTransport, both with a fetch that hands the
// request to handleA2AJsonRpc + RunTaskHandler over an in-memory run store, as the route will.
import t from 'tap'
import type { Test } from 'tap'
import { Role, TaskState } from '@a2a-js/sdk'
import type { Message, Part, SendMessageRequest, StreamResponse, Task } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client'
import type { Client } from '@a2a-js/sdk/client'
import { LegacyJsonRpcTransport, isLegacyAgentCard, parseLegacyAgentCard } from '@a2a-js/sdk/compat/v0_3/client'
import {
  A2ATaskProjection, RESPONSE_ARTIFACT_ID, RunTaskHandler, a2aAgentCard, a2aAgentCardDocument, handleA2AJsonRpc
} from '../../../../lib/frontends/a2a/protocol.js'
import type { A2ACardOptions } from '../../../../lib/frontends/a2a/protocol.js'
import { SSE_PING } from '../../../../lib/frontends/run-events.js'
import { FakeRuns } from './fake-runs.js'
import type { Script } from './fake-runs.js'
import { collect } from '../../../helper.js'

const BASE = 'http://svc.test/v1/a2a/helper'
const CARD: A2ACardOptions = { name: 'helper', description: 'Helps.', url: BASE }

/** The scripted agent, chosen by the input. */
async function agent (input: unknown, run: Script): Promise<{ output: unknown } | null> {
  if (typeof input !== 'string') return { output: { double: (input as { n: number }).n * 2 } }
  if (input === 'hello') {
    run.emit('message.delta', { text: 'Hel' })
    run.emit('tool.call.delta', { toolCallId: 'c1', name: 'lookup', delta: '{}' })
    run.emit('tool.call', { toolCallId: 'c1', name: 'lookup', input: {} })
    run.emit('reasoning.delta', { text: 'hm' })
    run.emit('checkpoint.saved', { step: 1 })
    run.emit('message.delta', { text: 'lo' })
    return { output: 'Hello' }
  }
  if (input === 'mail') {
    run.emit('message.delta', { text: 'Sending.' })
    const approval = await run.approval('sendEmail', { to: 'bob' }, 'Sends mail')
    run.emit('message.delta', { text: approval.status === 'approved' ? ' Sent.' : ' Not sent.' })
    return { output: approval.status === 'approved' ? 'Sent' : 'Not sent' }
  }
  if (input === 'ask') {
    await run.approval('doIt', undefined, null)
    return { output: 'done' }
  }
  if (input === 'slow') {
    run.emit('message.delta', { text: 'tick' })
    await run.cancelled()
    return null
  }
  throw new Error('boom')
}

interface Wire { method: string, headers: Headers, body: any }

/** What the route will do, in a fetch: the card at the well-known path, JSON-RPC at the endpoint. */
function service (runs: FakeRuns, options: { ping?: boolean, exposeErrors?: boolean } = {}) {
  const wire: Wire[] = []
  const returned: string[] = []
  const fetchImpl = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input))
    const headers = new Headers(init?.headers)
    const version = headers.get('a2a-version') ?? undefined
    if (url.pathname === '/v1/a2a/helper/.well-known/agent-card.json') {
      wire.push({ method: 'GET card', headers, body: undefined })
      return Response.json(a2aAgentCardDocument(CARD, version))
    }
    const body = JSON.parse(String(init?.body))
    wire.push({ method: body.method, headers, body })
    // One handler per request: it holds the signal the route aborts when the client goes away.
    const gone = new AbortController()
    const handler = new RunTaskHandler({ card: a2aAgentCard(CARD), port: runs, signal: gone.signal, exposeErrors: options.exposeErrors })
    const answer = await handleA2AJsonRpc(handler, body, version)
    if (typeof answer.body === 'string') return new Response(answer.body, { status: answer.status, headers: answer.headers })
    const frames = answer.body
    const stream = new ReadableStream<string>({
      async pull (controller) {
        const next = await frames.next()
        if (next.done === true) {
          controller.close()
          return
        }
        controller.enqueue(options.ping === true ? SSE_PING + next.value : next.value)
      },
      async cancel () {
        returned.push(body.method)
        gone.abort()
        await frames.return(undefined)
      }
    })
    return new Response(stream.pipeThrough(new TextEncoderStream()), { status: answer.status, headers: answer.headers })
  }
  return { wire, returned, fetchImpl }
}

async function v1Client (fetchImpl: typeof fetch): Promise<Client> {
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl })
  }))
  // The trailing slash matters: the card path is resolved relative to it.
  return await factory.createFromUrl(`${BASE}/`)
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
  return {
    tenant: '',
    message,
    configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately },
    metadata: {}
  }
}

/** Each response as `case:state` or `case:artifact text (append, last)`, for compact assertions. */
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

function taskText (task: Task): unknown {
  return task.artifacts[0]!.parts[0]!.content!.value
}

t.test('the v1.0 client finds the agent card and talks JSON-RPC 1.0', async (t) => {
  const { wire, fetchImpl } = service(new FakeRuns(agent))
  const client = await v1Client(fetchImpl)
  t.equal(client.protocolVersion, '1.0')
  const card = await client.getAgentCard()
  t.match(card, { name: 'helper', description: 'Helps.', capabilities: { streaming: true, pushNotifications: false } })
  t.same(card.supportedInterfaces.map((i) => [i.url, i.protocolBinding, i.protocolVersion]),
    [[BASE, 'JSONRPC', '1.0'], [BASE, 'JSONRPC', '0.3']])
  t.equal(wire[0]!.method, 'GET card')
  t.equal(wire[0]!.headers.get('a2a-version'), '1.0', 'the card resolver asks for the 1.0 card')
})

t.test('SendMessage (blocking): the run to its end, as a completed task with the output artifact', async (t) => {
  const runs = new FakeRuns(agent)
  const { wire, fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  const task = await client.sendMessage(request([part('hello')])) as Task
  t.equal(task.id, 'run-1', 'the task id is the run id')
  t.equal(task.contextId, 'session-1', 'the context id is the session id')
  t.equal(task.status!.state, TaskState.TASK_STATE_COMPLETED)
  t.same(task.artifacts.map((a) => [a.artifactId, a.parts[0]!.content]), [[RESPONSE_ARTIFACT_ID, { $case: 'text', value: 'Hello' }]])
  t.match(task.metadata, { usage: { totalTokens: 3 }, finishReason: 'stop' })
  t.same(task.history, [])
  const sent = wire.at(-1)!
  t.equal(sent.method, 'SendMessage')
  t.match(sent.body, { jsonrpc: '2.0', params: { message: { role: 'ROLE_USER', parts: [{ text: 'hello' }] } } })
  t.equal(sent.headers.get('a2a-version'), '1.0')

  const again = await client.getTask({ tenant: '', id: task.id })
  t.same(again, task, 'GetTask folds the same log into the same task')
  t.equal(wire.at(-1)!.method, 'GetTask')
})

t.test('SendStreamingMessage: task, working, text chunks, the whole output, completed', async (t) => {
  const runs = new FakeRuns(agent)
  const { wire, fetchImpl } = service(runs, { ping: true })
  const client = await v1Client(fetchImpl)
  const responses = await collect(client.sendMessageStream(request([part('hello')])))
  t.equal(wire.at(-1)!.method, 'SendStreamingMessage')
  t.same(shape(responses), [
    'task:TASK_STATE_SUBMITTED',
    'status:TASK_STATE_WORKING',
    'artifact:["Hel"]',
    'status:TASK_STATE_WORKING',
    'artifact:["lo"]+',
    'artifact:["Hello"]!',
    'status:TASK_STATE_COMPLETED'
  ], 'SSE comments between frames are skipped by the client')
  const progress = responses[3]!.payload!.value as { status: { message: Message } }
  t.match(progress.status.message, { role: Role.ROLE_AGENT, taskId: 'run-1', parts: [{ content: { $case: 'data', value: { type: 'tool.call', data: { name: 'lookup' } } } }] })
  t.same(runs.following, 0, 'the follower was closed')
})

t.test('a data part is the input; a data output is a data artifact', async (t) => {
  const { fetchImpl } = service(new FakeRuns(agent))
  const client = await v1Client(fetchImpl)
  const task = await client.sendMessage(request([part({ n: 21 })])) as Task
  t.same(task.artifacts[0]!.parts[0]!.content, { $case: 'data', value: { double: 42 } })
})

t.test('an approval is input-required; the answer, in a message to the same task, streams the rest', async (t) => {
  const runs = new FakeRuns(agent)
  const { fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  const first = await collect(client.sendMessageStream(request([part('mail')])))
  t.same(shape(first), ['task:TASK_STATE_SUBMITTED', 'status:TASK_STATE_WORKING', 'artifact:["Sending."]', 'status:TASK_STATE_INPUT_REQUIRED'],
    'the stream ends at input-required')
  const asked = first.at(-1)!.payload!.value as { status: { message: Message } }
  t.match(asked.status.message.parts, [
    { content: { $case: 'text', value: 'Sends mail' } },
    { content: { $case: 'data', value: { approval: { id: 'appr-run-1', action: 'sendEmail', payload: { to: 'bob' }, expiresAt: '2030-01-01T00:10:00.000Z' } } } }
  ])
  const waiting = await client.getTask({ tenant: '', id: 'run-1' })
  t.equal(waiting.status!.state, TaskState.TASK_STATE_INPUT_REQUIRED)

  const rest = await collect(client.sendMessageStream(request([part({ approved: true, comment: 'fine' })], { taskId: 'run-1', contextId: 'session-1' })))
  t.same(shape(rest), ['task:TASK_STATE_INPUT_REQUIRED', 'status:TASK_STATE_WORKING', 'artifact:[" Sent."]+', 'artifact:["Sent"]!', 'status:TASK_STATE_COMPLETED'])
  t.match(rest[1]!.payload!.value, { status: { message: { parts: [{ content: { value: { type: 'approval.decided', data: { approval: { status: 'approved', decision: { comment: 'fine' } } } } } }] } } })
})

t.test('an approval answered in text, with the blocking SendMessage', async (t) => {
  const runs = new FakeRuns(agent)
  const { fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  const asked = await client.sendMessage(request([part('mail')])) as Task
  t.equal(asked.status!.state, TaskState.TASK_STATE_INPUT_REQUIRED, 'a blocking send returns at input-required')
  const done = await client.sendMessage(request([part('Reject.')], { taskId: asked.id })) as Task
  t.equal(done.status!.state, TaskState.TASK_STATE_COMPLETED)
  t.equal(taskText(done), 'Not sent')

  const other = await client.sendMessage(request([part('ask')])) as Task
  t.match(other.status!.message!.parts[0], { content: { value: 'Approve doIt?' } }, 'no reason: a prompt naming the action')
  const yes = await client.sendMessage(request([part('yes')], { taskId: other.id })) as Task
  t.equal(taskText(yes), 'done')
})

t.test('cancel: CancelTask ends a running task; a resubscribed stream sees it end; a failure is failed', async (t) => {
  const runs = new FakeRuns(agent)
  const { wire, fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  const submitted = await client.sendMessage(request([part('slow')], {}, true)) as Task
  t.equal(submitted.status!.state, TaskState.TASK_STATE_SUBMITTED, 'returnImmediately: the task as submitted')
  while (runs.runs.get(submitted.id)!.events.length < 2) await new Promise((resolve) => setImmediate(resolve))

  const watching = collect(client.resubscribeTask({ tenant: '', id: submitted.id }))
  while (runs.following === 0) await new Promise((resolve) => setImmediate(resolve))
  const cancelled = await client.cancelTask({ tenant: '', id: submitted.id, metadata: {} })
  t.equal(cancelled.status!.state, TaskState.TASK_STATE_CANCELED)
  t.match(cancelled.status!.message!.parts, [{ content: { value: 'Run cancelled' } }])
  t.same(shape(await watching), ['task:TASK_STATE_WORKING', 'status:TASK_STATE_CANCELED'])
  t.same(wire.map((w) => w.method).slice(-3), ['SendMessage', 'SubscribeToTask', 'CancelTask'])

  const again = await client.cancelTask({ tenant: '', id: submitted.id, metadata: {} })
  t.equal(again.status!.state, TaskState.TASK_STATE_CANCELED, 'cancelling a cancelled task returns it')
  await t.rejects(client.cancelTask({ tenant: '', id: 'run-404', metadata: {} }), { name: 'TaskNotFoundError' })

  const failed = await client.sendMessage(request([part('explode')])) as Task
  t.equal(failed.status!.state, TaskState.TASK_STATE_FAILED)
  t.match(failed.metadata, { error: { code: 'AGENT_ERROR', message: 'boom' } })
  await t.rejects(client.cancelTask({ tenant: '', id: failed.id, metadata: {} }), { name: 'TaskNotCancelableError' })
  await t.rejects(collect(client.resubscribeTask({ tenant: '', id: failed.id })), { name: 'UnsupportedOperationError' })
})

t.test('resubscribe to a task waiting for input: the task, then the stream ends', async (t) => {
  const runs = new FakeRuns(agent)
  const { fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  await client.sendMessage(request([part('ask')]))
  t.same(shape(await collect(client.resubscribeTask({ tenant: '', id: 'run-1' }))), ['task:TASK_STATE_INPUT_REQUIRED'])
})

t.test('cancelling a task that waits for its approval', async (t) => {
  const runs = new FakeRuns(agent)
  const { fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  await client.sendMessage(request([part('ask')]))
  const cancelled = await client.cancelTask({ tenant: '', id: 'run-1', metadata: {} })
  t.equal(cancelled.status!.state, TaskState.TASK_STATE_CANCELED)
})

t.test('errors reach the client as the SDK\'s own error classes', async (t) => {
  const runs = new FakeRuns(agent)
  const { fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  await t.rejects(client.getTask({ tenant: '', id: 'nope' }), { name: 'TaskNotFoundError' })
  const done = await client.sendMessage(request([part('hello')])) as Task
  await t.rejects(client.sendMessage(request([part('yes')], { taskId: done.id })), { name: 'UnsupportedOperationError', message: /not waiting for input/ })
  const asked = await client.sendMessage(request([part('ask')])) as Task
  await t.rejects(client.sendMessage(request([part('maybe')], { taskId: asked.id })), { name: 'RequestMalformedError', message: /approved/ })
  await t.rejects(client.sendMessage(request([part({ approved: 'yes' })], { taskId: asked.id })), { name: 'RequestMalformedError' })
  await t.rejects(client.sendMessage(request([part('yes')], { taskId: asked.id, contextId: 'elsewhere' })), { name: 'RequestMalformedError', message: /contextId/ })
  await t.rejects(client.sendMessage(request([part('hello')], { contextId: 'session-unknown' })), { name: 'RequestMalformedError', message: /not found/ })
  await t.rejects(collect(client.sendMessageStream(request([part('hello')], { contextId: 'session-unknown' }))), { name: 'RequestMalformedError' },
    'an error before the first event is a JSON answer, not a stream')
  const file: Part = { content: { $case: 'url', value: 'https://example.com/a.png' }, mediaType: 'image/png', filename: 'a.png', metadata: {} }
  await t.rejects(client.sendMessage(request([file])), { name: 'ContentTypeNotSupportedError' })
  await t.rejects(client.sendMessage(request([part({ a: 1 }), part({ b: 2 })])), { name: 'RequestMalformedError' })
  await t.rejects(client.listTasks({ tenant: '', contextId: '', status: 0, pageToken: '', statusTimestampAfter: undefined }), { name: 'UnsupportedOperationError' })
  await t.rejects(async () => await client.getTaskPushNotificationConfig({ tenant: '', taskId: done.id, id: 'x' }),
    { name: 'PushNotificationNotSupportedError' }, 'the client refuses on its own: the card says no push notifications')

  // A decision that lost the compare-and-set to another one.
  const raced = await client.sendMessage(request([part('ask')])) as Task
  await runs.decide(`appr-${raced.id}`, { approved: true })
  await t.rejects(client.sendMessage(request([part('yes')], { taskId: raced.id })), { name: 'UnsupportedOperationError' })
})

t.test('an unexpected failure of the run store is an internal error, its message kept only with exposeErrors', async (t) => {
  const runs = new FakeRuns(agent)
  runs.startError = new Error('connection refused')
  const hidden = await v1Client(service(runs).fetchImpl)
  await t.rejects(hidden.sendMessage(request([part('hello')])), { message: /Internal Server Error/ })
  const shown = await v1Client(service(runs, { exposeErrors: true }).fetchImpl)
  await t.rejects(shown.sendMessage(request([part('hello')])), { message: /connection refused/ })
})

t.test('a store failure mid-stream becomes an SSE error event the client throws', async (t) => {
  const runs = new FakeRuns(agent)
  const { fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  runs.breakFollowAfter = 1
  const seen: StreamResponse[] = []
  await t.rejects((async () => { for await (const r of client.sendMessageStream(request([part('hello')]))) seen.push(r) })(), /SSE event contained an error/)
  t.same(shape(seen), ['task:TASK_STATE_SUBMITTED', 'status:TASK_STATE_WORKING'])
})

t.test('a client that goes away closes the follower', async (t) => {
  const runs = new FakeRuns(agent)
  const { returned, fetchImpl } = service(runs)
  const client = await v1Client(fetchImpl)
  for await (const response of client.sendMessageStream(request([part('slow')]))) {
    if (response.payload?.$case === 'artifactUpdate') break
  }
  while (runs.following > 0) await new Promise((resolve) => setImmediate(resolve))
  t.same(returned, ['SendStreamingMessage'])
  t.equal(runs.following, 0)
  await runs.cancel('run-1')
})

t.test('the v0.3 client: message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe', async (t) => {
  const runs = new FakeRuns(agent)
  const { wire, fetchImpl } = service(runs)
  const legacy = new LegacyJsonRpcTransport({ endpoint: BASE, fetchImpl })

  const done = await legacy.sendMessage(request([part('hello')])) as Task
  t.equal(done.status!.state, TaskState.TASK_STATE_COMPLETED)
  t.equal(taskText(done), 'Hello')
  t.match(wire.at(-1)!.body, { method: 'message/send', params: { message: { kind: 'message', parts: [{ kind: 'text', text: 'hello' }] } } })

  const streamed = await collect(legacy.sendMessageStream(request([part('mail')])))
  t.same(shape(streamed), ['task:TASK_STATE_SUBMITTED', 'status:TASK_STATE_WORKING', 'artifact:["Sending."]', 'status:TASK_STATE_INPUT_REQUIRED'])
  t.equal(wire.at(-1)!.method, 'message/stream')
  const rest = await collect(legacy.sendMessageStream(request([part({ approved: false })], { taskId: 'run-2' })))
  t.equal(shape(rest).at(-1), 'status:TASK_STATE_COMPLETED')

  const got = await legacy.getTask({ tenant: '', id: 'run-2' })
  t.equal(taskText(got), 'Not sent')
  t.equal(wire.at(-1)!.method, 'tasks/get')

  await legacy.sendMessage(request([part('slow')], {}, true))
  const watching = collect(legacy.resubscribeTask({ tenant: '', id: 'run-3' }))
  while (runs.following === 0) await new Promise((resolve) => setImmediate(resolve))
  const cancelled = await legacy.cancelTask({ tenant: '', id: 'run-3', metadata: {} })
  t.equal(cancelled.status!.state, TaskState.TASK_STATE_CANCELED)
  t.equal(shape(await watching).at(-1), 'status:TASK_STATE_CANCELED')
  t.same(wire.map((w) => w.method).slice(-3), ['message/send', 'tasks/resubscribe', 'tasks/cancel'])
  t.equal(wire.at(-1)!.headers.get('a2a-version'), null, 'the v0.3 client sends no version header')

  await t.rejects(legacy.getTask({ tenant: '', id: 'nope' }), { name: 'TaskNotFoundError' })
  await t.rejects(collect(legacy.resubscribeTask({ tenant: '', id: 'nope' })), /Task not found/, 'tasks/resubscribe answers SSE even for an error')
})

t.test('the agent card: the v0.3 document for a request without A2A-Version, read by the SDK\'s legacy parser', async (t) => {
  const { fetchImpl } = service(new FakeRuns(agent))
  const raw = await (await fetchImpl(`${BASE}/.well-known/agent-card.json`)).json()
  t.ok(isLegacyAgentCard(raw))
  const parsed = parseLegacyAgentCard(raw)
  t.match(parsed, { name: 'helper', description: 'Helps.', capabilities: { streaming: true } })
  t.equal(parsed.supportedInterfaces[0]!.url, BASE)

  const secured = { ...CARD, bearerAuth: true }
  const legacyBearer = parseLegacyAgentCard(a2aAgentCardDocument(secured, undefined))
  t.same(Object.keys(legacyBearer.securitySchemes), ['bearer'])
  const v1 = new DefaultAgentCardResolver().normalizeAgentCard(a2aAgentCardDocument(secured, '1.0'))
  t.match(v1.securitySchemes, { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { scheme: 'Bearer' } } } })
  t.same(v1.securityRequirements, [{ schemes: { bearer: { list: [] } } }])
  t.same(a2aAgentCard({ name: 'x', url: BASE }).description, '')
  t.same(a2aAgentCardDocument({ name: 'x', url: BASE }, '0.3').description, '')
})

t.test('an A2A-Version the card does not list is refused', async (t) => {
  const handler = new RunTaskHandler({ card: a2aAgentCard(CARD), port: new FakeRuns(agent) })
  const answer = await handleA2AJsonRpc(handler, { jsonrpc: '2.0', id: 7, method: 'GetTask', params: { id: 'x' } }, '2.0')
  t.equal(answer.status, 200)
  t.match(JSON.parse(answer.body as string), { jsonrpc: '2.0', id: 7, error: { message: /2\.0/ } })
  const junk = await handleA2AJsonRpc(handler, 'not json', undefined)
  t.match(JSON.parse(junk.body as string), { id: null, error: {} })
  await t.rejects(handler.getAuthenticatedExtendedAgentCard(), { name: 'UnsupportedOperationError' })
  for (const method of ['createTaskPushNotificationConfig', 'getTaskPushNotificationConfig', 'listTaskPushNotificationConfigs', 'deleteTaskPushNotificationConfig'] as const) {
    await t.rejects((handler[method] as () => Promise<never>)(), { name: 'PushNotificationNotSupportedError' })
  }
  await t.rejects(handler.sendMessage({ tenant: '', message: undefined, configuration: undefined, metadata: {} }), { name: 'RequestMalformedError' })
})

t.test('an ephemeral run (no session): the task is its own context', async (t) => {
  const runs = new FakeRuns(agent)
  runs.ephemeral = true
  const client = await v1Client(service(runs).fetchImpl)
  const task = await client.sendMessage(request([part('hello')])) as Task
  t.equal(task.contextId, task.id)
  t.equal((await client.getTask({ tenant: '', id: task.id })).contextId, task.id)
})

t.test('a decision in a data part without a value, and a request without an id', async (t) => {
  const runs = new FakeRuns(agent)
  const handler = new RunTaskHandler({ card: a2aAgentCard(CARD), port: runs })
  const asked = await handler.sendMessage(request([part('ask')])) as Task
  const empty: Part = { content: { $case: 'data', value: undefined }, mediaType: 'application/json', filename: '', metadata: {} }
  await t.rejects(handler.sendMessage(request([empty], { taskId: asked.id })), { name: 'RequestMalformedError' })
  const answer = await handleA2AJsonRpc(handler, { jsonrpc: '2.0', method: 'GetTask', params: { id: asked.id } }, '9.9')
  t.match(JSON.parse(answer.body as string), { id: null, error: {} })
})

t.test('the projection on its own: events it has no use for, and an ephemeral run', async (t: Test) => {
  const projection = new A2ATaskProjection('run-9', 'run-9')
  t.same(projection.push({ seq: 1, type: 'approval.other', data: {} }), [])
  t.same(projection.push({ seq: 2, type: 'tool.call.delta', data: {} }), [])
  t.same(projection.push({ seq: 3, type: 'ping', data: undefined }).map((r) => (r.payload!.value as { status: { message: Message } }).status.message.parts[0]!.content),
    [{ $case: 'data', value: { type: 'ping', data: null } }])
  t.equal(projection.lastSeq, 3)
  const streaming = new A2ATaskProjection('run-8', 'run-8')
  streaming.push({ seq: 1, type: 'message.delta', data: { text: 'Hel' } })
  streaming.push({ seq: 2, type: 'message.delta', data: { text: 'lo' } })
  t.same(streaming.task().artifacts.map((a) => a.parts.map((p) => p.content)), [[{ $case: 'text', value: 'Hello' }]],
    'mid-stream, the task\'s artifact is the text so far')
  t.same(projection.push({ seq: 4, type: 'run.completed', data: { output: undefined, usage: {}, finishReason: 'stop' } })
    .map((r) => r.payload!.$case), ['artifactUpdate', 'statusUpdate'])
  t.same(projection.task().artifacts[0]!.parts[0]!.content, { $case: 'data', value: null })
})
