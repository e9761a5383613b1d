// Redis stores (ioredis): idempotency and sessions shared by many instances, expiry left to Redis.
import type { Redis } from 'ioredis'
import { checkLimit, checkTtl, decodeKeyCursor, iso } from './common.js'
import { beforeKeyCursor, keyPage } from './rules.js'
import { RedisConnection, RedisScript, RedisStore } from './redis-connection.js'
import type { RedisClient, RedisStoreOptions } from './redis-connection.js'
import { randomId } from '../core/ids.js'
import { RedisRunStore } from './redis-runs.js'
import { RedisWebhookStore } from './redis-webhooks.js'
import { RedisQuotaStore } from './redis-quotas.js'
import type {
  IdempotencyRecord, IdempotencyResponse, IdempotencyStore, Message, NewSession, PrincipalSessionQuery, ReserveResult, SessionListQuery,
  SessionRecord, SessionStore, SessionWithMessages, StoreSet
} from './types.js'

export { RedisConnection } from './redis-connection.js'
export type { RedisClient, RedisSource, RedisStoreOptions } from './redis-connection.js'

// A record counts as live while unexpired and either completed or within its lease; otherwise it is
// replaced (idempotencyLive in rules.ts; the scripts below hold to idempotencyHeld and renewedLease). Times are the
// caller's clock (epoch ms) so that they agree with the other backends'.
const RESERVE = new RedisScript(`
local held = redis.call('HMGET', KEYS[1], 'state', 'expiresAt', 'lockedUntil')
local now = tonumber(ARGV[1])
if held[1] and tonumber(held[2]) > now and (held[1] == 'completed' or tonumber(held[3]) > now) then
  return redis.call('HGETALL', KEYS[1])
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[2], 'state', 'in_progress', 'createdAt', ARGV[1],
  'expiresAt', ARGV[3], 'lockedUntil', ARGV[4], 'token', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// complete, renew and release are each a compare-and-set on the reservation's token: they change a record that
// is unexpired, in progress and holds the token (ARGV[2]), and nothing else. ARGV[1] is now.
const HELD = `
local held = redis.call('HMGET', KEYS[1], 'state', 'token', 'expiresAt')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[2] or tonumber(held[3]) <= tonumber(ARGV[1]) then return 0 end
`

// ARGV: now, token, response, expiresAt, ttlMs
const COMPLETE = new RedisScript(`${HELD}
redis.call('HSET', KEYS[1], 'state', 'completed', 'response', ARGV[3], 'expiresAt', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// ARGV: now, token
const RELEASE = new RedisScript(`${HELD}
redis.call('DEL', KEYS[1])
return 1
`)

// Extends the lease; if the record would expire before the new lease ends, its expiry moves with it.
// ARGV: now, token, lockedUntil, leaseMs.
const RENEW = new RedisScript(`${HELD}
redis.call('HSET', KEYS[1], 'lockedUntil', ARGV[3])
if tonumber(held[3]) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'expiresAt', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
`)

function toIdempotency (key: string, hash: Record<string, string>): IdempotencyRecord {
  const record: IdempotencyRecord = {
    key,
    fingerprint: hash.fingerprint,
    state: hash.state as IdempotencyRecord['state'],
    createdAt: iso(Number(hash.createdAt)),
    expiresAt: iso(Number(hash.expiresAt)),
    lockedUntil: iso(Number(hash.lockedUntil))
  }
  if (hash.response !== undefined) record.response = JSON.parse(hash.response) as IdempotencyResponse
  return record
}

export class RedisIdempotencyStore extends RedisStore implements IdempotencyStore {
  #key (key: string): string {
    return `${this.prefix}idem:${key}`
  }

  async reserve (key: string, fingerprint: string, options: { ttlMs: number, leaseMs: number }): Promise<ReserveResult> {
    checkTtl('ttlMs', options.ttlMs)
    checkTtl('leaseMs', options.leaseMs)
    const now = Date.now()
    const ttlMs = Math.ceil(options.ttlMs)
    const token = randomId()
    const result = await RESERVE.run(this.client(), [now, fingerprint, now + ttlMs, now + options.leaseMs, ttlMs, token], [this.#key(key)])
    if (result === 1) return { outcome: 'reserved', token }
    return { outcome: 'existing', record: toIdempotency(key, pairs(result as string[])) }
  }

  async renew (key: string, token: string, leaseMs: number): Promise<boolean> {
    checkTtl('leaseMs', leaseMs)
    const now = Date.now()
    return await RENEW.run(this.client(), [now, token, now + leaseMs, Math.ceil(leaseMs)], [this.#key(key)]) === 1
  }

  async complete (key: string, token: string, response: IdempotencyResponse, ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    const ttl = Math.ceil(ttlMs)
    const now = Date.now()
    return await COMPLETE.run(this.client(), [now, token, JSON.stringify(response), now + ttl, ttl], [this.#key(key)]) === 1
  }

  async release (key: string, token: string): Promise<boolean> {
    return await RELEASE.run(this.client(), [Date.now(), token], [this.#key(key)]) === 1
  }

  async get (key: string): Promise<IdempotencyRecord | null> {
    const hash = await this.client().hgetall(this.#key(key))
    // Redis drops the key at expiry by its own clock; the check covers a few ms of skew with ours
    if (hash.state === undefined || Number(hash.expiresAt) <= Date.now()) return null
    return toIdempotency(key, hash)
  }
}

function pairs (flat: string[]): Record<string, string> {
  const hash: Record<string, string> = {}
  for (let i = 0; i < flat.length; i += 2) hash[flat[i]] = flat[i + 1]
  return hash
}

// A session's place in its owner's indexes (all its sessions; those of its agent): a sorted set by last activity
// that lives as long as its longest-lived member, so that an idle principal's index goes with its sessions.
const INDEX_OWNED = `
local function indexOwned (key, now, ttl, id)
  redis.call('ZADD', key, now, id)
  if redis.call('PTTL', key) < tonumber(ttl) then redis.call('PEXPIRE', key, ttl) end
end
`

// Creates a session afresh. KEYS: hash, messages, activity index, the owner's indexes. ARGV: now, ttlMs, id, base.
const CREATE = new RedisScript(`${INDEX_OWNED}
redis.call('DEL', KEYS[1], KEYS[2])
local fields = { 'base', ARGV[4], 'lastActiveAt', ARGV[1], 'turns', '0' }
for i = 4, #KEYS do
  table.insert(fields, 'owned' .. (i - 3))
  table.insert(fields, KEYS[i])
  indexOwned(KEYS[i], ARGV[1], ARGV[2], ARGV[3])
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[3])
return 1
`)

// Touches a live session: new expiry on both keys, new score in the activity index and its owner's, optionally a
// turn. ARGV: now, ttlMs, id, turns to add, then the messages to append (JSON).
const APPEND_TURN = new RedisScript(`${INDEX_OWNED}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'lastActiveAt', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'turns', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if #ARGV > 3 then redis.call('RPUSH', KEYS[2], unpack(ARGV, 4)) end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[3])
for _, key in ipairs(redis.call('HMGET', KEYS[1], 'owned1', 'owned2')) do
  if key then indexOwned(key, ARGV[1], ARGV[2], ARGV[3]) end
end
return 1
`)

/** The parts of a session that never change after create(); lastActiveAt and turns are hash fields. */
type SessionBase = Pick<SessionRecord, 'id' | 'agent' | 'principal' | 'createdAt' | 'metadata'>

function toSession (hash: { base: string, lastActiveAt: string, turns: string }): SessionRecord {
  const base = JSON.parse(hash.base) as SessionBase
  return { ...base, lastActiveAt: iso(Number(hash.lastActiveAt)), turns: Number(hash.turns) }
}

/**
 * A session is a hash (`session:<id>`) plus a list of messages (`messages:<id>`), both expiring with the
 * session; `sessions` is a sorted set of ids by last activity for list(), whose members outlive their
 * sessions until list() meets and removes them. `owned:<[principal]>` and `owned:<[principal, agent]>` are the same
 * for listByPrincipal(), named in the session's hash (`owned1`, `owned2`) for the scripts that touch it.
 */
export class RedisSessionStore extends RedisStore implements SessionStore {
  #keys (id: string): [string, string, string] {
    return [`${this.prefix}session:${id}`, `${this.prefix}messages:${id}`, `${this.prefix}sessions`]
  }

  /** The owner's indexes: JSON names them, so that no principal or agent name can pass for another's. */
  #owned (principal: string, agent?: string | null): string {
    return `${this.prefix}owned:${JSON.stringify(agent == null ? [principal] : [principal, agent])}`
  }

  async create (session: NewSession, ttlMs: number): Promise<SessionRecord> {
    checkTtl('ttlMs', ttlMs)
    const now = Date.now()
    const base: SessionBase = {
      id: session.id, agent: session.agent, principal: session.principal, createdAt: iso(now), metadata: session.metadata
    }
    const owned = [this.#owned(session.principal)]
    if (session.agent !== null) owned.push(this.#owned(session.principal, session.agent))
    const fields = { base: JSON.stringify(base), lastActiveAt: String(now), turns: '0' }
    await CREATE.run(this.client(), [now, Math.ceil(ttlMs), session.id, fields.base], [...this.#keys(session.id), ...owned])
    return toSession(fields)
  }

  async get (id: string): Promise<SessionWithMessages | null> {
    const [hash, messages] = this.#keys(id)
    const replies = await (this.client() as Redis).multi().hgetall(hash).lrange(messages, 0, -1).exec() as Array<[Error | null, unknown]>
    const fields = replies[0][1] as Record<string, string>
    if (fields.base === undefined) return null
    return {
      ...toSession(fields as { base: string, lastActiveAt: string, turns: string }),
      messages: (replies[1][1] as string[]).map((message) => JSON.parse(message) as Message)
    }
  }

  async appendTurn (id: string, messages: readonly Message[], ttlMs: number): Promise<boolean> {
    checkTtl('ttlMs', ttlMs)
    return await APPEND_TURN.run(this.client(),
      [Date.now(), Math.ceil(ttlMs), id, ...messages.map((message) => JSON.stringify(message))], this.#keys(id)) === 1
  }

  async delete (id: string): Promise<boolean> {
    const [hash, messages, index] = this.#keys(id)
    const replies = await (this.client() as Redis).multi().del(hash).del(messages).zrem(index, id).exec() as Array<[Error | null, unknown]>
    return replies[0][1] === 1
  }

  async list (query: SessionListQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    return this.#page(`${this.prefix}sessions`, query, () => true)
  }

  async listByPrincipal (principal: string, query: PrincipalSessionQuery): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    const { agent } = query
    // a session created afresh under the same id for someone else leaves its old place behind: it is not theirs
    return this.#page(this.#owned(principal, agent), query, (session) => session.principal === principal && (agent === undefined || session.agent === agent))
  }

  /** A page of the sessions in the sorted set `index`; members without a session, or not `wanted`, are removed. */
  async #page (index: string, query: SessionListQuery, wanted: (session: SessionRecord) => boolean): Promise<{ sessions: SessionRecord[], nextCursor: string | null }> {
    const limit = checkLimit(query.limit, Number.MAX_SAFE_INTEGER)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const client = this.client() as Redis
    const found: SessionRecord[] = []
    const gone: string[] = []
    // Equal scores come in reverse byte order of the id, the same order the cursor compares in.
    const batch = limit + 1
    for (let offset = 0; found.length <= limit; offset += batch) {
      const flat = await client.zrevrangebyscore(index, after === null ? '+inf' : after.ms, '-inf', 'WITHSCORES', 'LIMIT', offset, batch)
      const ids: string[] = []
      for (let i = 0; i < flat.length; i += 2) {
        if (beforeKeyCursor(Number(flat[i + 1]), flat[i], after)) ids.push(flat[i])
      }
      const pipeline = client.pipeline()
      for (const id of ids) pipeline.hmget(this.#keys(id)[0], 'base', 'lastActiveAt', 'turns')
      const replies = ids.length === 0 ? [] : await pipeline.exec() as Array<[Error | null, Array<string | null>]>
      replies.forEach(([, [base, lastActiveAt, turns]], i) => {
        const session = base === null ? null : toSession({ base, lastActiveAt: lastActiveAt as string, turns: turns as string })
        if (session === null || !wanted(session)) gone.push(ids[i])
        else if (found.length <= limit) found.push(session)
      })
      if (flat.length < batch * 2) break
    }
    if (gone.length > 0) await client.zrem(index, ...gone)
    const { items, nextCursor } = keyPage(found, limit, (session) => ({ ms: Date.parse(session.lastActiveAt), id: session.id }))
    return { sessions: items, nextCursor }
  }}

/** Sessions, idempotency, runs, the webhook outbox and the quota counts on one client (opened from a URL, or yours). */
export function redisStores (source: string | RedisClient, options: RedisStoreOptions = {}): Pick<Required<StoreSet>, 'sessionStore' | 'idempotency' | 'runStore' | 'webhookStore' | 'quotaStore'> {
  const connection = new RedisConnection(source)
  return {
    sessionStore: new RedisSessionStore(connection, options),
    idempotency: { store: new RedisIdempotencyStore(connection, options) },
    runStore: new RedisRunStore(connection, options),
    webhookStore: new RedisWebhookStore(connection, options),
    quotaStore: new RedisQuotaStore(connection, options)
  }
}
