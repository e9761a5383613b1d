// The public types are part of the product: these lines are checked by `tsc --noEmit` (npm test), and
// each `@ts-expect-error` fails the type check if the mistake it names ever compiles.
import t from 'tap'
import Fastify from 'fastify'
import { Type } from '@sinclair/typebox'
import { z } from 'zod'
import * as v from 'valibot'
import { toStandardJsonSchema } from '@valibot/to-json-schema'
import { type } from 'arktype'
import agentService, { MemorySessionStore, createAgentService, defineAgent, memoryStores } from '../../index.js'
import type {
  Agent, AgentServiceOptions, AgentService, RunContext, Decision, AuditStore, RunResult, MemorySessionStoreOptions, SessionStore,
  AgentSchema, InferSchema, TypedAgent
} from '../../index.js'
import { aiSdkAgent } from '../../adapters/ai-sdk.js'
import type { StreamTextOutput } from '../../adapters/ai-sdk.js'

const typed = defineAgent({
  description: 'typed input',
  async run (input: { q: string }, ctx) {
    const signal: AbortSignal = ctx.signal
    const decision: Decision = await ctx.requestApproval({ action: 'send', payload: input, timeoutMs: 1000 })
    ctx.emit('message.delta', { text: input.q })
    await ctx.checkpoint({ at: 1 })
    void signal
    return { output: decision.approved ? input.q : null, usage: { inputTokens: 1 }, finishReason: 'stop' }
  }
})

const streaming: Agent = {
  async * run (_input: unknown, ctx: RunContext) {
    yield 'text'
    yield { type: 'tool.call', data: { toolCallId: 'c1', name: ctx.agent, input: {} } }
    return { output: 'done' }
  }
}

// @ts-expect-error an agent needs run()
const noRun: Agent = { description: 'x' }
// @ts-expect-error run returns a result or an async iterable, not a bare value
defineAgent({ run: () => 42 })
// @ts-expect-error a result needs its output
defineAgent({ run: async () => ({ usage: { inputTokens: 1 } }) })
// @ts-expect-error options need agents
const noAgents: AgentServiceOptions = {}
// @ts-expect-error auth strategies are named
const badAuth: AgentServiceOptions = { agents: {}, auth: { strategy: 'basic', keys: [] } }
// @ts-expect-error requestTimeoutMs is a number
const badTimeout: AgentServiceOptions = { agents: {}, requestTimeoutMs: '5s' }

const options: AgentServiceOptions = {
  agents: { typed, streaming },
  ...memoryStores(),
  auth: { strategy: 'jwt', secret: 'x', algorithms: ['HS256'], access: { run: ['agents:run'] } },
  adminApi: { enabled: true, prefix: '/ops' },
  rateLimit: { maxRequests: 10, intervalMs: 1000 }
}
const audit: AuditStore = memoryStores().auditStore
const bounded: MemorySessionStoreOptions = { maxSessions: 50_000 }
const sessions: SessionStore = new MemorySessionStore(bounded)
const boundedStores: AgentServiceOptions = { agents: { typed }, ...memoryStores({ maxSessions: 100 }) }
// @ts-expect-error maxSessions is a number
const badBound: MemorySessionStoreOptions = { maxSessions: '10k' }
void [noRun, noAgents, badAuth, badTimeout, audit, sessions, boundedStores, badBound]

// run's input is typed from the schema in whichever library it is written: a Standard Schema's output type (Zod,
// Valibot, ArkType), TypeBox's Static, unknown for a plain JSON Schema (docs/agents.md, "Typed inputs")
const zodBooking = defineAgent({
  input: z.object({ city: z.string().trim(), nights: z.number().int().default(1) }),
  async run (input) {
    const city: string = input.city
    const nights: number = input.nights // the output type: the default makes it a number, not number | undefined
    // @ts-expect-error the schema has no such property
    void input.country
    // @ts-expect-error city is a string
    const n: number = input.city
    return { output: `${nights} nights in ${city}${n}` }
  }
})
const valibotBooking = defineAgent({
  input: toStandardJsonSchema(v.object({ city: v.string(), nights: v.optional(v.number()) })),
  async run (input) {
    const nights: number | undefined = input.nights
    // @ts-expect-error the schema has no such property
    void input.country
    return { output: input.city.toUpperCase() + String(nights) }
  }
})
const arkBooking = defineAgent({
  input: type({ city: 'string', nights: 'number' }),
  async run (input) {
    // @ts-expect-error nights is a number
    const nights: string = input.nights
    return { output: input.city + nights }
  }
})
const jsonBooking = defineAgent({
  input: { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties: { city: { type: 'string' } } },
  async run (input) {
    // @ts-expect-error a plain JSON Schema types nothing: input is unknown
    void input.city
    return { output: input }
  }
})
// a plain JSON Schema's run may annotate its input itself
const jsonAnnotated = defineAgent({ input: z.toJSONSchema(z.object({ q: z.string() })), async run (input: { q: string }) { return { output: input.q } } })
// @ts-expect-error run's own annotation contradicts the Zod schema
defineAgent({ input: z.object({ q: z.string() }), async run (input: { q: number }) { return { output: input.q } } })
const zodOutputs: TypedAgent<z.ZodObject<{ q: z.ZodString }>> = defineAgent({ input: z.object({ q: z.string() }), output: z.string(), async run (input) { return { output: input.q } } })
const asSchemas: AgentSchema[] = [Type.String(), z.string(), type('string'), toStandardJsonSchema(v.string()), { type: 'string' }]
const inferred: [InferSchema<typeof zodBooking.input>, InferSchema<ReturnType<typeof Type.String>>, InferSchema<{ type: 'string' }>] = [{ city: 'Oslo', nights: 1 }, 'x', null]
const fromModel = aiSdkAgent({
  input: z.object({ topic: z.string() }),
  run (input): StreamTextOutput {
    // @ts-expect-error the schema has no such property
    void input.subject
    throw new Error(input.topic)
  }
})
const schemaAgents: AgentServiceOptions = { agents: { zodBooking, valibotBooking, arkBooking, jsonBooking, jsonAnnotated, zodOutputs, fromModel } }
void [asSchemas, inferred, schemaAgents]

t.test('the public API has the types it documents', async (t) => {
  const service: AgentService = createAgentService({ ...options, logger: false })
  t.teardown(() => service.close(0))
  const app = Fastify({ logger: false })
  t.teardown(() => app.close())
  await app.register(agentService, { agents: { typed } })
  const result: RunResult | undefined = undefined
  t.equal(result, undefined)
  t.equal(typeof service.listen, 'function')
  t.ok(app.agentService.settings.agents.has('typed'))
})
