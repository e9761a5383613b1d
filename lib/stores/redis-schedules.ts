// The Redis schedules (docs/schedules.md), shared by every instance on the server. A schedule is a hash
// (`schedule:<id>`: principal, createdAt, wakeAt, revision, state as JSON); `schedules:wake` holds the ids by wakeAt
// (the due ones, the next wake), `schedules:created` and `schedules:by:<principal>` by creation (the listings). A write
// is one Lua script compared on the revision, so that of instances claiming one due time exactly one wins, and it
// publishes on `schedules` for the other instances' watchers. The scripts derive keys from the prefix: one Redis
// server, not a Cluster.
import type { Redis } from 'ioredis'
import { RedisScript, RedisStore, subscription } from './redis-connection.js'
import type { Subscription } from './redis-connection.js'
import { checkLimit, decodeKeyCursor, encodeKeyCursor } from './common.js'
import { MAX_SCHEDULE_LIST_LIMIT } from './memory-schedules.js'
import type { ScheduleListQuery, ScheduleRow, ScheduleRowPage, ScheduleState, ScheduleStore, ScheduleWrite } from './types.js'

const FIELDS = ['principal', 'createdAt', 'wakeAt', 'revision', 'state'] as const

// ARGV: prefix, id, principal, createdAt, wakeAt ('' for none), state. Returns 0 when the id is taken.
const INSERT = new RedisScript(`
local P, id = ARGV[1], ARGV[2]
local key = P .. 'schedule:' .. id
if redis.call('EXISTS', key) == 1 then return 0 end
redis.call('HSET', key, 'principal', ARGV[3], 'createdAt', ARGV[4], 'wakeAt', ARGV[5], 'revision', 1, 'state', ARGV[6])
if ARGV[5] ~= '' then redis.call('ZADD', P .. 'schedules:wake', ARGV[5], id) end
redis.call('ZADD', P .. 'schedules:created', ARGV[4], id)
redis.call('ZADD', P .. 'schedules:by:' .. ARGV[3], ARGV[4], id)
redis.call('PUBLISH', P .. 'schedules', id)
return 1
`)

// ARGV: prefix, then id, revision, wakeAt ('' for none), state per write. Returns per write { new revision, principal,
// createdAt }, or 0 when its revision was not the one given; one PUBLISH for them all.
const WRITE = new RedisScript(`
local P = ARGV[1]
local out, any = {}, false
for i = 2, #ARGV, 4 do
  local id = ARGV[i]
  local key = P .. 'schedule:' .. id
  local revision = redis.call('HGET', key, 'revision')
  if not revision or revision ~= ARGV[i + 1] then
    out[#out + 1] = 0
  else
    local next = tonumber(revision) + 1
    redis.call('HSET', key, 'wakeAt', ARGV[i + 2], 'revision', next, 'state', ARGV[i + 3])
    if ARGV[i + 2] == '' then redis.call('ZREM', P .. 'schedules:wake', id) else redis.call('ZADD', P .. 'schedules:wake', ARGV[i + 2], id) end
    local kept = redis.call('HMGET', key, 'principal', 'createdAt')
    out[#out + 1] = { next, kept[1], kept[2] }
    any = true
  end
end
if any then redis.call('PUBLISH', P .. 'schedules', '') end
return out
`)

// ARGV: prefix, id. Returns 1 when it was there.
const DELETE = new RedisScript(`
local P, id = ARGV[1], ARGV[2]
local key = P .. 'schedule:' .. id
local principal = redis.call('HGET', key, 'principal')
if not principal then return 0 end
redis.call('DEL', key)
redis.call('ZREM', P .. 'schedules:wake', id)
redis.call('ZREM', P .. 'schedules:created', id)
redis.call('ZREM', P .. 'schedules:by:' .. principal, id)
redis.call('PUBLISH', P .. 'schedules', id)
return 1
`)

// ARGV: prefix, index key (after the prefix), limit + 1, cursor ms ('' for none), cursor id. Returns id, fields… per
// row, newest first (ties by id, highest first), those after the cursor.
const LIST = new RedisScript(`
local P, index, want = ARGV[1], ARGV[1] .. ARGV[2], tonumber(ARGV[3])
local top, afterMs, afterId = '+inf', nil, ARGV[5]
if ARGV[4] ~= '' then top = ARGV[4]; afterMs = tonumber(ARGV[4]) end
local out, found, offset = {}, 0, 0
while found < want do
  local page = redis.call('ZREVRANGEBYSCORE', index, top, '-inf', 'WITHSCORES', 'LIMIT', offset, 100)
  if #page == 0 then break end
  for i = 1, #page, 2 do
    local id, score = page[i], tonumber(page[i + 1])
    if found < want and (afterMs == nil or score < afterMs or id < afterId) then
      found = found + 1
      out[#out + 1] = id
      out[#out + 1] = redis.call('HMGET', P .. 'schedule:' .. id, 'principal', 'createdAt', 'wakeAt', 'revision', 'state')
    end
  end
  offset = offset + 100
end
return out
`)

// ARGV: prefix, now, limit, until. Returns id, fields… per row taken, soonest first.
const TAKE = new RedisScript(`
local P = ARGV[1]
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'schedules:wake', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))) do
  local key = P .. 'schedule:' .. id
  redis.call('HINCRBY', key, 'revision', 1)
  redis.call('HSET', key, 'wakeAt', ARGV[4])
  redis.call('ZADD', P .. 'schedules:wake', ARGV[4], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HMGET', key, 'principal', 'createdAt', 'wakeAt', 'revision', 'state')
end
return out
`)

function toRow (id: string, values: Array<string | null>): ScheduleRow {
  const [principal, createdAt, wakeAt, revision, state] = values
  return {
    id,
    principal: principal!,
    createdAt: Number(createdAt),
    wakeAt: wakeAt === '' || wakeAt === null ? null : Number(wakeAt),
    revision: Number(revision),
    state: JSON.parse(state!) as ScheduleState
  }
}

function toRows (reply: unknown): ScheduleRow[] {
  const flat = reply as Array<string | Array<string | null>>
  const rows: ScheduleRow[] = []
  for (let i = 0; i < flat.length; i += 2) rows.push(toRow(flat[i] as string, flat[i + 1] as Array<string | null>))
  return rows
}

export class RedisScheduleStore extends RedisStore implements ScheduleStore {
  readonly #watchers = new Set<() => void>()
  #subscriber: Subscription | null = null

  #client (): Redis {
    return this.client() as Redis
  }

  async insert (row: Omit<ScheduleRow, 'revision'>): Promise<ScheduleRow> {
    const inserted = await INSERT.run(this.#client(), [
      this.prefix, row.id, row.principal, row.createdAt, row.wakeAt ?? '', JSON.stringify(row.state)
    ])
    if (inserted === 0) throw new Error(`schedule ${JSON.stringify(row.id)} exists already`)
    return { ...row, revision: 1 }
  }

  async get (id: string): Promise<ScheduleRow | null> {
    const values = await this.#client().hmget(`${this.prefix}schedule:${id}`, ...FIELDS)
    return values[0] === null ? null : toRow(id, values)
  }

  async write (id: string, revision: number, change: { wakeAt: number | null, state: ScheduleState }): Promise<ScheduleRow | null> {
    const [written] = await this.writeAll([{ id, revision, ...change }])
    return written!
  }

  async writeAll (writes: readonly ScheduleWrite[]): Promise<Array<ScheduleRow | null>> {
    if (writes.length === 0) return []
    const args: Array<string | number> = [this.prefix]
    for (const { id, revision, wakeAt, state } of writes) args.push(id, revision, wakeAt ?? '', JSON.stringify(state))
    const results = await WRITE.run(this.#client(), args) as Array<0 | [number, string, string]>
    return results.map((written, i) => {
      if (written === 0) return null
      const [next, principal, createdAt] = written
      const { id, wakeAt, state } = writes[i]!
      return { id, principal, createdAt: Number(createdAt), wakeAt, state: structuredClone(state), revision: next }
    })
  }

  async delete (id: string): Promise<boolean> {
    return await DELETE.run(this.#client(), [this.prefix, id]) === 1
  }

  async list (query: ScheduleListQuery): Promise<ScheduleRowPage> {
    const limit = checkLimit(query.limit, MAX_SCHEDULE_LIST_LIMIT)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const index = query.principal === undefined ? 'schedules:created' : `schedules:by:${query.principal}`
    const rows = toRows(await LIST.run(this.#client(), [this.prefix, index, limit + 1, after?.ms ?? '', after?.id ?? '']))
    const page = rows.slice(0, limit)
    const last = page.at(-1)
    return { rows: page, nextCursor: rows.length > limit && last !== undefined ? encodeKeyCursor(last.createdAt, last.id) : null }
  }

  async take (now: number, limit: number, until: number): Promise<ScheduleRow[]> {
    return toRows(await TAKE.run(this.#client(), [this.prefix, now, limit, until]))
  }

  async nextWake (): Promise<number | null> {
    const first = await this.#client().zrange(`${this.prefix}schedules:wake`, '0', '0', 'WITHSCORES')
    return first.length === 0 ? null : Number(first[1])
  }

  watch (listener: () => void): () => void {
    this.#watchers.add(listener)
    this.#subscribe()
    return () => { this.#watchers.delete(listener) }
  }

  #subscribe (): void {
    if (this.#subscriber !== null || this.closed) return
    this.#subscriber = subscription(this.#client(), `${this.prefix}schedules`, () => this.#tell(), () => this.#tell())
  }

  #tell (): void {
    for (const watcher of this.#watchers) watcher()
  }

  protected override async stop (): Promise<void> {
    this.#watchers.clear()
    const subscriber = this.#subscriber
    this.#subscriber = null
    subscriber?.disconnect()
  }
}
