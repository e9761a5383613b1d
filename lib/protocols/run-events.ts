// The run event vocabulary of CONTRACT §14, as the projections read it. Kept here, free of any
// protocol package, so the projections stay pure and the route layer can feed them its own log.

/** One event of a run's log: `seq` from 1, ending with exactly one terminal event. */
export interface RunEvent {
  seq: number
  type: string
  data: unknown
}

export interface RunStartedData {
  runId: string
  agent: string
  /** null for an ephemeral run (`store: false`) */
  sessionId: string | null
  requestId: string
  traceId: string
  attempt: number
}

export interface TextDeltaData { text: string }
export interface ToolCallDeltaData { toolCallId: string, name: string, delta: string }
export interface ToolCallData { toolCallId: string, name: string, input: unknown }
export interface ToolResultData { toolCallId: string, name: string, output: unknown, isError: boolean }

export interface ApprovalDecision {
  approved: boolean
  comment?: string | null
  decidedBy?: string | null
  decidedAt?: string
}

export interface Approval {
  id: string
  runId: string
  agent: string
  sessionId: string | null
  principal: string
  action: string
  payload?: unknown
  reason?: string | null
  status: 'pending' | 'approved' | 'rejected' | 'expired' | 'cancelled'
  requestedAt: string
  expiresAt: string
  decision?: ApprovalDecision | null
}

export interface ApprovalEventData { approval: Approval }

export interface Usage { inputTokens: number, outputTokens: number, totalTokens: number }

export interface RunCompletedData {
  runId: string
  agent: string
  sessionId: string | null
  status: 'completed'
  output: unknown
  usage: Usage
  finishReason: string
  requestId: string
  traceId: string
}

export interface RunFailedData {
  error: { code: string, message: string }
  traceId: string
}

/** Prefixes the service keeps for itself (§14); anything else that is not a built-in is a custom event. */
const RESERVED_PREFIXES = ['run.', 'approval.', 'checkpoint.']

export function isCustomEventType (type: string): boolean {
  return !RESERVED_PREFIXES.some((prefix) => type.startsWith(prefix)) &&
    type !== 'message.delta' && type !== 'reasoning.delta' && !type.startsWith('tool.')
}

/** A tool's output as text, for the protocols whose results are strings. */
export function outputText (output: unknown): string {
  return typeof output === 'string' ? output : JSON.stringify(output) ?? ''
}

/** `: ping` keeps proxies from closing an idle stream; every client tested here skips SSE comments. */
export const SSE_PING = ': ping\n\n'
