import fp from 'fastify-plugin'
import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { IdempotencyInProgressError, IdempotencyKeyReusedError } from '../lib/errors.js'
import { BodyFingerprint, SSE_CONTENT_TYPE, isReplayable, readIdempotencyKey, scopedIdempotencyKey, streamedResponse } from '../lib/idempotency.js'
import type { RunEvent } from '../lib/runner.js'
import type { IdempotencyResponse, IdempotencyStore } from '../lib/stores/types.js'
import { IdempotencyHeaders } from '../schemas/auth.js'
import { requestContextOf } from './request-context.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** the route honours `Idempotency-Key` (POST /v1/agents/:name/runs, POST /v1/approvals/:id) */
    idempotency?: boolean
  }
}

/** A key this request reserved and must complete or release; `renewal` keeps its lease while the request runs. */
interface Reservation {
  store: IdempotencyStore
  key: string
  ttlMs: number
  renewal: NodeJS.Timeout
}

const fingerprints = new WeakMap<FastifyRequest, BodyFingerprint>()
const reservations = new WeakMap<FastifyRequest, Reservation>()

async function settle (request: FastifyRequest, response: IdempotencyResponse | null): Promise<void> {
  const reservation = reservations.get(request)
  if (reservation === undefined) return
  reservations.delete(request)
  clearInterval(reservation.renewal)
  const { store, key, ttlMs } = reservation
  try {
    if (response !== null && isReplayable(response.status)) await store.complete(key, response, ttlMs)
    else await store.release(key)
  } catch (error) {
    // The key stays locked until its lease runs out: retries get 409 meanwhile, never a second run.
    request.log.error({ err: error }, 'idempotency store failed to record a response')
  }
}

/**
 * Renews the lease of a reservation every leaseMs/3 until the request settles, so that a run longer than the
 * lease is not taken over by a retry (which would run the agent a second time). A renewal that fails is
 * logged and the request goes on: the lease may still hold until the next one.
 */
function renewWhileRunning (request: FastifyRequest, store: IdempotencyStore, key: string, fingerprint: string, leaseMs: number): NodeJS.Timeout {
  let renewing = false
  const renew = async (): Promise<void> => {
    let renewed: boolean
    try {
      renewed = await store.renew(key, fingerprint, leaseMs)
    } catch (error) {
      if (reservations.has(request)) request.log.warn({ err: error }, 'idempotency store failed to renew a lease; retrying')
      return
    }
    // false after the request settled is the record completed or released, as it should be
    if (renewed || !reservations.has(request)) return
    // taken over (this run outlived its lease unrenewed) or removed: renewing again cannot make it ours
    clearInterval(timer)
    request.log.warn({ idempotencyKey: requestContextOf(request).idempotencyKey }, 'idempotency reservation lost while the request runs: a retry may be running it too')
  }
  const timer = setInterval(() => {
    // one renewal at a time: a slow store does not pile them up
    if (renewing) return
    renewing = true
    void renew().finally(() => { renewing = false })
  }, Math.max(1, Math.floor(leaseMs / 3)))
  timer.unref()
  return timer
}

/**
 * For a run streamed as SSE (a hijacked reply: no onSend): records its final event for replay (or releases
 * the key when the run failed), before the stream ends so that a retry after the end is a replay.
 */
export async function settleStreamedRun (request: FastifyRequest, final: RunEvent | undefined): Promise<void> {
  // A failed run is released like the 5xx (or the dropped connection) it stands for: a retry runs again.
  await settle(request, final?.type === 'run.completed' ? streamedResponse(final) : null)
}

const idempotency: FastifyPluginAsync = async (fastify) => {
  const settings = fastify.agentService.settings.idempotency
  if (settings === null) return
  const { store, ttlMs, lockLeaseMs } = settings

  const hasKey = (request: FastifyRequest): boolean => request.routeOptions.config.idempotency === true &&
    (request.headers['idempotency-key'] !== undefined || request.headers['x-idempotency-key'] !== undefined)

  fastify.addHook('preParsing', (request, _reply, payload, done) => {
    if (!hasKey(request)) return done(null, payload)
    const hashing = new BodyFingerprint()
    fingerprints.set(request, hashing)
    payload.on('error', (error) => hashing.destroy(error))
    done(null, payload.pipe(hashing))
  })

  // preHandler: after auth (the principal scopes the key) and after the body has been read and validated
  fastify.addHook('preHandler', async (request, reply) => {
    if (!hasKey(request)) return
    const key = readIdempotencyKey(request.headers)!
    const context = requestContextOf(request)
    context.idempotencyKey = key
    const scoped = scopedIdempotencyKey(context.principal, request.method, request.url.split('?', 1)[0]!, key)
    const bodyHash = fingerprints.get(request)!.digest()
    const reserved = await store.reserve(scoped, bodyHash, { ttlMs, leaseMs: lockLeaseMs })
    if (reserved.outcome === 'reserved') {
      reservations.set(request, { store, key: scoped, ttlMs, renewal: renewWhileRunning(request, store, scoped, bodyHash, lockLeaseMs) })
      context.replayed = false
      return
    }
    const { record } = reserved
    if (record.fingerprint !== bodyHash) throw new IdempotencyKeyReusedError()
    if (record.state !== 'completed' || record.response === undefined) {
      void reply.header('retry-after', '1')
      throw new IdempotencyInProgressError()
    }
    context.replayed = true
    const { status, body, contentType } = record.response
    void reply.code(status).header('idempotent-replayed', 'true').type(contentType)
    if (contentType === SSE_CONTENT_TYPE) void reply.header('cache-control', 'no-cache').header('x-accel-buffering', 'no')
    return reply.send(body)
  })

  fastify.addHook('onSend', async (request, reply, payload) => {
    if (!reservations.has(request)) return payload
    // Both routes answer serialized JSON (a result or an error body): always a string here.
    await settle(request, { status: reply.statusCode, body: payload as string, contentType: String(reply.getHeader('content-type')) })
    return payload
  })

  // a request that ends without a response (the client left mid-way) gives its key back
  fastify.addHook('onResponse', async (request) => { await settle(request, null) })
  fastify.addHook('onRequestAbort', async (request) => { await settle(request, null) })

  // documents the headers on the routes that honour them
  fastify.addHook('onRoute', (route) => {
    if (route.config?.idempotency === true && route.schema !== undefined && route.schema.headers === undefined) {
      route.schema = { ...route.schema, headers: IdempotencyHeaders }
    }
  })
}

/**
 * Idempotency keys on routes with `config.idempotency` (contract §9), when the `idempotency` option is set:
 * the first request runs, a repeat with the same body replays the stored response with
 * `Idempotent-Replayed: true`, another body is 422, a repeat while the first runs is 409. Registered
 * after auth: keys are scoped by principal.
 */
export const idempotencyPlugin = fp(idempotency, { fastify: '5.x', name: 'fastify-agents-idempotency', dependencies: ['fastify-agents-core'] })
export default idempotencyPlugin
