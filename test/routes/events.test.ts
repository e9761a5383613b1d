// Every transport carries the whole event vocabulary (README.md, "The event vocabulary"): reasoning, tool calls and results, custom
// events, in order, over real sockets.
import t from 'tap'
import type { Agent } from '../../lib/core/types.js'
import { listen } from '../helper.js'
import { openSse, openWs } from '../helpers/streams.js'

const toolUser: Agent = {
  async * run (_input, ctx) {
    yield { type: 'reasoning.delta', data: { text: 'Need the weather.' } }
    yield { type: 'tool.call.delta', data: { toolCallId: 'c1', name: 'weather', delta: '{"city":' } }
    yield { type: 'tool.call.delta', data: { toolCallId: 'c1', name: 'weather', delta: '"Oslo"}' } }
    yield { type: 'tool.call', data: { toolCallId: 'c1', name: 'weather', input: { city: 'Oslo' } } }
    ctx.emit('tool.result', { toolCallId: 'c1', name: 'weather', output: { celsius: -3 }, isError: false })
    yield { type: 'tool.progress', data: { percent: 100 } }
    yield 'It is -3 °C.'
  }
}

const expected: Array<[string, unknown]> = [
  ['reasoning.delta', { text: 'Need the weather.' }],
  ['tool.call.delta', { toolCallId: 'c1', name: 'weather', delta: '{"city":' }],
  ['tool.call.delta', { toolCallId: 'c1', name: 'weather', delta: '"Oslo"}' }],
  ['tool.call', { toolCallId: 'c1', name: 'weather', input: { city: 'Oslo' } }],
  ['tool.result', { toolCallId: 'c1', name: 'weather', output: { celsius: -3 }, isError: false }],
  ['tool.progress', { percent: 100 }],
  ['message.delta', { text: 'It is -3 °C.' }]
]

t.test('SSE streams reasoning, tool and custom events in order', async (t) => {
  const { url } = await listen(t, { agents: { weather: toolUser } })
  const stream = await openSse(url, '/v1/agents/weather/runs', { input: 'Weather in Oslo?' })
  await stream.ended
  const events = stream.events
  t.match(events[0], { event: 'run.started', data: { attempt: 1 } })
  t.same(events.slice(1, -1).map((e) => [e.event, e.data]), expected)
  t.same(events.map((e) => e.id), events.map((_, i) => i + 1))
  t.match(events.at(-1), { event: 'run.completed', data: { output: 'It is -3 °C.' } })
})

t.test('WebSocket frames carry the same events in order', async (t) => {
  const { url } = await listen(t, { agents: { weather: toolUser }, websocket: true })
  const ws = await openWs(url)
  t.teardown(() => ws.socket.close())
  ws.send({ type: 'run.start', ref: 'w', agent: 'weather', input: 'Weather in Oslo?' })
  const completed = await ws.next((frame) => frame.type === 'run.completed')
  const frames = ws.frames.filter((frame) => frame.runId === completed.runId)
  t.match(frames[0], { type: 'run.started', ref: 'w', seq: 1, data: { attempt: 1 } })
  t.same(frames.slice(1, -1).map((frame) => [frame.type, frame.data]), expected)
  t.same(frames.map((frame) => frame.seq), frames.map((_, i) => i + 1))
  t.match(completed, { ref: 'w', data: { output: 'It is -3 °C.' } })
})
