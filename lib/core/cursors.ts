// The cursors of every paginated listing (the Admin API's audit, sessions, runs and webhook attempts; a session's
// runs), written and read here for every backend. A cursor is client input: one that is not exactly what a store
// handed out as `nextCursor` is a 400 naming the parameter here, before any backend sees it — never a store's
// error (a timestamp PostgreSQL cannot hold was a 500) nor a page of nothing (the memory and SQLite stores).
import { InvalidCursorError, InvalidCursorParamError } from './errors.js'
import { unstorableText } from './validation.js'

/** The last instant a Date holds (ECMAScript's time range is ±8.64e15 ms); PostgreSQL's timestamps go further. */
const MAX_DATE_MS = 8.64e15
/** The longest id a key cursor carries: the query's cursor is at most 512 characters of base64 anyway. */
const MAX_ID_LENGTH = 256
const SEQ = /^(0|[1-9][0-9]{0,15})$/

function invalid (): Error {
  return new InvalidCursorError('cursor')
}

/** The base64url text's bytes, only when the text is exactly how they encode (Node's decoder skips what it cannot read). */
function decoded (cursor: string): string {
  const text = Buffer.from(cursor, 'base64url').toString()
  if (Buffer.from(text).toString('base64url') !== cursor) throw invalid()
  return text
}

// A seq cursor carries the place of the last item of a page in the store's own sequence (audit entries, runs,
// webhook attempts); the next page is everything before it.
export function encodeSeqCursor (seq: number | string): string {
  return Buffer.from(String(seq)).toString('base64url')
}

/** The seq, as its decimal text (a bigint column takes it as it is), at most Number.MAX_SAFE_INTEGER. */
export function decodeSeqCursor (cursor: string): string {
  const seq = decoded(cursor)
  if (!SEQ.test(seq) || !Number.isSafeInteger(Number(seq))) throw invalid()
  return seq
}

// A key cursor carries (lastActiveAt ms, id) of the last session of a page, the order the listing sorts by.
export function encodeKeyCursor (ms: number, id: string): string {
  return Buffer.from(JSON.stringify([ms, id])).toString('base64url')
}

/** An instant every backend can hold (from 1970 to the last a Date holds), and an id every backend can compare. */
export function decodeKeyCursor (cursor: string): { ms: number, id: string } {
  let parsed: unknown
  try {
    parsed = JSON.parse(decoded(cursor))
  } catch {
    throw invalid()
  }
  if (!Array.isArray(parsed) || parsed.length !== 2) throw invalid()
  const [ms, id] = parsed as unknown[]
  if (!Number.isSafeInteger(ms) || (ms as number) < 0 || (ms as number) > MAX_DATE_MS) throw invalid()
  if (typeof id !== 'string' || id.length > MAX_ID_LENGTH || unstorableText(id, '') !== null) throw invalid()
  return { ms: ms as number, id }
}

/** A seq given as a cursor of a run's events (`Last-Event-ID`, `?after=`): a non-negative safe integer, else a 400 naming it. */
export function seqParam (value: string, name: string): number {
  if (!SEQ.test(value) || !Number.isSafeInteger(Number(value))) throw new InvalidCursorParamError(name)
  return Number(value)
}
