import { Type } from '@sinclair/typebox'
import type { Static, TSchema } from '@sinclair/typebox'

/** The one error body every route answers with (Fastify's shape plus `requestId` and `traceId`). */
export const ErrorResponse = Type.Object({
  statusCode: Type.Integer(),
  error: Type.String(),
  message: Type.String(),
  code: Type.Optional(Type.String()),
  requestId: Type.String(),
  traceId: Type.Optional(Type.String())
}, { title: 'ErrorResponse', description: 'Every error response has this shape' })
export type ErrorResponse = Static<typeof ErrorResponse>

export const Metadata = Type.Record(Type.String(), Type.Unknown())

export const Usage = Type.Object({
  inputTokens: Type.Integer({ minimum: 0 }),
  outputTokens: Type.Integer({ minimum: 0 }),
  totalTokens: Type.Integer({ minimum: 0 })
}, { title: 'Usage' })
export type Usage = Static<typeof Usage>

export const AgentNamePattern = '^[a-z0-9][a-z0-9._-]{0,63}$'
export const AgentName = Type.String({ pattern: AgentNamePattern })

/** Path ids: generous but bounded, so a 10 KB id is a 400 rather than a store look-up. */
export const Id = Type.String({ minLength: 1, maxLength: 128 })

/** A listing's page cursor (lib/core/cursors.ts writes and reads them): one a store did not hand out is a 400. */
export const Cursor = Type.String({ minLength: 1, maxLength: 512, description: 'opaque, from the previous page\'s nextCursor' })
export const NextCursor = Type.Union([Type.String(), Type.Null()], { description: 'null on the last page' })

/** A listing's page size, 1 to `max` (`fallback` when absent): out of range, fractional or not a number is a 400. */
export const PageLimit = (max: number, fallback: number) => Type.Integer({ minimum: 1, maximum: max, default: fallback })

const errorDescriptions: Record<number, string> = {
  400: 'Invalid request',
  401: 'Missing or invalid credentials',
  403: 'Authenticated, but lacking the role',
  404: 'Not found',
  405: 'Method not allowed',
  409: 'Conflict',
  413: 'Body too large',
  415: 'Unsupported content type',
  422: 'Idempotency key reused with another body',
  426: 'Upgrade required (a WebSocket route asked without an upgrade)',
  429: 'Rate limited',
  500: 'Internal error',
  501: 'Not available: an optional peer dependency is not installed',
  503: 'Unavailable (shutting down, a store unavailable, or degraded)',
  504: 'Agent timed out'
}

// one schema object per status, whichever route or service documents it: Fastify compiles a response schema's
// serializer once per object in a process (lib/core/serializers.ts)
const errorSchemas = new Map<number, TSchema>()

/** `{ [status]: ErrorResponse }` for the given statuses: every route documents its error statuses. */
export function errorResponses (...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {}
  for (const status of statuses) {
    let schema = errorSchemas.get(status)
    if (schema === undefined) {
      schema = Type.Composite([ErrorResponse], { title: 'ErrorResponse', description: errorDescriptions[status] })
      errorSchemas.set(status, schema)
    }
    out[status] = schema
  }
  return out
}
