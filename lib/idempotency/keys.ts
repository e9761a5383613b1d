// Idempotency keys (docs/auth-and-traffic.md), without Fastify: reading the key, scoping it, fingerprinting the body,
// and what a stored response looks like. lib/idempotency/index.ts (the idempotency plugin) runs them around the two routes.
import { createHash } from 'node:crypto'
import type { Hash } from 'node:crypto'
import { Transform } from 'node:stream'
import type { TransformCallback } from 'node:stream'
import { IdempotencyKeyInvalidError } from '../core/errors.js'
import { formatSseEvent } from '../runs/sse.js'
import type { RunEvent } from '../runs/run.js'
import type { IdempotencyResponse } from '../stores/types.js'

export const MAX_IDEMPOTENCY_KEY_LENGTH = 255
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/

export const SSE_CONTENT_TYPE = 'text/event-stream; charset=utf-8'

/**
 * The request's idempotency key (`Idempotency-Key`, or `X-Idempotency-Key`), undefined without one.
 * Throws 400 IDEMPOTENCY_KEY_INVALID unless it is 1-255 printable ASCII characters, or when the two headers differ.
 */
export function readIdempotencyKey (headers: Record<string, string | string[] | undefined>): string | undefined {
  const keys = [headers['idempotency-key'], headers['x-idempotency-key']].filter((k) => k !== undefined)
  if (keys.length === 0) return undefined
  for (const key of keys) {
    // Node joins a repeated header into one string; a list only comes from a programmatic caller
    if (typeof key !== 'string') throw new IdempotencyKeyInvalidError('Send one Idempotency-Key header')
    if (key.length === 0) throw new IdempotencyKeyInvalidError('The idempotency key is empty')
    if (key.length > MAX_IDEMPOTENCY_KEY_LENGTH) throw new IdempotencyKeyInvalidError(`The idempotency key is longer than ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`)
    if (!PRINTABLE_ASCII.test(key)) throw new IdempotencyKeyInvalidError('The idempotency key must be printable ASCII')
  }
  if (keys.length === 2 && keys[0] !== keys[1]) throw new IdempotencyKeyInvalidError('Idempotency-Key and X-Idempotency-Key differ')
  return keys[0] as string
}

/**
 * The key a record is stored under: principal, method, path and the client's key, hashed (so that any
 * key fits any store, and one principal's keys can never name another's records).
 */
export function scopedIdempotencyKey (principal: string, method: string, path: string, key: string): string {
  return createHash('sha256').update(JSON.stringify([principal, method, path, key])).digest('hex')
}

/**
 * The path a key is scoped by: the URL's path, percent-decoded as the router decodes it, so that
 * `/v1/agents/%63ount/runs` and `/v1/agents/count/runs` (one route, one agent) share their keys.
 */
export function decodedPath (url: string): string {
  const path = url.split('?', 1)[0]!
  try {
    return decodeURIComponent(path)
  } catch {
    // not valid percent-encoding: the router matched it as written, and so is it scoped
    return path
  }
}

/**
 * Hashes the raw body as it streams to the parser: the fingerprint is sha256 of the bytes sent, known
 * once the body has been read (by the preHandler stage).
 */
export class BodyFingerprint extends Transform {
  readonly #hash: Hash = createHash('sha256')
  /** Fastify compares this with Content-Length after parsing; a pass-through keeps the raw stream's count. */
  receivedEncodedLength = 0

  override _transform (chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#hash.update(chunk)
    this.receivedEncodedLength += chunk.length
    callback(null, chunk)
  }

  digest (): string {
    return this.#hash.digest('hex')
  }
}

/** A streamed run is replayed as SSE with its final event only. */
export function streamedResponse (final: RunEvent): IdempotencyResponse {
  return { status: 200, body: formatSseEvent(final), contentType: SSE_CONTENT_TYPE }
}

/**
 * Whether a response is kept for replay: 2xx and 4xx. A 5xx, and 499 (the client left before its answer;
 * nobody got it), release the key so that a retry runs again.
 */
export function isReplayable (status: number): boolean {
  // a 429 (QUOTA_EXCEEDED) says "later": the retry after retry-after must run, not replay the refusal
  return status < 500 && status !== 499 && status !== 429
}
