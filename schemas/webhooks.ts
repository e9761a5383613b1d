// Webhooks (docs/webhooks.md): the option, the body POSTed to the endpoint, and the Admin API's listing of attempts.
import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { Cursor, Id, PageLimit } from './common.js'

export const WebhooksOptions = Type.Object({
  // the scheme (http or https) and the secret's form are checked by lib/webhooks/options.ts, each with its own message
  url: Type.String({ minLength: 1, description: 'the endpoint every delivery is POSTed to: an http(s) URL of the service\'s configuration' }),
  secret: Type.String({ minLength: 1, description: 'the Standard Webhooks signing secret, `whsec_<base64>` (at least 24 bytes once decoded)' }),
  events: Type.Optional(Type.Array(Type.String({ minLength: 1 }), {
    minItems: 1,
    uniqueItems: true,
    description: 'the event types delivered (default run.completed, run.failed, approval.requested): built-in types or custom ones'
  })),
  retentionMs: Type.Optional(Type.Integer({ minimum: 1, description: 'how long a delivered or failed delivery and its attempts are kept (default 7 days)' }))
}, { additionalProperties: false })
export type WebhooksOptions = Static<typeof WebhooksOptions>

/** The `data` of a delivery: who the run is, then the event's own data (a value that is not an object goes under `value`). */
export const WebhookData = Type.Object({
  runId: Type.String(),
  agent: Type.String(),
  sessionId: Type.Union([Type.String(), Type.Null()], { description: 'null for an ephemeral run (store: false)' }),
  principal: Type.String()
}, { additionalProperties: true })

/** What is POSTed: the same bytes on every attempt of one delivery. */
export const WebhookPayload = Type.Object({
  type: Type.String({ description: 'the event type (run.completed, approval.requested, …)' }),
  timestamp: Type.String({ format: 'date-time', description: 'when the event was stored' }),
  data: WebhookData
}, { title: 'WebhookPayload' })
export type WebhookPayload = Static<typeof WebhookPayload>

export const WebhookOutcome = Type.Union([Type.Literal('delivered'), Type.Literal('retried'), Type.Literal('failed')], {
  description: 'delivered (a 2xx answer); retried (no 2xx, another attempt is due); failed (no 2xx, and the delivery was given up)'
})
export type WebhookOutcome = Static<typeof WebhookOutcome>

export const WebhookAttempt = Type.Object({
  webhookId: Type.String({ description: 'the webhook-id header: the same on every attempt of one delivery' }),
  event: Type.String({ description: 'the event type' }),
  runId: Type.String(),
  attempt: Type.Integer({ minimum: 1, description: 'from 1, per delivery' }),
  at: Type.String({ format: 'date-time', description: 'when the attempt was made' }),
  status: Type.Union([Type.Integer(), Type.Null()], { description: 'the HTTP status answered; null when there was no answer' }),
  error: Type.Union([Type.String(), Type.Null()], { description: 'why there was no answer (a timeout, a refused connection); null when answered' }),
  durationMs: Type.Number({ minimum: 0 }),
  outcome: WebhookOutcome
}, { title: 'WebhookAttempt' })
export type WebhookAttempt = Static<typeof WebhookAttempt>

export const AdminWebhooksQuery = Type.Object({
  limit: Type.Optional(PageLimit(500, 50)),
  cursor: Type.Optional(Cursor),
  outcome: Type.Optional(WebhookOutcome),
  event: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  runId: Type.Optional(Id)
}, { additionalProperties: false })
export type AdminWebhooksQuery = Static<typeof AdminWebhooksQuery>

export const AdminWebhookAttemptPage = Type.Object({
  attempts: Type.Array(WebhookAttempt, { description: 'most recent first' }),
  nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'null on the last page' })
}, { title: 'AdminWebhookAttemptPage' })
export type AdminWebhookAttemptPage = Static<typeof AdminWebhookAttemptPage>
