// The AI SDK's mock model (ai/test), answering like the bench's agents: `echo` returns the user's text,
// `ticker` streams 100 deltas of 'token ', one per event-loop tick, `idle` starts a stream and sends
// nothing more until the request is aborted.
import { MockLanguageModelV4 } from 'ai/test'
import { finishReason, tickingStream, usage } from '../lib/ticking-stream.js'

export const DELTAS = 100

/** The text of the last user message of a call's prompt. */
function lastUserText (prompt) {
  for (let i = prompt.length - 1; i >= 0; i--) {
    const message = prompt[i]
    if (message.role !== 'user') continue
    return message.content.filter((part) => part.type === 'text').map((part) => part.text).join('')
  }
  return ''
}

function idleStream (signal) {
  return new ReadableStream({
    start (controller) {
      controller.enqueue({ type: 'stream-start', warnings: [] })
      controller.enqueue({ type: 'text-start', id: 't' })
      signal?.addEventListener('abort', () => controller.error(signal.reason), { once: true })
    }
  })
}

/** kind: 'echo' | 'ticker' | 'idle' */
export function mockModel (kind) {
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      // the mock keeps every call's options: a server under load would grow without bound
      model.doGenerateCalls.length = 0
      const text = lastUserText(options.prompt)
      return { content: [{ type: 'text', text }], finishReason, usage: usage(2), warnings: [] }
    },
    doStream: async (options) => {
      model.doStreamCalls.length = 0
      return { stream: kind === 'idle' ? idleStream(options.abortSignal) : tickingStream(DELTAS) }
    }
  })
  return model
}
