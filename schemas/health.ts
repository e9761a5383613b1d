import { Type } from '@sinclair/typebox'

export const DbCheck = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('error')]),
  latencyMs: Type.Number(),
  error: Type.Optional(Type.String())
})

export const HealthResponse = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
  uptimeSeconds: Type.Integer(),
  checks: Type.Object({ db: Type.Optional(DbCheck) })
})
