import { randomBytes } from 'node:crypto'
import type { TraceContext } from './types.js'

// W3C Trace Context level 1: version 00, lower-case hex, no all-zero ids. Anything else is ignored
// (and a new trace started), never half-trusted.
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/
const ZERO_TRACE_ID = '0'.repeat(32)
const ZERO_SPAN_ID = '0'.repeat(16)
const MAX_TRACESTATE = 512

/** Parses an incoming traceparent (+ tracestate); null when absent or invalid. */
export function parseTraceparent (traceparent: unknown, tracestate: unknown): TraceContext | null {
  if (typeof traceparent !== 'string') return null
  const match = TRACEPARENT.exec(traceparent)
  if (match === null) return null
  const [, traceId, parentSpanId, traceFlags] = match as unknown as [string, string, string, string]
  if (traceId === ZERO_TRACE_ID || parentSpanId === ZERO_SPAN_ID) return null
  const trace: TraceContext = { traceId, parentSpanId, traceFlags }
  if (typeof tracestate === 'string' && tracestate.length > 0 && tracestate.length <= MAX_TRACESTATE) trace.traceState = tracestate
  return trace
}

export function newTraceId (): string {
  return randomBytes(16).toString('hex')
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/** An incoming X-Request-ID is reused only when it is 1-128 chars of [A-Za-z0-9._:-]. */
export function isValidRequestId (value: unknown): value is string {
  return typeof value === 'string' && REQUEST_ID.test(value)
}
