// The Redis counts of the `quotas` option (docs/auth-and-traffic.md), shared by every instance on the server. A principal's slots
// are a sorted set (`quota:slots:<principal>`) of slot ids by expiry, so that an acquire is one Lua script: forget the
// expired, count, add. `quota:slot-sets` holds each principal's set by its latest expiry, for the purge. A window's
// tokens are a counter (`quota:tokens:<start>:<principal>`) that expires on its own (a TTL of twice the window from its
// first tokens) and is listed in `quota:windows` by its end, for the purge. Times are the caller's clock (epoch ms), as
// in the other backends. The scripts derive keys from the prefix: one Redis server, not a Cluster.
import type { Redis } from 'ioredis'
import { RedisScript, RedisStore } from './redis-connection.js'
import type { QuotaSlot, QuotaStore } from './types.js'

// ARGV: prefix, principal, slot id, max, now, until. Returns 1 when the slot is held.
const ACQUIRE = new RedisScript(`
local key = ARGV[1] .. 'quota:slots:' .. ARGV[2]
redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[5])
if not redis.call('ZSCORE', key, ARGV[3]) and redis.call('ZCARD', key) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', key, ARGV[6], ARGV[3])
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('ZADD', ARGV[1] .. 'quota:slot-sets', last[2], ARGV[2])
return 1
`)

// ARGV: prefix, until, then principal, slot id per slot. Returns the ids of the slots still held, now renewed.
const RENEW = new RedisScript(`
local renewed = {}
for i = 3, #ARGV, 2 do
  local key = ARGV[1] .. 'quota:slots:' .. ARGV[i]
  if redis.call('ZSCORE', key, ARGV[i + 1]) then
    redis.call('ZADD', key, ARGV[2], ARGV[i + 1])
    redis.call('ZADD', ARGV[1] .. 'quota:slot-sets', 'GT', ARGV[2], ARGV[i])
    renewed[#renewed + 1] = ARGV[i + 1]
  end
end
return renewed
`)

// ARGV: prefix, window start, window end, principal, n.
const ADD_TOKENS = new RedisScript(`
local member = ARGV[2] .. ':' .. ARGV[4]
local key = ARGV[1] .. 'quota:tokens:' .. member
redis.call('INCRBY', key, ARGV[5])
if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, 2 * (tonumber(ARGV[3]) - tonumber(ARGV[2]))) end
redis.call('ZADD', ARGV[1] .. 'quota:windows', ARGV[3], member)
return 1
`)

// ARGV: prefix, now, batch. The principals' sets whose every slot expired, then the ended windows; at most batch.
const PURGE = new RedisScript(`
local P, now, batch = ARGV[1], ARGV[2], tonumber(ARGV[3])
local purged = 0
for _, principal in ipairs(redis.call('ZRANGEBYSCORE', P .. 'quota:slot-sets', '-inf', now, 'LIMIT', 0, batch)) do
  if purged >= batch then break end
  local key = P .. 'quota:slots:' .. principal
  purged = purged + redis.call('ZCARD', key)
  redis.call('DEL', key)
  redis.call('ZREM', P .. 'quota:slot-sets', principal)
end
if purged < batch then
  local ended = redis.call('ZRANGEBYSCORE', P .. 'quota:windows', '-inf', now, 'LIMIT', 0, batch - purged)
  for _, member in ipairs(ended) do
    redis.call('DEL', P .. 'quota:tokens:' .. member)
    redis.call('ZREM', P .. 'quota:windows', member)
  end
  purged = purged + #ended
end
return purged
`)

export class RedisQuotaStore extends RedisStore implements QuotaStore {

  #client (): Redis {
    return this.client() as Redis
  }

  async acquire ({ principal, slotId }: QuotaSlot, max: number, now: number, until: number): Promise<boolean> {
    return await ACQUIRE.run(this.#client(), [this.prefix, principal, slotId, max, now, until]) === 1
  }

  async renew (slots: readonly QuotaSlot[], until: number): Promise<string[]> {
    if (slots.length === 0) return []
    return await RENEW.run(this.#client(), [this.prefix, until, ...slots.flatMap((s) => [s.principal, s.slotId])]) as string[]
  }

  async release ({ principal, slotId }: QuotaSlot): Promise<void> {
    await this.#client().zrem(`${this.prefix}quota:slots:${principal}`, slotId)
  }

  async addTokens (principal: string, window: { start: number, end: number }, n: number): Promise<void> {
    await ADD_TOKENS.run(this.#client(), [this.prefix, window.start, window.end, principal, n])
  }

  async tokens (principal: string, windowStart: number): Promise<number> {
    return Number(await this.#client().get(`${this.prefix}quota:tokens:${windowStart}:${principal}`) ?? 0)
  }

  async purge (now: number, batch: number): Promise<number> {
    return await PURGE.run(this.#client(), [this.prefix, now, batch]) as number
  }
}
