// An agent's schemas in the library its author already uses (docs/agents.md, "Typed inputs"): TypeBox, JSON Schema
// draft-07 and 2020-12, and Standard Schema validators (Zod 4, Valibot, ArkType). The same 400 naming the path before
// anything runs, the schema's own value given to run, the same per-agent OpenAPI schemas from the library's converter.
import t from 'tap'
import type { Test } from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { createConfig, lintFromString } from '@redocly/openapi-core'
import { Type } from '@sinclair/typebox'
import { z } from 'zod'
import * as v from 'valibot'
import { toStandardJsonSchema } from '@valibot/to-json-schema'
import { type } from 'arktype'
import { buildOpenApiDocument } from '../../app/openapi.js'
import type { AgentService } from '../../app/service.js'
import { resolveSettings } from '../../lib/service/settings.js'
import type { Agent, AgentServiceOptions } from '../../lib/core/types.js'
import { memoryStores } from '../../lib/stores/memory.js'
import { build, echo, eventually, listen, sleep } from '../helper.js'
import { openSse, openWs } from '../helpers/streams.js'

type Json = Record<string, any> // eslint-disable-line @typescript-eslint/no-explicit-any

const ZodBooking = z.object({ city: z.string().min(1), nights: z.number().int().min(1) })
const bookingProperties = { city: { type: 'string', minLength: 1 }, nights: { type: 'integer', minimum: 1 } }

/** One booking schema in each library, each refusing the same inputs. */
const kinds = {
  typebox: Type.Object({ city: Type.String({ minLength: 1 }), nights: Type.Integer({ minimum: 1 }) }),
  zod: ZodBooking,
  valibot: toStandardJsonSchema(v.object({ city: v.pipe(v.string(), v.minLength(1)), nights: v.pipe(v.number(), v.integer(), v.minValue(1)) })),
  arktype: type({ city: 'string > 0', nights: 'number.integer >= 1' }),
  draft07: { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object', properties: bookingProperties, required: ['city', 'nights'] },
  // what z.toJSONSchema() emits: draft 2020-12, by its $schema (as plain JSON: Zod 4.6 also hangs its validator on
  // it as a hidden ~standard, which would make it a Standard Schema)
  draft2020: JSON.parse(JSON.stringify(z.toJSONSchema(ZodBooking))) as Record<string, unknown>
}

const bad: Array<[unknown, RegExp]> = [
  ['Oslo', /^body\/input /],
  [{ city: 'Oslo', nights: 0 }, /^body\/input\/nights /],
  [{ city: 'Oslo', nights: '2' }, /^body\/input\/nights /],
  [{ city: '', nights: 1 }, /^body\/input\/city /]
]

function recording (input: unknown, calls: unknown[]): Agent {
  return { input: input as Agent['input'], async run (value) { calls.push(value); return { output: value } } }
}

async function nothingLeft (t: Test, service: AgentService, calls: unknown[]): Promise<void> {
  const { settings, runs } = service.app.agentService
  t.same((await settings.sessionStore.list({ limit: 100 })).sessions, [], 'no session created')
  t.equal(runs.size, 0, 'no run registered')
  t.same(calls, [], 'the agent never ran')
}

t.test('every kind of schema: a bad input is a 400 FST_ERR_VALIDATION naming its path before the agent runs', async (t) => {
  for (const [kind, schema] of Object.entries(kinds)) {
    const calls: unknown[] = []
    const service = build(t, { agents: { booking: recording(schema, calls) } })
    for (const [input, message] of bad) {
      const res = await service.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: { input } })
      t.equal(res.statusCode, 400, `${kind}: ${JSON.stringify(input)}`)
      t.match(res.json(), { statusCode: 400, error: 'Bad Request', code: 'FST_ERR_VALIDATION', message, requestId: String, traceId: String }, kind)
    }
    await nothingLeft(t, service, calls)
    const ok = await service.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: { input: { city: 'Oslo', nights: 2 } } })
    t.equal(ok.statusCode, 200, kind)
    t.same(calls, [{ city: 'Oslo', nights: 2 }], `${kind}: the agent ran once, with the input`)
  }
})

t.test('a Standard Schema\'s message follows the path it names; a JSON Schema\'s is Ajv\'s, as for TypeBox', async (t) => {
  const { app } = build(t, { agents: { zod: recording(kinds.zod, []), draft2020: recording(kinds.draft2020, []), valibot: recording(kinds.valibot, []) } })
  const message = async (agent: string, input: unknown) => (await app.inject({ method: 'POST', url: `/v1/agents/${agent}/runs`, payload: { input } })).json().message
  t.equal(await message('zod', { city: 'Oslo', nights: 0 }), 'body/input/nights is invalid: Too small: expected number to be >=1')
  t.equal(await message('valibot', { city: 'Oslo', nights: 1.5 }), 'body/input/nights is invalid: Invalid integer: Received 1.5')
  t.equal(await message('draft2020', { city: 'Oslo', nights: 0 }), 'body/input/nights must be >= 1')
  t.equal(await message('draft2020', { city: 'Oslo', nights: 1, pets: 1 }), 'body/input/pets is not allowed', 'additionalProperties: false, as z.toJSONSchema() says')
})

t.test('run gets what the schema gives back (transformed, defaults, stripped); the session keeps the input as sent', async (t) => {
  const calls: unknown[] = []
  const trimmed = z.object({ city: z.string().trim().toUpperCase(), nights: z.number().default(1) })
  const defaults = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties: { n: { type: 'integer', default: 3 } } }
  const { app } = build(t, { agents: { trimmed: recording(trimmed, calls), defaults: recording(defaults, calls) } })
  const res = await app.inject({ method: 'POST', url: '/v1/agents/trimmed/runs', payload: { input: { city: ' oslo ', extra: true } } })
  t.equal(res.statusCode, 200)
  t.same(res.json().output, { city: 'OSLO', nights: 1 })
  const session = (await app.inject({ url: `/v1/sessions/${res.json().sessionId as string}` })).json()
  t.same(session.messages[0].content, { city: ' oslo ', extra: true }, 'the history holds what the caller sent')
  t.same((await app.inject({ method: 'POST', url: '/v1/agents/defaults/runs', payload: { input: {} } })).json().output, { n: 3 }, '2020-12 fills defaults, as our draft-07 Ajv does')
  t.same(calls, [{ city: 'OSLO', nights: 1 }, { n: 3 }])
})

t.test('an async Standard Schema check is awaited before anything runs, over JSON, SSE and WebSocket', async (t) => {
  const calls: unknown[] = []
  const checked: string[] = []
  const signup = z.object({
    user: z.string().refine(async (name) => { checked.push(name); await sleep(5); return name !== 'taken' }, 'is taken')
  })
  const { service, url } = await listen(t, { agents: { signup: recording(signup, calls) }, websocket: true })
  const json = await service.app.inject({ method: 'POST', url: '/v1/agents/signup/runs', payload: { input: { user: 'taken' } } })
  t.equal(json.statusCode, 400)
  t.match(json.json(), { code: 'FST_ERR_VALIDATION', message: 'body/input/user is invalid: is taken' })
  const sse = await openSse(url, '/v1/agents/signup/runs', { input: { user: 'taken' } })
  t.equal(sse.status, 400)
  t.match(sse.headers.get('content-type'), /^application\/json/)
  const ws = await openWs(url)
  t.teardown(() => ws.socket.close())
  ws.send({ type: 'run.start', ref: 'w1', agent: 'signup', input: { user: 'taken' } })
  t.same(await ws.next((frame) => frame.type === 'error'), { type: 'error', ref: 'w1', error: { code: 'FST_ERR_VALIDATION', message: 'message/input/user is invalid: is taken' } })
  await nothingLeft(t, service, calls)
  // (Zod's validate tries a synchronous parse first, then the async one: each refinement runs twice)
  t.ok(checked.length >= 3 && checked.every((name) => name === 'taken'), 'the library\'s own async check ran each time')

  const ok = await service.app.inject({ method: 'POST', url: '/v1/agents/signup/runs', payload: { input: { user: 'ada' } } })
  t.same(ok.json().output, { user: 'ada' })
})

t.test('a front end\'s input goes through the same check: the OpenAI chat completion names its message', async (t) => {
  const calls: unknown[] = []
  const { url } = await listen(t, { agents: { long: recording(z.string().min(5), calls) } })
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'long', messages: [{ role: 'user', content: 'hi' }] })
  })
  t.equal(res.status, 400)
  t.match(await res.json(), { error: { code: 'FST_ERR_VALIDATION', param: 'messages/0/content', message: /^body\/messages\/0\/content is invalid: Too small/ } })
  t.same(calls, [])
})

t.test('a background run gets the schema\'s value where it is claimed; a schema that refuses it by then fails it at its start', async (t) => {
  const stores = memoryStores()
  const calls: unknown[] = []
  // two releases of one agent on shared stores: the new one (b) trims, and no longer takes `0`
  const older = z.object({ city: z.string(), nights: z.number() })
  const newer = z.object({ city: z.string().trim(), nights: z.number().min(1) })
  const a = build(t, { ...stores, agents: { booking: recording(older, calls) } })
  const b = build(t, { ...stores, agents: { booking: recording(newer, calls) } })
  await a.app.ready()
  await b.app.ready()
  a.app.agentService.worker.stopClaiming()
  const timer = setInterval(() => {}, 1_000)
  t.teardown(() => clearInterval(timer))

  const queue = async (input: unknown) => (await a.app.inject({ method: 'POST', url: '/v1/agents/booking/runs', payload: { input, background: true } })).json().runId as string
  const settled = (runId: string) => eventually(async () => {
    const run = (await b.app.inject({ url: `/v1/runs/${runId}` })).json()
    return run.status === 'queued' || run.status === 'running' ? undefined : run
  })
  const done = await settled(await queue({ city: ' Oslo ', nights: 2 }))
  t.equal(done.status, 'completed')
  t.same(calls, [{ city: 'Oslo', nights: 2 }], 'claimed by b: run got b\'s value')

  const refused = await settled(await queue({ city: 'Oslo', nights: 0 }))
  t.match(refused, { status: 'failed', error: { code: 'AGENT_ERROR' } })
  t.equal(calls.length, 1, 'the agent never ran with an input its schema refuses')
})

function problems (agents: Record<string, unknown>): string {
  try {
    resolveSettings({ agents } as unknown as AgentServiceOptions)
  } catch (error) {
    return (error as Error).message
  }
  return 'accepted'
}

t.test('a schema that cannot be checked or shown is an invalid option naming it and saying why', async (t) => {
  const run = echo.run
  t.match(problems({ raw: { input: v.object({ a: v.string() }), run } }),
    /^invalid options: \/agents\/raw\/input is not a valid schema: a valibot schema without a JSON Schema converter .*toStandardJsonSchema\(\) from @valibot\/to-json-schema/)
  t.match(problems({ dated: { input: z.object({ at: z.date() }), run } }), /^invalid options: \/agents\/dated\/input is not a valid schema: Date cannot be represented in JSON Schema/)
  t.match(problems({ out: { output: z.string().transform((s) => s.length), run } }), /^invalid options: \/agents\/out\/output is not a valid schema: Transforms cannot be represented/)
  t.match(problems({ raw: { output: v.string(), run } }), /\/agents\/raw\/output is not a valid schema: a valibot schema without/)
  const draft2020 = 'https://json-schema.org/draft/2020-12/schema'
  t.match(problems({ typo: { input: { $schema: draft2020, type: 'strin' }, run } }), /^invalid options: \/agents\/typo\/input is not a valid schema: /)
  t.match(problems({ typo: { input: { $schema: draft2020, type: 'string', frobnicate: true }, run } }), /frobnicate/, 'as strict as draft-07: an unknown keyword is refused')
  t.match(problems({ typo: { output: { $schema: draft2020, type: 12 }, run } }), /^invalid options: \/agents\/typo\/output is not a valid schema: data\/type must be/)
  t.match(problems({ old: { input: { $schema: 'http://json-schema.org/draft-04/schema#', type: 'string' }, run } }), /\/agents\/old\/input is not a valid schema: no schema with key or ref "http:\/\/json-schema.org\/draft-04\/schema#"/)
  t.match(problems({ old: { output: { $schema: 'http://json-schema.org/draft-04/schema#', type: 'string' }, run } }), /\/agents\/old\/output is not a valid schema: no schema with key or ref/, 'named, not thrown as it is')
  t.equal(problems({ fine: { input: { $schema: `${draft2020}#`, type: 'string' }, output: { $schema: draft2020, type: 'string' }, run } }), 'accepted')
  t.equal(problems({ fine: { output: kinds.zod, run }, typed: { input: kinds.arktype, output: kinds.valibot, run } }), 'accepted')
})

t.test('2020-12 is read as 2020-12 (prefixItems, formats); draft-07 keeps its own words (definitions, $ref)', async (t) => {
  const pair = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }], minItems: 2, items: false }
  const mail = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'string', format: 'email' }
  const referenced = { $schema: 'http://json-schema.org/draft-07/schema#', definitions: { n: { type: 'integer' } }, type: 'object', properties: { n: { $ref: '#/definitions/n' } } }
  const { app } = build(t, { agents: { pair: recording(pair, []), mail: recording(mail, []), referenced: recording(referenced, []) } })
  const run = async (agent: string, input: unknown) => (await app.inject({ method: 'POST', url: `/v1/agents/${agent}/runs`, payload: { input } })).json()
  t.match(await run('pair', ['a', 'b']), { code: 'FST_ERR_VALIDATION', message: 'body/input/1 must be integer' })
  t.match(await run('pair', ['a', 1, 2]), { code: 'FST_ERR_VALIDATION', message: 'body/input must NOT have more than 2 items' })
  t.same((await run('pair', ['a', 1])).output, ['a', 1])
  t.match(await run('mail', 'nobody'), { code: 'FST_ERR_VALIDATION', message: 'body/input must match format "email"' })
  t.same((await run('mail', 'ada@example.com')).output, 'ada@example.com')
  t.match(await run('referenced', { n: 'x' }), { code: 'FST_ERR_VALIDATION', message: 'body/input/n must be integer' })
})

t.test('a Standard Schema of any library: its path segments escaped as Ajv\'s, a failure with no issue still named', async (t) => {
  const calls: unknown[] = []
  const custom = {
    '~standard': {
      version: 1,
      vendor: 'custom',
      validate: (value: unknown) => value === 'ok'
        ? { value: 'OK' }
        : value === 'vague' ? { issues: [] } : { issues: [{ message: 'no', path: [{ key: 'a/b' }, Symbol('s'), 0, 'x~y'] }] },
      jsonSchema: { input: () => ({ type: 'string' }), output: () => ({ type: 'string' }) }
    }
  }
  const { app } = build(t, { agents: { custom: recording(custom, calls) } })
  const run = async (input: unknown) => (await app.inject({ method: 'POST', url: '/v1/agents/custom/runs', payload: { input } })).json()
  t.equal((await run('bad')).message, 'body/input/a~1b/Symbol(s)/0/x~0y is invalid: no')
  t.equal((await run('vague')).message, 'body/input is invalid: the schema refused it')
  t.equal((await run('ok')).output, 'OK')
  t.same(calls, ['OK'])
})

t.test('the OpenAPI document: each agent\'s own run operation shows its input and output, from its library\'s converter', async (t) => {
  const agents: Record<string, Agent> = {}
  for (const [kind, schema] of Object.entries(kinds)) agents[kind] = { input: schema, output: schema, async run (input) { return { output: input } } }
  agents.examples = { input: ZodBooking.meta({ examples: [{ city: 'Oslo', nights: 2 }] }), async run (input) { return { output: input } } }
  agents.later = { input: z.string().meta({ examples: ['x'] }).refine(async () => true), async run (input) { return { output: input } } }
  const document = await buildOpenApiDocument({ agents }) as Json
  await SwaggerParser.validate(structuredClone(document) as never)
  const config = await createConfig({ extends: ['recommended'] })
  const lint = await lintFromString({ source: JSON.stringify(document), absoluteRef: '/openapi.json', config })
  t.same(lint.filter((p) => p.severity === 'error').map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? ''}`), [], 'lints clean')

  const schemas = document.components.schemas as Json
  for (const kind of Object.keys(kinds)) {
    const id = kind[0]!.toUpperCase() + kind.slice(1)
    const operation = document.paths[`/v1/agents/${kind}/runs`].post
    t.same(operation.requestBody.content['application/json'].schema, { $ref: `#/components/schemas/${id}RunRequest` }, kind)
    t.match(schemas[`${id}RunRequest`].properties.input, { type: 'object', properties: bookingProperties, required: ['city', 'nights'] }, `${kind}: the input`)
    t.match(schemas[`${id}RunResult`].properties.output, { type: 'object', properties: bookingProperties }, `${kind}: the output`)
  }
  for (const kind of ['zod', 'valibot', 'arktype']) {
    t.notOk('$schema' in schemas[`${kind[0]!.toUpperCase()}${kind.slice(1)}RunRequest`].properties.input, `${kind}: converted for the document's own dialect (2020-12)`)
  }
  t.same(document.paths['/v1/agents/examples/runs'].post.requestBody.content['application/json'].example, { input: { city: 'Oslo', nights: 2 } }, 'the schema\'s own examples')
  t.equal(document.paths['/v1/agents/later/runs'].post.requestBody.content['application/json'].example, undefined, 'an example an async check cannot confirm at once is left out')
  t.equal(document.paths['/v1/agents/zod/runs'].post.requestBody.content['application/json'].example, undefined, 'none given, none made up')
  t.match(document.paths['/v1/agents/typebox/runs'].post.requestBody.content['application/json'].example, { input: { city: String, nights: 1 } }, 'TypeBox\'s, one TypeBox makes')
})
