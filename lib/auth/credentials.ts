// The parts of auth that need no Fastify: reading credentials off a request, checking api keys in
// constant time, pinning JWT algorithms to the key, reading roles. lib/auth/index.ts (the auth plugin) wires them in.
import * as crypto from 'node:crypto'
import { createPublicKey, timingSafeEqual } from 'node:crypto'
import type { KeyObject } from 'node:crypto'
import type { Access } from '../core/access.js'
import type { ApiKeyAuthOptions, JwtAlgorithm, JwtAuthOptions } from '../core/types.js'

/** Longer credentials are refused unread: no hashing or JWT parsing of a 1 MB header. */
export const MAX_CREDENTIAL_LENGTH = 8192

export type { Access }

export const DEFAULT_ACCESS: Readonly<Record<Access, readonly string[]>> = Object.freeze({
  run: Object.freeze(['agents:run']),
  readApprovals: Object.freeze(['approvals:read']),
  decideApprovals: Object.freeze(['approvals:decide'])
})

/** What authenticating a request's credential came to. */
export type AuthOutcome =
  | { ok: true, principal: string, /** null: every right (an api key) */ roles: ReadonlySet<string> | null }
  | { ok: false, reason: string, /** a credential was sent, and was wrong */ presented: boolean }

export type Credential =
  | { kind: 'none' }
  | { kind: 'invalid', reason: string }
  | { kind: 'token', token: string }

// RFC 7235 credentials: the scheme, one space, the token. The token is any run of visible ASCII (api keys
// are not all b64token), so "Bearer a b", "Bearer  a", tabs and control characters are malformed.
const BEARER = /^Bearer ([\x21-\x7e]+)$/i
const VISIBLE_ASCII = /^[\x21-\x7e]+$/

export interface CredentialSources {
  authorization: unknown
  apiKey: unknown
  /** the `access_token` query parameter, read only for WebSocket upgrades (browsers cannot set headers there) */
  queryToken: unknown
}

function tokenFrom (value: unknown, what: string): Credential {
  if (typeof value !== 'string') return { kind: 'invalid', reason: `${what} must be given once` }
  if (value.length > MAX_CREDENTIAL_LENGTH) return { kind: 'invalid', reason: `${what} is too long` }
  if (!VISIBLE_ASCII.test(value)) return { kind: 'invalid', reason: `${what} is malformed` }
  return { kind: 'token', token: value }
}

/**
 * The one credential a request carries: `Authorization: Bearer <token>`, `X-API-Key` (api-key only) or
 * `access_token` (WebSocket upgrades only). Two different ones at once are refused rather than guessed between.
 */
export function readCredential (sources: CredentialSources, acceptApiKeyHeader: boolean): Credential {
  // Runs on every request: no arrays or sets for what is nearly always a single credential.
  let found: Credential | null = null
  let several = false
  const consider = (credential: Credential): void => {
    if (found === null || (found.kind === 'token' && credential.kind === 'invalid')) found = credential
    else if (found.kind === 'token' && credential.kind === 'token' && credential.token !== found.token) several = true
  }
  if (sources.authorization !== undefined) {
    const header = sources.authorization
    if (typeof header === 'string' && header.length > MAX_CREDENTIAL_LENGTH + 'Bearer '.length) {
      consider({ kind: 'invalid', reason: 'The Authorization header is too long' })
    } else if (typeof header !== 'string') {
      consider({ kind: 'invalid', reason: 'Malformed Authorization header: expected "Bearer <token>"' })
    } else {
      const match = BEARER.exec(header)
      consider(match === null
        ? { kind: 'invalid', reason: 'Malformed Authorization header: expected "Bearer <token>"' }
        : tokenFrom(match[1], 'The bearer token'))
    }
  }
  if (acceptApiKeyHeader && sources.apiKey !== undefined) consider(tokenFrom(sources.apiKey, 'X-API-Key'))
  if (sources.queryToken !== undefined) consider(tokenFrom(sources.queryToken, 'access_token'))

  // the first malformed one is named before any talk of several
  if (found === null) return { kind: 'none' }
  if ((found as Credential).kind === 'invalid' || !several) return found
  return { kind: 'invalid', reason: 'Several different credentials: send exactly one' }
}

// crypto.hash() (Node 20.12+) digests in one call, without a Hash object per request.
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string, encoding: 'buffer') => Buffer }).hash
/* c8 ignore start: which branch runs depends on the Node version, and CI runs one */
const sha256: (value: string) => Buffer = oneShotHash !== undefined
  ? (value) => oneShotHash('sha256', value, 'buffer')
  : (value) => crypto.createHash('sha256').update(value, 'utf8').digest()
/* c8 ignore stop */

/** The principal of an api key: never the key, nor enough of its hash to test guesses offline cheaply. */
export function apiKeyPrincipal (key: string): string {
  return principalOfHash(sha256(key))
}

function principalOfHash (hash: Buffer): string {
  return 'key_' + hash.toString('hex').slice(0, 12)
}

/**
 * Checks api keys in constant time: the candidate and every configured key are hashed to 32 bytes, so
 * `timingSafeEqual` compares equal lengths, and every key is compared whatever matched first.
 */
export class ApiKeyVerifier {
  readonly #hashes: Buffer[]
  readonly #principals: string[]

  constructor (options: ApiKeyAuthOptions) {
    this.#hashes = options.keys.map(sha256)
    this.#principals = this.#hashes.map(principalOfHash)
  }

  /** The principal for a valid key, else null. Every known key is compared, in constant time. */
  verify (candidate: string): string | null {
    const hash = sha256(candidate)
    let matched = -1
    for (let i = 0; i < this.#hashes.length; i++) {
      if (timingSafeEqual(hash, this.#hashes[i]!)) matched = i
    }
    return matched === -1 ? null : this.#principals[matched]!
  }
}

const RSA_ALGORITHMS: JwtAlgorithm[] = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512']
const EC_ALGORITHMS: Record<string, JwtAlgorithm> = { prime256v1: 'ES256', secp384r1: 'ES384', secp521r1: 'ES512' }

function algorithmsForKey (key: KeyObject): JwtAlgorithm[] {
  switch (key.asymmetricKeyType) {
    case 'rsa': return RSA_ALGORITHMS
    case 'rsa-pss': return ['PS256', 'PS384', 'PS512']
    case 'ec': {
      // a public EC key always has its curve
      const curve = EC_ALGORITHMS[key.asymmetricKeyDetails!.namedCurve!]
      return curve === undefined ? [] : [curve]
    }
    case 'ed25519':
    case 'ed448': return ['EdDSA']
    default: return []
  }
}

/**
 * The algorithms a JWT may use, pinned to the key: HS256 (or the HS* listed) with a secret; with a public
 * key only the algorithms of its type (RSA: RS/PS, EC: the curve's ES*, Ed25519: EdDSA). `none` is never
 * among them, and no HS* with a public key: a token signed with the public key as an HMAC secret fails.
 * Throws a message naming the option when the key or the list does not fit.
 */
export function jwtAlgorithms (options: JwtAuthOptions): JwtAlgorithm[] {
  if (options.publicKey === undefined) return options.algorithms ?? ['HS256']
  let key: KeyObject
  try {
    key = createPublicKey(options.publicKey)
  } catch {
    throw new Error('/auth/publicKey must be a PEM public key (or certificate)')
  }
  const usable = algorithmsForKey(key)
  if (usable.length === 0) throw new Error(`/auth/publicKey has an unsupported key type (${key.asymmetricKeyType!})`)
  if (options.algorithms === undefined) return usable
  const unfit = options.algorithms.filter((a) => !usable.includes(a))
  if (unfit.length > 0) throw new Error(`/auth/algorithms ${unfit.join(', ')} cannot be verified with this ${key.asymmetricKeyType} publicKey`)
  return options.algorithms
}

/**
 * Roles from the claim named `rolesClaim`: an array of strings, or one string of space-separated roles
 * (the OAuth `scope` form). A dotted name reaches into nested claims (`realm_access.roles`) when no claim
 * has that exact name.
 */
export function rolesOf (payload: Record<string, unknown>, claim: string): Set<string> {
  let value: unknown = payload[claim]
  if (value === undefined && claim.includes('.')) {
    value = payload
    for (const part of claim.split('.')) value = (value as Record<string, unknown> | null)?.[part]
  }
  if (typeof value === 'string') return new Set(value.split(/\s+/).filter((r) => r !== ''))
  if (Array.isArray(value)) return new Set(value.filter((r): r is string => typeof r === 'string'))
  return new Set()
}

/**
 * Whether `roles` grant `access`. Any listed role grants it; for 'run', so does `<role>:<agent>` for the agent
 * asked for (`agents:run:echo`), and on routes not about one agent (sessions, the agent list) any such
 * per-agent role does.
 */
export function grants (roles: ReadonlySet<string>, allowed: readonly string[], access: Access, agent: string | undefined): boolean {
  for (const role of allowed) {
    if (roles.has(role)) return true
    if (access !== 'run') continue
    if (agent !== undefined) {
      if (roles.has(`${role}:${agent}`)) return true
    } else {
      for (const held of roles) if (held.startsWith(`${role}:`)) return true
    }
  }
  return false
}

/** The URL with the value of every `access_token` query parameter replaced: for logs and audit entries. */
export function redactAccessToken (url: string): string {
  return url.replace(/([?&]access_token=)[^&#]*/g, '$1[REDACTED]')
}

interface LoggedRequest {
  method: string
  url: string
  host?: string
  ip?: string
  socket?: { remotePort?: number }
}

/** Fastify's `req` log serializer, with `access_token` values redacted from the URL. */
export function redactingRequestSerializer (req: LoggedRequest): Record<string, unknown> {
  return { method: req.method, url: redactAccessToken(req.url), host: req.host, remoteAddress: req.ip, remotePort: req.socket?.remotePort }
}

/**
 * Logger options (Fastify's `logger`) whose request log lines never show an `access_token`. Your own `req`
 * serializer, if you set one, is kept as it is.
 */
export function withTokenRedaction<T> (logger: T): T | Record<string, unknown> {
  if (logger === false || logger === undefined || logger === null) return logger
  const options = logger === true ? {} : logger as Record<string, unknown>
  const serializers = (options.serializers ?? {}) as Record<string, unknown>
  return { ...options, serializers: { req: redactingRequestSerializer, ...serializers } }
}

/** A CORS preflight: public, and not counted by the rate limit. */
export function isPreflight (request: { method: string, headers: Record<string, unknown> }): boolean {
  return request.method === 'OPTIONS' && request.headers.origin !== undefined &&
    request.headers['access-control-request-method'] !== undefined
}

/**
 * Whether the request's principal has `access` (on `agent`): true when auth is off. For routes of your own
 * inside the service's scope (the WebSocket transport checks each run.start this way).
 */
export function hasAccess (request: { server: { agentService: { hasAccess(request: never, access: Access, agent?: string): boolean } } }, access: Access, agent?: string): boolean {
  return request.server.agentService.hasAccess(request as never, access, agent)
}
