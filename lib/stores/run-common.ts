// What the durable run stores (SQLite, PostgreSQL, Redis) share: the order of a batch of events, and the text
// they can keep. The memory store needs neither: it keeps JavaScript strings as they are.
import { RunLogGapError, UnstorableTextError } from '../core/errors.js'
import type { NewRun, RunStatus, StoredEvent } from './types.js'

export { MAX_RUN_LIST_LIMIT } from './memory-runs.js'

/** How often a store polls for what its notifications may have missed, unless told otherwise. */
export const RUN_POLL_MS = 1_000

export function isEnded (status: RunStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'cancelled'
}

/**
 * The seqs of a batch follow each other; the store checks the first against the run's `lastSeq`, atomically
 * with the write. Throws the error the memory store would for a gap inside the batch.
 */
export function checkBatch (runId: string, events: readonly StoredEvent[]): void {
  for (let i = 1; i < events.length; i++) {
    const expected = events[0]!.seq + i
    if (events[i]!.seq !== expected) throw new RunLogGapError(runId, expected, events[i]!.seq)
  }
}

const wellFormed = (String.prototype as unknown as { isWellFormed: (this: string) => boolean }).isWellFormed

/**
 * Whether a string survives the store unchanged. Every driver sends UTF-8, where a lone surrogate becomes
 * U+FFFD (two ids would then be one); PostgreSQL `text` refuses NUL outright.
 */
export function storable (value: string, nul: boolean): boolean {
  return wellFormed.call(value) && (nul || !value.includes('\u0000'))
}

/** Refuses, before anything is written, a string the store would not give back as it was. */
export function checkText (backend: string, nul: boolean, name: string, value: string): void {
  if (storable(value, nul)) return
  throw new UnstorableTextError(name, backend, wellFormed.call(value) ? 'a NUL character' : 'a lone surrogate')
}

export function checkNewRun (backend: string, nul: boolean, run: NewRun): void {
  const { record } = run
  for (const name of ['runId', 'agent', 'principal', 'requestId', 'traceId'] as const) {
    checkText(backend, nul, name, record[name])
  }
  if (record.sessionId !== null) checkText(backend, nul, 'sessionId', record.sessionId)
}

export function checkEvents (backend: string, nul: boolean, events: readonly StoredEvent[]): void {
  for (const event of events) {
    checkText(backend, nul, 'an event type', event.type)
    checkText(backend, nul, 'an event\'s data', event.data)
  }
}
