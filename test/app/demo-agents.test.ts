import t from 'tap'
import { build, listen, parseSse } from '../helper.js'
import { demoAgents } from '../../app/demo-agents.js'
import { openSse } from '../helpers/streams.js'

t.test('echo answers with its input and counts its words as tokens', async (t) => {
  const { app } = build(t, { agents: demoAgents })
  const cases: Array<[unknown, number]> = [['hello', 5], [{ prompt: 'hey' }, 3], [{ n: 1 }, 7]]
  for (const [input, tokens] of cases) {
    const body = (await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input } })).json()
    t.same(body.output, input)
    t.same(body.usage, { inputTokens: tokens, outputTokens: tokens, totalTokens: tokens * 2 })
  }
})

t.test('storyteller streams a story, one word per delta', async (t) => {
  const { app } = build(t, { agents: demoAgents })
  const events = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/storyteller/runs', payload: { input: 'a cat', stream: true } })).body)
  const deltas = events.filter((e) => e.event === 'message.delta').map((e) => e.data.text as string)
  const result = events.at(-1)!.data
  t.equal(deltas.join(''), result.output)
  t.match(result.output, /^Once upon a time there was a cat\./)
  t.equal(result.usage.outputTokens, deltas.length)
  const empty = parseSse((await app.inject({ method: 'POST', url: '/v1/agents/storyteller/runs', payload: { input: '', stream: true } })).body)
  t.match(empty.at(-1)!.data.output, /there was a quiet server/)
})

t.test('slow sleeps for input.ms (capped) and honours its signal', async (t) => {
  const { app } = build(t, { agents: demoAgents, requestTimeoutMs: 100 })
  t.same((await app.inject({ method: 'POST', url: '/v1/agents/slow/runs', payload: { input: { ms: 10 } } })).json().output, { sleptMs: 10 })
  const timedOut = await app.inject({ method: 'POST', url: '/v1/agents/slow/runs', payload: { input: null } })
  t.equal(timedOut.statusCode, 504, 'the default 5 s is cut by the timeout')
  const capped = await app.inject({ method: 'POST', url: '/v1/agents/slow/runs', payload: { input: { ms: 10_000_000 } } })
  t.equal(capped.statusCode, 504)
  t.equal(app.agentService.runs.size, 0, 'the aborted sleeps left nothing running')
})

t.test('approver asks, then acts on the decision', async (t) => {
  const { app, url } = await listen(t, { agents: demoAgents }).then(({ service, url }) => ({ app: service.app, url }))
  for (const approved of [true, false]) {
    const stream = await openSse(url, '/v1/agents/approver/runs', { input: { action: 'deploy v2' } })
    t.equal((await stream.next('message.delta')).data.text, 'Requesting approval to deploy v2…')
    const approval = (await stream.next('approval.requested')).data.approval as { id: string, action: string }
    t.equal(approval.action, 'deploy v2')
    const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved, decidedBy: 'dana' } })
    t.equal(decided.statusCode, 200)
    const done = await stream.next('run.completed')
    t.equal(done.data.output, approved ? 'Approved by dana: did deploy v2.' : 'Not done (rejected): deploy v2.')
    t.equal(done.data.finishReason, approved ? 'stop' : 'rejected')
    stream.close()
  }
  const defaults = await openSse(url, '/v1/agents/approver/runs', { input: null })
  const approval = (await defaults.next('approval.requested')).data.approval as { id: string, action: string }
  t.equal(approval.action, 'deploy', 'the default action')
  await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true } })
  t.equal((await defaults.next('run.completed')).data.output, 'Approved by someone: did deploy.')
  defaults.close()
})
