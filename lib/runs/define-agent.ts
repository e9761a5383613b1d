import type { Agent, AgentRunReturn, RunContext } from '../core/types.js'
import type { AgentSchema, InferSchema } from '../core/agent-schemas.js'

/** An agent with an input schema: `run` gets what the schema describes (InferSchema). */
export interface TypedAgent<S extends AgentSchema> extends Omit<Agent, 'input' | 'run'> {
  input: S
  run(input: InferSchema<S>, ctx: RunContext): AgentRunReturn
}

/**
 * A typed identity. With an `input` schema, `run`'s input is what the schema gives back: a Standard Schema's output
 * type (Zod, Valibot, ArkType), TypeBox's `Static`, `unknown` for a plain JSON Schema (the service validates it
 * before the run); without one, `run` may annotate its own: `defineAgent({ run: async (input: { q: string }, ctx) => … })`.
 */
export function defineAgent<S extends AgentSchema> (agent: TypedAgent<S>): TypedAgent<S>
export function defineAgent<Input = unknown> (agent: Agent<Input> & { input?: undefined }): Agent<Input>
export function defineAgent (agent: Agent): Agent {
  return agent
}
