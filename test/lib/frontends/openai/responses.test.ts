// Agents as models, through the `openai` package's own client: /v1/models, /v1/responses (JSON, streaming, replays
// with the same sequence_numbers, background, retrieve, resume, cancel, delete, sessions, store: false, approvals)
// and the OpenAI error shape on every refusal.
import t from 'tap'
import OpenAI from 'openai'
import type { Test } from 'tap'
import type { Agent, AgentEvent, RunContext } from '../../../../lib/core/types.js'
import { approver } from '../../../../app/demo-agents.js'
import { echo, eventually, listen } from '../../../helper.js'

/** Runs of each agent started so far: a refusal must come before any. */
const started: Record<string, number> = {}
const count = (name: string): void => { started[name] = (started[name] ?? 0) + 1 }

/** Reasoning, a tool call with streamed arguments and its result, then text. */
const thinker: Agent = {
  async * run () {
    count('thinker')
    yield { type: 'reasoning.delta', data: { text: 'Let me ' } }
    yield { type: 'reasoning.delta', data: { text: 'think.' } }
    yield { type: 'tool.call.delta', data: { toolCallId: 'call_1', name: 'lookup', delta: '{"q":' } }
    yield { type: 'tool.call.delta', data: { toolCallId: 'call_1', name: 'lookup', delta: '"x"}' } }
    yield { type: 'tool.call', data: { toolCallId: 'call_1', name: 'lookup', input: { q: 'x' } } }
    yield { type: 'tool.result', data: { toolCallId: 'call_1', name: 'lookup', output: { found: true }, isError: false } }
    yield 'The answer'
    yield ' is 42.'
    return { output: 'The answer is 42.', usage: { inputTokens: 3, outputTokens: 5 } }
  }
}

/** Tells what it was given: its input, its history, its metadata. */
const historian: Agent = {
  async run (input: unknown, ctx: RunContext) {
    count('historian')
    return { output: JSON.stringify({ input, history: ctx.history.map((m) => [m.role, m.content]), metadata: ctx.metadata }) }
  }
}

/** One delta, then waits for its signal (or for `release()`). */
let release: () => void = () => {}
const waiter: Agent = {
  async * run (_input: unknown, ctx: RunContext): AsyncGenerator<string | AgentEvent> {
    count('waiter')
    yield 'started'
    await new Promise<void>((resolve, reject) => {
      release = resolve
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true })
    })
    yield ' and done'
  }
}

const agents = { echo, thinker, historian, waiter, approver }

async function serve (t: Test, options: Record<string, unknown> = {}) {
  const { url, service } = await listen(t, { agents, ...options })
  const clientFor = (apiKey: string): OpenAI => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 })
  return { url, service, client: clientFor('none'), clientFor }
}

/** Every event of a stream, as the client parsed them. */
async function drain<T> (stream: AsyncIterable<T>): Promise<T[]> {
  const events: T[] = []
  for await (const event of stream) events.push(event)
  return events
}

t.test('models: the agents, as models; one of them; an unknown one is a 404 in the OpenAI shape', async (t) => {
  const { client, url } = await serve(t)
  const list = await client.models.list()
  t.same(list.data.map((m) => m.id), Object.keys(agents))
  t.match(list.data[0], { object: 'model', owned_by: 'fastify-agents', created: Number })
  t.match(await client.models.retrieve('thinker'), { id: 'thinker', object: 'model' })
  const error = await client.models.retrieve('nope').catch((err: unknown) => err) as InstanceType<typeof OpenAI.NotFoundError>
  t.ok(error instanceof OpenAI.NotFoundError)
  t.same(error.error, { message: 'Agent "nope" not found', type: 'invalid_request_error', param: null, code: 'AGENT_NOT_FOUND' })
  t.ok(error.headers.get('x-request-id'), 'X-Request-ID as always')
  const raw = await fetch(`${url}/v1/models/nope`)
  t.same(Object.keys(await raw.json() as object), ['error'])
})

t.test('responses.create: an agent as a model, its output as a message, its usage, its session as the conversation', async (t) => {
  const { client } = await serve(t)
  const response = await client.responses.create({ model: 'echo', input: 'hello', metadata: { ticket: 'T-1' } })
  t.match(response, {
    object: 'response',
    status: 'completed',
    model: 'echo',
    metadata: { ticket: 'T-1' },
    usage: { input_tokens: 1, output_tokens: 2, total_tokens: 3 },
    error: null,
    previous_response_id: null,
    conversation: { id: String }
  })
  t.match(response.id, /^resp_/)
  t.equal(response.output_text, 'hello')
  t.match(response.output, [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'hello' }] }])
  const { _request_id: _a, ...retrieved } = await client.responses.retrieve(response.id)
  const { _request_id: _b, ...created } = response
  t.same(retrieved, created, 'retrieve gives the same response')
})

t.test('responses: the agent\'s metadata is the request\'s; instructions are echoed, not given to the agent', async (t) => {
  const { client } = await serve(t)
  const response = await client.responses.create({ model: 'historian', input: 'hi', instructions: 'Be brief.', metadata: { a: 'b' } })
  t.same(JSON.parse(response.output_text), { input: 'hi', history: [], metadata: { a: 'b' } })
  t.equal(response.instructions, 'Be brief.')
})

t.test('streaming: typed events, sequence_numbers from 0 by 1; reasoning, function call and output items; a replay gives the same events', async (t) => {
  const { client } = await serve(t)
  const events = await drain(await client.responses.create({ model: 'thinker', input: 'q', stream: true }))
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), 'sequence_number counts from 0')
  t.same(events.map((e) => e.type), [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.delta',
    'response.function_call_arguments.done', 'response.output_item.done',
    'response.output_item.added', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.completed'
  ])
  const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent
  t.match(completed.response.output, [
    { type: 'reasoning', content: [{ type: 'reasoning_text', text: 'Let me think.' }] },
    { type: 'function_call', call_id: 'call_1', name: 'lookup', arguments: '{"q":"x"}', status: 'completed' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"found":true}' },
    { type: 'message', content: [{ type: 'output_text', text: 'The answer is 42.' }] }
  ])
  t.match(completed.response.usage, { input_tokens: 3, output_tokens: 5, total_tokens: 8 })

  const id = completed.response.id
  const replay = await drain(await client.responses.retrieve(id, { stream: true }))
  t.same(replay, events, 'a replay is the stream first sent, numbers and all')
  const resumed = await drain(await client.responses.retrieve(id, { stream: true, starting_after: 9 }))
  t.same(resumed, events.slice(10), 'starting_after: the events after it')
  t.same(await drain(await client.responses.retrieve(id, { stream: true, starting_after: 500 })), [], 'after the last: nothing')
  const json = await client.responses.retrieve(id)
  t.same(json.output, completed.response.output, 'the JSON response has the streamed items')
})

t.test('responses.stream(): the client\'s accumulator reads the stream whole', async (t) => {
  const { client } = await serve(t)
  const stream = client.responses.stream({ model: 'thinker', input: 'q' })
  const deltas: string[] = []
  stream.on('response.output_text.delta', (event) => deltas.push(event.delta))
  const final = await stream.finalResponse()
  t.equal(final.output_text, 'The answer is 42.')
  t.same(deltas, ['The answer', ' is 42.'])
  t.equal(final.status, 'completed')
})

t.test('previous_response_id continues its session (the server\'s history); conversation names one; earlier input messages follow it', async (t) => {
  const { client } = await serve(t)
  const first = await client.responses.create({ model: 'historian', input: 'one' })
  const second = await client.responses.create({ model: 'historian', input: 'two', previous_response_id: first.id })
  t.equal(second.previous_response_id, first.id)
  t.same(JSON.parse(second.output_text).history, [['user', 'one'], ['assistant', first.output_text]])
  t.equal(second.conversation?.id, first.conversation?.id, 'the same session')
  const third = await client.responses.create({
    model: 'historian',
    conversation: first.conversation!.id,
    input: [
      { role: 'user', content: 'three' },
      // what the AI SDK sends back of an assistant's turn (the client's types want an output message's id and status)
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'ok', annotations: [] }] } as never,
      { role: 'system', content: 'ignored' },
      { role: 'user', content: [{ type: 'input_text', text: 'fo' }, { type: 'input_text', text: 'ur' }] }
    ]
  })
  const seen = JSON.parse(third.output_text)
  t.equal(seen.input, 'four')
  t.same(seen.history.slice(-2), [['user', 'three'], ['assistant', 'ok']], 'the given messages after the session\'s')
  t.equal(seen.history.length, 6)
  const notFound = await client.responses.create({ model: 'historian', conversation: 'no-such-session', input: 'x' }).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(notFound.status, 404)
  t.equal((notFound.error as { code: string }).code, 'SESSION_NOT_FOUND')
})

t.test('store: false: an ephemeral run, gone once it ends', async (t) => {
  const { client } = await serve(t)
  const response = await client.responses.create({ model: 'echo', input: 'x', store: false })
  t.equal(response.output_text, 'x')
  t.equal(response.conversation, null)
  t.equal((response as unknown as { store: boolean }).store, false)
  await eventually(async () => (await client.responses.retrieve(response.id).catch((err: { status: number }) => err.status)) === 404, 5_000, 'the response gone')
})

t.test('background: queued at once, retrieved as it stands, resumed from a cursor, cancelled', async (t) => {
  const { client } = await serve(t)
  const queued = await client.responses.create({ model: 'waiter', input: 'x', background: true })
  t.equal(queued.status, 'queued')
  t.equal(queued.background, true)
  const running = await eventually(async () => {
    const response = await client.responses.retrieve(queued.id)
    return response.output_text === 'started' && response
  }, 5_000, 'the run going')
  t.equal(running.status, 'in_progress')
  const follow = await client.responses.retrieve(queued.id, { stream: true, starting_after: 2 })
  const events: OpenAI.Responses.ResponseStreamEvent[] = []
  const followed = (async () => { for await (const event of follow) events.push(event) })()
  await eventually(() => events.length > 0, 5_000, 'the replay')
  t.equal(events[0]!.sequence_number, 3, 'the events after the cursor')
  const cancelled = await client.responses.cancel(queued.id)
  t.equal(cancelled.status, 'cancelled')
  t.match(cancelled.error, { code: 'CANCELLED' })
  await followed
  t.match(events.at(-1), { type: 'response.failed', response: { status: 'cancelled' } }, 'the follower sees the end')
  const again = await client.responses.cancel(queued.id).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(again.status, 409)
  t.equal((again.error as { code: string }).code, 'RUN_ALREADY_ENDED')
})

t.test('background + stream: the stream of a run that outlives its client', async (t) => {
  const { client } = await serve(t)
  const controller = new AbortController()
  const stream = await client.responses.create({ model: 'waiter', input: 'x', background: true, stream: true }, { signal: controller.signal })
  let id = ''
  for await (const event of stream) {
    if (event.type === 'response.created') id = event.response.id
    if (event.type === 'response.output_text.delta') break
  }
  controller.abort()
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal((await client.responses.retrieve(id)).status, 'in_progress', 'still running without its client')
  release()
  const done = await eventually(async () => {
    const response = await client.responses.retrieve(id)
    return response.status === 'completed' && response
  }, 5_000, 'the run ended')
  t.equal(done.output_text, 'started and done')
})

t.test('a client that leaves a streamed (not background) response cancels its run', async (t) => {
  const { client } = await serve(t)
  const stream = await client.responses.create({ model: 'waiter', input: 'x', stream: true })
  let id = ''
  for await (const event of stream) {
    if (event.type === 'response.created') id = event.response.id
    if (event.type === 'response.output_text.delta') break
  }
  const ended = await eventually(async () => {
    const response = await client.responses.retrieve(id)
    return response.status !== 'in_progress' && response
  }, 5_000, 'the run cancelled')
  t.equal(ended.status, 'cancelled')
})

t.test('approvals: the response ends completed with the mcp_approval_request; the answer streams the rest of the same run', async (t) => {
  const { client } = await serve(t)
  const asked = await client.responses.create({ model: 'approver', input: 'go' })
  t.equal(asked.status, 'completed')
  const request = asked.output.at(-1) as OpenAI.Responses.ResponseOutputItem.McpApprovalRequest
  t.match(request, { type: 'mcp_approval_request', name: 'deploy', arguments: '"go"', server_label: 'approver' })
  t.equal(asked.output_text, 'Requesting approval to deploy…')

  const events = await drain(await client.responses.create({
    model: 'approver',
    previous_response_id: asked.id,
    input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true, reason: 'fine' }],
    stream: true
  }))
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i))
  const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent
  t.equal(completed.type, 'response.completed')
  t.equal(completed.response.previous_response_id, asked.id)
  t.match(completed.response.output, [{ type: 'message', content: [{ text: 'Approved by someone: did deploy.' }] }])
  t.equal(completed.response.id, `${asked.id}_${Number(/_(\d+)$/.exec(completed.response.id)![1])}`, 'the same run\'s next response')
  const retrieved = await client.responses.retrieve(completed.response.id)
  t.same(retrieved.output, completed.response.output)
  t.same(await drain(await client.responses.retrieve(completed.response.id, { stream: true })), events, 'replayed as first sent')
  t.equal((await client.responses.retrieve(asked.id)).status, 'completed', 'the first response stays as it ended')

  const twice = await client.responses.create({
    model: 'approver', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: false }]
  })
  t.equal(twice.output_text, 'Approved by someone: did deploy.', 'a second answer loses the compare-and-set: the run went on as first decided')
})

t.test('approvals: refused, JSON; an approval not asked by that response is a 400 or a 404', async (t) => {
  const { client } = await serve(t)
  const asked = await client.responses.create({ model: 'approver', input: 'drop' })
  const request = asked.output.at(-1) as OpenAI.Responses.ResponseOutputItem.McpApprovalRequest
  const other = await client.responses.create({ model: 'echo', input: 'x' })
  const noApproval = await client.responses.create({
    model: 'approver', previous_response_id: other.id, input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }]
  }).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(noApproval.status, 400)
  const unknown = await client.responses.create({
    model: 'approver', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: 'nope', approve: true }]
  }).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(unknown.status, 404)
  t.equal((unknown.error as { code: string }).code, 'APPROVAL_NOT_FOUND')
  const refused = await client.responses.create({
    model: 'approver', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: false }]
  })
  t.match(refused.output_text, /^Not done \(rejected\)/)
})

t.test('principals: another principal\'s response is not found, nor its approvals answerable; models as their roles allow', async (t) => {
  const { client, clientFor } = await serve(t, { auth: { strategy: 'api-key', keys: ['key-alice-0123456789', 'key-bob-0123456789ab'] } })
  const alice = clientFor('key-alice-0123456789')
  const bob = clientFor('key-bob-0123456789ab')
  const asked = await alice.responses.create({ model: 'approver', input: 'go' })
  const request = asked.output.at(-1) as OpenAI.Responses.ResponseOutputItem.McpApprovalRequest
  const read = await bob.responses.retrieve(asked.id).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(read.status, 404)
  t.equal((read.error as { code: string }).code, 'RESPONSE_NOT_FOUND')
  const answer = await bob.responses.create({
    model: 'approver', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }]
  }).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(answer.status, 400, 'bob cannot name alice\'s response')
  t.match(answer.error, { param: 'previous_response_id' })
  const cancel = await bob.responses.cancel(asked.id).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(cancel.status, 404)
  const done = await alice.responses.create({
    model: 'approver', previous_response_id: asked.id, input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }]
  })
  t.match(done.output_text, /^Approved by key_[0-9a-f]{12}: did deploy\.$/, 'decided by alice')

  const anonymous = await client.models.list().catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.ok(anonymous instanceof OpenAI.AuthenticationError)
  t.match(anonymous.error, { type: 'authentication_error', code: 'UNAUTHORIZED', param: null })
  t.ok(anonymous.headers?.get('www-authenticate'))
})

t.test('bad input: 4xx in the OpenAI shape before any agent runs', async (t) => {
  const { client, url } = await serve(t)
  const before = { ...started }
  const refusals: Array<[string, Record<string, unknown>, number, string, string | null]> = [
    ['unknown model', { model: 'nope', input: 'x' }, 404, 'AGENT_NOT_FOUND', null],
    ['malformed item', { model: 'historian', input: [{ type: 'message', role: 'user', content: 42 }] }, 400, 'FST_ERR_VALIDATION', 'input/0/content'],
    ['unknown item type', { model: 'historian', input: [{ type: 'computer_call_output' }] }, 400, 'FST_ERR_VALIDATION', 'input/0/type'],
    ['an image', { model: 'historian', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:,' }] }] }, 400, 'FST_ERR_VALIDATION', 'input/0/content/0'],
    ['no user message last', { model: 'historian', input: [{ role: 'assistant', content: 'hi' }] }, 400, 'FST_ERR_VALIDATION', 'input'],
    ['no input', { model: 'historian' }, 400, 'FST_ERR_VALIDATION', 'input'],
    ['unknown previous_response_id', { model: 'historian', input: 'x', previous_response_id: 'resp_00000000-0000-4000-8000-000000000000' }, 400, 'FST_ERR_VALIDATION', 'previous_response_id'],
    ['a previous_response_id that is no id', { model: 'historian', input: 'x', previous_response_id: 'nope' }, 400, 'FST_ERR_VALIDATION', 'previous_response_id'],
    ['both previous_response_id and conversation', { model: 'historian', input: 'x', previous_response_id: 'resp_x', conversation: 'c' }, 400, 'FST_ERR_VALIDATION', 'conversation'],
    ['store: false with a conversation', { model: 'historian', input: 'x', store: false, conversation: 'c' }, 400, 'FST_ERR_VALIDATION', 'conversation'],
    ['store: false in the background', { model: 'historian', input: 'x', store: false, background: true }, 400, 'FST_ERR_VALIDATION', 'background'],
    ['a wrong type', { model: 'historian', input: 'x', stream: 'yes' }, 400, 'FST_ERR_VALIDATION', 'stream'],
    ['metadata not of strings', { model: 'historian', input: 'x', metadata: { a: 1 } }, 400, 'FST_ERR_VALIDATION', 'metadata/a'],
    ['an approval answer without previous_response_id', { model: 'approver', input: [{ type: 'mcp_approval_response', approval_request_id: 'a', approve: true }] }, 400, 'FST_ERR_VALIDATION', 'input']
  ]
  for (const [what, body, status, code, param] of refusals) {
    const res = await fetch(`${url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    const json = await res.json() as { error: { code: string, param: string | null, type: string } }
    t.equal(res.status, status, what)
    t.match(json, { error: { code, param, type: 'invalid_request_error', message: String } }, what)
    t.ok(res.headers.get('x-request-id'), `${what}: X-Request-ID`)
  }
  const cursor = await fetch(`${url}/v1/responses/resp_00000000-0000-4000-8000-000000000000?stream=true&starting_after=-1`)
  t.equal(cursor.status, 404, 'an unknown response first')
  const own = await client.responses.create({ model: 'echo', input: 'x' })
  for (const bad of ['-1', 'abc', '1.5', '']) {
    const res = await fetch(`${url}/v1/responses/${own.id}?stream=true&starting_after=${bad}`)
    t.equal(res.status, 400, `starting_after=${bad}`)
    t.match(await res.json(), { error: { param: 'starting_after', code: 'FST_ERR_VALIDATION' } })
  }
  const unknownContinuation = await fetch(`${url}/v1/responses/${own.id}_1`)
  t.equal(unknownContinuation.status, 404, 'a continuation where the run asked for no approval')
  const { echo: _echo, ...others } = started
  const { echo: _before, ...othersBefore } = before
  t.same(others, othersBefore, 'no agent ran')
})

t.test('delete: a stored response goes; one in progress is a 409', async (t) => {
  const { client } = await serve(t)
  const response = await client.responses.create({ model: 'echo', input: 'x' })
  t.same(await client.responses.delete(response.id), { id: response.id, object: 'response', deleted: true })
  const gone = await client.responses.retrieve(response.id).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(gone.status, 404)
  const again = await client.responses.delete(response.id).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(again.status, 404)
  const running = await client.responses.create({ model: 'waiter', input: 'x', background: true })
  const busy = await client.responses.delete(running.id).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(busy.status, 409)
  t.equal((busy.error as { code: string }).code, 'RUN_IN_PROGRESS')
  await client.responses.cancel(running.id)
})

t.test('the shared hooks answer in the OpenAI shape: a rate limit\'s 429', async (t) => {
  const { url } = await serve(t, { rateLimit: { maxRequests: 1, intervalMs: 60_000 } })
  await fetch(`${url}/v1/models`)
  const limited = await fetch(`${url}/v1/models`)
  t.equal(limited.status, 429)
  t.ok(limited.headers.get('retry-after'))
  t.match(await limited.json(), { error: { type: 'rate_limit_error', code: 'RATE_LIMITED', param: null } })
})

t.test('openaiCompat: false: the routes are not there', async (t) => {
  const { url } = await serve(t, { openaiCompat: false })
  for (const path of ['/v1/models', '/v1/responses/resp_x']) t.equal((await fetch(`${url}${path}`)).status, 404, path)
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  t.equal(res.status, 404)
})
