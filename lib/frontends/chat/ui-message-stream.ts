// A run projected onto the Vercel AI SDK UI message stream, version 1: what `useChat`'s
// DefaultChatTransport reads (docs/front-ends.md). Pure: events in, SSE text out.
import type { UIMessageChunk } from 'ai'
import { isCustomEventType, outputText, wholeLog } from '../run-events.js'
import type {
  ApprovalEventData, LoggedEvent, RunCompletedData, RunEvent, RunFailedData, RunStartedData, TextDeltaData,
  ToolCallData, ToolCallDeltaData, ToolResultData
} from '../run-events.js'

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
  /**
   * Go on past an approval still pending instead of ending the response there: the request is shown, then its
   * decision and the rest of the run as they come (a page that watches rather than answers).
   */
  throughApprovals?: boolean
}

/** A tool call the run has not answered yet: what an approval asked for it must match. */
interface OpenCall {
  name: string
  /** its input as JSON text, as an approval's payload is compared with it */
  input: string
  /** the approval asked for it, if any */
  approvalId: string | null
}

/** JSON text of a value, `undefined` as `null` (an approval's missing payload is stored as null). */
function jsonOf (value: unknown): string {
  return JSON.stringify(value ?? null)
}

export class UiMessageStreamProjection {
  readonly #throughApprovals: boolean
  #started = false
  #start: Extract<UIMessageChunk, { type: 'start' }> | null = null
  #open: { type: 'text' | 'reasoning', id: string, deltaPrefix: string } | null = null
  #toolInputs = new Set<string>()
  /** tool calls without a result yet, in the order they came */
  #openCalls = new Map<string, OpenCall>()
  /** approvals that belong to a tool call: approval id → tool call id */
  #callOf = new Map<string, string>()
  /** of those, the ones still waiting for a decision that the client is to answer */
  #undecided = new Set<string>()
  /** tool calls whose approval was refused: their result (the denial) is already shown as denied */
  #denied = new Set<string>()
  #ended = false

  constructor (options: UiMessageStreamOptions = {}) {
    this.#throughApprovals = options.throughApprovals === true
    const delivered = options.delivered ?? []
    if (delivered.length === 0) return
    // learned as if projected, nothing written: the client has these parts already
    for (const event of delivered) {
      if (event.type === 'run.started') this.#start = startChunk(event.data as RunStartedData)
      else this.#map(event, [], true)
    }
    this.#open = null
    this.#ended = false
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
   * than from the events that follow), so it does not end the response. An attempt's end that the run goes on
   * after (`goesOn`, read from the log of a run resumed under its id) is news, not the end.
   */
  push (event: LoggedEvent, approvalDecided = false): string {
    return this.#project(event, approvalDecided)
  }

  /**
   * The SSE text for events already in the run's log, as for a resume from the first event. An approval
   * whose decision is also in `events` does not end the response: the client has nothing left to answer; nor does
   * an attempt's end that more events follow.
   */
  replay (events: readonly RunEvent[]): string {
    const decided = new Set<string>()
    for (const event of events) {
      if (event.type === 'approval.decided') decided.add((event.data as ApprovalEventData).approval.id)
    }
    let text = ''
    for (const event of wholeLog(events)) {
      const decidedLater = event.type === 'approval.requested' && decided.has((event.data as ApprovalEventData).approval.id)
      text += this.#project(event, decidedLater)
    }
    return text
  }

  #project (event: LoggedEvent, approvalDecidedLater: boolean): string {
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

  #map (event: LoggedEvent, chunks: UIMessageChunk[], approvalDecidedLater: boolean): void {
    if (event.goesOn === true) return this.#news(event, chunks)
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
        this.#openCalls.set(toolCallId, { name, input: jsonOf(input), approvalId: null })
        chunks.push({ type: 'tool-input-available', toolCallId, toolName: name, input, providerExecuted: true })
        return
      }
      case 'tool.result': {
        const { toolCallId, output, isError } = event.data as ToolResultData
        this.#close(chunks)
        this.#openCalls.delete(toolCallId)
        // the refusal is the call's outcome, as the SDK shows it: no error on top of it
        if (this.#denied.delete(toolCallId) && isError) return
        chunks.push(isError
          ? { type: 'tool-output-error', toolCallId, errorText: outputText(output) }
          : { type: 'tool-output-available', toolCallId, output })
        return
      }
      case 'approval.requested': {
        const { approval } = event.data as ApprovalEventData
        this.#close(chunks)
        const toolCallId = this.#claimCall(approval.id, approval.action, approval.payload)
        if (toolCallId !== null) {
          // The approval of a tool call the client shows already: that call's own request, as the SDK makes it.
          chunks.push(approval.reason == null
            ? { type: 'tool-approval-request', approvalId: approval.id, toolCallId }
            : { type: 'tool-approval-request', approvalId: approval.id, toolCallId, reason: approval.reason })
          if (!approvalDecidedLater) this.#undecided.add(approval.id)
          // The SDK's client answers a step's approvals together: the response ends once each call that waits
          // has its request (the AI SDK adapter asks for all of them at once).
          const waiting = [...this.#openCalls.values()].some((call) => call.approvalId === null)
          if (!waiting && this.#undecided.size > 0) this.#finishForAnswers(chunks)
          return
        }
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
        if (!approvalDecidedLater) this.#finishForAnswers(chunks)
        return
      }
      case 'approval.decided': {
        const { approval } = event.data as ApprovalEventData
        const approved = approval.status === 'approved'
        const toolCallId = this.#callOf.get(approval.id)
        // the answer on the approval, as the page that answered shows it (approval-responded), wherever it was decided
        const comment = approval.decision?.comment
        chunks.push(comment == null
          ? { type: 'tool-approval-response', approvalId: approval.id, approved }
          : { type: 'tool-approval-response', approvalId: approval.id, approved, reason: comment })
        if (toolCallId === undefined) {
          chunks.push(approved
            ? { type: 'tool-output-available', toolCallId: approval.id, output: approval.decision ?? { approved: true } }
            : { type: 'tool-output-denied', toolCallId: approval.id })
          return
        }
        this.#undecided.delete(approval.id)
        // the call's own outcome comes with its result (approved), or is the refusal (anything else)
        if (!approved) {
          this.#denied.add(toolCallId)
          chunks.push({ type: 'tool-output-denied', toolCallId })
        }
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
        if (event.type === 'run.requeued' || isCustomEventType(event.type)) this.#news(event, chunks)
    }
  }

  /**
   * A data part of the event's own: a custom event, and what tells the reader a new attempt follows (run.requeued,
   * an attempt's end that the run goes on after).
   */
  #news (event: RunEvent, chunks: UIMessageChunk[]): void {
    this.#close(chunks)
    chunks.push({ type: `data-${event.type}`, data: event.data ?? null })
  }

  /**
   * The tool call an approval belongs to: the first one still unanswered and not yet asked about whose name is
   * the approval's action and whose input is its payload (what the AI SDK adapter asks), or null.
   */
  #claimCall (approvalId: string, action: string, payload: unknown): string | null {
    const wanted = jsonOf(payload)
    for (const [toolCallId, call] of this.#openCalls) {
      if (call.approvalId !== null || call.name !== action || call.input !== wanted) continue
      call.approvalId = approvalId
      this.#callOf.set(approvalId, toolCallId)
      return toolCallId
    }
    return null
  }

  /** The client only sends its approval responses once this stream has finished: unless it only watches. */
  #finishForAnswers (chunks: UIMessageChunk[]): void {
    if (this.#throughApprovals) return
    chunks.push({ type: 'finish', finishReason: 'tool-calls' })
    this.#ended = true
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
