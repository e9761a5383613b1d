/**
 * `fastify-agents/ai-sdk`: an AI SDK (`ai` 6 or 7) `streamText()` call as an agent.
 *
 * The user's `run(input, ctx)` returns what `streamText()` returns; the adapter maps its `stream` parts onto the
 * run's events and sums the usage of every call. Approvals: a tool that needs one (`needsApproval`, or
 * `toolApproval: 'user-approval'`) makes streamText emit a `tool-approval-request` and stop. The adapter asks
 * `ctx.requestApproval` (action: the tool's name, payload: its input: what makes the approval that call's own in
 * the chat's stream), for all of a step's calls at once, then calls the user's `run` again: the
 * previous call's response messages and a tool message holding the SDK's `tool-approval-response`s wait in a
 * symbol-keyed slot on ctx, and `modelMessages(ctx, input)` appends them, so the SDK executes or denies the tool
 * and the model goes on. A `run` that does not build its messages with `modelMessages` cannot be continued.
 * Durable agents (docs/durable-agents.md): `durableModel` and `durableTools` make the model's calls and the tools'
 * executions steps of the run, replayed on a later attempt instead of made again.
 * Only types are imported from `ai`: this module loads nothing of it.
 */
import type { ModelMessage, TextStreamPart, ToolApprovalResponse, ToolSet } from 'ai'
import type { Agent, AgentEvent, AgentResult, Decision, RunContext } from '../lib/core/types.js'
import type { TypedAgent } from '../lib/runs/define-agent.js'
import type { AgentSchema, InferSchema } from '../lib/core/agent-schemas.js'
import { checkApprovalTimeout, textOf } from './common.js'
import type { AdapterOptions } from './common.js'

/** What the adapter reads of a `streamText()` result: `ai` 7 names it `stream` and `responseMessages`. */
export interface StreamTextOutputV7 {
  readonly stream: AsyncIterable<TextStreamPart<ToolSet>>
  readonly responseMessages: PromiseLike<ModelMessage[]>
}

/** `ai` 6 names them `fullStream` and `response.messages` (Node 20 installs `ai` 6: `ai` 7 needs Node 22). */
export interface StreamTextOutputV6 {
  readonly fullStream: AsyncIterable<TextStreamPart<ToolSet>>
  readonly response: PromiseLike<{ messages: ModelMessage[] }>
}

export type StreamTextOutput = StreamTextOutputV7 | StreamTextOutputV6

export interface AiSdkAgentOptions<Input = unknown> extends AdapterOptions {
  /** Calls `streamText({ ..., messages: modelMessages(ctx, input), abortSignal: ctx.signal })`. */
  run(input: Input, ctx: RunContext): StreamTextOutput | PromiseLike<StreamTextOutput>
}

/** With an `input` schema, `run` gets what the schema describes. */
export interface TypedAiSdkAgentOptions<S extends AgentSchema> extends Omit<AiSdkAgentOptions<InferSchema<S>>, 'input'> {
  input: S
}

const CONTINUATION = Symbol('fastify-agents.ai-sdk.continuation')

interface Continuation {
  /** the earlier calls' response messages, each followed by the tool message answering its approval requests */
  messages: ModelMessage[]
  /** set by modelMessages: the user's run did hand the continuation to the model */
  taken: boolean
}

type ContinuedContext = RunContext & { [CONTINUATION]?: Continuation }

type ApprovalRequestPart = Extract<TextStreamPart<ToolSet>, { type: 'tool-approval-request' }>

const EXPIRED = 'Nobody decided on this tool call before its approval expired.'
const REJECTED = 'A reviewer rejected this tool call.'
const DENIED = 'This tool call was denied.'

/** The session's earlier turns, the input as the new user message, then the continuation of this run, if any. */
export function modelMessages (ctx: RunContext, input: unknown): ModelMessage[] {
  const messages: ModelMessage[] = ctx.history.map((message) => message.role === 'user'
    ? { role: 'user', content: textOf(message.content) }
    : { role: 'assistant', content: textOf(message.content) })
  messages.push({ role: 'user', content: textOf(input) })
  const continuation = (ctx as ContinuedContext)[CONTINUATION]
  if (continuation !== undefined) {
    continuation.taken = true
    messages.push(...continuation.messages)
  }
  return messages
}

/** What the model is told with the decision: a denied call's reason reaches it as the tool's output. */
function approvalResponse (request: ApprovalRequestPart, decision: Decision): ToolApprovalResponse {
  const reason = decision.status === 'expired'
    ? EXPIRED
    : decision.comment ?? decision.response ?? (decision.approved ? undefined : REJECTED)
  return { type: 'tool-approval-response', approvalId: request.approvalId, approved: decision.approved, reason }
}

export function aiSdkAgent<S extends AgentSchema> (options: TypedAiSdkAgentOptions<S>): TypedAgent<S>
export function aiSdkAgent<Input = unknown> (options: AiSdkAgentOptions<Input> & { input?: undefined }): Agent<Input>
export function aiSdkAgent<Input> (options: AiSdkAgentOptions<Input>): Agent<Input> {
  const { run, approvalTimeoutMs, ...fields } = options
  if (typeof run !== 'function') throw new TypeError('aiSdkAgent: run must be a function returning what streamText() returns')
  checkApprovalTimeout('aiSdkAgent', approvalTimeoutMs)

  async function * runAgent (input: Input, ctx: RunContext): AsyncGenerator<string | AgentEvent, AgentResult> {
    const slot = ctx as ContinuedContext
    let text = ''
    let inputTokens = 0
    let outputTokens = 0
    let finishReason: string | undefined
    // why each denied call was denied, for its tool.result (the SDK's tool-output-denied part carries no reason)
    const denials = new Map<string, string | undefined>()
    for (;;) {
      const result = await run(input, ctx)
      if (slot[CONTINUATION]?.taken === false) {
        throw new Error('aiSdkAgent: a tool call was decided, but run() did not build its messages with modelMessages(ctx, input), so the decision cannot reach the model')
      }
      const toolNames = new Map<string, string>()
      const requests: ApprovalRequestPart[] = []
      for await (const part of 'stream' in result ? result.stream : result.fullStream) {
        switch (part.type) {
          case 'text-delta':
            text += part.text
            yield part.text
            break
          case 'reasoning-delta':
            yield { type: 'reasoning.delta', data: { text: part.text } }
            break
          case 'tool-input-start':
            toolNames.set(part.id, part.toolName)
            break
          case 'tool-input-delta':
            yield { type: 'tool.call.delta', data: { toolCallId: part.id, name: toolNames.get(part.id), delta: part.delta } }
            break
          case 'tool-call':
            yield { type: 'tool.call', data: { toolCallId: part.toolCallId, name: part.toolName, input: part.input } }
            break
          case 'tool-result':
            // a streaming tool's partial outputs: the call has one result, its last
            if (part.preliminary === true) break
            yield { type: 'tool.result', data: { toolCallId: part.toolCallId, name: part.toolName, output: part.output, isError: false } }
            break
          case 'tool-error':
            yield { type: 'tool.result', data: { toolCallId: part.toolCallId, name: part.toolName, output: messageOf(part.error), isError: true } }
            break
          case 'tool-approval-request':
            // automatic approvals and denials (toolApproval: 'approved' | 'denied') are settled in the same call
            if (part.isAutomatic !== true) requests.push(part)
            break
          case 'tool-approval-response':
            denials.set(part.toolCall.toolCallId, part.reason)
            break
          case 'tool-output-denied':
            yield { type: 'tool.result', data: { toolCallId: part.toolCallId, name: part.toolName, output: denials.get(part.toolCallId) ?? DENIED, isError: true } }
            break
          case 'finish':
            inputTokens += part.totalUsage.inputTokens ?? 0
            outputTokens += part.totalUsage.outputTokens ?? 0
            finishReason = part.finishReason
            break
          case 'error':
            throw part.error
          case 'abort':
            // the run's own abort has settled it already; any other (the user's own signal) fails it
            throw new Error('The model call was aborted', { cause: part.reason })
        }
      }
      if (requests.length === 0) return { output: text, usage: { inputTokens, outputTokens }, finishReason }

      // All of a step's approvals at once, as the SDK presents them (its client answers them together): each is
      // durable and decided on its own, and the SDK goes on once all are.
      const decisions = await Promise.all(requests.map((request) => ctx.requestApproval({
        action: request.toolCall.toolName,
        payload: request.toolCall.input,
        reason: request.reason,
        timeoutMs: approvalTimeoutMs
      })))
      const responses = requests.map((request, i) => {
        const response = approvalResponse(request, decisions[i]!)
        denials.set(request.toolCall.toolCallId, response.reason)
        return response
      })
      const earlier = slot[CONTINUATION]?.messages ?? []
      const answered = await responseMessages(result)
      // an approval that edited the call's input: the SDK executes the tool with the input its message holds
      requests.forEach((request, i) => {
        if (decisions[i]!.edited === true) editedCall(answered, request.toolCall.toolCallId, decisions[i]!.payload)
      })
      slot[CONTINUATION] = {
        messages: [...earlier, ...answered, { role: 'tool', content: responses }],
        taken: false
      }
    }
  }

  return { ...fields, run: runAgent }
}

/** The tool call's input in the response messages, replaced by the one a reviewer edited (which the model sees too). */
function editedCall (messages: ModelMessage[], toolCallId: string, input: unknown): void {
  for (const message of messages) {
    /* c8 ignore next: the SDK's response messages hold an assistant's content as parts; a string is only a guard */
    if (message.role !== 'assistant' || typeof message.content === 'string') continue
    message.content = message.content.map((part) => part.type === 'tool-call' && part.toolCallId === toolCallId ? { ...part, input } : part)
  }
}

/** A tool's step name: `tool.` and its name as a step name may be (lower case; other characters as `-`). */
function toolStepName (name: string): string {
  return ('tool.' + name.toLowerCase().replace(/[^a-z0-9_-]+/g, '-')).slice(0, 64)
}

/**
 * The tools, each `execute` wrapped in a durable step (`ctx.step`, docs/durable-agents.md): a tool that completed on
 * an earlier attempt of the run gives its journaled output back instead of running again. A streaming tool's output
 * is its last value. Tools without `execute` (the client's) are left as they are.
 */
export function durableTools<T extends ToolSet> (ctx: RunContext, tools: T): T {
  const wrapped: Record<string, unknown> = {}
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute
    if (typeof execute !== 'function') {
      wrapped[name] = tool
      continue
    }
    const step = toolStepName(name)
    wrapped[name] = {
      ...tool,
      execute: (input: unknown, options: Parameters<typeof execute>[1]) => ctx.step(step, async () => {
        const result: unknown = await execute(input, options)
        if (!isAsyncIterable(result)) return result
        let last: unknown = null
        for await (const value of result) last = value
        return last
      })
    }
  }
  return wrapped as T
}

/** What `durableModel` needs of a model: the AI SDK's language models (spec v2, v3, v4) all have these. */
export interface StreamingLanguageModel {
  readonly specificationVersion: string
  readonly provider: string
  readonly modelId: string
  doStream(options: never): PromiseLike<{ stream: ReadableStream<unknown> }>
}

/** The step a model call is journaled as (docs/durable-agents.md). */
const MODEL_STEP = 'model'

type StreamPart = { type: string } & Record<string, unknown>

/**
 * The model, each streamed call of it a durable step (`ctx.step`, docs/durable-agents.md): a call that finished on an
 * earlier attempt of the run is not made again, its journaled stream parts are given back to the SDK, which goes on
 * as it did (the tool calls they hold find their tools' steps, with `durableTools`). The parts stream to the run as
 * they come, and are journaled once the call has finished; a call that ends in an error is not journaled. Built as
 * `wrapLanguageModel` builds a model (the same fields, `doGenerate` untouched), without loading `ai`.
 */
export function durableModel<M extends StreamingLanguageModel> (ctx: RunContext, model: M): M {
  if (typeof model?.doStream !== 'function') throw new TypeError('durableModel: model must be a language model object (a provider\'s model, not a model id)')
  const generate = (model as unknown as { doGenerate?: (options: unknown) => unknown }).doGenerate
  return {
    specificationVersion: model.specificationVersion,
    provider: model.provider,
    modelId: model.modelId,
    get supportedUrls (): unknown { return (model as unknown as { supportedUrls?: unknown }).supportedUrls },
    doGenerate: (options: unknown) => generate?.call(model, options),
    doStream: (options: never) => journaledCall(ctx, () => model.doStream(options))
  } as unknown as M
}

/**
 * One model call as a step. The step's `fn` hands the live stream to the SDK as soon as the call answers, and
 * returns (is journaled) when the stream has ended; a journaled call resolves the step without `fn`, and its parts
 * are replayed. Whichever comes first is the stream the SDK reads.
 */
function journaledCall (ctx: RunContext, call: () => PromiseLike<{ stream: ReadableStream<unknown> }>): Promise<{ stream: ReadableStream<unknown> }> {
  let live!: (result: { stream: ReadableStream<unknown> }) => void
  const started = new Promise<{ stream: ReadableStream<unknown> }>((resolve) => { live = resolve })
  const step = ctx.step(MODEL_STEP, async () => {
    const result = await call()
    const [forModel, forJournal] = result.stream.tee()
    live({ ...result, stream: forModel })
    return { parts: await journalOf(forJournal as ReadableStream<StreamPart>) }
  })
  return Promise.race([started, step.then(({ parts }) => ({ stream: replayed(parts) }))])
}

/**
 * The call's parts as JSON, the deltas of one text (reasoning, tool input) merged; bytes as base64, which every
 * spec accepts where it takes bytes. A call that errs or ends without its `finish` part is not finished: it throws.
 */
async function journalOf (stream: ReadableStream<StreamPart>): Promise<StreamPart[]> {
  const parts: StreamPart[] = []
  let finished = false
  const reader = stream.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    if (value.type === 'error') {
      await reader.cancel()
      throw new Error('The model call ended in an error: not journaled')
    }
    if (value.type === 'finish') finished = true
    const last = parts.at(-1)
    if (DELTAS.has(value.type) && last?.type === value.type && last.id === value.id && last.providerMetadata === undefined && value.providerMetadata === undefined) {
      last.delta = (last.delta as string) + (value.delta as string)
      continue
    }
    parts.push(JSON.parse(JSON.stringify(value, bytesAsBase64)) as StreamPart)
  }
  if (!finished) throw new Error('The model call ended without finishing: not journaled')
  return parts
}

const DELTAS = new Set(['text-delta', 'reasoning-delta', 'tool-input-delta'])

function bytesAsBase64 (_key: string, value: unknown): unknown {
  return value instanceof Uint8Array ? Buffer.from(value).toString('base64') : value
}

/** The journaled parts as a model stream; the response's timestamp is a Date again. */
function replayed (parts: StreamPart[]): ReadableStream<unknown> {
  return new ReadableStream({
    start (controller) {
      for (const part of parts) {
        controller.enqueue(part.type === 'response-metadata' && typeof part.timestamp === 'string' ? { ...part, timestamp: new Date(part.timestamp) } : part)
      }
      controller.close()
    }
  })
}

function isAsyncIterable (value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as AsyncIterable<unknown> | null)?.[Symbol.asyncIterator] === 'function'
}

async function responseMessages (result: StreamTextOutput): Promise<ModelMessage[]> {
  return 'responseMessages' in result ? await result.responseMessages : (await result.response).messages
}

function messageOf (error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
