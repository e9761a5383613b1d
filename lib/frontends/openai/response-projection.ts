// A run's events as one response of the Responses API (what the `openai` clients and the AI SDK's Open Responses
// provider read). Pure and deterministic: the same events give the same events out, with the same sequence_numbers,
// so a replay from any instance (`starting_after`) is the stream first sent. A response is a stretch of its run's
// log: from the run's start, or from the approval the previous response ended at, to the run's end or its next
// approval.
import { outputText } from '../run-events.js'
import type {
  ApprovalEventData, RunCompletedData, RunEvent, RunFailedData, TextDeltaData, ToolCallData, ToolCallDeltaData, ToolResultData
} from '../run-events.js'

export type ResponseStatus = 'queued' | 'in_progress' | 'completed' | 'failed' | 'cancelled' | 'incomplete'

/** What a response shows beside its run's events: the request it answers. */
export interface ResponseHead {
  id: string
  /** the run's id: the items' ids are made from it */
  runId: string
  /** Unix seconds */
  createdAt: number
  model: string
  previousResponseId: string | null
  instructions: string | null
  metadata: Record<string, string>
  /** the run's session (null for an ephemeral run) */
  conversation: string | null
  background: boolean
  /** the response starts queued (a background run not started yet) */
  queued: boolean
}

export interface ResponseUsage {
  input_tokens: number
  output_tokens: number
  total_tokens: number
  input_tokens_details: { cached_tokens: number }
  output_tokens_details: { reasoning_tokens: number }
}

type Item = Record<string, unknown>

interface OpenText {
  kind: 'text' | 'reasoning'
  index: number
  id: string
  text: string
  /** a delta's frame is `head + sequence_number + middle + JSON text + tail` (the same bytes as JSON.stringify) */
  head: string
  middle: string
  tail: string
}

interface OpenCall {
  index: number
  id: string
  callId: string
  name: string
  arguments: string
  streamed: boolean
}

const TEXT_DELTA = 'response.output_text.delta'
const REASONING_DELTA = 'response.reasoning_text.delta'

/** Run finish reasons the Responses API calls incomplete. */
const INCOMPLETE: Record<string, string> = { length: 'max_output_tokens', 'content-filter': 'content_filter', content_filter: 'content_filter' }

export interface ResponseProjectionOptions {
  /** write only the events after this sequence_number (a resume); all by default */
  startingAfter?: number
  /** build the SSE text (a stream); false: only the response object (JSON, a retrieve) */
  sse?: boolean
}

export class ResponseProjection {
  readonly head: ResponseHead
  readonly #after: number
  readonly #sse: boolean
  readonly #base: string
  #next = 0
  #status: ResponseStatus
  #output: Item[] = []
  #open: OpenText | null = null
  #calls = new Map<string, OpenCall>()
  #wroteText = false
  #started = false
  #running = false
  #ended = false
  #usage: ResponseUsage | null = null
  #error: { code: string, message: string } | null = null
  #incomplete: { reason: string } | null = null
  #fixedJson: string | null = null

  constructor (head: ResponseHead, options: ResponseProjectionOptions = {}) {
    this.head = head
    this.#after = options.startingAfter ?? -1
    this.#sse = options.sse ?? true
    // the run's first 48 bits name its items: unique enough beside the seq, and every delta's frame carries it
    this.#base = head.runId.replaceAll('-', '').slice(0, 12)
    this.#status = head.queued ? 'queued' : 'in_progress'
  }

  /** True once the response has ended (completed, at an approval too; failed; incomplete): nothing more is written. */
  get ended (): boolean {
    return this.#ended
  }

  /** The SSE text for one event of the run ('' when it maps to nothing, or falls before `startingAfter`). */
  push (event: RunEvent): string {
    if (this.#ended) return ''
    const open = this.#open
    if (open !== null && event.type === (open.kind === 'text' ? 'message.delta' : 'reasoning.delta')) {
      const text = (event.data as TextDeltaData).text
      open.text += text
      const seq = this.#next++
      if (!this.#sse || seq <= this.#after) return ''
      return open.head + seq + open.middle + JSON.stringify(text) + open.tail
    }
    let out = this.#started ? '' : this.#start()
    switch (event.type) {
      case 'run.started':
        if (!this.#running) {
          this.#running = true
          if (this.#status === 'queued') {
            this.#status = 'in_progress'
            out += this.#lifecycle('response.in_progress')
          }
        }
        return out
      case 'message.delta':
      case 'reasoning.delta':
        return out + this.#openText(event.type === 'message.delta' ? 'text' : 'reasoning', event.seq, (event.data as TextDeltaData).text)
      case 'tool.call.delta': {
        const { toolCallId, name, delta } = event.data as ToolCallDeltaData
        out += this.#closeText()
        let call = this.#calls.get(toolCallId)
        if (call === undefined) {
          call = this.#addCall(toolCallId, name, event.seq)
          out += this.#emit('response.output_item.added', { output_index: call.index, item: this.#output[call.index] })
        }
        call.arguments += delta
        call.streamed = true
        return out + this.#emit('response.function_call_arguments.delta', { item_id: call.id, output_index: call.index, delta })
      }
      case 'tool.call': {
        const { toolCallId, name, input } = event.data as ToolCallData
        out += this.#closeText()
        let call = this.#calls.get(toolCallId)
        if (call === undefined) {
          call = this.#addCall(toolCallId, name, event.seq)
          out += this.#emit('response.output_item.added', { output_index: call.index, item: this.#output[call.index] })
        }
        const args = JSON.stringify(input) ?? 'null'
        // a client reads the arguments from their deltas: one, when the agent streamed none
        if (!call.streamed) out += this.#emit('response.function_call_arguments.delta', { item_id: call.id, output_index: call.index, delta: args })
        call.arguments = args
        return out + this.#closeCall(call, 'completed')
      }
      case 'tool.result': {
        const { toolCallId, output } = event.data as ToolResultData
        out += this.#closeText()
        const call = this.#calls.get(toolCallId)
        if (call !== undefined) out += this.#closeCall(call, 'completed')
        const item: Item = { id: `fco_${this.#base}_${event.seq}`, type: 'function_call_output', call_id: toolCallId, output: outputText(output), status: 'completed' }
        return out + this.#addWhole(item)
      }
      case 'approval.requested': {
        const { approval } = event.data as ApprovalEventData
        out += this.#closeAll()
        out += this.#addWhole({
          id: approval.id,
          type: 'mcp_approval_request',
          name: approval.action,
          arguments: JSON.stringify(approval.payload ?? null),
          server_label: this.head.model
        })
        // the response ends here, complete as far as it goes; the run waits for the answer
        return out + this.#end('completed', 'response.completed')
      }
      case 'run.completed': {
        const { output, usage, finishReason } = event.data as RunCompletedData
        out += this.#closeAll()
        // an agent that streamed no text in this response answers with its output
        const text = this.#wroteText ? '' : outputText(output)
        if (text !== '') out += this.#openText('text', event.seq, text) + this.#closeText()
        this.#usage = {
          input_tokens: usage.inputTokens,
          output_tokens: usage.outputTokens,
          total_tokens: usage.totalTokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens_details: { reasoning_tokens: 0 }
        }
        const reason = INCOMPLETE[finishReason]
        if (reason === undefined) return out + this.#end('completed', 'response.completed')
        this.#incomplete = { reason }
        return out + this.#end('incomplete', 'response.incomplete')
      }
      case 'run.failed': {
        const { error } = event.data as RunFailedData
        out += this.#closeAll()
        this.#error = { code: error.code, message: error.message }
        return out + this.#end(error.code === 'CANCELLED' ? 'cancelled' : 'failed', 'response.failed')
      }
      case 'run.requeued':
        // the next attempt starts its own items
        return out + this.#closeAll()
      default:
        return out
    }
  }

  /** The response object as it stands. */
  response (): Record<string, unknown> {
    return Object.assign({
      id: this.head.id,
      object: 'response',
      created_at: this.head.createdAt,
      status: this.#status,
      error: this.#error,
      incomplete_details: this.#incomplete,
      output: this.#currentOutput(),
      usage: this.#usage
    }, fixedFields(this.head))
  }

  #currentOutput (): Item[] {
    const open = this.#open
    return open === null ? this.#output : this.#output.map((item, i) => i === open.index ? this.#openItem(open) : item)
  }

  /** The response object's JSON, its fields that never change serialized once. */
  #responseJson (): string {
    this.#fixedJson ??= JSON.stringify(fixedFields(this.head)).slice(1)
    return `{"id":${JSON.stringify(this.head.id)},"object":"response","created_at":${this.head.createdAt},"status":"${this.#status}",` +
      `"error":${JSON.stringify(this.#error)},"incomplete_details":${JSON.stringify(this.#incomplete)},` +
      `"output":${JSON.stringify(this.#currentOutput())},"usage":${JSON.stringify(this.#usage)},${this.#fixedJson}`
  }

  #start (): string {
    this.#started = true
    let out = this.#lifecycle('response.created')
    if (this.#status === 'in_progress') out += this.#lifecycle('response.in_progress')
    return out
  }

  #lifecycle (type: string): string {
    const seq = this.#next++
    if (!this.#sse || seq <= this.#after) return ''
    return `event: ${type}\ndata: {"type":"${type}","sequence_number":${seq},"response":${this.#responseJson()}}\n\n`
  }

  #end (status: ResponseStatus, type: string): string {
    this.#status = status
    const out = this.#lifecycle(type)
    this.#ended = true
    return out
  }

  /** One event: its sequence_number taken, its frame written when it is to be sent. */
  #emit (type: string, fields: Record<string, unknown>): string {
    const seq = this.#next++
    if (!this.#sse || seq <= this.#after) return ''
    // the fields after `type` and `sequence_number`, as JSON.stringify would put them (no object made to hold all three)
    return `event: ${type}\ndata: {"type":"${type}","sequence_number":${seq},${JSON.stringify(fields).slice(1)}\n\n`
  }

  #openText (kind: 'text' | 'reasoning', seq: number, text: string): string {
    let out = this.#closeText()
    const index = this.#output.length
    const id = `${kind === 'text' ? 'msg' : 'rs'}_${this.#base}_${seq}`
    const type = kind === 'text' ? TEXT_DELTA : REASONING_DELTA
    const open: OpenText = {
      kind,
      index,
      id,
      text: '',
      head: `event: ${type}\ndata: {"type":"${type}","sequence_number":`,
      middle: `,"item_id":${JSON.stringify(id)},"output_index":${index},"content_index":0,"delta":`,
      tail: kind === 'text' ? ',"logprobs":[]}\n\n' : '}\n\n'
    }
    if (kind === 'text') this.#wroteText = true
    const item: Item = kind === 'text'
      ? { id, type: 'message', status: 'in_progress', role: 'assistant', content: [] }
      : { id, type: 'reasoning', summary: [], content: [] }
    this.#output.push(item)
    out += this.#emit('response.output_item.added', { output_index: index, item })
    out += this.#emit('response.content_part.added', { item_id: id, output_index: index, content_index: 0, part: emptyPart(kind) })
    this.#open = open
    open.text = text
    const seqOut = this.#next++
    if (this.#sse && seqOut > this.#after) out += open.head + seqOut + open.middle + JSON.stringify(text) + open.tail
    return out
  }

  #openItem (open: OpenText): Item {
    return open.kind === 'text'
      ? { id: open.id, type: 'message', status: 'in_progress', role: 'assistant', content: [textPart(open.text)] }
      : { id: open.id, type: 'reasoning', summary: [], content: [reasoningPart(open.text)] }
  }

  #closeText (): string {
    const open = this.#open
    if (open === null) return ''
    this.#open = null
    const { id, index, text } = open
    const where = { item_id: id, output_index: index, content_index: 0 }
    let out: string
    let item: Item
    if (open.kind === 'text') {
      const part = textPart(text)
      out = this.#emit('response.output_text.done', { ...where, text, logprobs: [] }) + this.#emit('response.content_part.done', { ...where, part })
      item = { id, type: 'message', status: 'completed', role: 'assistant', content: [part] }
    } else {
      const part = reasoningPart(text)
      out = this.#emit('response.reasoning_text.done', { ...where, text }) + this.#emit('response.content_part.done', { ...where, part })
      item = { id, type: 'reasoning', summary: [], content: [part] }
    }
    this.#output[index] = item
    return out + this.#emit('response.output_item.done', { output_index: index, item })
  }

  #addCall (callId: string, name: string, seq: number): OpenCall {
    const call: OpenCall = { index: this.#output.length, id: `fc_${this.#base}_${seq}`, callId, name, arguments: '', streamed: false }
    this.#calls.set(callId, call)
    this.#output.push({ id: call.id, type: 'function_call', status: 'in_progress', call_id: callId, name, arguments: '' })
    return call
  }

  #closeCall (call: OpenCall, status: 'completed' | 'incomplete'): string {
    this.#calls.delete(call.callId)
    const item: Item = { id: call.id, type: 'function_call', status, call_id: call.callId, name: call.name, arguments: call.arguments }
    this.#output[call.index] = item
    return this.#emit('response.function_call_arguments.done', { item_id: call.id, output_index: call.index, name: call.name, arguments: call.arguments }) +
      this.#emit('response.output_item.done', { output_index: call.index, item })
  }

  /** An item that is complete as it comes (a tool's output, an approval request). */
  #addWhole (item: Item): string {
    const index = this.#output.length
    this.#output.push(item)
    return this.#emit('response.output_item.added', { output_index: index, item }) + this.#emit('response.output_item.done', { output_index: index, item })
  }

  /** Nothing is left open when the response ends: tool calls whose arguments never completed end incomplete. */
  #closeAll (): string {
    let out = this.#closeText()
    for (const call of [...this.#calls.values()]) out += this.#closeCall(call, 'incomplete')
    return out
  }
}

/** The response's fields that its events never change: the request's, and OpenAI's fixed defaults. */
function fixedFields (head: ResponseHead): Record<string, unknown> {
  return {
    background: head.background,
    completed_at: null,
    conversation: head.conversation === null ? null : { id: head.conversation },
    frequency_penalty: 0,
    instructions: head.instructions,
    max_output_tokens: null,
    max_tool_calls: null,
    metadata: head.metadata,
    model: head.model,
    parallel_tool_calls: false,
    presence_penalty: 0,
    previous_response_id: head.previousResponseId,
    prompt_cache_key: null,
    reasoning: null,
    safety_identifier: null,
    service_tier: 'default',
    store: head.conversation !== null,
    temperature: 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_logprobs: 0,
    top_p: 1,
    truncation: 'disabled',
    user: null
  }
}

function textPart (text: string): Item {
  return { type: 'output_text', text, annotations: [] }
}

function reasoningPart (text: string): Item {
  return { type: 'reasoning_text', text }
}

function emptyPart (kind: 'text' | 'reasoning'): Item {
  return kind === 'text' ? textPart('') : reasoningPart('')
}
