import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'

export const DbCheck = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('error')]),
  latencyMs: Type.Number(),
  error: Type.Optional(Type.String())
}, { title: 'HealthCheck' })
export type DbCheck = Static<typeof DbCheck>

/**
 * One live probe per dependency: `db` (the option), then each store the service uses that can be probed, under
 * its option's name (`auditStore`, `sessionStore`, `approvalStore`, `checkpointStore`, `idempotencyStore`, …),
 * and `rateLimit` for the rate limit's Redis.
 */
export const HealthChecks = Type.Object({ db: Type.Optional(DbCheck) }, {
  additionalProperties: DbCheck,
  description: 'db (the option), then each store the service uses that can be probed, by option name; any error makes the status degraded'
})
export type HealthChecks = Static<typeof HealthChecks>

export const HealthResponse = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
  uptimeSeconds: Type.Integer(),
  checks: HealthChecks
}, { title: 'HealthResponse' })
export type HealthResponse = Static<typeof HealthResponse>
