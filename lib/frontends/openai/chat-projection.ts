// A run's events as a Chat Completions answer (what chat front ends and every OpenAI client read): the text only.
// The agent's own tool calls stay inside the run (a client would try to run them), and an approval waits for a
// decision made elsewhere while the stream stays open.
import { outputText } from '../run-events.js'
import type { RunCompletedData, RunEvent, RunFailedData, TextDeltaData } from '../run-events.js'
import { openAiErrorOf } from './errors.js'

export interface ChatHead {
  /** chatcmpl-<runId> */
  id: string
  /** Unix seconds */
  created: number
  model: string
}

/** Run finish reasons as Chat Completions names them; any other is `stop`. */
const FINISH: Record<string, string> = { length: 'length', 'content-filter': 'content_filter', content_filter: 'content_filter', 'tool-calls': 'stop' }

export function finishReasonOf (finishReason: string): string {
  return FINISH[finishReason] ?? 'stop'
}

export function usageOf (data: RunCompletedData): { prompt_tokens: number, completion_tokens: number, total_tokens: number } {
  return { prompt_tokens: data.usage.inputTokens, completion_tokens: data.usage.outputTokens, total_tokens: data.usage.totalTokens }
}

/** The streamed form: `data: <chat.completion.chunk>` frames, then `data: [DONE]`. */
export class ChatChunkProjection {
  readonly #head: string
  readonly #tail: string
  readonly #includeUsage: boolean
  readonly #chunkHead: string
  #started = false
  #wroteText = false
  #ended = false

  constructor (head: ChatHead, includeUsage: boolean) {
    this.#includeUsage = includeUsage
    // every chunk: the same id, created and model, then its choices (and `usage: null` when usage comes at the end)
    this.#chunkHead = `{"id":${JSON.stringify(head.id)},"object":"chat.completion.chunk","created":${head.created},"model":${JSON.stringify(head.model)},"system_fingerprint":null,"choices":`
    this.#head = `data: ${this.#chunkHead}[{"index":0,"delta":{"content":`
    this.#tail = includeUsage ? '},"logprobs":null,"finish_reason":null}],"usage":null}\n\n' : '},"logprobs":null,"finish_reason":null}]}\n\n'
  }

  get ended (): boolean {
    return this.#ended
  }

  push (event: RunEvent): string {
    if (this.#ended) return ''
    if (event.type === 'message.delta') {
      this.#wroteText = true
      return this.#begin() + this.#head + JSON.stringify((event.data as TextDeltaData).text) + this.#tail
    }
    if (event.type === 'run.completed') {
      const data = event.data as RunCompletedData
      let out = this.#begin()
      // an agent that streamed no text answers with its output
      if (!this.#wroteText) {
        const text = outputText(data.output)
        if (text !== '') out += this.#head + JSON.stringify(text) + this.#tail
      }
      const usage = this.#includeUsage ? ',"usage":null' : ''
      out += `data: ${this.#chunkHead}[{"index":0,"delta":{},"logprobs":null,"finish_reason":${JSON.stringify(finishReasonOf(data.finishReason))}}]${usage}}\n\n`
      if (this.#includeUsage) out += `data: ${this.#chunkHead}[],"usage":${JSON.stringify(usageOf(data))}}\n\n`
      this.#ended = true
      return out + 'data: [DONE]\n\n'
    }
    if (event.type === 'run.failed') {
      const { error } = event.data as RunFailedData
      this.#ended = true
      // what the OpenAI clients raise as an APIError mid-stream
      return `data: ${JSON.stringify(openAiErrorOf(error.code === 'CANCELLED' ? 409 : 500, error.message, error.code, null))}\n\n`
    }
    return ''
  }

  /** The first chunk names the role. */
  #begin (): string {
    if (this.#started) return ''
    this.#started = true
    const usage = this.#includeUsage ? ',"usage":null' : ''
    return `data: ${this.#chunkHead}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${usage}}\n\n`
  }
}
