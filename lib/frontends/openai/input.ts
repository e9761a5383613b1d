// What an OpenAI-shaped request gives the run: the last user message's text as the input, the earlier user and
// assistant messages for ctx.history, and (Responses) the answers to approvals. Checked here, before anything runs:
// a malformed item is a 400 naming it.
import { InputValidationError } from '../../core/errors.js'
import type { Message } from '../../stores/types.js'

export interface ApprovalAnswer {
  id: string
  approve: boolean
  reason: string | undefined
}

export interface ParsedInput {
  /** the last user message's text; null when the input only answers approvals */
  text: string | null
  /** the messages before it, for ctx.history after the session's own */
  history: Message[]
  approvals: ApprovalAnswer[]
}

type Part = { type?: unknown, text?: unknown, refusal?: unknown }

/** A message's text: a string, or its text parts joined; other parts (an image, a file) are refused. */
function textOf (content: unknown, path: string, textTypes: readonly string[]): string {
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) throw new InputValidationError(`${path} must be a string or a list of content parts`)
  let text = ''
  content.forEach((part: Part | null, i) => {
    const type = part?.type
    if (typeof type !== 'string') throw new InputValidationError(`${path}/${i}/type must be a string`)
    // a refusal an assistant gave is part of what it said
    if (type === 'refusal' && typeof part!.refusal === 'string') {
      text += part!.refusal
      return
    }
    if (!textTypes.includes(type)) throw new InputValidationError(`${path}/${i} is ${JSON.stringify(type)}: only text content is supported (${textTypes.join(', ')})`)
    if (typeof part!.text !== 'string') throw new InputValidationError(`${path}/${i}/text must be a string`)
    text += part!.text
  })
  return text
}

function historyMessage (role: 'user' | 'assistant', content: string, at: string): Message {
  return { role, content, runId: '', at }
}

/** Item types of earlier turns that a client sends back (the AI SDK does): read as history, not as input. */
const EARLIER_TURNS = new Set(['reasoning', 'function_call', 'function_call_output', 'item_reference'])

/** The Responses API's `input`: a string (a user message) or items. */
export function parseResponseInput (input: string | Array<Record<string, unknown>> | undefined): ParsedInput {
  if (input === undefined) throw new InputValidationError('body/input is required')
  if (typeof input === 'string') return { text: input, history: [], approvals: [] }
  const at = new Date().toISOString()
  const messages: Array<{ role: 'user' | 'assistant', text: string, index: number }> = []
  const approvals: ApprovalAnswer[] = []
  input.forEach((item, i) => {
    const path = `body/input/${i}`
    const type = item.type ?? 'message'
    if (type === 'mcp_approval_response') {
      const { approval_request_id: id, approve, reason } = item
      if (typeof id !== 'string' || id === '') throw new InputValidationError(`${path}/approval_request_id must be a non-empty string`)
      if (typeof approve !== 'boolean') throw new InputValidationError(`${path}/approve must be a boolean`)
      if (reason !== undefined && reason !== null && (typeof reason !== 'string' || reason.length > 2000)) {
        throw new InputValidationError(`${path}/reason must be a string of at most 2000 characters`)
      }
      approvals.push({ id, approve, reason: typeof reason === 'string' ? reason : undefined })
      return
    }
    if (typeof type === 'string' && EARLIER_TURNS.has(type)) return
    if (type !== 'message') throw new InputValidationError(`${path}/type ${JSON.stringify(type)} is not supported (message, mcp_approval_response)`)
    const role = item.role
    if (role === 'system' || role === 'developer') {
      textOf(item.content, `${path}/content`, ['input_text', 'text'])
      return
    }
    if (role === 'user') messages.push({ role, text: textOf(item.content, `${path}/content`, ['input_text', 'text']), index: i })
    else if (role === 'assistant') messages.push({ role, text: textOf(item.content, `${path}/content`, ['output_text', 'input_text', 'text']), index: i })
    else throw new InputValidationError(`${path}/role must be user, assistant, system or developer`)
  })
  if (approvals.length > 0) {
    if (messages.length > 0) throw new InputValidationError(`body/input/${messages[0]!.index} is not allowed: an input that answers approvals holds only mcp_approval_response items`)
    return { text: null, history: [], approvals }
  }
  const last = messages.at(-1)
  if (last?.role !== 'user') throw new InputValidationError('body/input must end with a user message')
  return { text: last.text, history: messages.slice(0, -1).map((m) => historyMessage(m.role, m.text, at)), approvals }
}

/** Chat Completions' `messages`: the last one is the user's; the earlier user and assistant ones are the history. */
export function parseChatMessages (messages: Array<{ role: string, content?: unknown }>): ParsedInput {
  const at = new Date().toISOString()
  const lastIndex = messages.length - 1
  const last = messages[lastIndex]!
  if (last.role !== 'user') throw new InputValidationError(`body/messages/${lastIndex} must be a user message`)
  const text = textOf(last.content, `body/messages/${lastIndex}/content`, ['text'])
  const history: Message[] = []
  for (let i = 0; i < lastIndex; i++) {
    const { role, content } = messages[i]!
    // instructions are the agent's own; tool messages belong to a client's tools, which the agent does not have
    if (role !== 'user' && role !== 'assistant') continue
    // an assistant message that only called tools has no text
    if (content === null || content === undefined) continue
    history.push(historyMessage(role, textOf(content, `body/messages/${i}/content`, ['text']), at))
  }
  return { text, history, approvals: [] }
}
