import fp from 'fastify-plugin'
import type {
  FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest, onSendHookHandler, preHandlerHookHandler, preParsingHookHandler
} from 'fastify'
import { IdempotencyInProgressError, IdempotencyKeyReusedError } from '../core/errors.js'
import { BodyFingerprint, SSE_CONTENT_TYPE, decodedPath, isReplayable, readIdempotencyKey, scopedIdempotencyKey, streamedResponse } from './keys.js'
import { RequestSlot, requestContextOf } from '../core/request-context.js'
import type { IdempotencyResponse, IdempotencyStore } from '../stores/types.js'
import { IdempotencyHeaders } from '../../schemas/auth.js'
import { AUTH, IDEMPOTENCY, REQUEST_CONTEXT } from '../service/composition.js'

/** A key this request reserved and must complete or release; `renewal` keeps its lease while the request runs. */
interface Reservation {
  store: IdempotencyStore
  key: string
  /** names this reservation to the store: only its holder renews, completes or releases it */
  token: string
  ttlMs: number
  renewal: NodeJS.Timeout
  /** this instance's note of it, until it is recorded or released */
  held: Held
}

/** This plugin's state of a request that carries a key: the body's hash as it streams in, then the key it holds. */
interface KeyState {
  key: string | undefined
  fingerprint: BodyFingerprint
  reservation: Reservation | undefined
}

/**
 * A key this instance reserved and has not yet recorded or released. `record`, once its response is known but the
 * store refused it: tries to record it now (joining an attempt in flight); true once it is written, or no longer
 * ours.
 */
interface Held {
  fingerprint: string
  record?: () => Promise<boolean>
}

const states = new RequestSlot<KeyState>('idempotency')

/** The first wait before a failed completion is tried again; it doubles up to COMPLETION_RETRY_MAX_MS. */
export const COMPLETION_RETRY_MS = 50
const COMPLETION_RETRY_MAX_MS = 1_000

/**
 * The keys this instance holds, and their completions the store refused (an outage), retried until written
 * (docs/auth-and-traffic.md): the lease renewed meanwhile, so that no retry of the client's takes the key over and runs the
 * agent a second time. The answer does not wait for them. They stop once written, when the record is no longer
 * ours, after `ttlMs` (the replay window: past it a second run is what the client may expect), and at close, after
 * one last attempt.
 *
 * A retry that reaches the instance holding its key is answered here before the store is asked: should the outage
 * have outlasted the lease, the store would let it take the key over while the first run's response waits to be
 * recorded (issue 23). A retry at another instance has only the store's word: its holder's renewals and completion
 * must reach the store before the lease runs out.
 */
class HeldKeys {
  readonly #held = new Map<string, Held>()
  readonly #pending = new Set<() => Promise<void>>()

  hold (key: string, fingerprint: string): Held {
    const held: Held = { fingerprint }
    this.#held.set(key, held)
    return held
  }

  /** Forgets `held` (a later reservation of its key is not this one's to forget). */
  drop (key: string, held: Held): void {
    if (this.#held.get(key) === held) this.#held.delete(key)
  }

  /**
   * Before a request reserves `key`: throws, as the store would, while this instance holds it — 422 for another
   * body, else 409 while its request runs or its response cannot yet be recorded. Once recorded, the request goes
   * on to the store, which replays it.
   */
  async check (key: string, fingerprint: string, reply: FastifyReply): Promise<void> {
    const held = this.#held.get(key)
    if (held === undefined) return
    if (held.fingerprint !== fingerprint) throw new IdempotencyKeyReusedError()
    if (held.record !== undefined && await held.record()) return
    void reply.header('retry-after', '1')
    throw new IdempotencyInProgressError()
  }

  /** Tries once; on a failure, goes on in the background and resolves. */
  async complete (request: FastifyRequest, reservation: Reservation, response: IdempotencyResponse): Promise<void> {
    const { store, key, token, ttlMs, renewal, held } = reservation
    const log = request.log
    let timer: NodeJS.Timeout | undefined
    let inFlight: Promise<boolean> | null = null
    /** written, declined, given up or closed: nothing more is tried */
    let over = false
    const write = async (): Promise<boolean> => {
      try {
        if (!await store.complete(key, token, response, ttlMs)) {
          log.warn({ idempotencyKey: states.get(request)?.key }, 'idempotency reservation lost before its response was recorded')
        }
        return true
      } catch (error) {
        log.error({ err: error }, 'idempotency store failed to record a response; retrying')
        return false
      }
    }
    const finish = (): void => {
      over = true
      clearTimeout(timer)
      clearInterval(renewal)
      this.#pending.delete(last)
      this.drop(key, held)
    }
    // one attempt at a time: the retries' and those a client's retry here asks for join the one in flight
    const attempt = (): Promise<boolean> => {
      if (inFlight !== null) return inFlight
      const made = write().then((written) => {
        if (written) finish()
        return written
      })
      inFlight = made
      void made.finally(() => { if (inFlight === made) inFlight = null })
      return made
    }
    const last = async (): Promise<void> => {
      over = true
      clearTimeout(timer)
      this.#pending.delete(last)
      if (await write()) finish()
      else this.#gaveUp(request, reservation, 'the service closed')
    }
    if (await attempt()) return
    held.record = attempt
    const giveUpAt = Date.now() + ttlMs
    let delay = COMPLETION_RETRY_MS
    const retry = (): void => {
      timer = setTimeout(() => {
        void attempt().then((written) => {
          if (written) return log.info({ idempotencyKey: states.get(request)?.key }, 'idempotency response recorded after the store came back')
          // closed meanwhile: its last attempt decides
          if (over) return
          if (Date.now() >= giveUpAt) {
            over = true
            this.#pending.delete(last)
            this.#gaveUp(request, reservation, 'its ttlMs passed')
          } else {
            delay = Math.min(delay * 2, COMPLETION_RETRY_MAX_MS)
            retry()
          }
        })
      }, delay)
      // the instance's life bounds the retries, not the other way round
      timer.unref()
    }
    this.#pending.add(last)
    retry()
  }

  #gaveUp (request: FastifyRequest, { key, renewal, held }: Reservation, why: string): void {
    clearInterval(renewal)
    this.drop(key, held)
    request.log.error({ idempotencyKey: states.get(request)?.key }, `idempotency response never recorded (${why}): the key stays locked until its lease runs out`)
  }

  /** At close (after the drain: no request is answered later): one last attempt each, before the stores close. */
  async close (): Promise<void> {
    await Promise.all([...this.#pending].map((last) => last()))
  }
}

async function settle (request: FastifyRequest, response: IdempotencyResponse | null, keys: HeldKeys): Promise<void> {
  const state = states.get(request)
  const reservation = state?.reservation
  if (reservation === undefined) return
  state!.reservation = undefined
  if (response !== null && isReplayable(response.status)) return keys.complete(request, reservation, response)
  clearInterval(reservation.renewal)
  keys.drop(reservation.key, reservation.held)
  try {
    await reservation.store.release(reservation.key, reservation.token)
  } catch (error) {
    // The key stays locked until its lease runs out: retries get 409 meanwhile, then run again (a 5xx's due).
    request.log.error({ err: error }, 'idempotency store failed to release a key')
  }
}

/**
 * Renews the lease of a reservation every leaseMs/3 until the request settles and its response is recorded,
 * so that a run longer than the lease is not taken over by a retry (which would run the agent a second time).
 * A renewal that fails is logged and the request goes on: the lease may still hold until the next one.
 */
function renewWhileRunning (request: FastifyRequest, state: KeyState, store: IdempotencyStore, key: string, token: string, leaseMs: number): NodeJS.Timeout {
  let renewing = false
  const renew = async (): Promise<void> => {
    let renewed: boolean
    try {
      renewed = await store.renew(key, token, leaseMs)
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
  const keys = new HeldKeys()
  // after the drain (begun in preClose, awaited by the drain plugin's onClose, which may run after this one): the
  // runs it let finish have made their completions by then, and get their last attempt
  fastify.addHook('onClose', async () => {
    await service.drain.finished
    await keys.close()
  })

  // For a run streamed as SSE (a hijacked reply: no onSend): its final event is recorded for replay (a failed
  // run releases the key, like the 5xx it stands for), before the stream ends: a retry after the end replays.
  service.useStreamSettler((request, final) => settle(request, final?.type === 'run.completed' ? streamedResponse(final) : null, keys))

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
    const scoped = scopedIdempotencyKey(requestContextOf(request).principal, request.method, decodedPath(request.url), key)
    const bodyHash = state.fingerprint.digest()
    await keys.check(scoped, bodyHash, reply)
    const reserved = await store.reserve(scoped, bodyHash, { ttlMs, leaseMs: lockLeaseMs })
    if (reserved.outcome === 'reserved') {
      const { token } = reserved
      const renewal = renewWhileRunning(request, state, store, scoped, token, lockLeaseMs)
      state.reservation = { store, key: scoped, token, ttlMs, renewal, held: keys.hold(scoped, bodyHash) }
      service.audit.note(request, { replayed: false })
      // a request that ends without a response (the client left mid-way) gives its key back
      reply.raw.once('close', () => { void settle(request, null, keys) })
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
      const { status, body, contentType, location } = recorded
      void reply.code(status).header('idempotent-replayed', 'true').type(contentType)
      if (location !== undefined) void reply.header('location', location)
      if (contentType === SSE_CONTENT_TYPE) void reply.header('cache-control', 'no-cache').header('x-accel-buffering', 'no')
      void reply.send(body)
    }, (error: FastifyError) => done(error))
  }

  const onSend: onSendHookHandler = (request, reply, payload, done) => {
    if (states.get(request)?.reservation === undefined) return done(null, payload)
    // Both routes answer serialized JSON (a result or an error body): always a string here.
    const response: IdempotencyResponse = { status: reply.statusCode, body: payload as string, contentType: String(reply.getHeader('content-type')) }
    const location = reply.getHeader('location')
    if (location !== undefined) response.location = String(location)
    void settle(request, response, keys).then(() => done(null, payload))
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
 * Idempotency keys on routes with `config.idempotency` (docs/auth-and-traffic.md), when the `idempotency` option is set:
 * the first request runs, a repeat with the same body replays the stored response with
 * `Idempotent-Replayed: true`, another body is 422, a repeat while the first runs is 409. Registered
 * after auth: keys are scoped by principal.
 */
export const idempotencyPlugin = fp(idempotency, {
  fastify: '5.x', name: IDEMPOTENCY.name, dependencies: ['fastify-agents-core', REQUEST_CONTEXT.name, AUTH.name]
})
export default idempotencyPlugin
