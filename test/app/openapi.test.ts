import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildOpenApiDocument } from '../../app/openapi.js'
import { build, echo } from '../helper.js'

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

t.test('docs: true serves Swagger UI and the document', async (t) => {
  const { app } = build(t, { docs: true })
  const ui = await app.inject({ method: 'GET', url: '/docs' })
  t.ok(ui.statusCode === 200 || ui.statusCode === 302, `ui answers (${ui.statusCode})`)
  const json = await app.inject({ method: 'GET', url: '/docs/json' })
  t.equal(json.statusCode, 200)
  t.equal(json.json().openapi, '3.1.0')
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
