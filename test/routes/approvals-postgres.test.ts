// Several instances sharing one PostgreSQL schema: a decision made on any of them wakes the run waiting on
// another (LISTEN/NOTIFY), and a checkpoint saved by one is resumed by another.
import t from 'tap'
import { approver } from '../../app/demo-agents.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import type { StoreSet } from '../../lib/stores/types.js'
import type { Agent } from '../../lib/core/types.js'
import { build, closeStores, eventually, listen, parseSse } from '../helper.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { openSse } from '../helpers/streams.js'

/** One instance's stores on the shared schema, closed after the services that use them. */
function storesOn (schema: string): Required<StoreSet> {
  return postgresStores({ connectionString: pgUrl(), schema })
}

const flaky: Agent<{ fail?: boolean }> = {
  async run (input, ctx) {
    if (ctx.resume === undefined) await ctx.checkpoint({ half: 'done' })
    if (input.fail === true) throw new Error('crash after the checkpoint')
    return { output: { resume: ctx.resume ?? null } }
  }
}

if (await requirePg(t)) {
  t.test('a decision posted to instance B wakes the run waiting on instance A within 1 s', async (t) => {
    const schema = withPgSchema(t)
    const storesA = storesOn(schema)
    const storesB = storesOn(schema)
    const a = await listen(t, { agents: { approver }, ...storesA })
    const b = build(t, { agents: { approver }, ...storesB })
    t.teardown(() => closeStores([storesA, storesB]))

    const stream = await openSse(a.url, '/v1/agents/approver/runs', { input: { action: 'migrate' } })
    const approval = (await stream.next('approval.requested')).data.approval

    const listed = await b.app.inject({ method: 'GET', url: '/v1/approvals?agent=approver' })
    t.same(listed.json().approvals.map((x: { id: string }) => x.id), [approval.id], 'B sees the approval A stored')

    const decided = await b.app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, decidedBy: 'dba' } })
    t.equal(decided.statusCode, 200)
    const at = Date.now()
    const event = await stream.next('approval.decided')
    const wokeAfterMs = Date.now() - at
    t.ok(wokeAfterMs < 1_000, `woke after ${wokeAfterMs} ms`)
    t.match(event.data.approval, { id: approval.id, status: 'approved', decision: { decidedBy: 'dba' } })
    t.equal((await stream.next('run.completed')).data.output, 'Approved by dba: did migrate.')
    const late = await a.service.app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: false } })
    t.equal(late.statusCode, 409, 'A sees it decided')
    t.equal(late.json().code, 'APPROVAL_ALREADY_DECIDED')
  })

  t.test('concurrent decisions on two instances: exactly one wins', async (t) => {
    const schema = withPgSchema(t)
    const storesA = storesOn(schema)
    const storesB = storesOn(schema)
    const a = build(t, { agents: { approver }, ...storesA })
    const b = build(t, { agents: { approver }, ...storesB })
    t.teardown(() => closeStores([storesA, storesB]))
    const keepAlive = setInterval(() => {}, 1_000)
    t.teardown(() => clearInterval(keepAlive))

    const run = a.app.inject({ method: 'POST', url: '/v1/agents/approver/runs', payload: { input: {} } })
    const approval = await eventually(async () => (await b.app.inject({ method: 'GET', url: '/v1/approvals' })).json().approvals[0])
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).app.inject({
      method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, decidedBy: `op-${i}` }
    })))
    t.same(answers.map((r) => r.statusCode).sort(), [200, ...Array(19).fill(409)])
    const winner = answers.find((r) => r.statusCode === 200)!.json().decision.decidedBy
    t.equal((await run).json().output, `Approved by ${winner}: did deploy.`)
  })

  t.test('a client gone from instance A: the approval reads as cancelled on B', async (t) => {
    const schema = withPgSchema(t)
    const storesA = storesOn(schema)
    const storesB = storesOn(schema)
    const a = await listen(t, { agents: { approver }, ...storesA })
    const b = build(t, { agents: { approver }, ...storesB })
    t.teardown(() => closeStores([storesA, storesB]))
    const stream = await openSse(a.url, '/v1/agents/approver/runs', { input: {} })
    const approval = (await stream.next('approval.requested')).data.approval
    stream.close()
    const status = await eventually(async () => {
      const current = (await b.app.inject({ method: 'GET', url: `/v1/approvals/${approval.id}` })).json().status
      return current === 'pending' ? undefined : current
    })
    t.equal(status, 'cancelled')
  })

  t.test('a run checkpointed on A and failed is resumed on B under the same runId', async (t) => {
    const schema = withPgSchema(t)
    const storesA = storesOn(schema)
    const storesB = storesOn(schema)
    const a = build(t, { agents: { flaky }, ...storesA })
    const b = build(t, { agents: { flaky }, ...storesB })
    t.teardown(() => closeStores([storesA, storesB]))
    const failed = parseSse((await a.app.inject({ method: 'POST', url: '/v1/agents/flaky/runs', payload: { input: { fail: true }, stream: true } })).body)
    t.same(failed.map((e) => e.event), ['run.started', 'checkpoint.saved', 'run.failed'])
    const { runId, sessionId } = failed[0]!.data
    const resumed = await b.app.inject({ method: 'POST', url: '/v1/agents/flaky/runs', payload: { input: {}, resumeRunId: runId } })
    t.equal(resumed.statusCode, 200)
    t.match(resumed.json(), { runId, sessionId, output: { resume: { step: 1, state: { half: 'done' } } } })
    t.equal(await storesA.checkpointStore.load(runId), null, 'deleted for every instance')
    const again = await a.app.inject({ method: 'POST', url: '/v1/agents/flaky/runs', payload: { input: {}, resumeRunId: runId } })
    t.equal(again.statusCode, 404)
  })
}
