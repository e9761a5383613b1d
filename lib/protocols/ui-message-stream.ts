// A run projected onto the Vercel AI SDK UI message stream, version 1: what `useChat`'s
// DefaultChatTransport reads (CONTRACT §17). Pure: events in, SSE text out.
import type { UIMessageChunk } from 'ai'
import { isCustomEventType, outputText } from './run-events.js'
import type {
  ApprovalEventData, RunCompletedData, RunEvent, RunFailedData, RunStartedData, TextDeltaData,
  ToolCallData, ToolCallDeltaData, ToolResultData
} from './run-events.js'

// `import type` only: the chat route must not need `ai` installed. The test checks this equals the SDK's
// UI_MESSAGE_STREAM_HEADERS minus `connection`, which HTTP/2 forbids and Node sets on HTTP/1.1 anyway.
export const UI_MESSAGE_STREAM_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  'x-vercel-ai-ui-message-stream': 'v1',
  'x-accel-buffering': 'no'
})

/** The finish reasons the SDK's chunk schema accepts; an agent's other reasons travel as 'other'. */
const FINISH_REASONS = new Set(['stop', 'length', 'content-filter', 'tool-calls', 'error', 'interrupted', 'other'])
type FinishReason = Extract<UIMessageChunk, { type: 'finish' }>['finishReason']

export interface UiMessageStreamOptions {
  /**
   * The events of this run that an earlier response of the chat already carried, up to and including
   * the `approval.requested` being answered. They are learned, not re-sent: the response is the
   * continuation of the same assistant message (same message id).
   */
  delivered?: readonly RunEvent[]
}

export class UiMessageStreamProjection {
  #started = false
  #start: Extract<UIMessageChunk, { type: 'start' }> | null = null
  #open: { type: 'text' | 'reasoning', id: string, deltaPrefix: string } | null = null
  #toolInputs = new Set<string>()
  #ended = false

  constructor (options: UiMessageStreamOptions = {}) {
    for (const event of options.delivered ?? []) {
      if (event.type === 'run.started') this.#start = startChunk(event.data as RunStartedData)
    }
  }

  head (): Record<string, string> {
    return { ...UI_MESSAGE_STREAM_HEADERS }
  }

  /** True once the response must end: after `[DONE]`, nothing more is written. */
  get ended (): boolean {
    return this.#ended
  }

  /**
   * The SSE text for one event ('' when it maps to nothing). `approvalDecided`: the event is an
   * `approval.requested` already decided (a replay that reads the decision from the approval store rather
   * than from the events that follow), so it does not end the response.
   */
  push (event: RunEvent, approvalDecided = false): string {
    return this.#project(event, approvalDecided)
  }

  /**
   * The SSE text for events already in the run's log, as for a resume from the first event. An approval
   * whose decision is also in `events` does not end the response: the client has nothing left to answer.
   */
  replay (events: readonly RunEvent[]): string {
    const decided = new Set<string>()
    for (const event of events) {
      if (event.type === 'approval.decided') decided.add((event.data as ApprovalEventData).approval.id)
    }
    let text = ''
    for (const event of events) {
      const decidedLater = event.type === 'approval.requested' && decided.has((event.data as ApprovalEventData).approval.id)
      text += this.#project(event, decidedLater)
    }
    return text
  }

  #project (event: RunEvent, approvalDecidedLater: boolean): string {
    if (this.#ended) return ''
    // the common case, a delta of the part already open: its frame by concatenation, the same bytes as
    // JSON.stringify({ type, id, delta })
    if (this.#open !== null && event.type === (this.#open.type === 'text' ? 'message.delta' : 'reasoning.delta')) {
      return this.#open.deltaPrefix + JSON.stringify((event.data as TextDeltaData).text) + '}\n\n'
    }
    const chunks: UIMessageChunk[] = []
    if (event.type === 'run.started') {
      this.#start ??= startChunk(event.data as RunStartedData)
    }
    if (!this.#started && this.#start !== null) {
      this.#started = true
      chunks.push(this.#start)
    }
    this.#map(event, chunks, approvalDecidedLater)
    let text = ''
    for (const chunk of chunks) text += `data: ${JSON.stringify(chunk)}\n\n`
    if (this.#ended) text += 'data: [DONE]\n\n'
    return text
  }

  #map (event: RunEvent, chunks: UIMessageChunk[], approvalDecidedLater: boolean): void {
    switch (event.type) {
      case 'run.started':
      case 'checkpoint.saved':
        return
      // (a delta of the part already open took #project's short way: this one opens a part)
      case 'message.delta':
      case 'reasoning.delta': {
        const type = event.type === 'message.delta' ? 'text' : 'reasoning'
        this.#close(chunks)
        const id = `${type}-${event.seq}`
        this.#open = { type, id, deltaPrefix: `data: {"type":"${type}-delta","id":${JSON.stringify(id)},"delta":` }
        chunks.push({ type: `${type}-start`, id })
        chunks.push({ type: `${type}-delta`, id, delta: (event.data as TextDeltaData).text })
        return
      }
      case 'tool.call.delta': {
        const { toolCallId, name, delta } = event.data as ToolCallDeltaData
        this.#close(chunks)
        if (!this.#toolInputs.has(toolCallId)) {
          this.#toolInputs.add(toolCallId)
          chunks.push({ type: 'tool-input-start', toolCallId, toolName: name, providerExecuted: true })
        }
        chunks.push({ type: 'tool-input-delta', toolCallId, inputTextDelta: delta })
        return
      }
      case 'tool.call': {
        const { toolCallId, name, input } = event.data as ToolCallData
        this.#close(chunks)
        chunks.push({ type: 'tool-input-available', toolCallId, toolName: name, input, providerExecuted: true })
        return
      }
      case 'tool.result': {
        const { toolCallId, output, isError } = event.data as ToolResultData
        this.#close(chunks)
        chunks.push(isError
          ? { type: 'tool-output-error', toolCallId, errorText: outputText(output) }
          : { type: 'tool-output-available', toolCallId, output })
        return
      }
      case 'approval.requested': {
        const { approval } = event.data as ApprovalEventData
        this.#close(chunks)
        // A step of its own: the SDK's lastAssistantMessageIsCompleteWithApprovalResponses looks at the
        // last step only, where a tool call still waiting for this approval's outcome would block it.
        chunks.push({ type: 'start-step' })
        chunks.push({
          type: 'tool-input-available',
          toolCallId: approval.id,
          toolName: approval.action,
          input: approval.payload ?? null,
          dynamic: true,
          providerExecuted: true
        })
        chunks.push(approval.reason == null
          ? { type: 'tool-approval-request', approvalId: approval.id, toolCallId: approval.id }
          : { type: 'tool-approval-request', approvalId: approval.id, toolCallId: approval.id, reason: approval.reason })
        if (!approvalDecidedLater) {
          // The client only sends its approval response once this stream has finished.
          chunks.push({ type: 'finish', finishReason: 'tool-calls' })
          this.#ended = true
        }
        return
      }
      case 'approval.decided': {
        const { approval } = event.data as ApprovalEventData
        chunks.push(approval.status === 'approved'
          ? { type: 'tool-output-available', toolCallId: approval.id, output: approval.decision ?? { approved: true } }
          : { type: 'tool-output-denied', toolCallId: approval.id })
        return
      }
      case 'run.completed': {
        const data = event.data as RunCompletedData
        this.#close(chunks)
        const finishReason = (FINISH_REASONS.has(data.finishReason) ? data.finishReason : 'other') as FinishReason
        chunks.push({ type: 'finish', finishReason, messageMetadata: { usage: data.usage } })
        this.#ended = true
        return
      }
      case 'run.failed': {
        const { error } = event.data as RunFailedData
        this.#close(chunks)
        chunks.push({ type: 'message-metadata', messageMetadata: { error } })
        chunks.push(error.code === 'CANCELLED'
          ? { type: 'abort', reason: error.message }
          : { type: 'error', errorText: error.message })
        this.#ended = true
        return
      }
      default:
        // run.requeued is news to the reader (a new attempt follows), like any custom event.
        if (event.type === 'run.requeued' || isCustomEventType(event.type)) {
          this.#close(chunks)
          chunks.push({ type: `data-${event.type}`, data: event.data ?? null })
        }
    }
  }

  #close (chunks: UIMessageChunk[]): void {
    if (this.#open === null) return
    chunks.push({ type: `${this.#open.type}-end`, id: this.#open.id })
    this.#open = null
  }
}

function startChunk (data: RunStartedData): Extract<UIMessageChunk, { type: 'start' }> {
  return {
    type: 'start',
    messageId: data.runId,
    messageMetadata: { runId: data.runId, sessionId: data.sessionId, traceId: data.traceId }
  }
}
