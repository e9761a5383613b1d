import { Type } from '@sinclair/typebox'

/**
 * The idempotency headers, documented on the routes that honour them. Checked by the idempotency plugin
 * (400 IDEMPOTENCY_KEY_INVALID), not by the schema, so that the error says what is wrong with the key.
 */
export const IdempotencyHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({
    description: '1-255 printable ASCII characters. A repeat with the same body within the TTL replays the first response (`Idempotent-Replayed: true`); another body is 422, a repeat while the first runs is 409.'
  })),
  'x-idempotency-key': Type.Optional(Type.String({ description: 'The same as Idempotency-Key' }))
})
