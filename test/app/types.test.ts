// The public types are part of the product: these lines are checked by `tsc --noEmit` (npm test), and
// each `@ts-expect-error` fails the type check if the mistake it names ever compiles.
import t from 'tap'
import Fastify from 'fastify'
import agentService, { MemorySessionStore, createAgentService, defineAgent, memoryStores } from '../../index.js'
import type {
  Agent, AgentServiceOptions, AgentService, RunContext, Decision, AuditStore, RunResult, MemorySessionStoreOptions, SessionStore
} from '../../index.js'

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
