// Rewind (docs/durable-agents.md): POST /v1/sessions/:id/fork and POST /v1/runs/:runId/replay. A fork copies the
// source's turns up to a run (the source unchanged); a replay runs an ended run again from its checkpoint, in a fork
// of its session taken before it, its completed steps given back by the journal.
import t from 'tap'
import type { Test } from 'tap'
import type { Agent, RunContext } from '../../lib/core/types.js'
import { build, eventually, parseSse } from '../helper.js'

const KEYS = { alice: 'alice-key-0123456789', bob: 'bob-key-0123456789' }
const as = (who: keyof typeof KEYS) => ({ 'x-api-key': KEYS[who] })

/**
 * A service whose agent answers "re: <input>": `run` a JSON run of alice's, `fail` a run of hers that fails (streamed,
 * for its run id) and left no turn.
 */
function talkative (t: Test) {
  let failNext = false
  const talker: Agent = {
    async run (input) {
      if (failNext) throw new Error('boom')
      return { output: `re: ${String(input)}` }
    }
  }
  const { app } = build(t, { agents: { talker }, auth: { strategy: 'api-key', keys: Object.values(KEYS) } })
  const run = async (input: string, sessionId?: string) => (await app.inject({ method: 'POST', url: '/v1/agents/talker/runs', headers: as('alice'), payload: { input, sessionId } })).json()
  const fail = async (input: string, sessionId: string): Promise<string> => {
    failNext = true
    const failed = await app.inject({ method: 'POST', url: '/v1/agents/talker/runs', headers: as('alice'), payload: { input, sessionId, stream: true } })
    failNext = false
    return (parseSse(failed.body)[0]!.data as { runId: string }).runId
  }
  return { app, run, fail }
}

t.test('fork before, after, or at the end of a session; the source unchanged; a fork point that is not a run of the session is 400', async (t) => {
  const { app, run, fail } = talkative(t)
  const first = await run('one')
  const sessionId = first.sessionId as string
  const second = await run('two', sessionId)
  const failedId = await fail('three', sessionId)
  const fourth = await run('four', sessionId)
  const fork = (body: Record<string, unknown> | undefined, who: keyof typeof KEYS = 'alice', id = sessionId) =>
    app.inject({ method: 'POST', url: `/v1/sessions/${id}/fork`, headers: as(who), ...(body === undefined ? {} : { payload: body }) })

  const before = await fork({ beforeRunId: second.runId, metadata: { why: 'a bad turn' } })
  t.equal(before.statusCode, 201)
  t.match(before.json(), { agent: 'talker', turns: 1, metadata: { why: 'a bad turn', forkedFrom: { sessionId, runId: second.runId } }, forkedFrom: { sessionId, runId: second.runId } })
  t.not(before.json().id, sessionId)
  t.same(before.json().messages.map((m: { content: unknown }) => m.content), ['one', 're: one'])
  const stored = (await app.inject({ url: `/v1/sessions/${before.json().id}`, headers: as('alice') })).json()
  t.same(stored.messages.map((m: { content: unknown }) => m.content), ['one', 're: one'], 'the fork is a session like any other')

  const after = (await fork({ afterRunId: second.runId })).json()
  t.same(after.messages.map((m: { content: unknown }) => m.content), ['one', 're: one', 'two', 're: two'])
  t.equal(after.turns, 2)
  const whole = (await fork(undefined)).json()
  t.equal(whole.turns, 3)
  t.same(whole.forkedFrom, { sessionId })
  const atFailed = (await fork({ beforeRunId: failedId })).json()
  t.same(atFailed.messages.map((m: { content: unknown }) => m.content), ['one', 're: one', 'two', 're: two'], 'a run that left no turn: the turns before it began')
  t.same((await app.inject({ url: `/v1/sessions/${sessionId}`, headers: as('alice') })).json().turns, 3, 'the source is unchanged')

  const elsewhere = await run('elsewhere')
  t.match((await fork({ beforeRunId: elsewhere.runId })).json(), { statusCode: 400, code: 'FST_ERR_VALIDATION', message: `body/beforeRunId: run "${elsewhere.runId}" is not a run of session "${sessionId}"` })
  t.match((await fork({ afterRunId: 'unknown-run' })).json(), { statusCode: 400, message: /^body\/afterRunId: run "unknown-run" is not a run of session/ })
  t.match((await fork({ beforeRunId: first.runId, afterRunId: fourth.runId })).json(), { statusCode: 400, message: 'body must have at most one of beforeRunId and afterRunId' })
  t.match((await fork({ other: 1 })).json(), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
  t.match((await fork({}, 'bob')).json(), { statusCode: 404, code: 'SESSION_NOT_FOUND' }, 'another principal\'s session')
})

t.test('a fork before a run that left no turn goes by the runs\' order, not their times: all in one millisecond, and after a page of runs', async (t) => {
  const { app, run, fail } = talkative(t)
  // every turn and every run at one instant, as on a fast machine
  const now = Date.now
  const frozen = now()
  Date.now = () => frozen
  t.teardown(() => { Date.now = now })
  const sessionId = (await run('one')).sessionId as string
  await run('two', sessionId)
  const failedId = await fail('three', sessionId)
  // more runs after it than one page of the session's runs holds (500)
  for (let i = 0; i < 501; i++) await run(`later ${i}`, sessionId)
  const fork = (await app.inject({ method: 'POST', url: `/v1/sessions/${sessionId}/fork`, headers: as('alice'), payload: { beforeRunId: failedId } })).json()
  t.same(fork.messages.map((m: { content: unknown }) => m.content), ['one', 're: one', 'two', 're: two'])
})

t.test('replay: a failed run again from its checkpoint in a fork of its session, its completed steps not run again', async (t) => {
  const executed: string[] = []
  const seen: Array<{ input: unknown, resume: unknown, history: number }> = []
  let failing = true
  const stepper: Agent = {
    async run (input, ctx: RunContext) {
      seen.push({ input, resume: ctx.resume ?? null, history: ctx.history.length })
      const fetched = await ctx.step('fetch', () => { executed.push('fetch'); return 'data' })
      await ctx.checkpoint({ fetched })
      const sent = await ctx.step('send', () => { executed.push('send'); if (failing) throw new Error('mail down'); return 'sent' })
      return { output: { fetched, sent, input } }
    }
  }
  const { app } = build(t, { agents: { stepper, echo: { async run (input) { return { output: input } } } } })
  const earlier = (await app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload: { input: 'earlier' } })).json()
  t.equal(earlier.statusCode, 500)
  failing = false
  const ok = (await app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload: { input: 'fine' } })).json()
  failing = true
  const failed = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/stepper/runs', payload: { input: 'x', sessionId: ok.sessionId, stream: true } })).body)
  const failedId = (failed[0]!.data as { runId: string }).runId
  failing = false
  executed.length = 0
  seen.length = 0

  const replayed = await app.inject({ method: 'POST', url: `/v1/runs/${failedId}/replay` })
  t.equal(replayed.statusCode, 200)
  const result = replayed.json()
  t.same(result.output, { fetched: 'data', sent: 'sent', input: 'x' }, 'the run\'s own input by default')
  t.not(result.runId, failedId)
  t.not(result.sessionId, ok.sessionId, 'a new session')
  t.same(executed, ['send'], 'the journaled step was not run again')
  t.same(seen, [{ input: 'x', resume: { step: 1, state: { fetched: 'data' } }, history: 2 }], 'from the checkpoint, with the turns before the run')
  const fork = (await app.inject({ url: `/v1/sessions/${result.sessionId}` })).json()
  t.match(fork, { forkedFrom: undefined, metadata: { forkedFrom: { sessionId: ok.sessionId, runId: failedId } }, turns: 2 })
  const log = parseSse((await app.inject({ url: `/v1/runs/${result.runId}/events` })).body)
  t.same(log.filter((e) => e.event === 'step.completed').map((e) => e.data), [
    { name: 'fetch', index: 0, output: 'data' }, { name: 'send', index: 1, output: 'sent' }
  ], 'a replayed step is written to the new run\'s log, for its own later attempts')

  // a state and an input of its own, as SSE
  executed.length = 0
  seen.length = 0
  const streamed = parseSse((await app.inject({ method: 'POST', url: `/v1/runs/${failedId}/replay`, payload: { input: 'y', state: { fixed: true }, stream: true } })).body)
  t.match(streamed.at(-1), { event: 'run.completed', data: { output: { input: 'y' } } })
  t.same(seen[0]!.resume, { step: 1, state: { fixed: true } })

  // in the background: the worker starts it from the checkpoint too
  executed.length = 0
  const queued = await app.inject({ method: 'POST', url: `/v1/runs/${failedId}/replay`, payload: { background: true } })
  t.equal(queued.statusCode, 202)
  const done = await eventually(async () => {
    const record = (await app.inject({ url: `/v1/runs/${queued.json().runId}` })).json()
    return record.status === 'completed' && record
  })
  t.same(done.result.output, { fetched: 'data', sent: 'sent', input: 'x' })
  t.same(executed, ['send'])

  // the 4xx: a run that kept no checkpoint, a completed one, one in progress, someone else's or unknown
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${ok.runId}/replay` })).json(), { statusCode: 409, code: 'NO_CHECKPOINT' })
  const echoed = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1, stream: true } })).body)
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${(echoed[0]!.data as { runId: string }).runId}/replay` })).json(), { statusCode: 409, code: 'NO_CHECKPOINT' })
  t.match((await app.inject({ method: 'POST', url: '/v1/runs/nope/replay' })).json(), { statusCode: 404, code: 'RUN_NOT_FOUND' })
  // its session deleted: nothing to fork
  await app.inject({ method: 'DELETE', url: `/v1/sessions/${ok.sessionId}` })
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${failedId}/replay` })).json(), { statusCode: 404, code: 'SESSION_NOT_FOUND' })
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${failedId}/replay`, payload: { sessionId: 'x' } })).json(), { statusCode: 400, code: 'FST_ERR_VALIDATION' })
})

t.test('replay of a run in progress is 409 RUN_IN_PROGRESS; a bad input for the agent\'s schema is 400 before any fork', async (t) => {
  let release!: () => void
  const held = new Promise<void>((resolve) => { release = resolve })
  const waiter: Agent = {
    input: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
    async run (_input, ctx) {
      await ctx.checkpoint({ at: 1 })
      await held
      throw new Error('failed after its checkpoint')
    }
  }
  const { app } = build(t, { agents: { waiter } })
  const running = app.inject({ method: 'POST', url: '/v1/agents/waiter/runs', payload: { input: { n: 1 }, stream: true } })
  const runId = await eventually(async () => (await app.inject({ url: '/v1/admin/runs' })).statusCode === 404 && [...app.agentService.runs.list()][0]?.runId)
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${runId}/replay` })).json(), { statusCode: 409, code: 'RUN_IN_PROGRESS' })
  release()
  await running
  const sessions = async () => (await app.inject({ url: '/v1/sessions' })).json().sessions.length
  const count = await sessions()
  t.match((await app.inject({ method: 'POST', url: `/v1/runs/${runId}/replay`, payload: { input: { n: 'one' } } })).json(), { statusCode: 400, message: /^body\/input\/n must be integer/ })
  t.equal(await sessions(), count, 'no fork made for a refused replay')
})
