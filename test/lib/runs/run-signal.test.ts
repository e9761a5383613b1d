import t from 'tap'
import type { FastifyBaseLogger } from 'fastify'
import { AgentRun, RunAbortedError } from '../../../lib/runs/run.js'
import type { RunCapabilities, RunOptions } from '../../../lib/runs/run.js'
import type { Agent, RunContext } from '../../../lib/core/types.js'

// The run's AbortController is created on first use (bench profile: it was ~3% of a JSON run's CPU).
// These pin down that the lazy signal behaves like an eager one.

const capabilities: RunCapabilities = {
  requestApproval: async () => ({ approved: false, status: 'expired' }),
  checkpoint: async () => {},
  finish: async () => {}
}
const log = { error () {}, info () {}, warn () {}, debug () {} } as unknown as FastifyBaseLogger

function runOf (agent: Agent): AgentRun {
  const options: RunOptions = {
    runId: 'run-1',
    agentName: 'a',
    agent,
    input: null,
    agentInput: null,
    sessionId: 'session-1',
    principal: 'anonymous',
    requestId: 'req-1',
    trace: { traceId: 'f'.repeat(32) },
    history: [],
    metadata: {},
    timeoutMs: null,
    exposeErrors: false,
    log,
    capabilities,
    sink: null,
    onDisconnect: 'cancel',
    attempt: 1,
    lastSeq: 0,
    detachable: false
  }
  return new AgentRun(options)
}

t.test('a signal first looked at after the abort is already aborted, with the reason', async (t) => {
  let ctx: RunContext | undefined
  let release!: () => void
  const run = runOf({ run: (_input, c) => { ctx = c; return new Promise((resolve) => { release = () => resolve({ output: 1 }) }) } })
  run.start()
  run.abort('CANCELLED')
  const outcome = await run.done
  t.equal(outcome.status, 'failed')
  t.ok(ctx!.signal.aborted)
  t.ok(ctx!.signal.reason instanceof RunAbortedError)
  t.equal((ctx!.signal.reason as RunAbortedError).code, 'CANCELLED')
  t.equal(run.signal, ctx!.signal, 'one signal per run')
  release()
})

t.test('a signal looked at before the abort is aborted by it', async (t) => {
  let signal: AbortSignal | undefined
  const run = runOf({ run: (_input, c) => { signal = c.signal; return new Promise(() => {}) } })
  run.start()
  t.notOk(signal!.aborted)
  run.abort('SHUTDOWN')
  await run.done
  t.ok(signal!.aborted)
  t.equal((signal!.reason as RunAbortedError).code, 'SHUTDOWN')
})

t.test('a run that completes leaves its signal, if anyone asks, not aborted', async (t) => {
  let ctx: RunContext | undefined
  const run = runOf({ run: async (_input, c) => { ctx = c; return { output: 'ok' } } })
  run.start()
  const outcome = await run.done
  t.equal(outcome.status, 'completed')
  t.notOk(ctx!.signal.aborted)
  run.abort('CANCELLED')
  t.notOk(run.signal.aborted, 'aborting a settled run does nothing')
})

t.test('ctx.signal is an own enumerable property: a spread ctx carries the same signal', async (t) => {
  let ctx: RunContext | undefined
  const run = runOf({ run: async (_input, c) => { ctx = c; return { output: 'ok' } } })
  run.start()
  await run.done
  t.ok(Object.keys(ctx!).includes('signal'))
  const copy = { ...ctx! }
  t.equal(copy.signal, run.signal)
  t.equal(Object.create(ctx!).signal, run.signal, 'read through a derived object too')
})

t.test('an agent that throws synchronously or resolves to something else fails the run', async (t) => {
  const thrown = runOf({ run () { throw new Error('sync') } })
  thrown.start()
  const a = await thrown.done
  t.equal(a.status, 'failed')
  t.equal(a.status === 'failed' && a.code, 'AGENT_ERROR')
  const wrong = runOf({ run: async () => 42 as never })
  wrong.start()
  const b = await wrong.done
  t.equal(b.status === 'failed' && (b.error as Error).message, 'Agent "a" must resolve to { output }')
})

t.test('ctx.signal can still be assigned, as the plain property it used to be', async (t) => {
  let ctx: RunContext | undefined
  const run = runOf({ run: async (_input, c) => { ctx = c; return { output: 'ok' } } })
  run.start()
  await run.done
  const mine = new AbortController().signal
  ctx!.signal = mine
  t.equal(ctx!.signal, mine)
  t.ok(Object.keys(ctx!).includes('signal'))
  t.not(run.signal, mine, 'the run keeps its own signal')
})

// ctx.emit, ctx.requestApproval and ctx.checkpoint are made on first use too (no closures for an idle run).
t.test('ctx methods made on first use: destructured, spread, called and reassigned like plain properties', async (t) => {
  const events: string[] = []
  const asked: unknown[] = []
  const saved: unknown[] = []
  let ctx: RunContext | undefined
  const options = {
    ...capabilities,
    requestApproval: async (_run: AgentRun, request: unknown) => { asked.push(request); return { approved: true, status: 'approved' as const } },
    checkpoint: async (_run: AgentRun, state: unknown) => { saved.push(state) }
  }
  const run = new AgentRun({ ...runOf({ run: async () => ({ output: null }) }).options, capabilities: options,
    agent: {
      async run (_input, c) {
        ctx = c
        const { emit, requestApproval, checkpoint } = c
        emit('tool.call', { toolCallId: 'c1', name: 'x', input: null })
        await checkpoint({ step: 1 })
        const decision = await requestApproval({ action: 'go' })
        return { output: decision.approved }
      }
    }
  })
  run.listen({ runEvent: (event) => { events.push(event.type) } })
  run.start()
  const outcome = await run.done
  t.equal(outcome.status === 'completed' && outcome.result.output, true)
  t.same(events, ['run.started', 'tool.call', 'run.completed'])
  t.same(asked, [{ action: 'go' }])
  t.same(saved, [{ step: 1 }])
  t.equal(ctx!.emit, ctx!.emit, 'one function per run, not one per look')
  for (const name of ['emit', 'requestApproval', 'checkpoint', 'signal']) t.ok(Object.keys(ctx!).includes(name), `${name} is enumerable`)
  const copy = { ...ctx! }
  t.equal(copy.checkpoint, ctx!.checkpoint, 'a spread ctx carries the same methods')
  const mine = (): void => {}
  ctx!.emit = mine
  t.equal(ctx!.emit, mine, 'assignable, as before')
})

t.test('done, first read after the run settled, gives the same outcome', async (t) => {
  const run = runOf({ run: async () => ({ output: 'late' }) })
  let settled: unknown
  run.listen({ runEvent () {}, runSettled (outcome) { settled = outcome } })
  run.start()
  for (let i = 0; i < 20 && settled === undefined; i++) await new Promise((resolve) => setImmediate(resolve))
  t.ok(settled, 'settled before anyone asked for done')
  t.equal(await run.done, settled)
  t.equal(run.done, run.done, 'one promise')
})

t.test('a result whose getters throw, or a finish() that throws at once, fails the run with AGENT_ERROR', async (t) => {
  const trap = { get output () { return 1 }, get usage (): never { throw new Error('usage trap') } }
  const getters = runOf({ run: async () => trap })
  getters.start()
  const a = await getters.done
  t.equal(a.status === 'failed' && (a.error as Error).message, 'usage trap')
  const throwing = new AgentRun({
    ...runOf({ run: async () => ({ output: 1 }) }).options,
    capabilities: { ...capabilities, finish: () => { throw new Error('finish trap') } }
  })
  throwing.start()
  const b = await throwing.done
  t.equal(b.status === 'failed' && b.code, 'AGENT_ERROR')
  t.equal(b.status === 'failed' && (b.error as Error).message, 'finish trap')
})

t.test('ctx.history and ctx.metadata of a new session without metadata: empty, stable, mutable, assignable', async (t) => {
  let ctx: RunContext | undefined
  const run = runOf({ run: async (_input, c) => { ctx = c; return { output: 'ok' } } })
  run.options.history = undefined
  run.options.metadata = undefined
  run.start()
  await run.done
  t.same(ctx!.history, [])
  t.equal(ctx!.history, ctx!.history, 'the same array on every look')
  ctx!.history.push({ role: 'user', content: 'x', runId: 'r', at: 'now' })
  t.equal(ctx!.history.length, 1)
  t.same(ctx!.metadata, {})
  ctx!.metadata.note = 1
  t.same({ ...ctx! }.metadata, { note: 1 }, 'spread carries them')
  ctx!.history = []
  ctx!.metadata = { other: true }
  t.same([ctx!.history, ctx!.metadata], [[], { other: true }], 'assignable, as before')
})
