// The `webhooks` option (docs/webhooks.md), beyond what its JSON schema says: the URL's scheme, the secret's form,
// the event types. Each problem is named by its JSON pointer, for the one message of an invalid options error.
import { CUSTOM_EVENT_TYPE, MAX_EVENT_TYPE_LENGTH, RESERVED_EVENT_PREFIXES } from '../runs/events.js'
import type { WebhookStore } from '../stores/types.js'
import type { WebhooksOptions } from '../../schemas/webhooks.js'

export const DEFAULT_WEBHOOK_EVENTS = ['run.completed', 'run.failed', 'approval.requested'] as const
export const DEFAULT_WEBHOOK_RETENTION_MS = 7 * 24 * 60 * 60_000
/** The Standard Webhooks specification's least secret: 24 bytes. */
export const MIN_WEBHOOK_SECRET_BYTES = 24

/** The service's own event types (README.md, "The event vocabulary"); any other must be a custom type an agent may produce. */
export const BUILT_IN_EVENT_TYPES: ReadonlySet<string> = new Set([
  'run.started', 'message.delta', 'reasoning.delta', 'tool.call.delta', 'tool.call', 'tool.result', 'approval.requested',
  'approval.decided', 'checkpoint.saved', 'step.completed', 'run.requeued', 'run.completed', 'run.failed'
])

export interface WebhookSettings {
  readonly url: string
  readonly secret: string
  readonly events: ReadonlySet<string>
  readonly retentionMs: number
  /** the outbox, with the store deadline */
  readonly store: WebhookStore
}

function isEventType (type: string): boolean {
  if (BUILT_IN_EVENT_TYPES.has(type)) return true
  return type.length <= MAX_EVENT_TYPE_LENGTH && CUSTOM_EVENT_TYPE.test(type) && !RESERVED_EVENT_PREFIXES.some((prefix) => type.startsWith(prefix))
}

/** What the schema cannot say about `webhooks` (whose shape it has checked: a wrong type is its message, not one of these). */
export function webhookProblems (webhooks: WebhooksOptions): string[] {
  const problems: string[] = []
  if (typeof webhooks.url === 'string') {
    let url: URL | null = null
    try {
      url = new URL(webhooks.url)
    } catch {}
    if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) problems.push('/webhooks/url must be an http:// or https:// URL')
  }
  if (typeof webhooks.secret === 'string') {
    const base64 = /^whsec_([A-Za-z0-9+/]+={0,2})$/.exec(webhooks.secret)?.[1]
    if (base64 === undefined || Buffer.from(base64, 'base64').length < MIN_WEBHOOK_SECRET_BYTES) {
      problems.push(`/webhooks/secret must be "whsec_" followed by the base64 of at least ${MIN_WEBHOOK_SECRET_BYTES} random bytes (Standard Webhooks)`)
    }
  }
  if (Array.isArray(webhooks.events)) {
    webhooks.events.forEach((type, i) => {
      if (typeof type === 'string' && !isEventType(type)) {
        problems.push(`/webhooks/events/${i} ${JSON.stringify(type)} is not an event type (a built-in one, or a custom ${CUSTOM_EVENT_TYPE.source} outside ${RESERVED_EVENT_PREFIXES.join(', ')})`)
      }
    })
  }
  return problems
}

export function resolveWebhooks (webhooks: WebhooksOptions, store: WebhookStore): WebhookSettings {
  return Object.freeze({
    url: webhooks.url,
    secret: webhooks.secret,
    events: new Set(webhooks.events ?? DEFAULT_WEBHOOK_EVENTS),
    retentionMs: webhooks.retentionMs ?? DEFAULT_WEBHOOK_RETENTION_MS,
    store
  })
}
