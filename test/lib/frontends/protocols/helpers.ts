// Run event fixtures shared by the protocol tests, and a Response that streams text piece by piece.
import type { Approval, RunEvent } from '../../../../lib/frontends/run-events.js'

export const RUN_ID = 'run-1'
export const SESSION_ID = 'session-1'
export const TRACE_ID = '0af7651916cd43dd8448eb211c80319c'

/** Numbers the events from `first` on, the way the run's log does. */
export function log (events: Array<[string, unknown]>, first = 1): RunEvent[] {
  return events.map(([type, data], i) => ({ seq: first + i, type, data }))
}

export function started (attempt = 1): [string, unknown] {
  return ['run.started', { runId: RUN_ID, agent: 'helper', sessionId: SESSION_ID, requestId: 'req-1', traceId: TRACE_ID, attempt }]
}

export function completed (output: unknown, finishReason = 'stop'): [string, unknown] {
  return ['run.completed', {
    runId: RUN_ID,
    agent: 'helper',
    sessionId: SESSION_ID,
    status: 'completed',
    output,
    usage: { inputTokens: 3, outputTokens: 5, totalTokens: 8 },
    finishReason,
    requestId: 'req-1',
    traceId: TRACE_ID
  }]
}

export function failed (code: string, message: string): [string, unknown] {
  return ['run.failed', { error: { code, message }, traceId: TRACE_ID }]
}

export function approval (status: Approval['status'] = 'pending', overrides: Partial<Approval> = {}): Approval {
  return {
    id: 'appr-1',
    runId: RUN_ID,
    agent: 'helper',
    sessionId: SESSION_ID,
    principal: 'alice',
    action: 'sendEmail',
    payload: { to: 'bob@example.com' },
    reason: 'Sends mail on your behalf',
    status,
    requestedAt: '2030-01-01T00:00:00.000Z',
    expiresAt: '2030-01-01T00:10:00.000Z',
    ...(status === 'approved' || status === 'rejected'
      ? { decision: { approved: status === 'approved', comment: 'ok', decidedBy: 'alice', decidedAt: '2030-01-01T00:01:00.000Z' } }
      : {}),
    ...overrides
  }
}

/** A streamed body: each piece is its own chunk, as a socket would deliver the projection's writes. */
export function streamOf (pieces: readonly string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder()
  return new ReadableStream({
    start (controller) {
      for (const piece of pieces) if (piece !== '') controller.enqueue(encoder.encode(piece))
      controller.close()
    }
  })
}

/** All of a stream's text. */
export async function textOf (stream: ReadableStream<string | Uint8Array>): Promise<string> {
  const decoder = new TextDecoder()
  let text = ''
  for await (const piece of stream as unknown as AsyncIterable<string | Uint8Array>) {
    text += typeof piece === 'string' ? piece : decoder.decode(piece, { stream: true })
  }
  return text
}
