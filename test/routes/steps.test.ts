// Durable steps (docs/durable-agents.md), in one process on memory stores: a step completed by an earlier attempt is
// not run again (a drain's hand-off, a resumeRunId), a step that differs from the journal fails the run STEP_MISMATCH,
// and a step's function gets the same idempotency key on every attempt. The same across processes killed with
// SIGKILL, on PostgreSQL and Redis: test/app/recovery-steps.test.ts.
import t from 'tap'
import type { Agent, RunContext, StepInfo } from '../../lib/core/types.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { build, eventually, handOffPair, gate, orAbort, parseSse, sleep } from '../helper.js'
import { MIN_RUN_LEASE_MS } from '../../schemas/options.js'

t.test('a drain hands a stepped run off: the next attempt gets the completed steps from the journal, runs the rest', async (t) => {
  const executed: Array<{ step: string, info: StepInfo }> = []
  const hold = gate()
  let attempts = 0
  const stepped: Agent = {
    resumable: true,
    async run (_input, ctx: RunContext) {
      attempts++
      const one = await ctx.step('one', (info) => { executed.push({ step: 'one', info }); return { n: 1, at: new Date(0) } })
      const two = await ctx.step('two', (info) => { executed.push({ step: 'two', info }); return 2 })
      // the first attempt waits here until the drain hands it off
      if (attempts === 1) await orAbort(hold.promise, ctx.signal)
      const three = await ctx.step('three', (info) => { executed.push({ step: 'three', info }); return 'three' })
      return { output: { one, two, three } }
    }
  }
  const { a, b, handOver } = await handOffPair(t, { agents: { stepped } })
  const { runId } = (await a.app.inject({ method: 'POST', url: '/v1/agents/stepped/runs', payload: { input: null, background: true } })).json()
  await eventually(() => executed.length === 2)
  await handOver(runId, 'completed')
  t.same(executed.map((e) => e.step), ['one', 'two', 'three'], 'each step executed once over two attempts')
  t.same(executed.map((e) => e.info), [
    { attempt: 1, idempotencyKey: `${runId}:0` }, { attempt: 1, idempotencyKey: `${runId}:1` }, { attempt: 2, idempotencyKey: `${runId}:2` }
  ])
  const record = (await b.app.inject({ url: `/v1/runs/${runId}` })).json()
  t.same(record.result.output, { one: { n: 1, at: '1970-01-01T00:00:00.000Z' }, two: 2, three: 'three' }, 'a step returns its JSON, on every attempt alike')
  const log = parseSse((await b.app.inject({ url: `/v1/runs/${runId}/events` })).body)
  t.same(log.map((e) => e.event), ['run.started', 'step.completed', 'step.completed', 'run.requeued', 'run.started', 'step.completed', 'run.completed'])
  t.same(log[1]!.data, { name: 'one', index: 0, output: { n: 1, at: '1970-01-01T00:00:00.000Z' } })
  t.same(log[5]!.data, { name: 'three', index: 2, output: 'three' }, 'a replayed step emits nothing')
})

t.test('resumeRunId replays the completed steps; a step of another name at a journaled index fails the run STEP_MISMATCH', async (t) => {
  const executed: string[] = []
  let failing = true
  let firstName = 'fetch'
  const stepped: Agent = {
    async run (_input, ctx) {
      await ctx.checkpoint({ at: 'start' })
      const fetched = await ctx.step(firstName, () => { executed.push(firstName); return 'fetched' })
      const sent = await ctx.step('send', ({ idempotencyKey }) => {
        executed.push('send')
        if (failing) throw new Error('the mail server is down')
        return idempotencyKey
      })
      return { output: { fetched, sent } }
    }
  }
  const { app } = build(t, { agents: { stepped }, exposeErrors: true })
  const start = async (payload: Record<string, unknown>) => parseSse((await app.inject({ method: 'POST', url: '/v1/agents/stepped/runs', payload: { input: null, stream: true, ...payload } })).body)
  const first = await start({})
  const runId = (first[0]!.data as { runId: string }).runId
  t.match(first.at(-1), { event: 'run.failed', data: { error: { code: 'AGENT_ERROR', message: 'the mail server is down' } } })
  failing = false
  const resumed = await app.inject({ method: 'POST', url: '/v1/agents/stepped/runs', payload: { input: null, resumeRunId: runId } })
  t.equal(resumed.statusCode, 200)
  t.same(resumed.json().output, { fetched: 'fetched', sent: `${runId}:1` })
  t.same(executed, ['fetch', 'send', 'send'], 'the completed step is not run again; the failed one is')

  // the agent changed between attempts: its first step has another name now
  failing = true
  executed.length = 0
  const other = await start({})
  const otherId = (other[0]!.data as { runId: string }).runId
  firstName = 'download'
  const mismatch = await app.inject({ method: 'POST', url: '/v1/agents/stepped/runs', payload: { input: null, resumeRunId: otherId } })
  t.equal(mismatch.statusCode, 500)
  t.match(mismatch.json(), { code: 'STEP_MISMATCH', message: 'Step 0 is "download" in this attempt, but "fetch" in the run\'s journal: the run cannot go on from its journal' })
  t.same(executed, ['fetch', 'send'], 'nothing ran after the mismatch')
  t.match((await app.inject({ url: `/v1/runs/${otherId}` })).json(), { status: 'failed', error: { code: 'STEP_MISMATCH' } })
})

t.test('ctx.step checks its arguments; an output that is not JSON fails the step; steps called at once keep their order', async (t) => {
  const seen: unknown[] = []
  const checked: Agent = {
    async run (_input, ctx) {
      for (const name of ['Bad Name', 'run.', 7]) {
        await ctx.step(name as string, () => 1).catch((err: Error) => seen.push(err.message))
      }
      await ctx.step('fn', 'not a function' as unknown as () => number).catch((err: Error) => seen.push(err.message))
      await ctx.step('cyclic', () => { const o: Record<string, unknown> = {}; o.o = o; return o }).catch((err: Error) => seen.push(err.constructor.name))
      const both = await Promise.all([
        ctx.step('slow', async () => { await new Promise((resolve) => setTimeout(resolve, 20)); return 'slow' }),
        ctx.step('quick', () => 'quick')
      ])
      return { output: both }
    }
  }
  const { app } = build(t, { agents: { checked } })
  const log = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/checked/runs', payload: { input: null, stream: true } })).body)
  t.same(log.at(-1)!.data.output, ['slow', 'quick'])
  t.match(seen, [
    /^ctx\.step: "Bad Name" is not a valid step name/, /^ctx\.step: "run\." is not a valid step name/, 'ctx.step: the step name must be a string',
    'ctx.step: fn must be a function', 'TypeError'
  ])
  t.same(log.filter((e) => e.event === 'step.completed').map((e) => e.data), [{ name: 'quick', index: 2, output: 'quick' }, { name: 'slow', index: 1, output: 'slow' }],
    'indexes count calls (the failed one included), in call order; events in completion order')
})

t.test('a step that returns nothing journals null; a step that ends after its run stopped is not journaled; ctx.step after the end throws', async (t) => {
  let late: Promise<unknown> = Promise.resolve()
  let after: Promise<unknown> = Promise.resolve()
  const agents: Record<string, Agent> = {
    empty: { async run (_input, ctx) { return { output: await ctx.step('nothing', () => undefined) } } },
    // a step still running when the agent fails beside it
    racing: {
      async run (_input, ctx) {
        late = ctx.step('slow', () => new Promise((resolve) => setTimeout(() => resolve('late'), 50))).catch((err: Error) => err.message)
        throw new Error('failed first')
      }
    },
    // a step running when the run times out, then another asked for
    timed: {
      async run (_input, ctx) {
        late = ctx.step('slow', () => new Promise((resolve) => setTimeout(() => resolve('late'), 100))).catch((err: Error) => err.message)
        await late
        after = ctx.step('next', () => 'never').catch((err: Error) => err.message)
        return { output: null }
      }
    }
  }
  const { app } = build(t, { agents, requestTimeoutMs: 30 })
  const empty = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/empty/runs', payload: { input: null, stream: true } })).body)
  t.same(empty.find((e) => e.event === 'step.completed')!.data, { name: 'nothing', index: 0, output: null })
  t.equal((empty.at(-1)!.data as { output: unknown }).output, null)

  const racing = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/racing/runs', payload: { input: null, stream: true } })).body)
  t.equal(await late, 'The run was cancelled', 'the run had ended: the step is not this attempt\'s to journal')
  t.notOk(racing.some((e) => e.event === 'step.completed'))

  const timed = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/timed/runs', payload: { input: null, stream: true } })).body)
  t.match(timed.at(-1), { event: 'run.failed', data: { error: { code: 'AGENT_TIMEOUT' } } })
  t.match(await late, /did not finish within 30 ms/)
  await eventually(async () => await after !== undefined)
  t.match(await after, /did not finish within 30 ms/, 'a step asked for after the run stopped throws why it stopped')
})

t.test('an approval an earlier attempt asked for is not asked again: a requeued run waits for it, or gets its decision back', async (t) => {
  // the instance that dies is played through the stores: it claims the run, logs its approval (and maybe the
  // decision), and its lease lapses; this instance requeues the run and runs the agent's next attempt
  const decisions: unknown[] = []
  const asking: Agent = {
    resumable: true,
    async run (_input, ctx) {
      const decision = await ctx.requestApproval({ action: 'send-mail', payload: { to: 'ada@example.com' } })
      decisions.push(decision)
      return { output: decision.approved ? 'sent' : 'not sent' }
    }
  }
  const stores = memoryStores()
  const { app } = build(t, { ...stores, runLeaseMs: MIN_RUN_LEASE_MS, agents: { asking } })
  await app.ready()
  const { worker } = app.agentService
  await worker.stop()
  // how the dying instance leaves its approval: decided and logged, decided after its last event was logged, still
  // pending, cancelled, or asked for another action than the next attempt's
  type Left = 'logged' | 'stored' | 'pending' | 'cancelled' | 'other-action'
  const dieAfterAsking = async (left: Left): Promise<{ runId: string, approvalId: string }> => {
    const { runId } = (await app.inject({ method: 'POST', url: '/v1/agents/asking/runs', payload: { input: null, background: true } })).json() as { runId: string }
    const [claimed] = await stores.runStore.claim({ owner: 'dying-instance', until: Date.now() + MIN_RUN_LEASE_MS }, new Date().toISOString(), 1)
    const now = Date.now()
    const approval = {
      id: `approval-${runId}`,
      runId,
      agent: 'asking',
      sessionId: claimed!.sessionId!,
      principal: claimed!.principal,
      action: left === 'other-action' ? 'send-fax' : 'send-mail',
      payload: { to: 'ada@example.com' },
      reason: null,
      status: 'pending' as const,
      requestedAt: new Date(now).toISOString(),
      expiresAt: new Date(now + 60_000).toISOString()
    }
    await stores.approvalStore.create(approval)
    const events = [
      { seq: 1, type: 'run.started', data: JSON.stringify({ runId, attempt: 1 }) },
      { seq: 2, type: 'approval.requested', data: JSON.stringify({ approval }) }
    ]
    if (left === 'logged' || left === 'stored') {
      const decided = await stores.approvalStore.decide(approval.id, { approved: true, comment: null, decidedBy: 'ops', decidedAt: new Date().toISOString() })
      if (left === 'logged') events.push({ seq: 3, type: 'approval.decided', data: JSON.stringify({ approval: (decided as { approval: unknown }).approval }) })
    }
    if (left === 'cancelled') await stores.approvalStore.cancel(approval.id)
    await stores.runStore.append(runId, events, 'dying-instance')
    return { runId, approvalId: approval.id }
  }
  const ended = async (runId: string): Promise<Record<string, any>> => await eventually(async () => {
    const record = (await app.inject({ url: `/v1/runs/${runId}` })).json()
    return record.status === 'completed' && record
  }, MIN_RUN_LEASE_MS + 5_000, 'the requeued run completed')

  // decided before the instance died: the next attempt gets the decision, nobody is asked again
  const decided = await dieAfterAsking('logged')
  worker.start(app.log)
  t.match(await ended(decided.runId), { attempt: 2, result: { output: 'sent' } })
  t.match(decisions, [{ approved: true, decidedBy: 'ops' }])
  t.same((await stores.approvalStore.listPending({ runId: decided.runId })), [], 'no new approval')
  const log = parseSse((await app.inject({ url: `/v1/runs/${decided.runId}/events` })).body)
  t.same(log.map((e) => e.event), ['run.started', 'approval.requested', 'approval.decided', 'run.requeued', 'run.started', 'run.completed'])

  // still pending when it died: the next attempt waits for that same approval, whose decision ends the run
  await worker.stop()
  const pending = await dieAfterAsking('pending')
  worker.start(app.log)
  await eventually(async () => (await app.inject({ url: `/v1/runs/${pending.runId}` })).json().attempt === 2 || undefined, MIN_RUN_LEASE_MS + 5_000, 'requeued')
  await sleep(100)
  t.same((await stores.approvalStore.listPending({ runId: pending.runId })).map((a) => a.id), [pending.approvalId], 'the one asked before, not a new one')
  const decide = await app.inject({ method: 'POST', url: `/v1/approvals/${pending.approvalId}`, payload: { approved: false, comment: 'not today' } })
  t.equal(decide.statusCode, 200)
  t.match(await ended(pending.runId), { attempt: 2, result: { output: 'not sent' } })
  t.match(decisions[1], { approved: false, comment: 'not today' })
  const pendingLog = parseSse((await app.inject({ url: `/v1/runs/${pending.runId}/events` })).body)
  t.same(pendingLog.map((e) => e.event), ['run.started', 'approval.requested', 'run.requeued', 'run.started', 'approval.decided', 'run.completed'])

  // decided after the dying instance's last event was stored: the decision joins the next attempt's log
  await worker.stop()
  const late = await dieAfterAsking('stored')
  worker.start(app.log)
  t.match(await ended(late.runId), { attempt: 2, result: { output: 'sent' } })
  const lateLog = parseSse((await app.inject({ url: `/v1/runs/${late.runId}/events` })).body)
  t.same(lateLog.map((e) => e.event), ['run.started', 'approval.requested', 'run.requeued', 'run.started', 'approval.decided', 'run.completed'])
  t.match(lateLog[4]!.data, { approval: { id: late.approvalId, status: 'approved' } })

  // cancelled (nobody decided it), or asked for another action: asked again, a new approval
  for (const left of ['cancelled', 'other-action'] as const) {
    await worker.stop()
    const asked = await dieAfterAsking(left)
    worker.start(app.log)
    const [fresh] = await eventually(async () => {
      const waiting = await stores.approvalStore.listPending({ runId: asked.runId })
      return waiting.some((a) => a.id !== asked.approvalId) && waiting.filter((a) => a.id !== asked.approvalId)
    }, MIN_RUN_LEASE_MS + 5_000, `a new approval (${left})`)
    t.equal(fresh!.action, 'send-mail', `${left}: asked again`)
    t.equal((await app.inject({ method: 'POST', url: `/v1/approvals/${fresh!.id}`, payload: { approved: true } })).statusCode, 200)
    t.match(await ended(asked.runId), { attempt: 2, result: { output: 'sent' } })
  }
})
