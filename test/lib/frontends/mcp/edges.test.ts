// /v1/mcp at its edges: bad JSON-RPC is JSON-RPC's errors (never a 500, never a run), auth and JWT roles, the
// option that turns it off, and a missing SDK.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { Type } from '@sinclair/typebox'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildOpenApiDocument } from '../../../../app/openapi.js'
import { CallToolResultSchema, CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js'
import { storyteller } from '../../../../app/demo-agents.js'
import { loadMcp } from '../../../../lib/frontends/mcp/index.js'
import type { Agent } from '../../../../lib/core/types.js'
import { build, echo, injected, listen } from '../../../helper.js'
import { nowSeconds, signJwt } from '../../../helpers/jwt.js'
import { mcpClient, post } from './helpers.js'

const SECRET = 'a-secret-of-at-least-thirty-two-bytes!'
const typed: Agent = {
  input: Type.Object({ a: Type.Number() }, { additionalProperties: false }),
  async run (input) { return { output: input } }
}

const INIT = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } })

/** The JSON-RPC message of an answer: JSON, or the last `data:` of a stream. */
function message (text: string): any {
  const data = text.split('\n').filter((line) => line.startsWith('data: ')).at(-1)
  return JSON.parse(data === undefined ? text : data.slice(6))
}

t.test('bad JSON-RPC: its error codes, never a 500, never a run', async (t) => {
  const { url, service } = await listen(t, { agents: { typed, storyteller } })
  const runs = service.app.agentService.settings.runStore
  const notJson = await post(url, '{"jsonrpc":')
  t.equal(notJson.status, 400)
  t.match(JSON.parse(notJson.text), { jsonrpc: '2.0', id: null, error: { code: -32700 } })
  t.match(JSON.parse((await post(url, '{"__proto__":{"x":1}}')).text), { error: { code: -32700 } }, 'what the service\'s parser refuses')
  t.match(JSON.parse((await post(url, '{"hello":"world"}')).text), { error: { code: -32700 } }, 'JSON that is no JSON-RPC (the SDK\'s answer)')

  const { client } = await mcpClient(t, url)
  const codeOf = async (request: Promise<unknown>): Promise<number> => ((await request.catch((e: unknown) => e)) as McpError).code
  t.equal(await codeOf(client.request({ method: 'nope/nothing', params: {} } as never, Type as never)), -32601, 'an unknown method')
  t.equal(await codeOf(client.experimental.tasks.getTask(42 as never)), -32602, 'bad params')
  t.equal(await codeOf(client.callTool({ name: 'typed', arguments: { a: 'one' } })), -32602, 'bad arguments')
  const named = await client.callTool({ name: 'typed', arguments: { a: 'one' } }).catch((e: unknown) => e) as McpError
  t.match(named.message, /arguments\/a/, 'naming the field')
  t.equal(await codeOf(client.callTool({ name: 'storyteller', arguments: {} })), -32602, 'a wrapped input missing')
  t.equal(await codeOf(client.callTool({ name: 'nobody', arguments: {} })), -32602, 'an unknown tool')
  t.equal(await codeOf(client.callTool({ name: 'storyteller', arguments: { input: 'x' }, _meta: { sessionId: 7 } })), -32602, 'a session id that is no string')
  t.equal(await codeOf(client.callTool({ name: 'storyteller', arguments: { input: 'x' }, _meta: { sessionId: 'nope' } })), -32602, 'an unknown session')
  t.equal(await codeOf(client.request({ method: 'tools/call', params: { arguments: {} } } as never, Type as never)), -32602, 'a call without a name')
  t.same((await runs.list({ limit: 10 })).runs, [], 'nothing ran')

  const deep = await post(url, '['.repeat(200) + ']'.repeat(200))
  t.equal(deep.status, 400, 'too deep for the service, as everywhere')
  const nul = await post(url, '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\u0000"}}')
  t.match(JSON.parse(nul.text), { code: 'FA_UNSTORABLE_TEXT' })
  const noAccept = await fetch(new URL('/v1/mcp', url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: INIT })
  t.equal(noAccept.status, 406, 'the transport\'s own checks')
  t.equal((await fetch(new URL('/v1/mcp', url))).status, 405, 'no stream of the server\'s own (stateless)')
  t.equal((await fetch(new URL('/v1/mcp', url), { method: 'DELETE' })).headers.get('allow'), 'POST')
})

t.test('auth: 401 with WWW-Authenticate; JWT roles filter tools/list and calls', async (t) => {
  const keyed = await listen(t, { agents: { echo }, auth: { strategy: 'api-key', keys: ['k'] } })
  const refused = await post(keyed.url, INIT)
  t.equal(refused.status, 401)
  t.match(refused.headers.get('www-authenticate'), /^Bearer/)
  const { client: withKey } = await mcpClient(t, keyed.url, { headers: { authorization: 'Bearer k' } })
  t.same((await withKey.listTools()).tools.map((tool) => tool.name), ['echo'])

  const { url } = await listen(t, { agents: { echo, storyteller }, auth: { strategy: 'jwt', secret: SECRET } })
  const token = signJwt({ sub: 'alice', roles: ['agents:run:echo'], exp: nowSeconds() + 600 }, { alg: 'HS256', secret: SECRET })
  const { client } = await mcpClient(t, url, { headers: { authorization: `Bearer ${token}` } })
  t.same((await client.listTools()).tools.map((tool) => tool.name), ['echo'], 'only the agents the token may run')
  t.match(await client.callTool({ name: 'echo', arguments: { input: 'hi' } }), { content: [{ text: 'hi' }] })
  const forbidden = await client.callTool({ name: 'storyteller', arguments: { input: 'x' } }).catch((e: unknown) => e) as McpError
  t.match(forbidden, { code: -32602, message: /Unknown tool: storyteller/ }, 'as unknown as a tool that is not there')
  const none = signJwt({ sub: 'bob', roles: ['approvals:read'], exp: nowSeconds() + 600 }, { alg: 'HS256', secret: SECRET })
  t.equal((await post(url, INIT, { authorization: `Bearer ${none}` })).status, 403, 'no agent to run at all')
})

t.test('a session id says whether the client can be asked; the initialize answer carries it', async (t) => {
  const { url } = await listen(t, { agents: { echo } })
  const plain = await post(url, INIT)
  t.match(plain.headers.get('mcp-session-id'), /^[0-9a-f-]{36}$/)
  const eliciting = await post(url, INIT.replace('"capabilities":{}', '"capabilities":{"elicitation":{}}'))
  t.match(eliciting.headers.get('mcp-session-id'), /\.elicit$/, 'an empty elicitation capability is form mode')
  const urlOnly = await post(url, INIT.replace('"capabilities":{}', '"capabilities":{"elicitation":{"url":{}}}'))
  t.notMatch(urlOnly.headers.get('mcp-session-id'), /\.elicit$/, 'URL mode only: not asked')
  t.match(message(plain.text), { result: { serverInfo: { name: 'fastify-agents' }, capabilities: { tools: {}, tasks: { requests: { tools: { call: {} } } } } } })
  const older = await post(url, INIT.replace('2025-11-25', '2025-06-18'))
  t.match(message(older.text), { result: { protocolVersion: '2025-06-18' } }, 'the version before tasks is spoken too')
  const listed = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }), { 'mcp-protocol-version': '2025-06-18' })
  t.match(message(listed.text), { result: { tools: [{ name: 'echo' }] } })
  const ping = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }), { 'mcp-protocol-version': '2025-11-25' })
  t.equal(ping.headers.get('mcp-session-id'), null, 'only initialize gives one')
  const answer = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 'fa-approval:00000000-0000-4000-8000-000000000000', result: { action: 'accept', content: { approved: true } } }), { 'mcp-protocol-version': '2025-11-25' })
  t.equal(answer.status, 202, 'an answer to an approval that is not the caller\'s changes nothing')
  const refusal = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 'fa-approval:00000000-0000-4000-8000-000000000000', error: { code: -1, message: 'the client could not ask' } }), { 'mcp-protocol-version': '2025-11-25' })
  t.equal(refusal.status, 202, 'an error for an answer leaves the approval as it is')
})

t.test('mcp: false turns /v1/mcp off', async (t) => {
  const { app } = build(t, { mcp: false })
  t.equal((await app.inject({ method: 'POST', url: '/v1/mcp', payload: INIT })).statusCode, 404)
})

t.test('without @modelcontextprotocol/sdk: 501 MCP_UNAVAILABLE naming the package; nothing else changes', async (t) => {
  const mcpLoader = async (): Promise<never> => {
    throw Object.assign(new Error('Cannot find package \'@modelcontextprotocol/sdk\' imported from /x/server.js'), { code: 'ERR_MODULE_NOT_FOUND' })
  }
  const { app } = build(t, injected({ mcpLoader }))
  const res = await app.inject({ method: 'POST', url: '/v1/mcp', headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json' }, payload: INIT })
  t.equal(res.statusCode, 501)
  t.match(res.json(), { code: 'MCP_UNAVAILABLE', message: 'MCP needs the optional peer dependency @modelcontextprotocol/sdk: npm install @modelcontextprotocol/sdk' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'x' } })).statusCode, 200)

  await t.rejects(loadMcp(async () => { throw new Error('a broken install') }), /a broken install/, 'an SDK that is there but fails to load says so')
  const other = build(t)
  t.not((await other.app.inject({ method: 'POST', url: '/v1/mcp', headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json' }, payload: INIT })).statusCode, 501, 'another service in the process loads the real module')
  t.ok((await loadMcp()).answerMcp, 'the real module loads')
})

t.test('the OpenAPI document shows /v1/mcp: its JSON-RPC body, both answers, how to connect; gone with mcp: false', async (t) => {
  const document = await buildOpenApiDocument({ agents: { echo } })
  await SwaggerParser.validate(structuredClone(document) as never)
  const paths = document.paths as Record<string, Record<string, { description?: string, requestBody?: unknown, responses: Record<string, { content?: Record<string, unknown> }> }>>
  const post = paths['/v1/mcp']!.post!
  t.ok(post.requestBody)
  t.same(Object.keys(post.responses['200']!.content!).sort(), ['application/json', 'text/event-stream'])
  t.match(post.description, /StreamableHTTPClientTransport/)
  t.same(Object.keys(paths['/v1/mcp']!), ['post'], 'GET and DELETE (405) left out')
  const off = await buildOpenApiDocument({ agents: { echo }, mcp: false })
  t.notOk((off.paths as Record<string, unknown>)['/v1/mcp'])
})

t.test('what is no task of the caller\'s is not found: a plain run, a task past its ttl, a task of an agent the token may not run', async (t) => {
  const failing: Agent = { async run () { throw new Error('no') } }
  const { url, service } = await listen(t, { agents: { typed, failing, storyteller }, auth: { strategy: 'jwt', secret: SECRET } })
  const token = (roles: string[]): string => signJwt({ sub: 'alice', roles, exp: nowSeconds() + 600 }, { alg: 'HS256', secret: SECRET })
  const { client } = await mcpClient(t, url, { headers: { authorization: `Bearer ${token(['agents:run'])}` } })
  const notFound = async (taskId: string, caller = client): Promise<void> => {
    t.match(await caller.experimental.tasks.getTask(taskId).catch((e: unknown) => e), { code: -32602, message: /Task not found/ }, taskId)
  }
  const plain = await fetch(`${url}/v1/agents/typed/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token(['agents:run'])}` }, body: JSON.stringify({ input: { a: 1 } })
  })
  await notFound(((await plain.json()) as { runId: string }).runId)
  const { task: brief } = await client.request({ method: 'tools/call', params: { name: 'typed', arguments: { a: 1 }, task: { ttl: 1 } } }, CreateTaskResultSchema)
  t.equal(brief.ttl, 1)
  await new Promise((resolve) => setTimeout(resolve, 20))
  await notFound(brief.taskId)

  const { task } = await client.request({ method: 'tools/call', params: { name: 'failing', arguments: { input: null }, task: {} } }, CreateTaskResultSchema)
  t.match(await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema), { isError: true, content: [{ text: /^AGENT_ERROR: / }] })
  t.match(await client.experimental.tasks.getTask(task.taskId), { status: 'failed', statusMessage: /^AGENT_ERROR: / })
  const { client: narrower } = await mcpClient(t, url, { headers: { authorization: `Bearer ${token(['agents:run:typed'])}` } })
  await notFound(task.taskId, narrower)
  t.match(await client.experimental.tasks.listTasks('bogus').catch((e: unknown) => e), { code: -32602 }, 'a cursor it did not hand out')
  t.match(await client.callTool({ name: 'typed' }).catch((e: unknown) => e), { code: -32602, message: /arguments/ }, 'no arguments at all')
  t.ok(service)
})

t.test('import \'fastify-agents\' never loads @modelcontextprotocol/sdk: a process where it cannot be found serves everything else', async (t) => {
  const index = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '../../../../index.js')).href
  const hook = 'export async function resolve (specifier, context, next) {' +
    ' if (specifier.startsWith(\'@modelcontextprotocol/sdk\')) throw Object.assign(new Error("Cannot find package \'" + specifier + "\' imported from " + context.parentURL), { code: \'ERR_MODULE_NOT_FOUND\' });' +
    ' return next(specifier, context) }'
  const script = `
    import { register } from 'node:module'
    register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}))
    const { createAgentService } = await import(${JSON.stringify(index)})
    const service = createAgentService({ logger: false, agents: { echo: { async run (input) { return { output: input } } } } })
    const run = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'x' } })
    const mcp = await service.app.inject({ method: 'POST', url: '/v1/mcp', headers: { 'content-type': 'application/json' }, payload: '{"jsonrpc":"2.0","id":1,"method":"ping"}' })
    console.log(JSON.stringify({ run: run.statusCode, mcp: mcp.statusCode, code: mcp.json().code }))
    await service.close(0)
  `
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 })
  t.equal(child.status, 0, child.stderr)
  t.same(JSON.parse(child.stdout.trim().split('\n').at(-1)!), { run: 200, mcp: 501, code: 'MCP_UNAVAILABLE' })
})

t.test('the rate limit counts MCP requests as any other', async (t) => {
  const { url } = await listen(t, { agents: { echo }, rateLimit: { maxRequests: 2, intervalMs: 60_000 } })
  t.equal((await post(url, INIT)).status, 200)
  t.equal((await post(url, INIT)).status, 200)
  const over = await post(url, INIT)
  t.equal(over.status, 429)
  t.ok(over.headers.get('retry-after'))
})
