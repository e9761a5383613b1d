// Two instances sharing PostgreSQL (runs, approvals, audit) and Redis (sessions, idempotency): a response made on
// one is retrieved, resumed from a cursor and answered on the other, with the sequence_numbers first sent.
import t from 'tap'
import OpenAI from 'openai'
import type { Test } from 'tap'
import { approver, storyteller } from '../../../../app/demo-agents.js'
import { postgresStores } from '../../../../lib/stores/postgres.js'
import { redisStores } from '../../../../lib/stores/redis.js'
import type { StoreSet } from '../../../../lib/stores/types.js'
import { closeStores, listen } from '../../../helper.js'
import { pgUrl, redisUrl, requirePg, requireRedis, withPgSchema, withRedisPrefix } from '../../../helpers/services.js'

async function instance (t: Test, schema: string, prefix: string): Promise<{ client: OpenAI, stores: StoreSet }> {
  const { sessionStore, idempotency } = redisStores(redisUrl(), { prefix })
  const stores: StoreSet = { ...postgresStores({ connectionString: pgUrl(), schema }), sessionStore, idempotency }
  const { url } = await listen(t, { agents: { storyteller, approver }, ...stores })
  return { client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 }), stores }
}

async function drain<T> (stream: AsyncIterable<T>): Promise<T[]> {
  const events: T[] = []
  for await (const event of stream) events.push(event)
  return events
}

if (await requirePg(t) && await requireRedis(t)) {
  t.test('a background response made on A: retrieved, resumed after a cursor and replayed on B', async (t) => {
    const schema = withPgSchema(t)
    const prefix = withRedisPrefix(t)
    const a = await instance(t, schema, prefix)
    const b = await instance(t, schema, prefix)
    t.teardown(() => closeStores([a.stores, b.stores]))

    const queued = await a.client.responses.create({ model: 'storyteller', input: 'a lighthouse', background: true })
    t.equal(queued.status, 'queued')
    const fromB = await drain(await b.client.responses.retrieve(queued.id, { stream: true, starting_after: 4 }))
    t.equal(fromB[0]!.sequence_number, 5, 'B resumes after the cursor')
    t.same(fromB.map((e) => e.sequence_number), fromB.map((_, i) => i + 5), 'nothing skipped or repeated')
    const completed = fromB.at(-1) as OpenAI.Responses.ResponseCompletedEvent
    t.equal(completed.type, 'response.completed')
    t.equal((await b.client.responses.retrieve(queued.id)).output_text, completed.response.output.map((item) => item.type === 'message' ? item.content.map((c) => c.type === 'output_text' ? c.text : '').join('') : '').join(''))
    const fromA = await drain(await a.client.responses.retrieve(queued.id, { stream: true }))
    t.same(fromA.slice(5), fromB, 'the same events on both instances')
    t.same(await drain(await b.client.responses.retrieve(queued.id, { stream: true })), fromA)

    const next = await b.client.responses.create({ model: 'storyteller', input: 'and then?', previous_response_id: queued.id })
    t.equal(next.conversation?.id, queued.conversation?.id, 'B continues the session A made (sessions in Redis)')
  })

  t.test('an approval asked in a response on A, answered on B: B streams the rest of the same run', async (t) => {
    const schema = withPgSchema(t)
    const prefix = withRedisPrefix(t)
    const a = await instance(t, schema, prefix)
    const b = await instance(t, schema, prefix)
    t.teardown(() => closeStores([a.stores, b.stores]))

    const asked = await a.client.responses.create({ model: 'approver', input: 'go' })
    const request = asked.output.at(-1) as OpenAI.Responses.ResponseOutputItem.McpApprovalRequest
    t.equal(request.type, 'mcp_approval_request')
    const events = await drain(await b.client.responses.create({
      model: 'approver',
      previous_response_id: asked.id,
      input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }],
      stream: true
    }))
    const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent
    t.equal(completed.type, 'response.completed')
    t.match(completed.response.output, [{ type: 'message', content: [{ text: 'Approved by someone: did deploy.' }] }])
    t.same(await drain(await a.client.responses.retrieve(completed.response.id, { stream: true })), events, 'A replays what B sent')
  })
}
