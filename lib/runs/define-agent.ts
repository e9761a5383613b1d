import type { Static, TSchema } from '@sinclair/typebox'
import type { Agent, AgentRunReturn, RunContext } from '../core/types.js'

/** An agent with an input schema: `run` gets what the schema describes. */
export interface TypedAgent<S extends TSchema> extends Omit<Agent, 'input' | 'run'> {
  input: S
  run(input: Static<S>, ctx: RunContext): AgentRunReturn
}

/**
 * A typed identity. With an `input` schema, `run`'s input is `Static<typeof input>` (and the service validates
 * it before the run); without one, `run` may annotate its own: `defineAgent({ run: async (input: { q: string }, ctx) => … })`.
 */
export function defineAgent<S extends TSchema> (agent: TypedAgent<S>): TypedAgent<S>
export function defineAgent<Input = unknown> (agent: Agent<Input> & { input?: undefined }): Agent<Input>
export function defineAgent (agent: Agent): Agent {
  return agent
}
