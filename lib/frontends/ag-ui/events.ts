// A run projected onto AG-UI 1.0 over SSE (what CopilotKit's HttpAgent reads), docs/front-ends.md. Pure:
// events in, `data: <event>` frames out. One AG-UI run per HTTP response: an approval ends it as an
// interrupt, and the answer (RunAgentInput.resume) opens a new AG-UI run over the rest of the same run.
import type { Event as CoreEvent, Interrupt } from '@ag-ui/core'
import { isCustomEventType, outputText } from '../run-events.js'
import type {
  ApprovalEventData, LoggedEvent, RunCompletedData, RunEvent, RunFailedData, RunStartedData, TextDeltaData,
  ToolCallData, ToolCallDeltaData, ToolResultData
} from '../run-events.js'

// The core's event types carry a string enum; on the wire (and here, without importing it at run time)
// they are the enum's string values.
type Wire<E> = E extends { type: infer T extends string } ? Omit<E, 'type'> & { type: `${T}` } : never
export type AgUiEvent = Wire<CoreEvent>

export const AG_UI_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no'
})

/** What an answer to an approval interrupt looks like: the `payload` of its resume entry. */
export const APPROVAL_RESPONSE_SCHEMA = Object.freeze({
  type: 'object',
  properties: {
    approved: { type: 'boolean' },
    comment: { type: 'string', maxLength: 2000 },
    payload: { description: 'only with approved: true: the payload edited' },
    response: { type: 'string', maxLength: 10_000 }
  },
  required: ['approved'],
  additionalProperties: false
})

/** The name of the CUSTOM event that announces an interrupt to clients predating interrupt outcomes. */
export const LEGACY_INTERRUPT_EVENT = 'on_interrupt'

/**
 * An interrupt's id: the approval's, then the id of the AG-UI run it interrupts. The client names the interrupt in
 * its `resume` (and sends no `parentRunId`): that is how the continuation knows which AG-UI run it continues
 * without the service keeping the AG-UI ids anywhere. Approval ids are UUIDs: the first `:` ends them.
 */
export function interruptId (approvalId: string, agUiRunId: string): string {
  return `${approvalId}:${agUiRunId}`
}

/** The approval an interrupt id names, and the AG-UI run it interrupted (absent for a bare approval id). */
export function parseInterruptId (id: string): { approvalId: string, agUiRunId?: string } {
  const at = id.indexOf(':')
  return at === -1 ? { approvalId: id } : { approvalId: id.slice(0, at), agUiRunId: id.slice(at + 1) }
}

export interface AgUiRunOptions {
  /** The client's threadId (it names the session), echoed in RUN_STARTED and RUN_FINISHED. */
  threadId: string
  /** The client's runId for this AG-UI run, echoed likewise. */
  runId: string
  /** Set on a continuation: the AG-UI run this one continues, as the client knew it (its `runId`). */
  parentRunId?: string
  /** Events an earlier AG-UI run of the same service run already carried: learned, not re-sent. */
  delivered?: readonly RunEvent[]
}

export class AgUiProjection {
  readonly #threadId: string
  readonly #runId: string
  readonly #parentRunId: string | undefined
  #service: RunStartedData | null = null
  #started = false
  #open: { type: 'text' | 'reasoning', id: string, deltaPrefix: string } | null = null
  #openTools = new Set<string>()
  #ended = false

  constructor (options: AgUiRunOptions) {
    this.#threadId = options.threadId
    this.#runId = options.runId
    this.#parentRunId = options.parentRunId
    for (const event of options.delivered ?? []) {
      if (event.type === 'run.started') this.#service ??= event.data as RunStartedData
    }
  }

  head (): Record<string, string> {
    return { ...AG_UI_HEADERS }
  }

  /** True once RUN_FINISHED or RUN_ERROR is written: the response must end. */
  get ended (): boolean {
    return this.#ended
  }

  /**
   * The SSE text for one event ('' when it maps to nothing). An attempt's end that the run goes on after (`goesOn`,
   * read from the log of a run resumed under its id) is a CUSTOM event, not the AG-UI run's end.
   */
  push (event: LoggedEvent): string {
    if (this.#ended) return ''
    // the common case, a delta of the message already open: its frame by concatenation, the same bytes as
    // JSON.stringify({ type, messageId, delta })
    if (this.#open !== null && event.type === (this.#open.type === 'text' ? 'message.delta' : 'reasoning.delta')) {
      return this.#open.deltaPrefix + JSON.stringify((event.data as TextDeltaData).text) + '}\n\n'
    }
    const out: AgUiEvent[] = []
    if (event.type === 'run.started') this.#service ??= event.data as RunStartedData
    if (!this.#started) {
      this.#started = true
      out.push(this.#runStarted())
    }
    this.#map(event, out)
    let text = ''
    for (const item of out) text += `data: ${JSON.stringify(item)}\n\n`
    return text
  }

  #runStarted (): AgUiEvent {
    const event: AgUiEvent = { type: 'RUN_STARTED', threadId: this.#threadId, runId: this.#runId }
    if (this.#parentRunId !== undefined) event.parentRunId = this.#parentRunId
    if (this.#service !== null) {
      // The service's own ids, for a client that wants to rejoin through /v1/runs/:runId/events.
      event.metadata = { runId: this.#service.runId, sessionId: this.#service.sessionId, traceId: this.#service.traceId }
    }
    return event
  }

  #map (event: LoggedEvent, out: AgUiEvent[]): void {
    const id = `${this.#runId}:${event.seq}`
    if (event.goesOn === true) {
      // the attempt's messages and tool calls end with it; the next attempt opens its own
      this.#closeAll(out)
      out.push({ type: 'CUSTOM', name: event.type, value: event.data })
      return
    }
    switch (event.type) {
      case 'run.started':
        return
      // (a delta of the message already open took push's short way: this one opens a message)
      case 'message.delta': {
        this.#closeMessage(out)
        this.#open = { type: 'text', id, deltaPrefix: `data: {"type":"TEXT_MESSAGE_CONTENT","messageId":${JSON.stringify(id)},"delta":` }
        out.push({ type: 'TEXT_MESSAGE_START', messageId: id, role: 'assistant' })
        out.push({ type: 'TEXT_MESSAGE_CONTENT', messageId: id, delta: (event.data as TextDeltaData).text })
        return
      }
      case 'reasoning.delta': {
        this.#closeMessage(out)
        this.#open = { type: 'reasoning', id, deltaPrefix: `data: {"type":"REASONING_MESSAGE_CONTENT","messageId":${JSON.stringify(id)},"delta":` }
        out.push({ type: 'REASONING_START', messageId: `${id}:span` })
        out.push({ type: 'REASONING_MESSAGE_START', messageId: id, role: 'reasoning' })
        out.push({ type: 'REASONING_MESSAGE_CONTENT', messageId: id, delta: (event.data as TextDeltaData).text })
        return
      }
      case 'tool.call.delta': {
        const { toolCallId, name, delta } = event.data as ToolCallDeltaData
        this.#closeMessage(out)
        if (!this.#openTools.has(toolCallId)) {
          this.#openTools.add(toolCallId)
          out.push({ type: 'TOOL_CALL_START', toolCallId, toolCallName: name })
        }
        out.push({ type: 'TOOL_CALL_ARGS', toolCallId, delta })
        return
      }
      case 'tool.call': {
        const { toolCallId, name, input } = event.data as ToolCallData
        this.#closeMessage(out)
        if (!this.#openTools.has(toolCallId)) {
          out.push({ type: 'TOOL_CALL_START', toolCallId, toolCallName: name })
          out.push({ type: 'TOOL_CALL_ARGS', toolCallId, delta: JSON.stringify(input) ?? 'null' })
        }
        this.#openTools.delete(toolCallId)
        out.push({ type: 'TOOL_CALL_END', toolCallId })
        return
      }
      case 'tool.result': {
        const { toolCallId, output, isError } = event.data as ToolResultData
        this.#closeMessage(out)
        if (this.#openTools.delete(toolCallId)) out.push({ type: 'TOOL_CALL_END', toolCallId })
        const result: AgUiEvent = { type: 'TOOL_CALL_RESULT', messageId: id, toolCallId, content: outputText(output), role: 'tool' }
        if (isError) result.metadata = { isError: true }
        out.push(result)
        return
      }
      case 'checkpoint.saved':
        out.push({ type: 'STATE_SNAPSHOT', snapshot: event.data })
        return
      case 'approval.requested': {
        const { approval } = event.data as ApprovalEventData
        this.#closeAll(out)
        const interrupt: Interrupt = {
          id: interruptId(approval.id, this.#runId),
          reason: 'approval',
          message: approval.reason ?? `Approve ${approval.action}?`,
          // the approval's own schema, when it gave one, says what an edited payload must be
          responseSchema: approval.schema === undefined
            ? { ...APPROVAL_RESPONSE_SCHEMA }
            : { ...APPROVAL_RESPONSE_SCHEMA, properties: { ...APPROVAL_RESPONSE_SCHEMA.properties, payload: approval.schema } },
          expiresAt: approval.expiresAt,
          metadata: { action: approval.action, payload: approval.payload ?? null, runId: approval.runId, approvalId: approval.id }
        }
        // Clients that predate interrupt outcomes learn of it from this event, as from LangGraph's.
        out.push({
          type: 'CUSTOM',
          name: LEGACY_INTERRUPT_EVENT,
          value: JSON.stringify({ approvalId: approval.id, action: approval.action, payload: approval.payload ?? null, reason: approval.reason ?? null, expiresAt: approval.expiresAt })
        })
        out.push({ type: 'RUN_FINISHED', threadId: this.#threadId, runId: this.#runId, outcome: { type: 'interrupt', interrupts: [interrupt] } })
        this.#ended = true
        return
      }
      case 'run.completed': {
        const { output, usage } = event.data as RunCompletedData
        this.#closeAll(out)
        out.push({
          type: 'RUN_FINISHED',
          threadId: this.#threadId,
          runId: this.#runId,
          result: output,
          outcome: { type: 'success' },
          usage: [{ inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, totalTokens: usage.totalTokens }]
        })
        this.#ended = true
        return
      }
      case 'run.failed': {
        const { error } = event.data as RunFailedData
        this.#closeAll(out)
        // A cancel is a run stopped by whoever runs it, not a failure: AG-UI 1.0 has an outcome for that.
        out.push(error.code === 'CANCELLED'
          ? { type: 'RUN_FINISHED', threadId: this.#threadId, runId: this.#runId, outcome: { type: 'cancelled' } }
          : { type: 'RUN_ERROR', message: error.message, code: error.code })
        this.#ended = true
        return
      }
      default:
        if (event.type === 'run.requeued' || event.type === 'approval.decided' || isCustomEventType(event.type)) {
          out.push({ type: 'CUSTOM', name: event.type, value: event.data ?? null })
        }
    }
  }

  #closeMessage (out: AgUiEvent[]): void {
    if (this.#open === null) return
    if (this.#open.type === 'text') {
      out.push({ type: 'TEXT_MESSAGE_END', messageId: this.#open.id })
    } else {
      out.push({ type: 'REASONING_MESSAGE_END', messageId: this.#open.id })
      out.push({ type: 'REASONING_END', messageId: `${this.#open.id}:span` })
    }
    this.#open = null
  }

  /** The verifier refuses to finish a run with a message or a tool call still open. */
  #closeAll (out: AgUiEvent[]): void {
    this.#closeMessage(out)
    for (const toolCallId of this.#openTools) out.push({ type: 'TOOL_CALL_END', toolCallId })
    this.#openTools.clear()
  }
}
