// The front-end routes (docs/front-ends.md) in the OpenAPI document: their bodies, their error statuses and their media types
// (the UI message stream, AG-UI's and A2A's event streams are text/event-stream; A2A also answers JSON-RPC as JSON).
import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildOpenApiDocument } from '../../app/openapi.js'
import { echo } from '../helper.js'

interface Operation { responses: Record<string, { content?: Record<string, unknown> }>, requestBody?: unknown, tags?: string[] }
type Paths = Record<string, Record<string, Operation>>

t.test('the chat, AG-UI and A2A routes are documented, each with its media types', async (t) => {
  const document = await buildOpenApiDocument({ agents: { echo } })
  await SwaggerParser.validate(structuredClone(document) as never)
  const paths = document.paths as Paths
  const chat = paths['/v1/agents/{name}/chat']!.post!
  t.ok(chat.requestBody)
  t.same(Object.keys(chat.responses['200']!.content!), ['text/event-stream'])
  t.ok(chat.responses['404'] && chat.responses['409'] && chat.responses['401'])
  const resume = paths['/v1/agents/{name}/chat/{id}/stream']!.get!
  t.same(Object.keys(resume.responses['200']!.content!), ['text/event-stream'])
  t.ok(resume.responses['204'])
  const agUi = paths['/v1/agents/{name}/ag-ui']!.post!
  t.ok(agUi.requestBody)
  t.same(Object.keys(agUi.responses['200']!.content!), ['text/event-stream'])
  const rpc = paths['/v1/a2a/{name}']!.post!
  t.same(Object.keys(rpc.responses['200']!.content!).sort(), ['application/json', 'text/event-stream'])
  t.ok(rpc.responses['501'], 'without the optional SDK')
  const card = paths['/v1/a2a/{name}/.well-known/agent-card.json']!.get!
  t.ok(card.responses['200'] && card.responses['501'])
  for (const operation of [chat, resume, agUi, rpc, card]) t.same(operation.tags, ['front ends'])
})
