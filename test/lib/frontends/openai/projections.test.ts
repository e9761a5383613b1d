// The projections alone: events in, OpenAI's events out, for what the routes' runs rarely make (a requeued run, a
// tool call left open, a call without streamed arguments, a response read while its message is being written).
import t from 'tap'
import { ChatChunkProjection } from '../../../../lib/frontends/openai/chat-projection.js'
import { ResponseProjection } from '../../../../lib/frontends/openai/response-projection.js'
import type { ResponseHead } from '../../../../lib/frontends/openai/response-projection.js'
import type { RunEvent } from '../../../../lib/frontends/run-events.js'

const head: ResponseHead = {
  id: 'resp_r', runId: '00000000-0000-4000-8000-000000000000', createdAt: 1, model: 'm', previousResponseId: null,
  instructions: null, metadata: {}, conversation: 's', background: true, queued: true
}
let seq = 0
const ev = (type: string, data: unknown): RunEvent => ({ seq: ++seq, type, data })
const usage = { inputTokens: 1, outputTokens: 2, totalTokens: 3 }

function frames (text: string): Array<Record<string, any>> {
  return text.split('\n\n').filter((f) => f !== '').map((f) => JSON.parse(f.split('\n')[1]!.slice('data: '.length)))
}

t.test('a queued response: in progress at its run\'s start; a call without streamed arguments; one left open ends incomplete; a requeue closes what is open', async (t) => {
  const projection = new ResponseProjection(head)
  const out: Array<Record<string, any>> = []
  const push = (event: RunEvent): void => { out.push(...frames(projection.push(event))) }
  push(ev('run.started', { runId: head.runId }))
  t.same(out.map((e) => [e.type, e.response.status]), [['response.created', 'queued'], ['response.in_progress', 'in_progress']])
  push(ev('tool.result', { toolCallId: 'z', name: 'f', output: 1, isError: false }))
  push(ev('reasoning.delta', { text: 'hm' }))
  const reading = projection.response() as { output: Array<Record<string, unknown>>, status: string }
  t.match(reading.output, [{ type: 'function_call_output' }, { type: 'reasoning', content: [{ type: 'reasoning_text', text: 'hm' }] }], 'an open item as it stands')
  push(ev('tool.call', { toolCallId: 'a', name: 'f' }))
  push(ev('tool.call.delta', { toolCallId: 'b', name: 'g', delta: '{' }))
  push(ev('tool.result', { toolCallId: 'b', name: 'g', output: 'x', isError: true }))
  push(ev('tool.call.delta', { toolCallId: 'c', name: 'h', delta: '[' }))
  push(ev('run.requeued', { attempt: 2, reason: 'INSTANCE_LOST' }))
  push(ev('run.started', { runId: head.runId, attempt: 2 }))
  push(ev('message.delta', { text: 'hi' }))
  push(ev('approval.requested', { approval: { id: 'ap', action: 'act' } }))
  t.same(projection.push(ev('run.completed', { output: null, usage, finishReason: 'stop' })), '', 'nothing after the end')
  const done = out.filter((e) => e.type === 'response.output_item.done').map((e) => [e.item.type, e.item.status ?? ''])
  t.same(done, [['function_call_output', 'completed'], ['reasoning', ''], ['function_call', 'completed'], ['function_call', 'completed'], ['function_call_output', 'completed'], ['function_call', 'incomplete'], ['message', 'completed'], ['mcp_approval_request', '']])
  t.match(out.find((e) => e.type === 'response.function_call_arguments.delta'), { delta: 'null' }, 'no input: null')
  t.match(out.at(-2), { item: { arguments: 'null' } }, 'an approval without payload')
  t.same(out.map((e) => e.sequence_number), out.map((_, i) => i))
  t.equal(out.at(-1)!.type, 'response.completed')
})

t.test('a run that fails, one that ends incomplete; a resume writes only what comes after its cursor', async (t) => {
  const failed = frames(new ResponseProjection({ ...head, queued: false }).push(ev('run.failed', { error: { code: 'AGENT_ERROR', message: 'x' } })))
  t.match(failed.at(-1), { type: 'response.failed', response: { status: 'failed', error: { code: 'AGENT_ERROR' } } })
  const events = [ev('run.started', {}), ev('message.delta', { text: 'a' }), ev('message.delta', { text: 'b' }), ev('run.completed', { output: 'ab', usage, finishReason: 'length' })]
  const full = new ResponseProjection(head)
  const all = frames(events.map((e) => full.push(e)).join(''))
  t.match(all.at(-1), { type: 'response.incomplete', response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } } })
  const resumed = new ResponseProjection(head, { startingAfter: 4 })
  t.same(frames(events.map((e) => resumed.push(e)).join('')), all.slice(5))
})

t.test('chat chunks: nothing after the end; a cancelled run\'s error; other events map to nothing', async (t) => {
  const projection = new ChatChunkProjection({ id: 'chatcmpl-x', created: 1, model: 'm' }, false)
  t.equal(projection.push(ev('run.started', {})), '')
  const text = projection.push(ev('run.failed', { error: { code: 'CANCELLED', message: 'The run was cancelled' } }))
  t.same(JSON.parse(text.slice('data: '.length)), { error: { message: 'The run was cancelled', type: 'invalid_request_error', param: null, code: 'CANCELLED' } })
  t.ok(projection.ended)
  t.equal(projection.push(ev('message.delta', { text: 'late' })), '')
})
