// Agents as MCP tools (docs/front-ends.md, "MCP"): what tools/list shows of an agent, how a call's arguments become
// the run's input, and how a run's end becomes a tools/call result. No SDK here: plain JSON shapes.
import type { CompiledAgentSchemas, JsonSchema } from '../../core/agent-schemas.js'
import type { Agent } from '../../core/types.js'
import { outputText } from '../run-events.js'
import type { McpTool, McpToolResult } from './schemas.js'

/** An agent's schemas as plain JSON Schema (a Standard Schema's from its library's converter), made at registration. */
export type ToolSchemas = CompiledAgentSchemas | undefined

function isObjectSchema (schema: JsonSchema | undefined): boolean {
  return schema?.type === 'object'
}

/** Whether the tool's arguments are the agent's input itself (an object schema), or hold it as `input`. */
export function argumentsAreInput (schemas: ToolSchemas): boolean {
  return isObjectSchema(schemas?.input)
}

export function toolOf (name: string, agent: Agent, schemas: ToolSchemas): McpTool {
  const input = schemas?.input
  const tool: McpTool = {
    name,
    inputSchema: isObjectSchema(input)
      ? { ...input! }
      : { type: 'object', properties: { input: input === undefined ? {} : { ...input } }, required: ['input'] },
    execution: { taskSupport: 'optional' }
  }
  if (agent.description !== undefined) tool.description = agent.description
  if (isObjectSchema(schemas?.output)) tool.outputSchema = { ...schemas!.output! }
  return tool
}

/**
 * The run's input from a call's arguments, and the path a validation message names it by; null when the tool
 * holds it as `input` and the arguments have none.
 */
export function inputOf (schemas: ToolSchemas, args: Record<string, unknown> | undefined): { input: unknown, path: string } | null {
  if (argumentsAreInput(schemas)) return { input: args ?? {}, path: 'arguments' }
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
