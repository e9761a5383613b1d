import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildOpenApiDocument } from '../../app/openapi.js'
import { writeFile } from 'node:fs/promises'
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Type } from '@sinclair/typebox'
import { createConfig, lintFromString } from '@redocly/openapi-core'
import openapiTS, { astToString } from 'openapi-typescript'
import { defineAgent } from '../../lib/runs/define-agent.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { build, closeStores, echo, listen } from '../helper.js'

interface Operation { responses: Record<string, { content?: Record<string, unknown> }>, parameters?: unknown[], requestBody?: unknown }
type Paths = Record<string, Record<string, Operation>>

t.test('the document validates and names every route and error status', async (t) => {
  const document = await buildOpenApiDocument({ agents: { echo } })
  t.equal(document.openapi, '3.1.0')
  await SwaggerParser.validate(structuredClone(document) as never)
  const paths = document.paths as Paths
  const expected: Record<string, Record<string, number[]>> = {
    '/health': { get: [200, 503] },
    '/v1/health': { get: [200, 503] },
    '/v1/agents': { get: [200] },
    '/v1/agents/{name}': { get: [200, 400, 404] },
    '/v1/agents/{name}/runs': { post: [200, 400, 404, 409, 413, 415, 422, 429, 500, 503, 504] },
    '/v1/agents/echo/runs': { post: [200, 400, 409, 413, 415, 422, 429, 500, 503, 504] },
    '/v1/sessions': { post: [201, 400, 404, 413, 415] },
    '/v1/sessions/{id}': { get: [200, 404], delete: [204, 404] }
  }
  for (const [path, methods] of Object.entries(expected)) {
    t.ok(paths[path], `${path} is documented`)
    for (const [method, statuses] of Object.entries(methods)) {
      const operation = paths[path]![method]!
      t.ok(operation, `${method.toUpperCase()} ${path}`)
      for (const status of statuses) t.ok(operation.responses[String(status)], `${method.toUpperCase()} ${path} documents ${status}`)
    }
  }
  const run = paths['/v1/agents/{name}/runs']!.post!
  t.ok(run.responses['200']!.content!['text/event-stream'], 'the SSE media type is documented')
  t.ok(run.responses['200']!.content!['application/json'])
  t.ok(run.requestBody, 'the run body is documented')
  t.match((document.components as { securitySchemes: object }).securitySchemes, { apiKey: { type: 'apiKey' }, bearerJwt: { scheme: 'bearer' }, adminBearer: { scheme: 'bearer' } })
})

t.test('docs: true with auth on: the page, its assets and the document load without credentials', async (t) => {
  const { app } = build(t, { docs: true, auth: { strategy: 'api-key', keys: ['k'] } })
  const ui = await app.inject({ method: 'GET', url: '/docs' })
  t.ok(ui.statusCode === 200 || ui.statusCode === 302, `ui answers (${ui.statusCode})`)
  const page = await app.inject({ method: 'GET', url: ui.statusCode === 302 ? ui.headers.location! : '/docs' })
  t.equal(page.statusCode, 200)
  t.match(page.body, /swagger-ui/)
  for (const asset of ['/docs/static/swagger-ui.css', '/docs/static/swagger-ui-bundle.js', '/docs/static/swagger-initializer.js']) {
    t.equal((await app.inject({ method: 'GET', url: asset })).statusCode, 200, asset)
  }
  const json = await app.inject({ method: 'GET', url: '/docs/json' })
  t.equal(json.statusCode, 200)
  const document = json.json()
  t.equal(document.openapi, '3.1.0')
  t.same(document.security, [{ apiKey: [] }], 'the API asks for the key')
  t.same(document.paths['/health'].get.security, [], 'health shows no lock')
  t.same(document.paths['/v1/health'].get.security, [])
  t.equal(document.paths['/v1/agents'].get.security, undefined, 'the rest takes the document\'s security')
  t.equal((await app.inject({ method: 'GET', url: '/v1/agents' })).statusCode, 401, 'the API itself still needs the key')
  const without = build(t).app
  t.equal((await without.inject({ method: 'GET', url: '/docs' })).statusCode, 404)
})

t.test('the document is built before ready() only by the plugin', async (t) => {
  const { createAgentService } = await import('../../app/service.js')
  const service = createAgentService({ agents: { echo }, logger: false })
  t.teardown(() => service.close(0))
  await service.app.ready()
  t.equal((service.app.agentService.openApiDocument() as { openapi: string }).openapi, '3.1.0')
  const { corePlugin } = await import('../../plugins/core.js')
  const Fastify = (await import('fastify')).default
  const bare = Fastify({ logger: false })
  await bare.register(corePlugin, { agents: { echo } })
  t.throws(() => bare.agentService.openApiDocument(), /built by the fastify-agents plugin/)
  await bare.close()
})

// an agent that declares its input and output: its own run operation shows them
const greeter = defineAgent({
  description: 'Greets by name',
  input: Type.Object({ name: Type.String({ examples: ['Ada'] }) }, { additionalProperties: false }),
  output: Type.Object({ greeting: Type.String() }),
  async run (input: { name: string }) {
    return { output: { greeting: `Hello, ${input.name}` } }
  }
})

type Json = Record<string, any>

function operations (document: Json): Array<[string, string, Json]> {
  return Object.entries(document.paths as Json).flatMap(([path, item]) => Object.entries(item as Json).map(([method, op]) => [method, path, op as Json] as [string, string, Json]))
}

t.test('servers, license, an operationId for every operation, named schemas by $ref', async (t) => {
  const document = await buildOpenApiDocument({
    agents: { echo, greeter }, publicUrl: 'https://agents.example', adminApi: { enabled: true, bearerToken: 't' }, websocket: true, idempotency: {}
  }) as Json
  await SwaggerParser.validate(structuredClone(document) as never)
  t.same(document.servers, [{ url: 'https://agents.example', description: 'fastify-agents' }])
  t.same(document.info.license, { name: 'MIT', identifier: 'MIT' })
  const ids = operations(document).map(([, , op]) => op.operationId as string)
  t.equal(new Set(ids).size, ids.length, 'unique')
  t.ok(ids.every((id) => /^[a-z][a-zA-Z0-9]*$/.test(id)), 'camelCase')
  // each set by hand in its route's schema (issue 24): nothing is made from the method and the path any more
  t.same(Object.fromEntries(operations(document).map(([method, path, op]) => [`${method} ${path}`, op.operationId])), {
    'get /health': 'getHealth',
    'get /v1/health': 'getV1Health',
    'get /v1/agents': 'listAgents',
    'get /v1/agents/{name}': 'getAgent',
    'post /v1/agents/{name}/runs': 'runAgent',
    'post /v1/sessions': 'createSession',
    'get /v1/sessions': 'listSessions',
    'get /v1/sessions/{id}': 'getSession',
    'delete /v1/sessions/{id}': 'deleteSession',
    'post /v1/sessions/{id}/fork': 'forkSession',
    'get /v1/sessions/{id}/runs': 'listSessionRuns',
    'get /v1/approvals': 'listApprovals',
    'get /v1/approvals/{id}': 'getApproval',
    'post /v1/approvals/{id}': 'decideApproval',
    'get /v1/runs/{runId}': 'getRun',
    'get /v1/runs/{runId}/events': 'getRunEvents',
    'post /v1/runs/{runId}/cancel': 'cancelRun',
    'post /v1/schedules': 'createSchedule',
    'get /v1/schedules': 'listSchedules',
    'get /v1/schedules/{id}': 'getSchedule',
    'patch /v1/schedules/{id}': 'updateSchedule',
    'delete /v1/schedules/{id}': 'deleteSchedule',
    'get /v1/schedules/{id}/runs': 'listScheduleRuns',
    'post /v1/schedules/{id}/trigger': 'triggerSchedule',
    'post /v1/runs/{runId}/replay': 'replayRun',
    'post /v1/agents/{name}/chat': 'chatWithAgent',
    'get /v1/agents/{name}/chat/{id}/stream': 'resumeChatStream',
    'get /v1/agents/{name}/chat/{id}/messages': 'getChatMessages',
    'post /v1/agents/{name}/ag-ui': 'runAgUiAgent',
    'get /v1/a2a/{name}/.well-known/agent-card.json': 'getA2aAgentCard',
    'post /v1/a2a/{name}': 'sendA2aRequest',
    'get /v1/models': 'listModels',
    'get /v1/models/{model}': 'getModel',
    'post /v1/responses': 'createResponse',
    'get /v1/responses/{id}': 'getResponse',
    'delete /v1/responses/{id}': 'deleteResponse',
    'post /v1/responses/{id}/cancel': 'cancelResponse',
    'post /v1/chat/completions': 'createChatCompletion',
    'post /v1/mcp': 'postMcp',
    'get /v1/ws': 'openWebSocket',
    'get /admin/health': 'getAdminHealth',
    'get /admin/agents': 'listAdminAgents',
    'get /admin/audit': 'listAuditEntries',
    'get /admin/sessions': 'listAdminSessions',
    'get /admin/approvals': 'listAdminApprovals',
    'get /admin/checkpoints': 'listCheckpoints',
    'get /admin/runs': 'listAdminRuns',
    'get /admin/runs/{runId}/events': 'listAdminRunEvents',
    'get /admin/live': 'getAdminLiveFeed',
    'get /admin/webhooks': 'listWebhookAttempts',
    'get /admin/schedules': 'listAdminSchedules',
    'get /admin/stats': 'getStats',
    'get /admin/metrics': 'getMetrics',
    'post /v1/agents/echo/runs': 'runEchoAgent',
    'post /v1/agents/greeter/runs': 'runGreeterAgent'
  })
  const again = await buildOpenApiDocument({ agents: { echo, greeter }, adminApi: { enabled: true } }) as Json
  t.same(operations(again).map(([, , op]) => op.operationId), operations(document).filter(([, path]) => path !== '/v1/ws').map(([, , op]) => op.operationId), 'stable')

  const schemas = document.components.schemas as Json
  for (const name of ['RunRequest', 'RunResult', 'ErrorResponse', 'Session', 'Approval', 'HealthResponse', 'Schedule', 'CreateScheduleRequest', 'AgentRunRequest', 'GreeterRunRequest', 'GreeterRunResult']) {
    t.ok(schemas[name], `components.schemas.${name}`)
  }
  const inline: string[] = []
  const walk = (node: unknown, at: string): void => {
    if (typeof node !== 'object' || node === null) return
    if (typeof (node as Json).title === 'string' && (node as Json).type !== undefined) inline.push(at)
    for (const [key, value] of Object.entries(node)) walk(value, `${at}/${key}`)
  }
  walk(document.paths, '#/paths')
  t.same(inline, [], 'no named schema inline in the paths: each is a $ref')
  const run = document.paths['/v1/agents/{name}/runs'].post
  t.same(run.responses['200'].content['application/json'].schema, { $ref: '#/components/schemas/RunResult' })
  t.same(run.responses['404'].content['application/json'].schema, { $ref: '#/components/schemas/ErrorResponse' })
  t.equal(run.responses['404'].description, 'Not found', 'each status keeps its own description')
  t.ok(run.responses['200'].content['text/event-stream'], 'the SSE answer on runAgent')
  t.same(run.responses['202'].content['application/json'].schema, { $ref: '#/components/schemas/QueuedRun' }, 'and the background one')

  const greet = document.paths['/v1/agents/greeter/runs'].post
  t.same(Object.keys(greet.responses['200'].content), ['application/json'], 'the agent\'s own operation answers JSON only')
  t.match(schemas.GreeterRunRequest.properties.input, { type: 'object', properties: { name: { type: 'string' } } })
  t.notOk('stream' in schemas.GreeterRunRequest.properties)
  t.notOk('background' in schemas.GreeterRunRequest.properties)
  t.notOk(greet.responses['202'], 'no queued answer: data is the run result, not a union')
  t.match(schemas.GreeterRunResult.properties.output, { type: 'object', properties: { greeting: { type: 'string' } } })
  t.same(greet.requestBody.content['application/json'].example, { input: { name: 'Ada' } })
})

t.test('the document lints clean with Redocly\'s recommended rules', async (t) => {
  const document = await buildOpenApiDocument({ agents: { echo, greeter }, auth: { strategy: 'api-key', keys: ['k'] }, adminApi: { enabled: true, bearerToken: 't' }, websocket: true, idempotency: {}, docs: true })
  const config = await createConfig({ extends: ['recommended'] })
  const problems = await lintFromString({ source: JSON.stringify(document), absoluteRef: '/openapi.json', config })
  const errors = problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? ''}`)
  t.same(errors, [], 'no errors')
  // the one warning: the WebSocket upgrade answers 101, not a 2xx
  t.same(problems.filter((p) => p.severity !== 'error').map((p) => p.ruleId), ['operation-2xx-response'])
})

t.test('a generated client types the JSON answer of a run (openapi-typescript + openapi-fetch)', async (t) => {
  const document = await buildOpenApiDocument({ agents: { echo, greeter } })
  const dir = t.testdir({})
  await writeFile(join(dir, 'api.d.ts'), astToString(await openapiTS(document as never)))
  await writeFile(join(dir, 'client.ts'), `
import createClient from 'openapi-fetch'
import type { paths } from './api.js'

const client = createClient<paths>({ baseUrl: 'http://localhost:3000' })

export async function greet (name: string): Promise<string> {
  const { data, error } = await client.POST('/v1/agents/greeter/runs', { body: { input: { name } } })
  if (error !== undefined) throw new Error(error.message)
  const greeting: string = data.output.greeting
  const usage: number = data.usage.totalTokens
  return greeting + String(usage)
}

export async function echo (): Promise<unknown> {
  const { data } = await client.POST('/v1/agents/echo/runs', { body: { input: 'hello' } })
  return data?.output
}
`)
  await writeFile(join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, skipLibCheck: true, types: [] },
    files: ['client.ts']
  }))
  await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
  const tsc = new URL('../../../node_modules/typescript/bin/tsc', import.meta.url)
  const result = await promisify(execFile)(process.execPath, [tsc.pathname, '-p', dir]).then(() => '', (error: { stdout: string }) => error.stdout)
  t.equal(result, '', 'the client type-checks: data.output is the agent\'s output type, no cast')
})

t.test('the documented example bodies work when tried', async (t) => {
  const { url, service } = await listen(t, { agents: { echo, greeter }, docs: true })
  const document = (await (await fetch(`${url}/docs/json`)).json()) as Json
  const tried: string[] = []
  for (const [method, path, op] of operations(document)) {
    const example = op.requestBody?.content?.['application/json']?.example
    if (method !== 'post' || example === undefined || !/runs$/.test(path)) continue
    const name = (op.parameters as Json[] | undefined)?.find((p) => p.name === 'name')?.example as string | undefined
    const res = await fetch(url + path.replace('{name}', name ?? ''), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(example) })
    t.equal(res.status, 200, `${op.operationId as string}: ${JSON.stringify(example)}`)
    tried.push(op.operationId as string)
  }
  t.same(tried.sort(), ['runAgent', 'runEchoAgent', 'runGreeterAgent'])
  t.ok(service)
})

t.test('operation ids of colliding agent names, inputs without an example, words in the examples made', async (t) => {
  const digits = { input: Type.String({ pattern: '^[0-9]{3}$' }), async run () { return { output: 1 } } }
  const opaque = { input: Type.Unsafe<string>({ type: 'string' }), async run () { return { output: 1 } } }
  const counter = { input: Type.Object({ n: Type.Integer() }), async run () { return { output: 1 } } }
  const document = await buildOpenApiDocument({ agents: { 'a-b': digits, 'a.b': opaque, counter } }) as Json
  t.same(document.paths['/v1/agents/counter/runs'].post.requestBody.content['application/json'].example, { input: { n: 0 } }, 'one TypeBox makes')
  t.equal(document.paths['/v1/agents/a-b/runs'].post.operationId, 'runABAgent')
  t.equal(document.paths['/v1/agents/a.b/runs'].post.operationId, 'runABAgent2', 'numbered, never the same twice')
  t.equal(document.paths['/v1/agents/a-b/runs'].post.requestBody.content['application/json'].example, undefined, 'no example rather than one that fails')
  t.equal(document.paths['/v1/agents/a.b/runs'].post.requestBody.content['application/json'].example, undefined)

  // TypeBox makes " " for minLength: 1, which reads as nothing in Swagger UI
  const named = {
    input: Type.Object({
      name: Type.String({ minLength: 1 }),
      code: Type.String({ minLength: 12, maxLength: 12 }),
      tag: Type.String({ maxLength: 3 }),
      tags: Type.Array(Type.String({ minLength: 2 }), { minItems: 1 }),
      kind: Type.Union([Type.Literal('a'), Type.Literal('b')]),
      given: Type.String({ default: 'Ada' })
    }),
    async run () { return { output: 1 } }
  }
  const words = await buildOpenApiDocument({ agents: { named } }) as Json
  t.same(words.paths['/v1/agents/named/runs'].post.requestBody.content['application/json'].example, {
    input: { name: 'example', code: 'examplexxxxx', tag: 'exa', tags: ['example'], kind: 'a', given: 'Ada' }
  }, 'a word wherever a free string goes, within its lengths')
})

t.test('building the document leaves the stores of the options alone', async (t) => {
  const dir = t.testdir({})
  const stores = sqliteStores(join(dir, 'data.db'))
  const options = { agents: { echo }, ...stores, idempotency: stores.idempotency, adminApi: { enabled: true, auditStore: stores.auditStore } }
  const document = await buildOpenApiDocument(options) as Json
  t.ok(document.paths['/admin/stats'])
  t.ok(document.paths['/v1/agents/{name}/runs'].post.parameters.some((p: Json) => p.name === 'idempotency-key'), 'idempotency still documented')
  t.same(await stores.sessionStore.list({ limit: 1 }), { sessions: [], nextCursor: null }, 'the stores still serve')
  t.ok(((await buildOpenApiDocument({ agents: { echo }, adminApi: true })) as Json).paths['/admin/stats'], 'adminApi: true, the earlier form')
  await closeStores([stores])
})
