import fp from 'fastify-plugin'
import type {
  FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest, onSendHookHandler, preHandlerHookHandler, preParsingHookHandler
} from 'fastify'
import { IdempotencyInProgressError, IdempotencyKeyReusedError } from '../lib/core/errors.js'
import { BodyFingerprint, SSE_CONTENT_TYPE, isReplayable, readIdempotencyKey, scopedIdempotencyKey, streamedResponse } from '../lib/core/idempotency.js'
import { RequestSlot, requestContextOf } from '../lib/core/request-context.js'
import type { IdempotencyResponse, IdempotencyStore } from '../lib/stores/types.js'
import { IdempotencyHeaders } from '../schemas/auth.js'

/** A key this request reserved and must complete or release; `renewal` keeps its lease while the request runs. */
interface Reservation {
  store: IdempotencyStore
  key: string
  ttlMs: number
  renewal: NodeJS.Timeout
}

/** This plugin's state of a request that carries a key: the body's hash as it streams in, then the key it holds. */
interface KeyState {
  key: string | undefined
  fingerprint: BodyFingerprint
  reservation: Reservation | undefined
}

const states = new RequestSlot<KeyState>('idempotency')

async function settle (request: FastifyRequest, response: IdempotencyResponse | null): Promise<void> {
  const state = states.get(request)
  const reservation = state?.reservation
  if (reservation === undefined) return
  state!.reservation = undefined
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
function renewWhileRunning (request: FastifyRequest, state: KeyState, store: IdempotencyStore, key: string, fingerprint: string, leaseMs: number): NodeJS.Timeout {
  let renewing = false
  const renew = async (): Promise<void> => {
    let renewed: boolean
    try {
      renewed = await store.renew(key, fingerprint, leaseMs)
    } catch (error) {
      if (state.reservation !== undefined) request.log.warn({ err: error }, 'idempotency store failed to renew a lease; retrying')
      return
    }
    // false after the request settled is the record completed or released, as it should be
    if (renewed || state.reservation === undefined) return
    // taken over (this run outlived its lease unrenewed) or removed: renewing again cannot make it ours
    clearInterval(timer)
    request.log.warn({ idempotencyKey: state.key }, 'idempotency reservation lost while the request runs: a retry may be running it too')
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

const hasKey = (request: FastifyRequest): boolean =>
  request.headers['idempotency-key'] !== undefined || request.headers['x-idempotency-key'] !== undefined

/** The hooks a route declared (none, one or a list), then ours. */
function withHook<T> (declared: T | T[] | undefined, hook: T): T[] {
  return [declared, hook].flat().filter((h): h is T => h !== undefined)
}

const idempotency: FastifyPluginAsync = async (fastify) => {
  const service = fastify.agentService
  const settings = service.settings.idempotency
  if (settings === null) return
  const { store, ttlMs, lockLeaseMs } = settings
  states.declare(fastify)

  // For a run streamed as SSE (a hijacked reply: no onSend): its final event is recorded for replay (a failed
  // run releases the key, like the 5xx it stands for), before the stream ends: a retry after the end replays.
  service.useStreamSettler((request, final) => settle(request, final?.type === 'run.completed' ? streamedResponse(final) : null))

  const preParsing: preParsingHookHandler = (request, _reply, payload, done) => {
    if (!hasKey(request)) return done(null, payload)
    const hashing = new BodyFingerprint()
    states.set(request, { key: undefined, fingerprint: hashing, reservation: undefined })
    payload.on('error', (error) => hashing.destroy(error))
    done(null, payload.pipe(hashing))
  }

  /** Reserves the key, or answers with what it recorded: the stored response to replay, or undefined to run. */
  async function reserveKey (request: FastifyRequest, reply: FastifyReply): Promise<IdempotencyResponse | undefined> {
    const key = readIdempotencyKey(request.headers)!
    const state = states.get(request)!
    state.key = key
    service.audit.note(request, { idempotencyKey: key })
    const scoped = scopedIdempotencyKey(requestContextOf(request).principal, request.method, request.url.split('?', 1)[0]!, key)
    const bodyHash = state.fingerprint.digest()
    const reserved = await store.reserve(scoped, bodyHash, { ttlMs, leaseMs: lockLeaseMs })
    if (reserved.outcome === 'reserved') {
      state.reservation = { store, key: scoped, ttlMs, renewal: renewWhileRunning(request, state, store, scoped, bodyHash, lockLeaseMs) }
      service.audit.note(request, { replayed: false })
      // a request that ends without a response (the client left mid-way) gives its key back
      reply.raw.once('close', () => { void settle(request, null) })
      return undefined
    }
    const { record } = reserved
    if (record.fingerprint !== bodyHash) throw new IdempotencyKeyReusedError()
    if (record.state !== 'completed' || record.response === undefined) {
      void reply.header('retry-after', '1')
      throw new IdempotencyInProgressError()
    }
    service.audit.note(request, { replayed: true })
    return record.response
  }

  // After auth (the principal scopes the key) and after the body has been read and validated. Callback style:
  // a request without a key, the usual case, goes on with no promise made and no extra tick.
  const preHandler: preHandlerHookHandler = (request, reply, done) => {
    if (!hasKey(request)) return done()
    reserveKey(request, reply).then((recorded) => {
      if (recorded === undefined) return done()
      const { status, body, contentType } = recorded
      void reply.code(status).header('idempotent-replayed', 'true').type(contentType)
      if (contentType === SSE_CONTENT_TYPE) void reply.header('cache-control', 'no-cache').header('x-accel-buffering', 'no')
      void reply.send(body)
    }, (error: FastifyError) => done(error))
  }

  const onSend: onSendHookHandler = (request, reply, payload, done) => {
    if (states.get(request)?.reservation === undefined) return done(null, payload)
    // Both routes answer serialized JSON (a result or an error body): always a string here.
    void settle(request, { status: reply.statusCode, body: payload as string, contentType: String(reply.getHeader('content-type')) })
      .then(() => done(null, payload))
  }

  // Route hooks, on the two routes that honour keys: every other route runs none of this.
  fastify.addHook('onRoute', (route) => {
    if (route.config?.idempotency !== true) return
    route.preParsing = withHook(route.preParsing, preParsing)
    route.preHandler = withHook(route.preHandler, preHandler)
    route.onSend = withHook(route.onSend, onSend)
    // documents the headers
    if (route.schema !== undefined && route.schema.headers === undefined) route.schema = { ...route.schema, headers: IdempotencyHeaders }
  })
}

/**
 * Idempotency keys on routes with `config.idempotency` (contract §9), when the `idempotency` option is set:
 * the first request runs, a repeat with the same body replays the stored response with
 * `Idempotent-Replayed: true`, another body is 422, a repeat while the first runs is 409. Registered
 * after auth: keys are scoped by principal.
 */
export const idempotencyPlugin = fp(idempotency, {
  fastify: '5.x', name: 'fastify-agents-idempotency', dependencies: ['fastify-agents-core', 'fastify-agents-request-context', 'fastify-agents-auth']
})
export default idempotencyPlugin
