// The agents every bench server mounts. Plain objects, as a user would write them.

const tick = () => new Promise((resolve) => setImmediate(resolve))

/** Answers with its input (the same work as the bare Fastify and node:http echo routes). */
export const echo = {
  description: 'echo',
  async run (input) {
    return { output: input, usage: { inputTokens: 1, outputTokens: 2 } }
  }
}

/**
 * Streams `input.deltas` (default 100) text deltas, one per event-loop tick. Like a model's stream, it does
 * not poll its signal between tokens: when the run is aborted the runner ends the generator (return()).
 */
export const ticker = {
  description: 'one delta per tick',
  async * run (input) {
    const deltas = input?.deltas ?? 100
    for (let i = 0; i < deltas; i++) {
      await tick()
      yield 'token '
    }
  }
}

/** Holds its stream open, doing nothing, until the client goes away. */
export const idle = {
  description: 'waits for its signal',
  run (_input, ctx) {
    return new Promise((resolve, reject) => {
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true })
    })
  }
}

export const benchAgents = { echo, ticker, idle }

/** A JSON body of about `bytes` bytes: `{ "input": { ... } }`. */
export function jsonBody (bytes = 1024) {
  const input = { prompt: 'Summarise the following text.', tags: ['bench', 'echo'], text: '' }
  const overhead = JSON.stringify({ input }).length
  input.text = 'lorem ipsum dolor sit amet '.repeat(Math.ceil(bytes / 27)).slice(0, Math.max(0, bytes - overhead))
  return JSON.stringify({ input })
}
