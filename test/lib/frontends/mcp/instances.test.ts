// Two instances sharing their stores, on PostgreSQL and on Redis (runs and sessions; approvals in PostgreSQL, which
// Redis does not keep): a task made on A is read, awaited and cancelled on B, and an elicitation's answer that lands
// on B decides the approval of a run that A runs — stateless, as behind a load balancer.
import t from 'tap'
import type { Test } from 'tap'
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { Redis } from 'ioredis'
import { CreateTaskResultSchema, CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { approver, slow, storyteller } from '../../../../app/demo-agents.js'
import type { AgentService } from '../../../../app/service.js'
import { postgresStores } from '../../../../lib/stores/postgres.js'
import { redisStores } from '../../../../lib/stores/redis.js'
import type { StoreSet } from '../../../../lib/stores/types.js'
import { closeStores, eventually, listen } from '../../../helper.js'
import { pgUrl, redisUrl, requirePg, requireRedis } from '../../../helpers/services.js'
import { mcpClient } from './helpers.js'

/** A PostgreSQL schema of this front end's own, dropped with everything in it when `t` ends. */
function mcpSchema (t: Test): string {
  const schema = `fa_test_mcp_${randomBytes(6).toString('hex')}`
  t.teardown(async () => {
    const client = new pg.Client(pgUrl())
    await client.connect()
    try {
      await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
    } finally {
      await client.end()
    }
  })
  return schema
}

/** A Redis key prefix of this front end's own; its keys are deleted when `t` ends. */
function mcpPrefix (t: Test): string {
  const prefix = `fa_test_mcp_${randomBytes(6).toString('hex')}:`
  t.teardown(async () => {
    const redis = new Redis(redisUrl())
    try {
      let cursor = '0'
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500)
        if (keys.length > 0) await redis.del(...keys)
        cursor = next
      } while (cursor !== '0')
    } finally {
      await redis.quit()
    }
  })
  return prefix
}

type Backend = 'postgres' | 'redis'

async function instance (t: Test, backend: Backend, schema: string, prefix: string): Promise<{ url: string, service: AgentService, stores: StoreSet }> {
  let stores: StoreSet = postgresStores({ connectionString: pgUrl(), schema })
  if (backend === 'redis') {
    const { runStore, sessionStore } = redisStores(redisUrl(), { prefix })
    stores = { ...stores, runStore, sessionStore }
  }
  const { url, service } = await listen(t, { agents: { storyteller, approver, slow }, ...stores })
  return { url, service, stores }
}

async function pair (t: Test, backend: Backend): Promise<[Awaited<ReturnType<typeof instance>>, Awaited<ReturnType<typeof instance>>]> {
  const schema = mcpSchema(t)
  const prefix = mcpPrefix(t)
  const a = await instance(t, backend, schema, prefix)
  const b = await instance(t, backend, schema, prefix)
  t.teardown(() => closeStores([a.stores, b.stores]))
  return [a, b]
}

/** A client behind a "load balancer": its requests go to `first`, its answers (JSON-RPC responses) to `second`. */
async function splitClient (t: Test, first: string, second: string, approved: boolean): Promise<{ client: Client, answeredOn: string[] }> {
  const answeredOn: string[] = []
  const client = new Client({ name: 'split', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } })
  client.setRequestHandler(ElicitRequestSchema, () => ({ action: 'accept', content: { approved } }))
  const transport = new StreamableHTTPClientTransport(new URL('/v1/mcp', first), {
    fetch: async (url, init) => {
      const body = typeof init?.body === 'string' ? JSON.parse(init.body) as { id?: unknown, method?: unknown } : null
      if (body !== null && body.id !== undefined && body.method === undefined) {
        answeredOn.push(second)
        return fetch(new URL('/v1/mcp', second), init)
      }
      return fetch(url, init)
    }
  })
  await client.connect(transport)
  t.teardown(() => client.close())
  return { client, answeredOn }
}

for (const backend of ['postgres', 'redis'] as const) {
  t.test(`${backend}: a task made on A is read, awaited and cancelled on B`, async (t) => {
    if (!await requirePg(t) || (backend === 'redis' && !await requireRedis(t))) return
    const [a, b] = await pair(t, backend)
    const { client: onA } = await mcpClient(t, a.url)
    const { client: onB } = await mcpClient(t, b.url)

    const { task } = await onA.request({ method: 'tools/call', params: { name: 'storyteller', arguments: { input: 'two instances' }, task: {} } }, CreateTaskResultSchema)
    t.match(await onB.experimental.tasks.getTask(task.taskId), { taskId: task.taskId, status: /^(working|completed)$/ })
    const result = await onB.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema)
    t.match(result, { isError: false, content: [{ text: /two instances/ }], _meta: { runId: task.taskId } }, 'awaited on B')
    t.match(await onA.experimental.tasks.getTask(task.taskId), { status: 'completed' })

    const { task: long } = await onA.request({ method: 'tools/call', params: { name: 'slow', arguments: { input: { ms: 30_000 } }, task: {} } }, CreateTaskResultSchema)
    await eventually(async () => (await onB.experimental.tasks.getTask(long.taskId)).status === 'working' &&
      (a.service.app.agentService.runs.has(long.taskId) || b.service.app.agentService.runs.has(long.taskId)), 5_000, 'the task running')
    t.match(await onB.experimental.tasks.cancelTask(long.taskId), { taskId: long.taskId, status: 'cancelled' }, 'cancelled from B, wherever it runs')
    t.match(await onA.experimental.tasks.getTask(long.taskId), { status: 'cancelled' })
    t.match((await onB.experimental.tasks.listTasks()).tasks.map((listed) => listed.taskId), [long.taskId, task.taskId])
  })

  t.test(`${backend}: an elicitation's answer that lands on B decides the approval of a run on A`, async (t) => {
    if (!await requirePg(t) || (backend === 'redis' && !await requireRedis(t))) return
    const [a, b] = await pair(t, backend)
    const { client, answeredOn } = await splitClient(t, a.url, b.url, true)
    const result = await client.callTool({ name: 'approver', arguments: { input: { action: 'deploy' } } })
    t.same(result.content, [{ type: 'text', text: 'Approved by someone: did deploy.' }])
    t.ok(answeredOn.includes(b.url), 'the answer went to B')
    const runId = (result._meta as { runId: string }).runId
    t.match(await a.stores.runStore!.get(runId), { status: 'completed' }, 'the run A ran')

    // a task whose approval is answered through B, the run claimed by whichever instance had room
    const { client: rejecting } = await splitClient(t, a.url, b.url, false)
    const messages = []
    for await (const message of rejecting.experimental.tasks.callToolStream({ name: 'approver', arguments: { input: { action: 'drop' } } }, undefined, { task: {} })) {
      messages.push(message)
    }
    t.match(messages.at(-1), { type: 'result', result: { content: [{ text: 'Not done (rejected): drop.' }] } })
  })
}
