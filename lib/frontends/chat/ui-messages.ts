// A chat's messages as the AI SDK's UI messages (what `useChat({ messages })` is seeded with): an assistant message
// is the chunks the chat stream sends for its run (UiMessageStreamProjection's replay of the log, the same bytes),
// put together as the SDK's client puts them together (`processUIMessageStream` in `ai`), so that the message a
// reload gets back equals the one the stream built. Pure: events in, messages out.
import type { UIMessageChunk } from 'ai'
import type { UiMessage } from '../../../schemas/chat.js'
import { outputText } from '../run-events.js'
import type { RunEvent } from '../run-events.js'
import { UiMessageStreamProjection } from './ui-message-stream.js'

type Part = Record<string, unknown> & { type: string }
type ToolPart = Part & { toolCallId: string, state: string, input?: unknown, approval?: Record<string, unknown> }

/** The chunks of the chat stream's SSE text (`data: <chunk>` frames, then `data: [DONE]`). */
function chunksOf (text: string): UIMessageChunk[] {
  const chunks: UIMessageChunk[] = []
  for (const frame of text.split('\n\n')) {
    if (!frame.startsWith('data: ') || frame === 'data: [DONE]') continue
    chunks.push(JSON.parse(frame.slice(6)) as UIMessageChunk)
  }
  return chunks
}

/** Merges metadata as the SDK does: objects key by key, deeply; anything else replaced. */
function merged (base: unknown, overrides: unknown): unknown {
  if (!isObject(base) || !isObject(overrides)) return overrides
  const result: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(overrides)) result[key] = merged(result[key], value)
  return result
}

function isObject (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function isToolPart (part: Part): part is ToolPart {
  return part.type === 'dynamic-tool' || part.type.startsWith('tool-')
}

/** JSON text read as far as it goes: the whole value, or nothing yet (the SDK shows a partial one, repaired). */
function parsedInput (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/**
 * The assistant message of a run that has ended, from its whole log: what the chat stream showed for it, however many
 * responses it took (an approval ends one, its answer opens the next on the same message). `id`: when the log has no
 * `run.started` (a queued run cancelled), the run's id all the same.
 */
export function assistantMessage (id: string, events: readonly RunEvent[]): UiMessage {
  const message: UiMessage & { parts: Part[] } = { id, role: 'assistant', parts: [] }
  const open = new Map<string, Part & { text: string }>()
  const partialInputs = new Map<string, string>()
  const tool = (toolCallId: string): ToolPart => {
    // the latest call of that id (ids are unique within a run: the SDK looks in the current step first, the same one)
    for (let i = message.parts.length - 1; i >= 0; i--) {
      const part = message.parts[i]!
      if (isToolPart(part) && part.toolCallId === toolCallId) return part
    }
    throw new Error(`no tool call ${toolCallId} in the chat stream`)
  }
  for (const chunk of chunksOf(new UiMessageStreamProjection().replay(events))) {
    switch (chunk.type) {
      case 'start':
        message.id = chunk.messageId! // the projection's start always names the run
        if (chunk.messageMetadata != null) message.metadata = merged(message.metadata, chunk.messageMetadata)
        break
      case 'finish':
      case 'message-metadata':
        if (chunk.messageMetadata != null) message.metadata = merged(message.metadata, chunk.messageMetadata)
        break
      case 'text-start':
      case 'reasoning-start': {
        const part = chunk.type === 'text-start'
          ? { type: 'text', text: '', state: 'streaming' }
          : { type: 'reasoning', id: chunk.id, text: '', state: 'streaming' }
        open.set(chunk.id, part)
        message.parts.push(part)
        break
      }
      case 'text-delta':
      case 'reasoning-delta':
        open.get(chunk.id)!.text += chunk.delta
        break
      case 'text-end':
      case 'reasoning-end':
        open.get(chunk.id)!.state = 'done'
        open.delete(chunk.id)
        break
      case 'tool-input-start':
        partialInputs.set(chunk.toolCallId, '')
        message.parts.push({ type: `tool-${chunk.toolName}`, toolCallId: chunk.toolCallId, state: 'input-streaming', providerExecuted: chunk.providerExecuted })
        break
      case 'tool-input-delta': {
        const text = partialInputs.get(chunk.toolCallId)! + chunk.inputTextDelta
        partialInputs.set(chunk.toolCallId, text)
        Object.assign(tool(chunk.toolCallId), { input: parsedInput(text), rawInput: text })
        break
      }
      case 'tool-input-available': {
        const fields = { toolCallId: chunk.toolCallId, state: 'input-available', input: chunk.input, providerExecuted: chunk.providerExecuted }
        const streamed = partialInputs.has(chunk.toolCallId) ? tool(chunk.toolCallId) : null
        if (streamed !== null) {
          delete streamed.rawInput
          Object.assign(streamed, fields)
        } else {
          message.parts.push(chunk.dynamic === true ? { type: 'dynamic-tool', toolName: chunk.toolName, ...fields } : { type: `tool-${chunk.toolName}`, ...fields })
        }
        break
      }
      case 'tool-approval-request': {
        const part = tool(chunk.toolCallId)
        part.state = 'approval-requested'
        part.approval = chunk.reason == null ? { id: chunk.approvalId } : { id: chunk.approvalId, requestReason: chunk.reason }
        break
      }
      case 'tool-approval-response': {
        const part = message.parts.find((part): part is ToolPart => isToolPart(part) && part.approval?.id === chunk.approvalId)!
        part.state = 'approval-responded'
        part.approval = { ...part.approval, approved: chunk.approved, ...(chunk.reason == null ? {} : { reason: chunk.reason }) }
        break
      }
      case 'tool-output-available':
        Object.assign(tool(chunk.toolCallId), { state: 'output-available', output: chunk.output })
        break
      case 'tool-output-error':
        Object.assign(tool(chunk.toolCallId), { state: 'output-error', errorText: chunk.errorText })
        break
      case 'tool-output-denied':
        tool(chunk.toolCallId).state = 'output-denied'
        break
      case 'start-step':
        message.parts.push({ type: 'step-start' })
        break
      default:
        // data-<type> (a custom event, or news of a next attempt): one part each, as they have no id; `error` and
        // `abort` add no part (the failure is in the metadata, from message-metadata)
        if (chunk.type.startsWith('data-')) message.parts.push({ type: chunk.type, data: (chunk as { data: unknown }).data })
    }
  }
  return message
}

/** A user's message: the run's input (a chat run's input is the message's text). */
export function userMessage (id: string, input: unknown): UiMessage {
  const parts: Part[] = [{ type: 'text', text: outputText(input) }]
  return { id, role: 'user', parts }
}

/**
 * A turn whose run's log is gone (past `runRetentionMs`) though its session keeps it: the output's text, all that is
 * left of what the stream showed.
 */
export function keptAssistantMessage (runId: string, output: unknown): UiMessage {
  const parts: Part[] = [{ type: 'text', text: outputText(output), state: 'done' }]
  return { id: runId, role: 'assistant', parts }
}
