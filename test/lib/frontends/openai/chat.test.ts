// Chat Completions through the `openai` package's client: an ephemeral run, its history as given, JSON and chunks.
import t from 'tap'
import type { Test } from 'tap'
import OpenAI from 'openai'
import type { Agent, RunContext } from '../../../../lib/core/types.js'
import { storyteller } from '../../../../app/demo-agents.js'
import { eventually, listen } from '../../../helper.js'

const historian: Agent = {
  async run (input: unknown, ctx: RunContext) {
    return { output: { input, sessionId: ctx.sessionId, history: ctx.history.map((m) => [m.role, m.content]) }, usage: { inputTokens: 4, outputTokens: 6 }, finishReason: 'length' }
  }
}

const failing: Agent = {
  async * run () {
    yield 'partial'
    throw new Error('boom')
  }
}

let aborted = 0
const waiter: Agent = {
  async * run (_input: unknown, ctx: RunContext) {
    yield 'started'
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => { aborted++; reject(ctx.signal.reason) }, { once: true }))
  }
}

async function serve (t: Test) {
  const { url, service } = await listen(t, { agents: { storyteller, historian, failing, waiter } })
  return { url, service, client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 }) }
}

t.test('JSON: the output as the message, the usage, the finish reason; the earlier messages are ctx.history, nothing kept', async (t) => {
  const { client, service } = await serve(t)
  const completion = await client.chat.completions.create({
    model: 'historian',
    messages: [
      { role: 'system', content: 'be nice' },
      { role: 'user', content: 'one' },
      { role: 'assistant', content: [{ type: 'text', text: 'two' }] },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c', content: 'x' },
      { role: 'user', content: [{ type: 'text', text: 'thr' }, { type: 'text', text: 'ee' }] }
    ]
  })
  t.match(completion, { object: 'chat.completion', model: 'historian', usage: { prompt_tokens: 4, completion_tokens: 6, total_tokens: 10 } })
  t.match(completion.id, /^chatcmpl-/)
  t.equal(completion.choices[0]!.finish_reason, 'length')
  t.same(JSON.parse(completion.choices[0]!.message.content!), { input: 'three', sessionId: null, history: [['user', 'one'], ['assistant', 'two']] })
  const runId = completion.id.slice('chatcmpl-'.length)
  await eventually(async () => await service.app.agentService.settings.runStore.get(runId) === null, 5_000, 'the ephemeral run gone')
})

t.test('streaming: chunks of the deltas, the finish, the usage with include_usage, [DONE]', async (t) => {
  const { client } = await serve(t)
  const stream = await client.chat.completions.create({ model: 'storyteller', messages: [{ role: 'user', content: 'a fox' }], stream: true, stream_options: { include_usage: true } })
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
  for await (const chunk of stream) chunks.push(chunk)
  t.equal(chunks[0]!.choices[0]!.delta.role, 'assistant')
  const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')
  t.equal(text, 'Once upon a time there was a fox. It answered every request, streamed every word, and drained gracefully at the end.')
  t.equal(chunks.at(-2)!.choices[0]!.finish_reason, 'stop')
  t.same(chunks.at(-1)!.choices, [])
  t.match(chunks.at(-1)!.usage, { prompt_tokens: 5, completion_tokens: 21, total_tokens: 26 }, 'the run\'s usage')
  t.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0]!.id))

  const plain = await client.chat.completions.create({ model: 'historian', messages: [{ role: 'user', content: 'x' }], stream: true })
  const plainChunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
  for await (const chunk of plain) plainChunks.push(chunk)
  t.same(JSON.parse(plainChunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).input, 'x', 'no deltas: the output as one')
  t.equal(plainChunks.at(-1)!.choices[0]!.finish_reason, 'length')
  t.notOk(plainChunks.some((c) => c.usage), 'no usage without include_usage')
})

t.test('a failed run: a 500 in the OpenAI shape, or the stream\'s error event (the client raises)', async (t) => {
  const { client } = await serve(t)
  const error = await client.chat.completions.create({ model: 'failing', messages: [{ role: 'user', content: 'x' }] }).catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.equal(error.status, 500)
  t.match(error.error, { code: 'AGENT_ERROR', type: 'server_error', message: 'Internal Server Error' }, 'the message per exposeErrors')
  const stream = await client.chat.completions.create({ model: 'failing', messages: [{ role: 'user', content: 'x' }], stream: true })
  const text: string[] = []
  const failure = await (async () => { for await (const chunk of stream) text.push(chunk.choices[0]?.delta.content ?? '') })().catch((err: unknown) => err) as InstanceType<typeof OpenAI.APIError>
  t.ok(failure instanceof OpenAI.APIError, 'the client raises')
  t.match(failure.error, { code: 'AGENT_ERROR' })
  t.equal(text.join(''), 'partial')
})

t.test('a client that leaves cancels the run (JSON and streaming)', async (t) => {
  const { client } = await serve(t)
  const before = aborted
  const stream = await client.chat.completions.create({ model: 'waiter', messages: [{ role: 'user', content: 'x' }], stream: true })
  for await (const chunk of stream) if (chunk.choices[0]?.delta.content === 'started') break
  await eventually(() => aborted === before + 1, 5_000, 'the streamed run cancelled')
  const controller = new AbortController()
  const pending = client.chat.completions.create({ model: 'waiter', messages: [{ role: 'user', content: 'x' }] }, { signal: controller.signal }).catch(() => null)
  await new Promise((resolve) => setTimeout(resolve, 100))
  controller.abort()
  await pending
  await eventually(() => aborted === before + 2, 5_000, 'the JSON run cancelled')
})

t.test('bad input: the last message must be the user\'s, with text; an unknown model is a 404', async (t) => {
  const { url } = await serve(t)
  const cases: Array<[unknown, number, string, string | null]> = [
    [{ model: 'historian', messages: [{ role: 'assistant', content: 'x' }] }, 400, 'FST_ERR_VALIDATION', 'messages/0'],
    [{ model: 'historian', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] }, 400, 'FST_ERR_VALIDATION', 'messages/0/content/0'],
    [{ model: 'historian', messages: [{ role: 'user', content: 42 }] }, 400, 'FST_ERR_VALIDATION', 'messages/0/content'],
    [{ model: 'historian', messages: [{ role: 'user', content: [{ text: 'x' }] }] }, 400, 'FST_ERR_VALIDATION', 'messages/0/content/0/type'],
    [{ model: 'historian', messages: [{ role: 'user', content: [{ type: 'text', text: 1 }] }] }, 400, 'FST_ERR_VALIDATION', 'messages/0/content/0/text'],
    [{ model: 'historian', messages: [] }, 400, 'FST_ERR_VALIDATION', 'messages'],
    [{ model: 'nope', messages: [{ role: 'user', content: 'x' }] }, 404, 'AGENT_NOT_FOUND', null]
  ]
  for (const [body, status, code, param] of cases) {
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    t.equal(res.status, status, JSON.stringify(body))
    t.match(await res.json(), { error: { code, param } })
  }
})
