import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'

export const DbCheck = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('error')]),
  latencyMs: Type.Number(),
  error: Type.Optional(Type.String())
})
export type DbCheck = Static<typeof DbCheck>

export const HealthResponse = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
  uptimeSeconds: Type.Integer(),
  checks: Type.Object({ db: Type.Optional(DbCheck) })
})
export type HealthResponse = Static<typeof HealthResponse>
