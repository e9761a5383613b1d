// The AI SDK's Open Responses provider against /v1/responses: generateText and streamText with an agent as the model.
import t from 'tap'
import { createOpenResponses } from '@ai-sdk/open-responses'
import { generateText, streamText } from 'ai'
import type { Agent, RunContext } from '../../../../lib/core/types.js'
import { storyteller } from '../../../../app/demo-agents.js'
import { listen } from '../../../helper.js'

/** Thinks aloud, then answers with what it was given. */
const thoughtful: Agent = {
  async * run (input: unknown, ctx: RunContext) {
    yield { type: 'reasoning.delta', data: { text: 'Considering ' } }
    yield { type: 'reasoning.delta', data: { text: 'it.' } }
    yield `You said ${String(input)}`
    yield ` after ${ctx.history.length} messages.`
    return { output: null, usage: { inputTokens: 7, outputTokens: 9 } }
  }
}

t.test('generateText: the agent\'s text, usage and finish reason; the prompt\'s earlier messages are its history', async (t) => {
  const { url } = await listen(t, { agents: { thoughtful, storyteller } })
  const agents = createOpenResponses({ name: 'agents', url: `${url}/v1/responses` })
  const result = await generateText({
    model: agents('thoughtful'),
    system: 'be brief',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
      { role: 'user', content: 'ping' }
    ]
  })
  t.equal(result.text, 'You said ping after 2 messages.')
  t.equal(result.reasoningText, 'Considering it.')
  t.equal(result.finishReason, 'stop')
  t.match(result.usage, { inputTokens: 7, outputTokens: 9, totalTokens: 16 })
  t.match(result.response.id, /^resp_/)
  t.equal(result.response.modelId, 'thoughtful')
})

t.test('streamText: the deltas as they come, the reasoning apart, the usage at the end', async (t) => {
  const { url } = await listen(t, { agents: { thoughtful, storyteller } })
  const agents = createOpenResponses({ name: 'agents', url: `${url}/v1/responses` })
  const result = streamText({ model: agents('storyteller'), prompt: 'a heron' })
  const deltas: string[] = []
  for await (const delta of result.textStream) deltas.push(delta)
  t.ok(deltas.length > 10, `${deltas.length} deltas`)
  t.equal(deltas.join(''), 'Once upon a time there was a heron. It answered every request, streamed every word, and drained gracefully at the end.')
  t.equal(await result.finishReason, 'stop')
  t.match(await result.usage, { inputTokens: 7, outputTokens: 21 }, "the run's usage")

  const thinking = streamText({ model: agents('thoughtful'), prompt: 'x' })
  const parts: string[] = []
  for await (const part of thinking.fullStream) parts.push(part.type)
  t.ok(parts.includes('reasoning-delta') && parts.includes('text-delta'), parts.join(' '))
  t.equal(await thinking.reasoningText, 'Considering it.')
  t.equal(await thinking.text, 'You said x after 0 messages.')
})

t.test('an unknown model: the provider raises the service\'s message', async (t) => {
  const { url } = await listen(t, { agents: { thoughtful } })
  const agents = createOpenResponses({ name: 'agents', url: `${url}/v1/responses` })
  const error = await generateText({ model: agents('nope'), prompt: 'x', maxRetries: 0 }).catch((err: unknown) => err) as { statusCode?: number, message: string, responseBody?: string }
  t.equal(error.statusCode, 404)
  t.match(error.responseBody, /AGENT_NOT_FOUND/)
})
