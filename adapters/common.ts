// What the ecosystem adapters share: the options every adapted agent takes and how it turns a run's input into text.
import type { AgentSchema } from '../lib/core/agent-schemas.js'

export interface AdapterOptions {
  description?: string
  metadata?: Record<string, unknown>
  /** validates the run request's input (and types it); passed through to the service */
  input?: AgentSchema
  /** documents the run's output; passed through to the service */
  output?: AgentSchema
  /** the run may be requeued on another instance (docs/runs.md); passed through to the service */
  resumable?: boolean
  /** how long each approval the adapter asks for stays pending; default: `ctx.requestApproval`'s (15 minutes) */
  approvalTimeoutMs?: number
}

// the longest ctx.requestApproval accepts (a timer's limit)
const MAX_APPROVAL_TIMEOUT_MS = 2 ** 31 - 1

/** requestApproval would reject a bad timeout only at the first approval, mid-run: this says so when the agent is made. */
export function checkApprovalTimeout (adapter: string, value: number | undefined): void {
  if (value !== undefined && !(Number.isInteger(value) && value >= 0 && value <= MAX_APPROVAL_TIMEOUT_MS)) {
    throw new RangeError(`${adapter}: approvalTimeoutMs must be an integer from 0 to ${MAX_APPROVAL_TIMEOUT_MS}, got ${String(value)}`)
  }
}

/** A string as it is; anything else (the input is any JSON) as JSON. */
export function textOf (value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value)
}
