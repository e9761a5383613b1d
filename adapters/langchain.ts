/**
 * `fastify-agents/langchain`: a compiled LangGraph graph, or any LangChain Runnable, as an agent.
 *
 * The graph is streamed with `streamMode: ['messages', 'updates']` on `thread_id = ctx.sessionId`, so a checkpointer
 * keeps the conversation per session: the graph's own state, not `ctx.history`, carries the earlier turns. Chat-model
 * output (the `messages` mode) is the run's text; the messages each node returns (the `updates` mode) give the tool
 * calls, the tool results, the usage and the output (the last AI message's text). Approvals: a graph `interrupt(value)`
 * ends the stream with `__interrupt__`; the adapter asks `ctx.requestApproval` for each interrupt (payload: its
 * value) and streams the graph again on the same thread with `new Command({ resume })`, the decisions keyed by
 * interrupt id, so `interrupt()` returns the decision `{ approved, comment, decidedBy, status }`.
 * A plain Runnable (a chat model, a chain) is streamed too: its message chunks or strings are the text.
 * With `resumable: true`, a graph runs with a checkpointer kept in the run's checkpoint (./langgraph-checkpointer.ts),
 * so that an attempt that takes the run over continues the graph from its last checkpoint.
 */
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages'
import type { Agent, AgentEvent, AgentResult, Decision, RunContext } from '../lib/core/types.js'
import type { TypedAgent } from '../lib/runs/define-agent.js'
import type { AgentSchema, InferSchema } from '../lib/core/agent-schemas.js'
import { checkApprovalTimeout, textOf } from './common.js'
import type { AdapterOptions } from './common.js'
import { runCheckpointer } from './langgraph-checkpointer.js'
import type { RunCheckpointer } from './langgraph-checkpointer.js'
import type { BaseCheckpointSaver } from '@langchain/langgraph'

/**
 * What `interrupt()` returns in a graph this adapter runs: the decision. LangGraph types it `any`; name it
 * `interrupt<Value, InterruptDecision>(value)` (docs/agents.md).
 */
export type InterruptDecision = Decision

// How a LangGraph graph is lent a checkpointer for one call: the key a parent graph hands its subgraphs theirs by,
// which wins over the graph's own.
const CHECKPOINTER = '__pregel_checkpointer'

export interface GraphStreamOptions {
  configurable: { thread_id: string, [CHECKPOINTER]?: BaseCheckpointSaver }
  streamMode: Array<'messages' | 'updates'>
  signal: AbortSignal
  /** a resumable graph's: each super-step's checkpoint stored before the next one starts */
  durability?: 'sync'
}

/** What the adapter calls: a compiled graph's (or any Runnable's) `stream()`. */
export interface StreamableGraph {
  stream(input: unknown, options: GraphStreamOptions): Promise<AsyncIterable<unknown>>
  /** a compiled graph's own checkpointer (`false`: it never checkpoints) */
  checkpointer?: BaseCheckpointSaver | boolean
}

export interface LangGraphAgentOptions<Input = unknown> extends AdapterOptions {
  /** The graph's input for a run; by default one human message holding the input (JSON unless a string). */
  toGraphInput?(input: Input, ctx: RunContext): unknown
}

/** With an `input` schema, `toGraphInput` gets what the schema describes. */
export interface TypedLangGraphAgentOptions<S extends AgentSchema> extends Omit<LangGraphAgentOptions<InferSchema<S>>, 'input'> {
  input: S
}

interface GraphInterrupt {
  id: string
  value: unknown
}

function defaultInput (input: unknown): unknown {
  return { messages: [new HumanMessage(textOf(input))] }
}

/** The approval's action: the interrupt value's own `action` when it names one. */
function actionOf (value: unknown): string {
  const action = (value as { action?: unknown } | null)?.action
  return typeof action === 'string' && action !== '' ? action : 'interrupt'
}

/** The messages a node returned: its update's `messages` key, one message or a list. */
function messagesIn (update: unknown): unknown[] {
  const messages = (update as { messages?: unknown } | null)?.messages
  return Array.isArray(messages) ? messages : [messages]
}

/** The text of the last AI message in the graph's last checkpoint, if its state has messages. */
async function lastAiMessageText (saver: RunCheckpointer, config: GraphStreamOptions): Promise<string | undefined> {
  const { messages } = (await saver.getTuple(config))!.checkpoint.channel_values as { messages?: unknown }
  return [messages].flat().findLast((message) => AIMessage.isInstance(message))?.text
}

export function langGraphAgent<S extends AgentSchema> (graph: StreamableGraph, options: TypedLangGraphAgentOptions<S>): TypedAgent<S>
export function langGraphAgent<Input = unknown> (graph: StreamableGraph, options?: LangGraphAgentOptions<Input> & { input?: undefined }): Agent<Input>
export function langGraphAgent<Input> (graph: StreamableGraph, options: LangGraphAgentOptions<Input> = {}): Agent<Input> {
  if (typeof graph?.stream !== 'function') throw new TypeError('langGraphAgent: graph must be a compiled graph or a Runnable (an object with stream())')
  const { toGraphInput = defaultInput, approvalTimeoutMs, ...fields } = options
  checkApprovalTimeout('langGraphAgent', approvalTimeoutMs)
  // a graph (not a plain Runnable) that may checkpoint, in a run that may be taken over: docs/durable-agents.md
  const durable = fields.resumable === true && 'checkpointer' in graph && graph.checkpointer !== false

  async function * run (input: Input, ctx: RunContext): AsyncGenerator<string | AgentEvent, AgentResult> {
    const config: GraphStreamOptions = { configurable: { thread_id: ctx.sessionId }, streamMode: ['messages', 'updates'], signal: ctx.signal }
    let graphInput = toGraphInput(input, ctx)
    let saver: RunCheckpointer | undefined
    // an ephemeral run (store: false) keeps no checkpoint, and is never taken over
    if (durable && ctx.sessionId !== null) {
      saver = await runCheckpointer(ctx, typeof graph.checkpointer === 'object' ? graph.checkpointer : undefined)
      config.configurable[CHECKPOINTER] = saver
      // LangGraph's default stores a checkpoint while the next super-step runs: one that completed could run again
      config.durability = 'sync'
      // an earlier attempt checkpointed the graph: it goes on from there (LangGraph's resume is a null input)
      if (saver.resumed) graphInput = null
    }
    let text = ''
    let lastAiText: string | undefined
    let inputTokens = 0
    let outputTokens = 0
    // the name of each tool call, for a tool message that does not carry one
    const toolNames = new Map<string, string>()
    for (;;) {
      const interrupts: GraphInterrupt[] = []
      for await (const chunk of await graph.stream(graphInput, config)) {
        if (Array.isArray(chunk) && chunk[0] === 'messages') {
          const message: unknown = chunk[1][0]
          // tool messages come with the updates; a chunk of a tool call alone has no text
          if (AIMessage.isInstance(message) && message.text !== '') {
            text += message.text
            yield message.text
          }
        } else if (Array.isArray(chunk) && chunk[0] === 'updates') {
          const update = chunk[1] as Record<string, unknown>
          if (update.__interrupt__ !== undefined) {
            interrupts.push(...update.__interrupt__ as GraphInterrupt[])
            continue
          }
          // On resume, the tasks that had finished before the interrupt replay their writes: seen already.
          if ((update.__metadata__ as { cached?: boolean } | undefined)?.cached === true) continue
          for (const nodeUpdate of Object.values(update)) {
            for (const message of messagesIn(nodeUpdate)) {
              if (AIMessage.isInstance(message)) {
                for (const call of message.tool_calls ?? []) {
                  const toolCallId = call.id ?? ''
                  toolNames.set(toolCallId, call.name)
                  yield { type: 'tool.call', data: { toolCallId, name: call.name, input: call.args } }
                }
                inputTokens += message.usage_metadata?.input_tokens ?? 0
                outputTokens += message.usage_metadata?.output_tokens ?? 0
                lastAiText = message.text
              } else if (ToolMessage.isInstance(message)) {
                const name = message.name ?? toolNames.get(message.tool_call_id) ?? ''
                yield { type: 'tool.result', data: { toolCallId: message.tool_call_id, name, output: message.content, isError: message.status === 'error' } }
              }
            }
          }
        } else if (AIMessage.isInstance(chunk)) {
          // a plain Runnable ending in a chat model; its last chunk may carry only the usage
          inputTokens += chunk.usage_metadata?.input_tokens ?? 0
          outputTokens += chunk.usage_metadata?.output_tokens ?? 0
          if (chunk.text !== '') {
            text += chunk.text
            yield chunk.text
          }
        } else if (typeof chunk === 'string') {
          // a plain Runnable ending in a string output parser
          text += chunk
          yield chunk
        }
      }
      if (interrupts.length === 0) {
        // a graph that had ended before its run was taken over: nothing ran now, its last AI message is in the checkpoint
        if (lastAiText === undefined && text === '' && saver?.resumed === true) lastAiText = await lastAiMessageText(saver, config)
        return { output: lastAiText ?? text, usage: { inputTokens, outputTokens } }
      }

      // One approval after the other; the graph goes on once every interrupt of this step is answered.
      const resume: Record<string, Decision> = {}
      for (const { id, value } of interrupts) {
        resume[id] = await ctx.requestApproval({ action: actionOf(value), payload: value, timeoutMs: approvalTimeoutMs })
      }
      // Loaded here: a plain Runnable needs only @langchain/core, and only a graph can interrupt.
      const { Command } = await import('@langchain/langgraph')
      graphInput = new Command({ resume })
    }
  }

  return { ...fields, run }
}
