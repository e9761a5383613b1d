// The run event vocabulary (README.md, "The event vocabulary"): what an agent may yield or emit, checked by the runner.
import t from 'tap'
import { Writable } from 'node:stream'
import type { Agent, RunContext } from '../../../lib/core/types.js'
import { agentEventProblem } from '../../../lib/runs/events.js'
import { build, parseSse } from '../../helper.js'

t.test('custom types: the pattern, at most 64 characters, the service prefixes reserved', async (t) => {
  for (const ok of ['progress', 'a', 'tool.progress', 'my-app.step_2.done', 'run', 'runs.x', 'approvals', 'x'.repeat(64)]) {
    t.equal(agentEventProblem(ok, null), null, ok)
  }
  for (const bad of ['Progress', '1st', 'a..b', 'a.', '.a', 'a b', '', 'ünicode', 'a/b', 'x'.repeat(65)]) {
    t.match(agentEventProblem(bad, null), /is not a valid event type \(\^\[a-z\]\[a-z0-9_-\]\*\(\\\.\[a-z0-9_-\]\+\)\*\$, at most 64 characters\)$/, JSON.stringify(bad))
  }
  t.equal(agentEventProblem('x'.repeat(100), null), `"${'x'.repeat(64)}…" is not a valid event type (${'^[a-z][a-z0-9_-]*(\\.[a-z0-9_-]+)*$'}, at most 64 characters)`, 'a long name is cut')
  for (const reserved of ['run.completed', 'run.started', 'run.anything', 'approval.requested', 'checkpoint.saved', 'checkpoint.x.y', 'step.completed']) {
    t.equal(agentEventProblem(reserved, {}), `"${reserved}" is reserved to the service (run., approval., checkpoint., step.)`)
  }
  t.equal(agentEventProblem('constructor', null), null, 'a name that is a property of every object is just a name')
})

t.test('the built-in shapes', async (t) => {
  const good: Array<[string, unknown]> = [
    ['message.delta', { text: '' }],
    ['reasoning.delta', { text: 'hmm' }],
    ['tool.call.delta', { toolCallId: 'c', name: 'n', delta: '{"a"' }],
    ['tool.call', { toolCallId: 'c', name: 'n', input: { a: 1 } }],
    ['tool.call', { toolCallId: 'c', name: 'n' }],
    ['tool.result', { toolCallId: 'c', name: 'n', output: [1], isError: false }],
    ['tool.result', { toolCallId: 'c', name: 'n', isError: true }]
  ]
  for (const [type, data] of good) t.equal(agentEventProblem(type, data), null, `${type} ${JSON.stringify(data)}`)
  const bad: Array<[string, unknown, string]> = [
    ['message.delta', undefined, '{ text: string }'],
    ['message.delta', { text: 1 }, '{ text: string }'],
    ['reasoning.delta', 'text', '{ text: string }'],
    ['tool.call.delta', { toolCallId: 'c', name: 'n' }, '{ toolCallId: string, name: string, delta: string }'],
    ['tool.call', { name: 'n', input: {} }, '{ toolCallId: string, name: string, input }'],
    ['tool.call', null, '{ toolCallId: string, name: string, input }'],
    ['tool.result', { toolCallId: 'c', name: 'n', output: 1 }, '{ toolCallId: string, name: string, output, isError: boolean }'],
    ['tool.result', { toolCallId: 'c', name: 1, isError: false }, '{ toolCallId: string, name: string, output, isError: boolean }']
  ]
  for (const [type, data, shape] of bad) t.equal(agentEventProblem(type, data), `"${type}" needs data ${shape}`, `${type} ${JSON.stringify(data)}`)
})

t.test('ctx.emit throws a TypeError for a reserved or bad type and for a built-in type with the wrong data', async (t) => {
  const thrown: unknown[] = []
  const agent: Agent = {
    async run (_input, ctx: RunContext) {
      for (const [type, data] of [['run.completed', {}], ['approval.decided', {}], ['Bad Name', 1], ['tool.call', { name: 'x' }], ['message.delta', { text: 5 }], [42, null]] as const) {
        try {
          ctx.emit(type as string, data)
        } catch (error) {
          thrown.push(error)
        }
      }
      ctx.emit('reasoning.delta', { text: 'fine' })
      ctx.emit('progress')
      return { output: 'ok' }
    }
  }
  const { app } = build(t, { agents: { agent } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/agent/runs', payload: { input: 1, stream: true } })
  t.same(parseSse(res.body).map((e) => e.event), ['run.started', 'reasoning.delta', 'progress', 'run.completed'], 'nothing refused went out; the run goes on')
  t.ok(thrown.every((e) => e instanceof TypeError))
  t.same(thrown.map((e) => (e as Error).message), [
    'ctx.emit: "run.completed" is reserved to the service (run., approval., checkpoint., step.)',
    'ctx.emit: "approval.decided" is reserved to the service (run., approval., checkpoint., step.)',
    'ctx.emit: "Bad Name" is not a valid event type (^[a-z][a-z0-9_-]*(\\.[a-z0-9_-]+)*$, at most 64 characters)',
    'ctx.emit: "tool.call" needs data { toolCallId: string, name: string, input }',
    'ctx.emit: "message.delta" needs data { text: string }',
    'ctx.emit: the event type must be a string'
  ])
})

function capture (): { lines: string[], logger: { level: string, stream: Writable } } {
  const lines: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  return { lines, logger: { level: 'error', stream } }
}

t.test('a yielded event with a reserved or bad type, or built-in data of the wrong shape, fails the run AGENT_ERROR naming it', async (t) => {
  const yielding = (event: unknown): Agent => ({ async * run () { yield 'before '; yield event as string; yield 'never' } })
  const agents = {
    completes: yielding({ type: 'run.completed', data: { output: 'forged' } }),
    checkpoints: yielding({ type: 'checkpoint.saved', data: { step: 9 } }),
    shouts: yielding({ type: 'LOUD' }),
    calls: yielding({ type: 'tool.result', data: { toolCallId: 'c', name: 'n', output: 1, isError: 'no' } }),
    thinks: yielding({ type: 'reasoning.delta', data: { text: null } })
  }
  const expected: Record<keyof typeof agents, string> = {
    completes: '"run.completed" is reserved to the service (run., approval., checkpoint., step.)',
    checkpoints: '"checkpoint.saved" is reserved to the service (run., approval., checkpoint., step.)',
    shouts: '"LOUD" is not a valid event type (^[a-z][a-z0-9_-]*(\\.[a-z0-9_-]+)*$, at most 64 characters)',
    calls: '"tool.result" needs data { toolCallId: string, name: string, output, isError: boolean }',
    thinks: '"reasoning.delta" needs data { text: string }'
  }

  const hidden = capture()
  const exposed = capture()
  const quiet = build(t, { agents, logger: hidden.logger as never }).app
  const open = build(t, { agents, exposeErrors: true, logger: exposed.logger as never }).app
  for (const [name, problem] of Object.entries(expected)) {
    const message = `Agent "${name}" yielded an event it may not: ${problem}`

    const sse = parseSse((await quiet.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1, stream: true } })).body)
    t.same(sse.map((e) => e.event), ['run.started', 'message.delta', 'run.failed'], `${name}: nothing after the bad event`)
    t.same(sse.at(-1)!.data.error, { code: 'AGENT_ERROR', message: 'Internal Server Error' }, `${name}: hidden on the wire`)
    t.ok(hidden.lines.some((line) => JSON.parse(line).err?.message === message), `${name}: named in the log`)

    const json = await quiet.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1 } })
    t.equal(json.statusCode, 500)
    t.match(json.json(), { code: 'AGENT_ERROR', message: 'Internal Server Error' })

    const shown = parseSse((await open.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1, stream: true } })).body)
    t.same(shown.at(-1)!.data.error, { code: 'AGENT_ERROR', message }, `${name}: exposeErrors shows the name`)
    t.match((await open.inject({ method: 'POST', url: `/v1/agents/${name}/runs`, payload: { input: 1 } })).json(), { code: 'AGENT_ERROR', message })
  }
})

t.test('run.started carries the attempt', async (t) => {
  const { app } = build(t)
  const events = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true } })).body)
  t.match(events[0], { event: 'run.started', data: { attempt: 1, agent: 'echo' } })
})
