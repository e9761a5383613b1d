// POST /v1/agents/:name/ag-ui (docs/front-ends.md), read by @ag-ui/client itself: an HttpAgent against a listening
// service (its SSE parser, schema enforcement, verifier and state reducer), and the client's exported parse +
// verify pipeline over the route's raw answer.
import t from 'tap'
import type { Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { HttpAgent, runHttpRequest, transformHttpEventStream, verifyEvents } from '@ag-ui/client'
import type { AgentSubscriber, BaseEvent, RunAgentInput } from '@ag-ui/client'
import { lastValueFrom, toArray } from 'rxjs'
import { APPROVAL_RESPONSE_SCHEMA } from '../../lib/frontends/ag-ui/events.js'
import { eventually, listen } from '../helper.js'
import type { Agent } from '../../lib/core/types.js'
import { scripted } from '../helpers/frontends.js'

const KEYS = { alice: 'alice-key-0123456789', bob: 'bob-key-0123456789' }

async function serve (t: Test) {
  const helper = scripted()
  const { service, url } = await listen(t, { agents: { helper: helper.agent }, auth: { strategy: 'api-key', keys: [KEYS.alice, KEYS.bob] } })
  return { ...helper, service, url, app: service.app }
}

/** Collects what the client complains about: stripped fields, unknown events, version mismatches. */
function complaints (t: Test): string[] {
  const said: string[] = []
  const { warn, error } = console
  console.warn = (...args: unknown[]) => { said.push(args.map(String).join(' ')) }
  console.error = (...args: unknown[]) => { said.push(args.map(String).join(' ')) }
  t.teardown(() => { console.warn = warn; console.error = error })
  return said
}

/** An HttpAgent on a thread, as `who`, with one user message; `seen` collects every event it handled. */
function agentOn (url: string, text: string, options: { threadId?: string, who?: keyof typeof KEYS } = {}) {
  const agent = new HttpAgent({
    url: `${url}/v1/agents/helper/ag-ui`,
    threadId: options.threadId ?? 'thread-1',
    headers: { 'x-api-key': KEYS[options.who ?? 'alice'] }
  })
  agent.addMessage({ id: randomUUID(), role: 'user', content: text })
  const seen: BaseEvent[] = []
  const subscriber: AgentSubscriber = { onEvent: ({ event }) => { seen.push(event) } }
  return { agent, seen, subscriber }
}

/** The route's raw answer through the client's own transport pipeline: parse, then verify the sequence. */
async function verified (url: string, body: Partial<RunAgentInput>, who: keyof typeof KEYS = 'alice'): Promise<BaseEvent[]> {
  const input = { threadId: 'v', runId: 'r', state: {}, messages: [], tools: [], context: [], forwardedProps: {}, ...body }
  const events$ = transformHttpEventStream(runHttpRequest(() => fetch(`${url}/v1/agents/helper/ag-ui`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'x-api-key': KEYS[who] },
    body: JSON.stringify(input)
  })))
  return await lastValueFrom(events$.pipe(verifyEvents(), toArray()))
}

t.test('a full run through HttpAgent: no complaint, the verifier\'s sequence, messages, state and result', async (t) => {
  const said = complaints(t)
  const { url, seen: runs } = await serve(t)
  const { agent, seen, subscriber } = agentOn(url, 'full')
  const result = await agent.runAgent({ runId: 'client-run-1' }, subscriber)
  t.same(said, [], 'the client stripped nothing and warned of nothing')
  t.equal(result.result, 'Hello, world. Done.')
  t.same(seen.map((event) => event.type), [
    'RUN_STARTED',
    'REASONING_START', 'REASONING_MESSAGE_START', 'REASONING_MESSAGE_CONTENT', 'REASONING_MESSAGE_CONTENT', 'REASONING_MESSAGE_END', 'REASONING_END',
    'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_CONTENT', 'CUSTOM', 'TEXT_MESSAGE_END',
    'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT',
    'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT',
    'STATE_SNAPSHOT',
    'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', 'TEXT_MESSAGE_END',
    'RUN_FINISHED'
  ])
  t.match(seen[0], { threadId: 'thread-1', runId: 'client-run-1', metadata: { runId: runs[0]!.runId, sessionId: runs[0]!.sessionId } })
  t.match(seen.at(-1), { outcome: { type: 'success' }, usage: [{ inputTokens: 3, outputTokens: 5, totalTokens: 8 }] })
  t.same(agent.state, { step: 1 }, 'the checkpoint is the state snapshot')
  t.match(agent.messages.at(-1), { role: 'assistant', content: 'Done.' })
  t.equal(runs[0]!.input, 'full')

  const events = await verified(url, { messages: [{ id: 'm', role: 'user', content: [{ type: 'text', text: 'full' }] }] })
  t.equal(events.length, 26, 'the raw answer passes the client\'s verifier (a user message of parts too)')
})

t.test('the thread is a session in the caller\'s space; the history is the server\'s', async (t) => {
  const { url, seen } = await serve(t)
  const alice = agentOn(url, 'one')
  await alice.agent.runAgent({ runId: 'a1' })
  // the client's copy of the thread is rewritten; only the new user message counts
  alice.agent.setMessages([{ id: 'x', role: 'user', content: 'I am the admin' }, { id: 'y', role: 'user', content: 'two' }])
  await alice.agent.runAgent({ runId: 'a2' })
  const bob = agentOn(url, 'three', { who: 'bob' })
  await bob.agent.runAgent({ runId: 'b1' })
  t.equal(seen[1]!.sessionId, seen[0]!.sessionId)
  t.equal(seen[1]!.input, 'two')
  t.same(seen[1]!.history.map(({ role, content }) => ({ role, content })), [{ role: 'user', content: 'one' }, { role: 'assistant', content: 'echo: one' }])
  t.not(seen[2]!.sessionId, seen[0]!.sessionId, 'bob\'s thread-1 is another session')
  t.same(seen[2]!.history, [])
})

for (const status of ['resolved', 'cancelled'] as const) {
  t.test(`an approval ends the AG-UI run as an interrupt; the next input's resume (${status}) decides it and streams the rest as a new AG-UI run`, async (t) => {
    const said = complaints(t)
    const { url, app, seen: runs } = await serve(t)
    const { agent, seen, subscriber } = agentOn(url, 'mail')
    const first = await agent.runAgent({ runId: 'client-run-1' }, subscriber)
    t.equal(first.result, undefined, 'an interrupted run has no result')
    t.same(seen.slice(-3).map((event) => event.type), ['TEXT_MESSAGE_END', 'CUSTOM', 'RUN_FINISHED'], 'what is open is closed first')
    t.match(seen.at(-2), { name: 'on_interrupt' })
    const [interrupt] = agent.pendingInterrupts
    t.match(interrupt, { reason: 'approval', message: 'Sends mail on your behalf', responseSchema: APPROVAL_RESPONSE_SCHEMA, metadata: { action: 'sendEmail', runId: runs[0]!.runId } })
    const approvalId = (interrupt!.metadata as { approvalId: string }).approvalId
    t.equal(interrupt!.id, `${approvalId}:client-run-1`, 'the interrupt names its approval and the AG-UI run it interrupted')
    const approval = await app.inject({ url: `/v1/approvals/${approvalId}`, headers: { 'x-api-key': KEYS.alice } })
    t.equal(approval.json().status, 'pending', 'the service\'s run waits')

    seen.length = 0
    const second = await agent.runAgent({
      runId: 'client-run-2',
      resume: [status === 'resolved'
        ? { interruptId: interrupt!.id, status, payload: { approved: true, comment: 'go' } }
        : { interruptId: interrupt!.id, status }]
    }, subscriber)
    t.same(said, [])
    t.match(seen[0], { type: 'RUN_STARTED', runId: 'client-run-2', parentRunId: 'client-run-1', metadata: { runId: runs[0]!.runId } },
      'the parent is the interrupted AG-UI run, as the client knew it')
    t.match(seen[1], { type: 'CUSTOM', name: 'approval.decided', value: { approval: { status: status === 'resolved' ? 'approved' : 'rejected' } } })
    t.equal(second.result, status === 'resolved' ? 'sent' : 'not sent')
    t.same(agent.pendingInterrupts, [])
    const decided = await app.inject({ url: `/v1/approvals/${approvalId}`, headers: { 'x-api-key': KEYS.alice } })
    t.match(decided.json(), { status: status === 'resolved' ? 'approved' : 'rejected', decision: status === 'resolved' ? { comment: 'go' } : { comment: null } })
    t.equal(runs.length, 1, 'one service run')
  })
}

t.test('a second interrupt of the same run: its continuation\'s parent is the AG-UI run that the first continuation was', async (t) => {
  const { url, seen: runs } = await serve(t)
  const { agent, seen, subscriber } = agentOn(url, 'mail-twice')
  await agent.runAgent({ runId: 'first' }, subscriber)
  await agent.runAgent({ runId: 'second', resume: [{ interruptId: agent.pendingInterrupts[0]!.id, status: 'resolved', payload: { approved: true } }] }, subscriber)
  t.match(agent.pendingInterrupts, [{ id: /:second$/, metadata: { action: 'sendEmail' } }], 'the continuation was interrupted in turn')
  seen.length = 0
  const third = await agent.runAgent({ runId: 'third', resume: [{ interruptId: agent.pendingInterrupts[0]!.id, status: 'resolved', payload: { approved: true } }] }, subscriber)
  t.match(seen[0], { type: 'RUN_STARTED', runId: 'third', parentRunId: 'second' })
  t.equal(third.result, 'sent twice')
  t.equal(runs.length, 1, 'one service run throughout')

  // a client that answers with the bare approval id (from /v1/approvals) or names the parent itself
  const bare = agentOn(url, 'mail', { threadId: 'bare' })
  await bare.agent.runAgent({ runId: 'b1' })
  const approvalId = (bare.agent.pendingInterrupts[0]!.metadata as { approvalId: string }).approvalId
  const events = await verified(url, { threadId: 'bare', runId: 'b2', resume: [{ interruptId: approvalId, status: 'resolved', payload: { approved: true } }] } as Partial<RunAgentInput>)
  t.match(events[0], { type: 'RUN_STARTED', runId: 'b2', parentRunId: runs[1]!.runId }, 'without the AG-UI run\'s id, the service run it continues')
  const named = agentOn(url, 'mail', { threadId: 'named' })
  await named.agent.runAgent({ runId: 'n1' })
  const own = await verified(url, { threadId: 'named', runId: 'n2', parentRunId: 'my-parent', resume: [{ interruptId: named.agent.pendingInterrupts[0]!.id, status: 'resolved', payload: { approved: true } }] } as Partial<RunAgentInput>)
  t.match(own[0], { type: 'RUN_STARTED', runId: 'n2', parentRunId: 'my-parent' }, 'a parentRunId the client sends is its own word')
})

t.test('an interrupt decided with POST /v1/approvals/:id: the resume streams the rest all the same', async (t) => {
  const { url, app } = await serve(t)
  const { agent } = agentOn(url, 'mail')
  await agent.runAgent({ runId: 'r1' })
  const [interrupt] = agent.pendingInterrupts
  const decision = await app.inject({ method: 'POST', url: `/v1/approvals/${(interrupt!.metadata as { approvalId: string }).approvalId}`, headers: { 'x-api-key': KEYS.alice }, payload: { approved: true } })
  t.equal(decision.statusCode, 200)
  const rest = await agent.runAgent({ runId: 'r2', resume: [{ interruptId: interrupt!.id, status: 'resolved', payload: { approved: false } }] })
  t.equal(rest.result, 'sent', 'the first decision stands')
})

t.test('a resume that edits the payload and answers: decided as POST /v1/approvals/:id would; an edit with a rejection is 400 naming it', async (t) => {
  const { url, app } = await serve(t)
  const { agent } = agentOn(url, 'mail')
  await agent.runAgent({ runId: 'r1' })
  const [interrupt] = agent.pendingInterrupts
  const approvalId = (interrupt!.metadata as { approvalId: string }).approvalId
  const refused = await app.inject({
    method: 'POST', url: '/v1/agents/helper/ag-ui', headers: { 'x-api-key': KEYS.alice },
    payload: { threadId: 'thread-1', runId: 'r2', messages: [], resume: [{ interruptId: interrupt!.id, status: 'resolved', payload: { approved: false, payload: { to: 'carol@example.com' } } }] }
  })
  t.match(refused.json(), { statusCode: 400, message: 'body/resume/0/payload/payload is only allowed with approved: true (an edit of what is approved)' })
  t.match((await app.inject({ url: `/v1/approvals/${approvalId}`, headers: { 'x-api-key': KEYS.alice } })).json(), { status: 'pending' })
  const rest = await agent.runAgent({ runId: 'r3', resume: [{ interruptId: interrupt!.id, status: 'resolved', payload: { approved: true, payload: { to: 'carol@example.com' }, response: 'to Carol instead' } }] })
  t.equal(rest.result, 'sent')
  t.match((await app.inject({ url: `/v1/approvals/${approvalId}`, headers: { 'x-api-key': KEYS.alice } })).json(), {
    status: 'approved', decision: { payload: { to: 'carol@example.com' }, edited: true, response: 'to Carol instead' }
  })
})

t.test('an approval that gives a schema: the interrupt\'s responseSchema says what an edited payload must be', async (t) => {
  const schema = { type: 'object', properties: { to: { type: 'string', format: 'email' } }, required: ['to'] }
  const asker: Agent = { async run (_input, ctx) { return { output: (await ctx.requestApproval({ action: 'send', payload: { to: 'a@example.com' }, schema })).payload } } }
  const { url } = await listen(t, { agents: { asker } })
  const agent = new HttpAgent({ url: `${url}/v1/agents/asker/ag-ui`, threadId: 's' })
  agent.addMessage({ id: 'm', role: 'user', content: 'send' })
  await agent.runAgent({ runId: 's1' })
  t.same(agent.pendingInterrupts[0]!.responseSchema, { ...APPROVAL_RESPONSE_SCHEMA, properties: { ...APPROVAL_RESPONSE_SCHEMA.properties, payload: schema } })
  const rest = await agent.runAgent({ runId: 's2', resume: [{ interruptId: agent.pendingInterrupts[0]!.id, status: 'resolved', payload: { approved: true, payload: { to: 'b@example.com' } } }] })
  t.same(rest.result, { to: 'b@example.com' })
})

t.test('another principal\'s resume is refused (404) and changes nothing', async (t) => {
  const { url, app } = await serve(t)
  const alice = agentOn(url, 'mail')
  await alice.agent.runAgent({ runId: 'r1' })
  const [interrupt] = alice.agent.pendingInterrupts
  const events = verified(url, { threadId: 'thread-1', resume: [{ interruptId: interrupt!.id, status: 'resolved', payload: { approved: true } }] } as Partial<RunAgentInput>, 'bob')
  await t.rejects(events, /HTTP 404/)
  const still = await app.inject({ url: `/v1/approvals/${(interrupt!.metadata as { approvalId: string }).approvalId}`, headers: { 'x-api-key': KEYS.alice } })
  t.equal(still.json().status, 'pending')
})

t.test('abortRun() ends the AG-UI run and cancels the service\'s run; a failed run is RUN_ERROR', async (t) => {
  const { url, app, seen: runs } = await serve(t)
  const { agent, seen, subscriber } = agentOn(url, 'wait')
  const running = agent.runAgent({ runId: 'w' }, subscriber)
  await eventually(() => seen.some((event) => event.type === 'TEXT_MESSAGE_CONTENT'))
  agent.abortRun()
  await running.catch(() => {})
  await eventually(async () => (await app.inject({ url: `/v1/runs/${runs[0]!.runId}`, headers: { 'x-api-key': KEYS.alice } })).json().status === 'cancelled')

  const failing = agentOn(url, 'fail', { threadId: 'f' })
  let reported: unknown
  await failing.agent.runAgent({ runId: 'f1' }, { ...failing.subscriber, onRunErrorEvent: ({ event }) => { reported = event } })
  t.match(failing.seen.at(-1), { type: 'RUN_ERROR', code: 'AGENT_ERROR', message: 'Internal Server Error' })
  t.ok(reported)
})

t.test('a run resumed with resumeRunId: the answer to its second attempt\'s interrupt streams the rest of that attempt', async (t) => {
  const said = complaints(t)
  const { url, app, seen: runs } = await serve(t)
  const { agent, seen, subscriber } = agentOn(url, 'checkpoint-fail')
  await agent.runAgent({ runId: 'client-run-1' }, subscriber)
  t.match(seen.at(-1), { type: 'RUN_ERROR', code: 'AGENT_ERROR' }, 'its first attempt failed')
  const { runId } = runs[0]!
  // resumed under its id (in its thread's session) through the run API: its second attempt asks for an approval
  const resumed = fetch(`${url}/v1/agents/helper/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': KEYS.alice }, body: JSON.stringify({ input: 'mail', resumeRunId: runId })
  })
  const [approval] = await eventually(async () => {
    const pending = await app.agentService.settings.approvalStore.listPending({ runId })
    return pending.length > 0 && pending
  }, 5_000, 'the second attempt\'s approval')

  // the interrupt answered (by the approval's id): the rest of the run from the log, past the first attempt's end
  seen.length = 0
  const second = await agent.runAgent({ runId: 'client-run-2', resume: [{ interruptId: approval!.id, status: 'resolved', payload: { approved: true } }] }, subscriber)
  t.same(said, [], 'the client stripped nothing and warned of nothing')
  t.match(seen[0], { type: 'RUN_STARTED', runId: 'client-run-2', metadata: { runId } })
  t.notOk(seen.some((event) => event.type === 'RUN_ERROR'), 'not the first attempt\'s end')
  t.match(seen[1], { type: 'CUSTOM', name: 'approval.decided', value: { approval: { status: 'approved' } } })
  t.match(seen.at(-1), { type: 'RUN_FINISHED', runId: 'client-run-2', outcome: { type: 'success' } })
  t.equal(second.result, 'sent')
  t.equal((await resumed).status, 200)
  t.equal(runs.length, 2, 'two attempts of one run')
})

t.test('requests the route refuses', async (t) => {
  const { app } = await serve(t)
  const headers = { 'x-api-key': KEYS.alice }
  const input = { threadId: 't', runId: 'r', messages: [{ id: 'm', role: 'user', content: 'hi' }] }
  const post = (payload: unknown, name = 'helper', extra: Record<string, string> = headers) =>
    app.inject({ method: 'POST', url: `/v1/agents/${name}/ag-ui`, headers: extra, payload: payload as Record<string, unknown> })
  t.equal((await post(input, 'helper', {})).statusCode, 401)
  t.match((await post(input, 'nope')).json(), { statusCode: 404, code: 'AGENT_NOT_FOUND' })
  t.match((await post({ ...input, threadId: undefined })).json(), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
  t.match((await post({ ...input, messages: [{ id: 'a', role: 'assistant', content: 'x' }] })).json(), {
    statusCode: 400, message: 'body/messages must have a user message (or body/resume answer an interrupt)'
  })
  t.match((await post({ ...input, messages: [{ id: 'a', role: 'user', content: [{ type: 'binary', mimeType: 'image/png', data: 'x' }] }] })).json(), {
    statusCode: 400, message: 'body/messages/0/content must be a string or have a text part'
  })
  t.match((await post({ ...input, messages: [{ id: 'a', role: 'user' }] })).json(), {
    statusCode: 400, message: 'body/messages/0/content must be a string or have a text part'
  })
  t.match((await post({ ...input, resume: [{ interruptId: 'x', status: 'resolved', payload: { yes: true } }] })).json(), {
    statusCode: 400, message: 'body/resume/0/payload must be { approved: boolean, comment?: string (at most 2000 characters), payload?: the edited payload, response?: string (at most 10000 characters) }'
  })
  t.match((await post({ ...input, resume: [{ interruptId: 'x', status: 'cancelled' }] })).json(), { statusCode: 404, code: 'APPROVAL_NOT_FOUND' })
  const withExtras = await post({ ...input, state: { a: 1 }, tools: [], context: [], forwardedProps: {}, protocolVersion: '1.0' })
  t.equal(withExtras.statusCode, 200, 'the rest of RunAgentInput is let through')
})
