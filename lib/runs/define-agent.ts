import type { Agent } from '../core/types.js'

/** A typed identity: `defineAgent({ run: async (input: { q: string }, ctx) => ({ output }) })`. */
export function defineAgent<Input = unknown> (agent: Agent<Input>): Agent<Input> {
  return agent
}
