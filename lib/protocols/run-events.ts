// What the projections read of a run: its events (the pipeline's own RunEvent, without the serialized copy a
// projection has no use for) and their data, whose shapes are the schemas'.
import type { Static } from '@sinclair/typebox'
import type { RunEvent as PipelineEvent } from '../runs/run.js'
import { RESERVED_EVENT_PREFIXES } from '../runs/events.js'

export type { Approval } from '../../schemas/approvals.js'
export type {
  ApprovalEventData, RunStartedData, TextDeltaData, ToolCallData, ToolCallDeltaData, ToolResultData
} from '../../schemas/events.js'
export type { RunResult as RunCompletedData } from '../../schemas/runs.js'
import type { RunFailedEvent } from '../../schemas/runs.js'

/** One event of a run's log: `seq` from 1, ending with exactly one terminal event. */
export type RunEvent = Pick<PipelineEvent, 'seq' | 'type' | 'data'>

export type RunFailedData = Static<typeof RunFailedEvent>

/** Anything but a built-in type or one of the service's reserved prefixes (§14) is a custom event. */
export function isCustomEventType (type: string): boolean {
  return !RESERVED_EVENT_PREFIXES.some((prefix) => type.startsWith(prefix)) &&
    type !== 'message.delta' && type !== 'reasoning.delta' && !type.startsWith('tool.')
}

/** A tool's output as text, for the protocols whose results are strings. */
export function outputText (output: unknown): string {
  return typeof output === 'string' ? output : JSON.stringify(output) ?? ''
}

/** `: ping` keeps proxies from closing an idle stream; every client tested here skips SSE comments. */
export const SSE_PING = ': ping\n\n'
