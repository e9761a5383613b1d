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

// Every run needs a trace id: cut from a pool refilled 4 KB at a time (one synchronous trip into OpenSSL
// per 256 ids rather than per id), as crypto.randomUUID() does for its own ids.
const TRACE_ID_BYTES = 16
const POOL_BYTES = TRACE_ID_BYTES * 256
let pool = Buffer.alloc(0)
let poolOffset = 0

export function newTraceId (): string {
  if (poolOffset === pool.length) {
    pool = randomBytes(POOL_BYTES)
    poolOffset = 0
  }
  const id = pool.toString('hex', poolOffset, poolOffset + TRACE_ID_BYTES)
  poolOffset += TRACE_ID_BYTES
  return id
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/** An incoming X-Request-ID is reused only when it is 1-128 chars of [A-Za-z0-9._:-]. */
export function isValidRequestId (value: unknown): value is string {
  return typeof value === 'string' && REQUEST_ID.test(value)
}
