import t from 'tap'
import type { FastifyBaseLogger } from 'fastify'
import { AgentRun, RunAbortedError } from '../lib/runner.js'
import type { RunCapabilities, RunOptions } from '../lib/runner.js'
import type { Agent, RunContext } from '../lib/types.js'

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
    sessionId: 'session-1',
    principal: 'anonymous',
    requestId: 'req-1',
    trace: { traceId: 'f'.repeat(32) },
    history: [],
    metadata: {},
    timeoutMs: null,
    exposeErrors: false,
    log,
    capabilities
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
