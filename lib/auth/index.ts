import fp from 'fastify-plugin'
import type { JWT } from '@fastify/jwt'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { ApiKeyVerifier, DEFAULT_ACCESS, grants, isPreflight, jwtAlgorithms, readCredential, rolesOf } from './credentials.js'
import type { AuthOutcome, Credential } from './credentials.js'
import { ForbiddenError, UnauthorizedError } from '../core/errors.js'
import { RequestSlot, requestContextOf } from '../core/request-context.js'
import type { JwtAuthOptions } from '../core/types.js'
import { AUTH, REQUEST_CONTEXT } from '../service/composition.js'

const REALM = 'fastify-agents'

/** The verdict on the request's credential (none: auth off, a public or Admin API route, a preflight). */
const outcomes = new RequestSlot<AuthOutcome>('auth')

function isWebSocketUpgrade (request: FastifyRequest): boolean {
  return request.headers.upgrade?.toLowerCase() === 'websocket'
}

function credentialOf (request: FastifyRequest, acceptApiKeyHeader: boolean): Credential {
  const query = request.query as Record<string, unknown> | undefined
  return readCredential({
    authorization: request.headers.authorization,
    apiKey: request.headers['x-api-key'],
    queryToken: isWebSocketUpgrade(request) ? query?.access_token : undefined
  }, acceptApiKeyHeader)
}

const jwtMessages: Record<string, string> = {
  FAST_JWT_EXPIRED: 'The token has expired',
  FAST_JWT_INACTIVE: 'The token is not valid yet',
  FAST_JWT_INVALID_ALGORITHM: 'The token is signed with an algorithm that is not allowed',
  FAST_JWT_MISSING_SIGNATURE: 'The token is not signed',
  FAST_JWT_INVALID_SIGNATURE: 'The token signature is invalid'
}

function jwtFailure (error: unknown): string {
  const { code, message } = error as { code?: string, message?: string }
  if (code !== undefined && code in jwtMessages) return jwtMessages[code]!
  // fast-jwt names the claim (iss, aud, …) and never echoes the token's values
  if (code === 'FAST_JWT_INVALID_CLAIM_VALUE' || code === 'FAST_JWT_INVALID_CLAIM_TYPE' || code === 'FAST_JWT_MISSING_REQUIRED_CLAIM') {
    return `The token was refused: ${message}`
  }
  return 'The token is malformed or invalid'
}

type Verify = (token: string) => Record<string, unknown>

/**
 * @fastify/jwt in a scope of its own (its `jwt` and request decorators stay out of the host app's way);
 * under a namespace when the host app registered @fastify/jwt itself.
 */
async function registerJwt (fastify: FastifyInstance, options: JwtAuthOptions): Promise<Verify> {
  let verify: Verify | undefined
  // loaded with the jwt strategy only: importing the package does not pay for it (bench/import.js)
  const { default: fastifyJwt } = await import('@fastify/jwt')
  await fastify.register(async (scope) => {
    const namespace = scope.hasDecorator('jwt') ? 'fastifyAgents' : undefined
    await scope.register(fastifyJwt, {
      secret: options.publicKey !== undefined ? { public: options.publicKey } : options.secret!,
      decoratorName: 'fastifyAgentsJwtUser',
      namespace,
      verify: {
        algorithms: jwtAlgorithms(options),
        allowedIss: options.issuer,
        allowedAud: options.audience,
        // fast-jwt checks iss and aud only when present: configured, they are required
        requiredClaims: ['sub', ...(options.issuer === undefined ? [] : ['iss']), ...(options.audience === undefined ? [] : ['aud'])]
      }
    })
    const decorator = namespace === undefined ? scope.jwt : (scope.jwt as unknown as Record<string, JWT>)[namespace]!
    verify = (token) => decorator.verify(token)
  })
  return verify!
}

function challenge (reply: FastifyReply, presented: boolean): void {
  void reply.header('www-authenticate', presented ? `Bearer realm="${REALM}", error="invalid_token"` : `Bearer realm="${REALM}"`)
}

const auth: FastifyPluginAsync = async (fastify) => {
  const service = fastify.agentService
  const options = service.settings.auth

  // (an access_token in the URL is redacted by the request context hook, before anything records the URL)
  if (options === null) return

  let authenticate: (token: string) => AuthOutcome
  if (options.strategy === 'api-key') {
    const verifier = new ApiKeyVerifier(options)
    authenticate = (token) => {
      const principal = verifier.verify(token)
      return principal === null ? { ok: false, reason: 'Invalid API key', presented: true } : { ok: true, principal, roles: null }
    }
  } else {
    const verify = await registerJwt(fastify, options)
    const rolesClaim = options.rolesClaim ?? 'roles'
    authenticate = (token) => {
      let payload: Record<string, unknown>
      try {
        payload = verify(token)
      } catch (error) {
        return { ok: false, reason: jwtFailure(error), presented: true }
      }
      const sub = payload.sub
      if (typeof sub !== 'string' || sub === '') return { ok: false, reason: 'The token sub must be a non-empty string', presented: true }
      return { ok: true, principal: sub, roles: rolesOf(payload, rolesClaim) }
    }
  }
  const acceptApiKeyHeader = options.strategy === 'api-key'
  // a client that sent nothing is told where its credential goes
  const missing = acceptApiKeyHeader
    ? 'Missing credentials: send the API key as X-API-Key: <key> or Authorization: Bearer <key>'
    : 'Missing credentials: send the JWT as Authorization: Bearer <token>'
  const access = (options as JwtAuthOptions).access ?? {}
  outcomes.declare(fastify)

  // For the routes (the WebSocket transport checks each run.start against its agent).
  service.useAccessCheck((request, needed, agent) => {
    const outcome = outcomes.get(request)
    if (outcome?.ok !== true) return false
    if (outcome.roles === null) return true
    return grants(outcome.roles, access[needed] ?? DEFAULT_ACCESS[needed], needed, agent)
  })

  /** Refuses a request whose credential failed, or that lacks the route's access; null lets it through. */
  const verdict = (request: FastifyRequest, reply: FastifyReply, outcome: AuthOutcome): Error | null => {
    if (!outcome.ok) {
      challenge(reply, outcome.presented)
      return new UnauthorizedError(outcome.reason)
    }
    const needed = requestContextOf(request).config.access
    if (needed === undefined) return null
    const name = (request.params as Record<string, unknown> | undefined)?.name
    const agent = typeof name === 'string' ? name : undefined
    if (service.hasAccess(request, needed, agent)) return null
    return new ForbiddenError(`The token lacks the role for ${needed}${agent === undefined ? '' : ` on agent "${agent}"`}`)
  }
  // With a rate limit, the verdict waits for a later hook: the limiter (an onRequest hook registered after
  // this one) counts rejected requests too, by principal when there is one. Without, one hook does both.
  const verdictLater = service.settings.rateLimit !== null

  fastify.addHook('onRequest', (request, reply, done) => {
    const context = requestContextOf(request)
    const config = context.config
    if (config.public === true || config.admin === true || isPreflight(request)) return done()
    const credential = credentialOf(request, acceptApiKeyHeader)
    let outcome: AuthOutcome
    if (credential.kind === 'none') outcome = { ok: false, reason: missing, presented: false }
    else if (credential.kind === 'invalid') outcome = { ok: false, reason: credential.reason, presented: true }
    else outcome = authenticate(credential.token)
    outcomes.set(request, outcome)
    // the principal is only ever what the credential proves: nothing the client sends can choose it
    if (outcome.ok) {
      context.principal = outcome.principal
      context.authenticated = true
    }
    if (verdictLater) return done()
    const refused = verdict(request, reply, outcome)
    if (refused === null) done()
    else done(refused)
  })

  if (verdictLater) {
    fastify.addHook('preParsing', (request, reply, payload, done) => {
      const outcome = outcomes.get(request)
      if (outcome === null) return done(null, payload)
      const refused = verdict(request, reply, outcome)
      if (refused === null) done(null, payload)
      else done(refused)
    })
  }
}

/**
 * api-key or JWT auth for every route of the scope but public ones (health), Admin API routes (their own
 * token) and CORS preflights. Sets the request's principal; 401 with `WWW-Authenticate`, 403 `FORBIDDEN`
 * when the route's `config.access` is not granted.
 */
export const authPlugin = fp(auth, { fastify: '5.x', name: AUTH.name, dependencies: ['fastify-agents-core', REQUEST_CONTEXT.name] })
export default authPlugin
