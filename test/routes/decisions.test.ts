// Decisions that edit or answer (docs/durable-agents.md): POST /v1/approvals/:id with `payload` (an edit, checked
// against the schema the agent gave ctx.requestApproval) and `response`; the bad ones are 400 naming the field, the
// approval still pending. On every approval store (memory, SQLite, PostgreSQL): the schema is kept with the approval.
import { Type } from '@sinclair/typebox'
import t from 'tap'
import type { Test } from 'tap'
import * as z from 'zod'
import type { FastifyInstance } from 'fastify'
import type { Agent, AgentServiceOptions, RunContext } from '../../lib/core/types.js'
import type { ApprovalRecord } from '../../lib/stores/types.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { build, closeStores, eventually, parseSse } from '../helper.js'
import { pgReachable, pgUrl, withPgSchema } from '../helpers/services.js'

function asking (request: Parameters<RunContext['requestApproval']>[0]): Agent {
  return { async run (_input, ctx) { return { output: await ctx.requestApproval(request) } } }
}

async function pendingApproval (app: FastifyInstance): Promise<ApprovalRecord> {
  return eventually(async () => (await app.inject({ url: '/v1/approvals' })).json().approvals[0] as ApprovalRecord, 20_000)
}

const Transfer = Type.Object({ to: Type.String(), amount: Type.Integer({ maximum: 100 }) }, { additionalProperties: false })

async function editsAndAnswers (t: Test, stores: Partial<AgentServiceOptions>): Promise<void> {
  const { app } = build(t, { ...stores, agents: { pay: asking({ action: 'transfer', payload: { to: 'alice', amount: 50 }, schema: Transfer }) } })
  const run = app.inject({ method: 'POST', url: '/v1/agents/pay/runs', payload: { input: null } })
  const approval = await pendingApproval(app)
  t.same(approval.schema, { type: 'object', properties: { to: { type: 'string' }, amount: { type: 'integer', maximum: 100 } }, required: ['to', 'amount'], additionalProperties: false }, 'the schema is kept with the approval, as JSON Schema')

  const decide = (payload: Record<string, unknown>) => app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload })
  const tooMuch = await decide({ approved: true, payload: { to: 'alice', amount: 500 } })
  t.equal(tooMuch.statusCode, 400)
  t.match(tooMuch.json(), { code: 'FST_ERR_VALIDATION', message: /^body\/payload\/amount must be <= 100/ })
  const extra = await decide({ approved: true, payload: { to: 'alice', amount: 5, memo: 'x' } })
  t.match(extra.json(), { statusCode: 400, message: 'body/payload/memo is not allowed' })
  const rejectedEdit = await decide({ approved: false, payload: { to: 'alice', amount: 5 } })
  t.match(rejectedEdit.json(), { statusCode: 400, code: 'FST_ERR_VALIDATION', message: 'body/payload is only allowed with approved: true (an edit of what is approved)' })
  const longAnswer = await decide({ approved: true, response: 'x'.repeat(10_001) })
  t.match(longAnswer.json(), { statusCode: 400, message: /body\/response/ })
  t.match((await app.inject({ url: `/v1/approvals/${approval.id}` })).json(), { status: 'pending' }, 'still pending after every refusal')

  const decided = await decide({ approved: true, payload: { to: 'alice', amount: 20 }, response: 'twenty is enough', comment: 'trimmed' })
  t.equal(decided.statusCode, 200)
  t.match(decided.json().decision, { approved: true, comment: 'trimmed', payload: { to: 'alice', amount: 20 }, edited: true, response: 'twenty is enough' })
  t.same((await run).json().output, {
    approved: true, comment: 'trimmed', decidedBy: null, status: 'approved', payload: { to: 'alice', amount: 20 }, edited: true, response: 'twenty is enough'
  }, 'the agent gets the edit and the answer')
}

t.test('an edit checked against the approval\'s schema; a rejection carries no edit; the agent gets the edit and the answer (memory)', async (t) => {
  await editsAndAnswers(t, {})
})

t.test('the same on SQLite stores', async (t) => {
  const stores = sqliteStores(':memory:')
  t.teardown(() => closeStores([stores]))
  await editsAndAnswers(t, stores)
})

t.test('the same on PostgreSQL stores', { skip: await pgReachable() ? false : 'PostgreSQL not reachable' }, async (t) => {
  const stores = postgresStores({ connectionString: pgUrl(), schema: withPgSchema(t) })
  t.teardown(() => closeStores([stores]))
  await editsAndAnswers(t, stores)
})

t.test('a rejection with a response; a decision without an edit gives the payload asked for', async (t) => {
  const { app } = build(t, { agents: { ask: asking({ action: 'send', payload: { subject: 'hi' } }) } })
  const run = app.inject({ method: 'POST', url: '/v1/agents/ask/runs', payload: { input: null, stream: true } })
  const approval = await pendingApproval(app)
  const decided = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: false, comment: 'not now', response: 'ask again on Monday' } })
  t.equal(decided.statusCode, 200)
  const events = parseSse((await run).body)
  t.same(events.at(-1)!.data.output, { approved: false, comment: 'not now', decidedBy: null, status: 'rejected', payload: { subject: 'hi' }, edited: false, response: 'ask again on Monday' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/approvals/nope', payload: { approved: true } })).statusCode, 404)
})

t.test('a Standard Schema and a JSON Schema 2020-12 check the edit alike; a schema that is not one fails requestApproval', async (t) => {
  const agents: Record<string, Agent> = {
    zod: asking({ action: 'z', schema: z.object({ n: z.number().max(3) }) }),
    json: asking({ action: 'j', schema: { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', prefixItems: [{ type: 'string' }] } }),
    broken: asking({ action: 'b', schema: { type: 'nonsense' } }),
    'not-object': asking({ action: 'b', schema: 42 as unknown as Record<string, unknown> })
  }
  const { app } = build(t, { agents, exposeErrors: true })
  for (const [agent, bad, good, field] of [['zod', { n: 4 }, { n: 2 }, 'body/payload/n'], ['json', [1], ['one'], 'body/payload/0']] as const) {
    const run = app.inject({ method: 'POST', url: `/v1/agents/${agent}/runs`, payload: { input: null } })
    const approval = await pendingApproval(app)
    const refused = await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, payload: bad } })
    t.equal(refused.statusCode, 400, agent)
    t.match(refused.json().message, new RegExp(`^${field} `), agent)
    t.equal((await app.inject({ method: 'POST', url: `/v1/approvals/${approval.id}`, payload: { approved: true, payload: good } })).statusCode, 200)
    t.same((await run).json().output.payload, good)
  }
  const broken = await app.inject({ method: 'POST', url: '/v1/agents/broken/runs', payload: { input: null } })
  t.match(broken.json(), { statusCode: 500, message: /^requestApproval: schema is not a valid schema: / })
  const notObject = await app.inject({ method: 'POST', url: '/v1/agents/not-object/runs', payload: { input: null } })
  t.match(notObject.json(), { statusCode: 500, message: 'requestApproval: schema is not a valid schema: a schema is an object' })
})
