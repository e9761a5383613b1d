import fp from 'fastify-plugin'
import type { FastifyPluginCallback, FastifyRequest } from 'fastify'
import { iso } from '../lib/stores/common.js'
import type { AuditEntry } from '../lib/stores/types.js'
import type { AgentServiceState } from './core.js'
import { requestContextOf } from './request-context.js'
import { randomId } from '../lib/core/ids.js'

/**
 * Writes the request's one audit entry and counts it: by the onResponse hook, or first by the SSE route
 * for a hijacked reply (whose onResponse hook runs only when its raw response finishes, if at all).
 */
export function auditRequest (state: AgentServiceState, request: FastifyRequest, status: number): void {
  // Fastify 5 runs onResponse for a hijacked reply too (when its raw response finishes): whichever of the
  // two calls comes first is the request's one entry. (A flag on the context, not a WeakSet of requests:
  // one weak entry per request is work for every garbage collection.)
  const context = requestContextOf(request)
  if (context.audited) return
  context.audited = true
  const durationMs = Math.round((performance.now() - context.startedAt) * 100) / 100
  // The route's config too: a hook of an outer scope (rate limit, drain) may answer an admin request
  // before the Admin API's own onRequest hook has marked it.
  const admin = context.admin || context.config.admin === true
  state.stats.recordRequest(status, durationMs, admin)
  // The id is ours: a client-chosen X-Request-ID is recorded as requestId and cannot collide with it.
  const entry: AuditEntry = {
    id: randomId(),
    at: iso(Date.now()),
    requestId: context.requestId,
    method: request.method,
    route: context.route,
    url: request.url,
    status,
    durationMs,
    principal: context.principal,
    ip: request.ip
  }
  if (context.agent !== undefined) entry.agent = context.agent
  if (context.runId !== undefined) entry.runId = context.runId
  if (context.sessionId !== undefined) entry.sessionId = context.sessionId
  const traceId = context.knownTraceId
  if (traceId !== undefined) entry.traceId = traceId
  if (context.idempotencyKey !== undefined) entry.idempotencyKey = context.idempotencyKey
  if (context.replayed !== undefined) entry.replayed = context.replayed
  if (admin) entry.admin = true
  state.audit.write(entry)
}

const audit: FastifyPluginCallback = (fastify, _options, done) => {
  const state = fastify.agentService
  fastify.addHook('onResponse', (request, reply, next) => {
    auditRequest(state, request, reply.statusCode)
    next()
  })
  done()
}

/** Audits and counts every request of the scope it is registered in. */
export const auditPlugin = fp(audit, { fastify: '5.x', name: 'fastify-agents-audit', dependencies: ['fastify-agents-core'] })
export default auditPlugin
