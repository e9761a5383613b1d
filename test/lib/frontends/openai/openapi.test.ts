// The OpenAI-shaped routes in the OpenAPI document: each with its body, its answers (JSON and, where it streams,
// text/event-stream) and its errors in the OpenAI shape; gone with openaiCompat: false.
import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { buildOpenApiDocument } from '../../../../app/openapi.js'
import { echo } from '../../../helper.js'

interface Operation { responses: Record<string, { content?: Record<string, { schema?: { properties?: Record<string, unknown>, $ref?: string } }> }>, requestBody?: unknown, tags?: string[] }
type Paths = Record<string, Record<string, Operation>>

t.test('the routes are documented, the streams with both media types, the errors in the OpenAI shape', async (t) => {
  const document = await buildOpenApiDocument({ agents: { echo } })
  await SwaggerParser.validate(structuredClone(document) as never)
  const paths = document.paths as Paths
  const create = paths['/v1/responses']!.post!
  t.ok(create.requestBody)
  t.same(Object.keys(create.responses['200']!.content!).sort(), ['application/json', 'text/event-stream'])
  const chat = paths['/v1/chat/completions']!.post!
  t.same(Object.keys(chat.responses['200']!.content!).sort(), ['application/json', 'text/event-stream'])
  const retrieve = paths['/v1/responses/{id}']!.get!
  t.same(Object.keys(retrieve.responses['200']!.content!).sort(), ['application/json', 'text/event-stream'])
  for (const [path, method] of [['/v1/models', 'get'], ['/v1/models/{model}', 'get'], ['/v1/responses/{id}/cancel', 'post'], ['/v1/responses/{id}', 'delete']] as const) {
    t.ok(paths[path]?.[method], `${method} ${path}`)
  }
  const notFound = JSON.stringify(paths['/v1/models/{model}']!.get!.responses['404'])
  t.match(notFound, /OpenAiError/, 'the OpenAI error shape')
  for (const operation of [create, chat, retrieve]) t.same(operation.tags, ['openai'])
  const off = await buildOpenApiDocument({ agents: { echo }, openaiCompat: false })
  t.notOk((off.paths as Paths)['/v1/responses'], 'openaiCompat: false')
})
