// Typed agents: the lines outside the tests are checked by `tsc` (npm test); each `@ts-expect-error` fails
// the type check if the mistake it names ever compiles.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { defineAgent } from '../../../index.js'
import type { Agent, AgentServiceOptions } from '../../../index.js'
import { resolveSettings } from '../../../lib/service/settings.js'
import { echo } from '../../helper.js'

const Question = Type.Object({ q: Type.String(), limit: Type.Optional(Type.Integer({ minimum: 1 })) }, { additionalProperties: false })

const typed = defineAgent({
  description: 'typed by its schema',
  input: Question,
  output: Type.Object({ answer: Type.String() }),
  resumable: true,
  async run (input, ctx) {
    const q: string = input.q
    const limit: number | undefined = input.limit
    void ctx.signal
    return { output: { answer: `${q} (${limit ?? 1})` } }
  }
})
const streaming = defineAgent({
  input: Type.Array(Type.String()),
  async * run (input) {
    for (const word of input) yield word.toUpperCase()
  }
})
const annotated = defineAgent({ async run (input: { n: number }) { return { output: input.n + 1 } } })
const untyped = defineAgent({ async run (input) { return { output: input } } })

defineAgent({
  input: Question,
  async run (input) {
    // @ts-expect-error the schema says q is a string
    const n: number = input.q
    // @ts-expect-error the schema has no such property
    void input.missing
    return { output: n }
  }
})
// @ts-expect-error run's own annotation contradicts the schema
defineAgent({ input: Question, async run (input: { q: number }) { return { output: input.q } } })
// @ts-expect-error input is a schema, not a value
defineAgent({ input: 'string', async run () { return { output: 1 } } })
// @ts-expect-error resumable is a boolean
defineAgent({ resumable: 'yes', async run () { return { output: 1 } } })

// typed agents go where any agent goes
const options: AgentServiceOptions = { agents: { typed, streaming, annotated, untyped } }
const asAgent: Agent = typed
void [options, asAgent]

function problems (agents: Record<string, unknown>): string {
  try {
    resolveSettings({ agents } as unknown as AgentServiceOptions)
  } catch (error) {
    return (error as Error).message
  }
  return 'accepted'
}

t.test('defineAgent returns the agent as given', async (t) => {
  t.equal(typed.input, Question)
  t.equal(typed.resumable, true)
  t.same(Object.keys(typed).sort(), ['description', 'input', 'output', 'resumable', 'run'])
})

t.test('an agent schema that is not one, or a resumable that is not a boolean, is an invalid option naming it', async (t) => {
  t.equal(problems({ typed, echo }), 'accepted')
  t.match(problems({ bad: { input: { type: 'strin' }, run: echo.run } }), /^invalid options: \/agents\/bad\/input is not a valid schema: /)
  t.match(problems({ bad: { input: { type: 'object', properties: { a: { type: 'string' } }, frobnicate: true }, run: echo.run } }), /\/agents\/bad\/input is not a valid schema: .*frobnicate/)
  t.match(problems({ 'a.b': { input: 'string', run: echo.run } }), /\/agents\/a\.b\/input is not a valid schema/)
  t.match(problems({ out: { output: { type: 12 }, run: echo.run } }), /^invalid options: \/agents\/out\/output is not a valid schema: data\/type must be/)
  t.equal(problems({ flag: { resumable: 'yes', run: echo.run } }), 'invalid options: /agents/flag/resumable must be boolean')
  t.equal(problems({ both: { input: { type: 'nope' }, resumable: 1, run: echo.run } }).split('; ').length, 2, 'every problem named at once')
  t.equal(problems({ fine: { input: Type.Any(), output: Type.Unknown(), resumable: false, run: echo.run } }), 'accepted')
  t.equal(resolveSettings({ agents: { typed, echo } }).agentSchemas.size, 1, 'compiled once, for the agent with schemas')
})
