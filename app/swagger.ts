import type { SwaggerOptions } from '@fastify/swagger'
import { Kind } from '@sinclair/typebox'
import type { TSchema } from '@sinclair/typebox'
import type { AgentSchema, CompiledAgentSchemas, JsonSchema } from '../lib/core/agent-schemas.js'
import type { Settings } from '../lib/service/settings.js'
import { packageVersion as version } from '../lib/core/version.js'

type Json = Record<string, any> // eslint-disable-line @typescript-eslint/no-explicit-any
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']

function pascal (text: string): string {
  return text.split(/[^A-Za-z0-9]+/).filter((part) => part !== '').map((part) => part[0]!.toUpperCase() + part.slice(1)).join('')
}

/** A value for `schema` from its own examples or default, an object's from its properties'; undefined when none is given. */
function givenExample (schema: JsonSchema): unknown {
  const given = (schema.examples as unknown[] | undefined)?.[0] ?? schema.default
  if (given !== undefined || schema.type !== 'object' || schema.properties === undefined) return given
  const value: Record<string, unknown> = {}
  for (const [key, property] of Object.entries(schema.properties as Record<string, JsonSchema>)) {
    const example = givenExample(property)
    if (example !== undefined) value[key] = example
  }
  return Object.keys(value).length > 0 ? value : undefined
}

// TypeBox's value module (dozens of files), loaded with the document's options rather than with the package
let valueModule: typeof import('@sinclair/typebox/value') | null = null

/**
 * The schema with a word as the default of each free string (no pattern, format or enum), as long as its lengths
 * allow: Value.Create fills strings with spaces, and `minLength: 1` read as `" "` in Swagger UI.
 */
function withWords<T> (schema: T): T {
  if (typeof schema !== 'object' || schema === null) return schema
  if (Array.isArray(schema)) return schema.map(withWords) as T
  // a spread keeps TypeBox's symbol keys (Kind), which Value.Create reads
  const copy: Json = { ...schema }
  for (const key of Object.keys(copy)) copy[key] = withWords(copy[key])
  if (copy.type === 'string' && copy.default === undefined && copy.pattern === undefined && copy.format === undefined && copy.enum === undefined && copy.const === undefined) {
    copy.default = 'example'.padEnd(copy.minLength ?? 0, 'x').slice(0, copy.maxLength)
  }
  return copy as T
}

/**
 * An input the agent's schema accepts, for the example body: from the schema's examples, else (TypeBox) one TypeBox
 * makes; checked by the agent's own validator (a check that is async confirms nothing here).
 */
function exampleInput (schema: AgentSchema | undefined, compiled: CompiledAgentSchemas | undefined): unknown {
  if (schema === undefined) return 'hello'
  const { Value } = valueModule!
  const { input, validate } = compiled!
  const makers = [() => givenExample(input!)]
  if (Kind in schema) makers.push(() => Value.Create(withWords(schema as TSchema)))
  for (const make of makers) {
    try {
      const value = make()
      if (value === undefined) continue
      const checked = validate!(structuredClone(value), 'input')
      if (checked instanceof Promise) checked.catch(() => {})
      else return value
    } catch {}
  }
  return undefined
}

/**
 * One run operation per agent (`POST …/agents/echo/runs`, `runEchoAgent`), with the agent's own input and output
 * schemas: JSON only, so that a generated client types `data.output` at once. Streaming stays on `runAgent`,
 * which documents both answers.
 */
function addAgentOperations (document: Json, settings: Settings): void {
  // the service always mounts the run route (the document is the whole service's)
  const [genericPath, item] = Object.entries(document.paths as Json).find(([path, item]) => /\/agents\/\{name\}\/runs$/.test(path) && item.post !== undefined)!
  const base = genericPath.slice(0, -'/agents/{name}/runs'.length)
  const run = item.post as Json
  const request = run.requestBody.content['application/json']
  const firstAgent = settings.agents.keys().next().value as string
  request.example = { input: 'hello' }
  for (const parameter of run.parameters as Json[]) if (parameter.name === 'name') parameter.example = firstAgent

  for (const [name, agent] of settings.agents) {
    const id = pascal(name)
    const operation = structuredClone(run)
    operation.operationId = `run${id}Agent`
    operation.summary = `Run ${name}`
    operation.description = (agent.description ?? '') + (agent.description === undefined ? '' : '\n\n') +
      `Answers JSON. For Server-Sent Events (\`Accept: text/event-stream\`) or a background run (\`"background": true\`, 202) use runAgent (\`POST ${base}/agents/{name}/runs\`).`
    operation.parameters = (operation.parameters as Json[]).filter((parameter) => parameter.name !== 'name')
    if (operation.parameters.length === 0) delete operation.parameters
    const body = operation.requestBody.content['application/json']
    delete body.schema.properties.stream
    delete body.schema.properties.background
    delete operation.responses['202']
    // without `stream` and `background`: this operation answers the run's JSON result only
    body.schema.title = 'AgentRunRequest'
    const compiled = settings.agentSchemas.get(name)
    if (compiled?.input !== undefined) {
      body.schema.properties.input = structuredClone(compiled.input)
      body.schema.title = `${id}RunRequest`
    }
    const input = exampleInput(agent.input, compiled)
    if (input === undefined) delete body.example
    else body.example = { input }
    const ok = operation.responses['200']
    ok.description = 'The run result'
    const result = structuredClone(ok.content['application/json'])
    if (compiled?.output !== undefined) {
      result.schema.properties.output = structuredClone(compiled.output)
      result.schema.title = `${id}RunResult`
    }
    ok.content = { 'application/json': result }
    document.paths[`${base}/agents/${name}/runs`] = { post: operation }
  }
}

/**
 * Every schema with a title (the TypeBox schemas of schemas/ name themselves) moves to `components.schemas` and is
 * referenced with `$ref`; two different shapes under one title get numbered names.
 */
function extractNamedSchemas (document: Json): void {
  const components: Json = document.components.schemas ??= {}
  const shapes = new Map<string, string>()
  const descriptions = new Map<string, Set<string | undefined>>()
  const shapeOf = (node: Json): string => JSON.stringify({ ...node, description: undefined })
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(visit)
    if (typeof node !== 'object' || node === null) return node
    const object = node as Json
    for (const key of Object.keys(object)) object[key] = visit(object[key])
    if (typeof object.title !== 'string') return object
    const shape = shapeOf(object)
    let name: string = object.title
    for (let n = 2; shapes.has(name) && shapes.get(name) !== shape; n++) name = `${object.title as string}${n}`
    if (!shapes.has(name)) {
      shapes.set(name, shape)
      components[name] = object
    }
    const seen = descriptions.get(name) ?? new Set()
    seen.add(object.description as string | undefined)
    descriptions.set(name, seen)
    return { $ref: `#/components/schemas/${name}` }
  }
  for (const item of Object.values(document.paths as Json)) {
    for (const method of METHODS) {
      const operation = (item as Json)[method]
      if (operation === undefined) continue
      for (const parameter of operation.parameters ?? []) if (parameter.schema !== undefined) parameter.schema = visit(parameter.schema)
      for (const media of Object.values(operation.requestBody?.content ?? {})) (media as Json).schema = visit((media as Json).schema)
      for (const response of Object.values(operation.responses)) {
        for (const media of Object.values((response as Json).content ?? {})) (media as Json).schema = visit((media as Json).schema)
      }
    }
  }
  // a description that differs between uses (each error status says its own) belongs to the response, not the schema
  for (const [name, seen] of descriptions) if (seen.size > 1) delete components[name].description
}

/** The document as @fastify/swagger builds it from the routes, completed: ids, public operations, per-agent runs, components. */
export function completeDocument (generated: Json, settings: Settings, publicRoutes: ReadonlySet<string>): Json {
  const document = structuredClone(generated)
  addAgentOperations(document, settings)
  const used = new Set<string>()
  for (const [path, item] of Object.entries(document.paths as Json)) {
    for (const method of METHODS) {
      const operation = (item as Json)[method]
      if (operation === undefined) continue
      // every route names its operation in its schema (test/app/openapi.test.ts holds them to it); a route plugin
      // that a host app mounts twice gets a number on its second id, as ids are unique
      const wanted: string | undefined = operation.operationId
      if (wanted !== undefined) {
        let id = wanted
        for (let n = 2; used.has(id); n++) id = `${wanted}${n}`
        used.add(id)
        operation.operationId = id
      }
      // no lock on what needs no credential (health): the document's security would otherwise apply
      if (publicRoutes.has(`${method.toUpperCase()} ${path}`)) operation.security = []
    }
  }
  extractNamedSchemas(document)
  return document
}

/** @fastify/swagger's options: the document is built from the routes' own TypeBox schemas, then completed. */
export async function openApiOptions (settings: Settings, publicRoutes: ReadonlySet<string>): Promise<SwaggerOptions> {
  valueModule ??= await import('@sinclair/typebox/value')
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'fastify-agents',
        version,
        description: 'Named AI agents over JSON, Server-Sent Events and WebSocket.',
        license: { name: 'MIT', identifier: 'MIT' }
      },
      // the `publicUrl` option; without it, the origin the document was read from (Swagger UI's own)
      servers: [{ url: settings.publicUrl ?? '/', description: 'fastify-agents' }],
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'api-key auth (also accepted as Authorization: Bearer <key>)' },
          bearerJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'JWT auth with roles' },
          adminBearer: { type: 'http', scheme: 'bearer', description: 'The Admin API token (adminApi.bearerToken)' }
        }
      },
      security: settings.auth === null ? [] : settings.auth.strategy === 'api-key' ? [{ apiKey: [] }] : [{ bearerJwt: [] }]
    },
    hideUntagged: false,
    transformObject: (documentObject) => completeDocument((documentObject as { openapiObject: Json }).openapiObject, settings, publicRoutes)
  }
}
