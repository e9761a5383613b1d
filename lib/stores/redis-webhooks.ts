// The Redis outbox of webhook deliveries (docs/webhooks.md), shared by every instance on the server. A delivery is a hash
// (`wh:<id>`); `wh:due` is a sorted set of the pending ones by when each is next due (while claimed, when its lease
// runs out), so that a claim is one Lua script over it and instances claiming at once never take the same delivery.
// Ended deliveries wait in `wh:ended` by expiry. An attempt is a JSON string (`wh-attempt:<seq>`, seq from a counter),
// listed in sorted sets by seq: all of them, and per outcome, event and run; `wh-attempts-of:<id>` names a delivery's
// attempts for the purge. The scripts derive keys from the prefix: one Redis server, not a Cluster.
import type { Redis } from 'ioredis'
import { checkLimit, decodeSeqCursor, encodeSeqCursor } from './common.js'
import { MAX_WEBHOOK_ATTEMPT_LIMIT } from './memory-webhooks.js'
import { RedisScript, RedisStore } from './redis-connection.js'
import type { NewWebhookDelivery, RunLease, WebhookAttempt, WebhookAttemptPage, WebhookAttemptQuery, WebhookDelivery, WebhookStore } from './types.js'

// ARGV: prefix, then id, type, runId, payload, createdAt, giveUpAt, dueAt per delivery. An id there already is left alone.
const ENQUEUE = new RedisScript(`
local P = ARGV[1]
for i = 2, #ARGV, 7 do
  local key = P .. 'wh:' .. ARGV[i]
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'type', ARGV[i + 1], 'runId', ARGV[i + 2], 'payload', ARGV[i + 3], 'createdAt', ARGV[i + 4],
      'giveUpAt', ARGV[i + 5], 'status', 'pending', 'attempt', 0)
    redis.call('ZADD', P .. 'wh:due', ARGV[i + 6], ARGV[i])
  end
end
return 0
`)

// ARGV: prefix, owner, lease until, now, limit. Returns { id, type, runId, payload, createdAt, giveUpAt, attempt } each.
const CLAIM = new RedisScript(`
local P = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', P .. 'wh:due', '-inf', ARGV[4], 'LIMIT', 0, tonumber(ARGV[5]))
local claimed = {}
for _, id in ipairs(ids) do
  local key = P .. 'wh:' .. id
  local attempt = redis.call('HINCRBY', key, 'attempt', 1)
  redis.call('HSET', key, 'owner', ARGV[2])
  redis.call('ZADD', P .. 'wh:due', ARGV[3], id)
  local d = redis.call('HMGET', key, 'type', 'runId', 'payload', 'createdAt', 'giveUpAt')
  claimed[#claimed + 1] = { id, d[1], d[2], d[3], d[4], d[5], attempt }
end
return claimed
`)

// ARGV: prefix, id, owner, attempt, outcome, the attempt's JSON, event, runId, dueAt, expiresAt. Returns 1 when the
// owner held the delivery for that attempt (and what follows was set), else 0; the attempt is listed either way.
const RECORD = new RedisScript(`
local P = ARGV[1]
local id = ARGV[2]
local key = P .. 'wh:' .. id
local d = redis.call('HMGET', key, 'status', 'owner', 'attempt')
if not d[1] then return 0 end
local seq = redis.call('INCR', P .. 'wh:seq')
redis.call('SET', P .. 'wh-attempt:' .. seq, ARGV[6])
redis.call('ZADD', P .. 'wh-attempts', seq, seq)
redis.call('ZADD', P .. 'wh-attempts:outcome:' .. ARGV[5], seq, seq)
redis.call('ZADD', P .. 'wh-attempts:event:' .. ARGV[7], seq, seq)
redis.call('ZADD', P .. 'wh-attempts:run:' .. ARGV[8], seq, seq)
redis.call('RPUSH', P .. 'wh-attempts-of:' .. id, seq)
if d[1] ~= 'pending' or d[2] ~= ARGV[3] or d[3] ~= ARGV[4] then return 0 end
redis.call('HDEL', key, 'owner')
if ARGV[5] == 'retried' then
  redis.call('ZADD', P .. 'wh:due', ARGV[9], id)
else
  redis.call('HSET', key, 'status', ARGV[5])
  redis.call('ZREM', P .. 'wh:due', id)
  redis.call('ZADD', P .. 'wh:ended', ARGV[10], id)
end
return 1
`)

// ARGV: prefix, now, batch. Deletes at most batch ended deliveries past their expiry, and their attempts.
const PURGE = new RedisScript(`
local P = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', P .. 'wh:ended', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  for _, seq in ipairs(redis.call('LRANGE', P .. 'wh-attempts-of:' .. id, 0, -1)) do
    local attempt = cjson.decode(redis.call('GET', P .. 'wh-attempt:' .. seq))
    redis.call('ZREM', P .. 'wh-attempts', seq)
    redis.call('ZREM', P .. 'wh-attempts:outcome:' .. attempt.outcome, seq)
    redis.call('ZREM', P .. 'wh-attempts:event:' .. attempt.event, seq)
    redis.call('ZREM', P .. 'wh-attempts:run:' .. attempt.runId, seq)
    redis.call('DEL', P .. 'wh-attempt:' .. seq)
  end
  redis.call('DEL', P .. 'wh:' .. id, P .. 'wh-attempts-of:' .. id)
  redis.call('ZREM', P .. 'wh:ended', id)
end
return #ids
`)

// ARGV: prefix, index, before (a score bound), count. Returns seq, JSON, seq, JSON, … most recent first: one read, so
// that an attempt listed is one there (a purge between two reads would leave its seq without its JSON).
const LIST = new RedisScript(`
local P = ARGV[1]
local out = {}
for _, seq in ipairs(redis.call('ZREVRANGEBYSCORE', P .. ARGV[2], ARGV[3], '-inf', 'LIMIT', 0, tonumber(ARGV[4]))) do
  out[#out + 1] = seq
  out[#out + 1] = redis.call('GET', P .. 'wh-attempt:' .. seq)
end
return out
`)

/** Deliveries per ENQUEUE script: a large backlog is sent in several (each delivery is enqueued once whatever happens). */
const ENQUEUE_CHUNK = 500
/** Attempts read per round trip while a filtered page is gathered. */
const SCAN_CHUNK = 200

export class RedisWebhookStore extends RedisStore implements WebhookStore {

  #client (): Redis {
    return this.client() as Redis
  }

  async enqueue (deliveries: readonly NewWebhookDelivery[]): Promise<void> {
    const client = this.#client()
    for (let i = 0; i < deliveries.length; i += ENQUEUE_CHUNK) {
      const args: Array<string | number> = [this.prefix]
      for (const d of deliveries.slice(i, i + ENQUEUE_CHUNK)) args.push(d.id, d.type, d.runId, d.payload, d.createdAt, d.giveUpAt, d.dueAt)
      await ENQUEUE.run(client, args)
    }
  }

  async claim (lease: RunLease, now: number, limit: number): Promise<WebhookDelivery[]> {
    const rows = await CLAIM.run(this.#client(), [this.prefix, lease.owner, lease.until, now, limit]) as Array<[string, string, string, string, string, string, number]>
    return rows.map(([id, type, runId, payload, createdAt, giveUpAt, attempt]) => ({
      id, type, runId, payload, createdAt: Number(createdAt), giveUpAt: Number(giveUpAt), attempt
    }))
  }

  async record (attempt: WebhookAttempt, owner: string, next: { dueAt: number, retentionMs: number }): Promise<boolean> {
    const held = await RECORD.run(this.#client(), [
      this.prefix, attempt.webhookId, owner, attempt.attempt, attempt.outcome, JSON.stringify(attempt), attempt.event, attempt.runId,
      next.dueAt, Date.now() + next.retentionMs
    ])
    return held === 1
  }

  async attempts (query: WebhookAttemptQuery): Promise<WebhookAttemptPage> {
    const limit = checkLimit(query.limit, MAX_WEBHOOK_ATTEMPT_LIMIT)
    let before = query.cursor === undefined ? '+inf' : `(${decodeSeqCursor(query.cursor)}`
    const client = this.#client()
    // read the narrowest index, check the other filters on the attempts themselves
    const index = query.runId !== undefined
      ? `wh-attempts:run:${query.runId}`
      : query.event !== undefined ? `wh-attempts:event:${query.event}` : query.outcome !== undefined ? `wh-attempts:outcome:${query.outcome}` : 'wh-attempts'
    const found: Array<{ seq: string, attempt: WebhookAttempt }> = []
    while (found.length <= limit) {
      const read = await LIST.run(client, [this.prefix, index, before, SCAN_CHUNK]) as string[]
      if (read.length === 0) break
      for (let i = 0; i < read.length; i += 2) {
        const attempt = JSON.parse(read[i + 1]!) as WebhookAttempt
        if (query.outcome !== undefined && attempt.outcome !== query.outcome) continue
        if (query.event !== undefined && attempt.event !== query.event) continue
        found.push({ seq: read[i]!, attempt })
      }
      before = `(${read.at(-2)!}`
    }
    const page = found.slice(0, limit)
    return { attempts: page.map((f) => f.attempt), nextCursor: found.length > limit ? encodeSeqCursor(page[limit - 1]!.seq) : null }
  }

  async purge (now: number, batch: number): Promise<number> {
    return await PURGE.run(this.#client(), [this.prefix, now, batch]) as number
  }
}
