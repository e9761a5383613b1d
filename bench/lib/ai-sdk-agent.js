// The AI SDK agent of the adapter scenario: streamText() over MockLanguageModelV4, through fastify-agents/ai-sdk.
// Loaded only by the servers that mount it, so that the other scenarios never load `ai`.
import { streamText } from 'ai'
import { MockLanguageModelV4 } from 'ai/test'
import { tickingStream } from './ticking-stream.js'

function tickingModel () {
  const model = new MockLanguageModelV4({
    doStream: async (options) => {
      // the mock keeps every call's options: a server streaming for minutes would grow without bound
      model.doStreamCalls.length = 0
      return { stream: tickingStream(options.providerOptions?.bench?.deltas ?? 100) }
    }
  })
  return model
}

/**
 * The AI SDK agents, each streaming `input.deltas` (default 100) text deltas from the SDK's mock model:
 * `ai-ticker` through the adapter, and `ai-by-hand`, a generator agent reading the same streamText() result
 * itself (what the SDK costs apart from the adapter).
 */
export async function aiSdkAgents (pkg) {
  const { aiSdkAgent, modelMessages } = await import(pkg === undefined ? 'fastify-agents/ai-sdk' : pkg.replace(/index\.js$/, 'adapters/ai-sdk.js'))
  const model = tickingModel()
  const call = (input, ctx) => streamText({
    model,
    messages: modelMessages(ctx, input),
    providerOptions: { bench: { deltas: input?.deltas ?? 100 } },
    abortSignal: ctx.signal
  })
  return {
    'ai-ticker': aiSdkAgent({ description: 'one delta per tick, from the AI SDK mock model, through the adapter', run: call }),
    'ai-by-hand': {
      description: 'the same streamText() result, read by a generator agent',
      async * run (input, ctx) {
        for await (const part of call(input, ctx).stream) {
          if (part.type === 'text-delta') yield part.text
        }
      }
    }
  }
}
