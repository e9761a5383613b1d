// Agents as MCP tools (docs/front-ends.md, "MCP"): what tools/list shows of an agent, how a call's arguments become
// the run's input, and how a run's end becomes a tools/call result. No SDK here: plain JSON shapes.
import type { TSchema } from '@sinclair/typebox'
import type { Agent } from '../../core/types.js'
import { outputText } from '../../protocols/run-events.js'
import type { McpTool, McpToolResult } from './schemas.js'

/** The schema as JSON (a TypeBox schema carries symbol keys that are not the client's business). */
function plain (schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema)) as Record<string, unknown>
}

function isObjectSchema (schema: TSchema | undefined): schema is TSchema {
  return schema !== undefined && (schema as { type?: unknown }).type === 'object'
}

/** Whether the tool's arguments are the agent's input itself (an object schema), or hold it as `input`. */
export function argumentsAreInput (agent: Agent): boolean {
  return isObjectSchema(agent.input)
}

export function toolOf (name: string, agent: Agent): McpTool {
  const tool: McpTool = {
    name,
    inputSchema: argumentsAreInput(agent)
      ? plain(agent.input!)
      : { type: 'object', properties: { input: agent.input === undefined ? {} : plain(agent.input) }, required: ['input'] },
    execution: { taskSupport: 'optional' }
  }
  if (agent.description !== undefined) tool.description = agent.description
  if (isObjectSchema(agent.output)) tool.outputSchema = plain(agent.output)
  return tool
}

/**
 * The run's input from a call's arguments, and the path a validation message names it by; null when the tool
 * holds it as `input` and the arguments have none.
 */
export function inputOf (agent: Agent, args: Record<string, unknown> | undefined): { input: unknown, path: string } | null {
  if (argumentsAreInput(agent)) return { input: args ?? {}, path: 'arguments' }
  if (args === undefined || !Object.hasOwn(args, 'input')) return null
  return { input: args.input, path: 'arguments/input' }
}

/** What identifies the run behind a result. */
export interface RunIds {
  runId: string
  sessionId: string | null
  traceId: string
}

/** A run's end as a tools/call result: its output as text (and as structured content when it is an object), or its error. */
export function toolResult (end: { output: unknown } | { error: { code: string, message: string } }, ids: RunIds, meta: Record<string, unknown> = {}): McpToolResult {
  const _meta = { ...meta, runId: ids.runId, sessionId: ids.sessionId, traceId: ids.traceId }
  if ('error' in end) return { content: [{ type: 'text', text: `${end.error.code}: ${end.error.message}` }], isError: true, _meta }
  const result: McpToolResult = { content: [{ type: 'text', text: outputText(end.output) }], isError: false, _meta }
  if (typeof end.output === 'object' && end.output !== null && !Array.isArray(end.output)) result.structuredContent = end.output as Record<string, unknown>
  return result
}
