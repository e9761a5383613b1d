// What the projections read of a run: its events (the pipeline's own RunEvent, without the serialized copy a
// projection has no use for) and their data, whose shapes are the schemas'.
import type { Static } from '@sinclair/typebox'
import type { RunEvent as PipelineEvent } from '../runs/run.js'
import { RESERVED_EVENT_PREFIXES, endsRun, isTerminal } from '../runs/events.js'

export type { Approval } from '../../schemas/approvals.js'
export type {
  ApprovalEventData, RunStartedData, TextDeltaData, ToolCallData, ToolCallDeltaData, ToolResultData
} from '../../schemas/events.js'
export type { RunResult as RunCompletedData } from '../../schemas/runs.js'
import type { RunFailedEvent } from '../../schemas/runs.js'

/** One event of a run's log: `seq` from 1, ending with exactly one terminal event. */
export type RunEvent = Pick<PipelineEvent, 'seq' | 'type' | 'data'>

export type RunFailedData = Static<typeof RunFailedEvent>

/**
 * An event as read from a run's log (`followRun`, `storedEvents`): `goesOn` marks an attempt's terminal event that the
 * run goes on after — a run resumed under its id, whose `run.requeued { reason: 'RESUMED' }` and next attempt follow
 * (the rule is `endsRun`'s) — which a projection shows as news, not as the end. A live run's own events have none.
 */
export interface LoggedEvent extends RunEvent {
  readonly goesOn?: true
}

/** Whether the event ends the run: a terminal event that the run does not go on after. */
export function endsTheRun (event: LoggedEvent): boolean {
  return isTerminal(event.type) && event.goesOn !== true
}

/** The event as its log's readers get it, `end` saying whether it ends the run (endsRun's answer). */
export function loggedEvent (event: RunEvent, end: boolean): LoggedEvent {
  return end || !isTerminal(event.type) ? event : { ...event, goesOn: true }
}

/** A log read whole (all there was when read), each attempt's end that more events follow marked `goesOn`. */
export function wholeLog (events: readonly RunEvent[]): LoggedEvent[] {
  return events.map((event, i) => loggedEvent(event, endsRun(events, i, true)!))
}

/** Anything but a built-in type or one of the service's reserved prefixes (README.md, "The event vocabulary") is a custom event. */
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
