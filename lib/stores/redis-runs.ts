// The Redis run store, shared by every instance on the server. A run is a hash (`run:<id>`) and a list of its
// events (`run-events:<id>`); a session's lock is a key (`run-session:<id>`) naming the run that holds it; sorted
// sets by order of creation (a counter, `runs:seq`) list the runs (all, per session, per agent, per status) and
// `runs:expiring` the ended ones by expiry. The hash fields `owner` and `leaseUntil` are kept for the leases of
// background runs (contract §16). Every write is one Lua script, which publishes what it changed on the store's channel; each store
// listens on a connection of its own (a duplicate of the client) and polls for what a lost message did not tell.
// The scripts derive the keys of other runs from the prefix: one Redis server, not a Cluster.
import { createHash } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { RunLogGapError } from '../core/errors.js'
import { checkLimit, checkTtl, decodeSeqCursor, encodeSeqCursor, endedBeforeStartEvent, storeClosedError, toMs } from './common.js'
import { MAX_RUN_LIST_LIMIT, RUN_POLL_MS, checkBatch, checkEvents, checkNewRun, checkText, isEnded, storable } from './run-common.js'
import { RunWatchHub } from './run-watch.js'
import type { RunState } from './run-watch.js'
import { RedisConnection } from './redis.js'
import type { RedisSource, RedisStoreOptions } from './redis.js'
import type {
  CancelRunResult, CreateRunResult, NewRun, ReopenRunResult, RunChange, RunEnd, RunListQuery, RunPage, RunRecord, RunSpec, RunStatus,
  RunStore, StartRunResult, StoredEvent
} from './types.js'

export interface RedisRunStoreOptions extends RedisStoreOptions {
  /** how often watchers poll for what a lost message did not tell them (default 1,000 ms) */
  pollIntervalMs?: number
}

const BACKEND = 'Redis'
/** How many times cancel reads and tries again while the run changes under it (it only moves forward). */
const CANCEL_ATTEMPTS = 5

/** A Lua script run by its SHA, sent in full only when the server does not know it yet. */
class Script {
  readonly #source: string
  readonly #sha: string

  constructor (body: string) {
    this.#source = LUA_COMMON + body
    this.#sha = createHash('sha1').update(this.#source).digest('hex')
  }

  async run (client: Redis, args: Array<string | number>): Promise<unknown> {
    try {
      return await client.evalsha(this.#sha, 0, ...args)
    } catch (error) {
      if (!String((error as Error).message).startsWith('NOSCRIPT')) throw error
      return client.eval(this.#source, 0, ...args)
    }
  }
}

// ARGV[1] is always the prefix. A member of `runs:expiring` names the run and the sets it is listed in, as
// length-prefixed fields (id, agent, status, session if any), so that the run can be unlisted after Redis has
// expired its hash.
const LUA_COMMON = `
local P = ARGV[1]
local function runKey (id) return P .. 'run:' .. id end
local function eventsKey (id) return P .. 'run-events:' .. id end
local function lockKey (session) return P .. 'run-session:' .. session end
local function active (status) return status == 'queued' or status == 'running' end
local function field (value) return #value .. ':' .. value end
local function fields (packed)
  local out, i = {}, 1
  while i <= #packed do
    local colon = string.find(packed, ':', i, true)
    local n = tonumber(string.sub(packed, i, colon - 1))
    out[#out + 1] = string.sub(packed, colon + 1, colon + n)
    i = colon + n + 1
  end
  return out
end
local function list (id, agent, session, status, ms)
  redis.call('ZADD', P .. 'runs', ms, id)
  redis.call('ZADD', P .. 'runs:agent:' .. agent, ms, id)
  redis.call('ZADD', P .. 'runs:status:' .. status, ms, id)
  if session then redis.call('ZADD', P .. 'runs:session:' .. session, ms, id) end
end
local function unlist (id, agent, session, status)
  redis.call('ZREM', P .. 'runs', id)
  redis.call('ZREM', P .. 'runs:agent:' .. agent, id)
  redis.call('ZREM', P .. 'runs:status:' .. status, id)
  if session then redis.call('ZREM', P .. 'runs:session:' .. session, id) end
end
-- the holder of a session, unless it has ended (or is gone): then the lock is free
local function holding (session)
  local holder = redis.call('GET', lockKey(session))
  if holder and active(redis.call('HGET', runKey(holder), 'status')) then return holder end
  return nil
end
local function push (key, from)
  for i = from, #ARGV, 1000 do redis.call('RPUSH', key, unpack(ARGV, i, math.min(i + 999, #ARGV))) end
end
`

// ARGV: prefix, runId, exclusive, session ('' and hasSession '0' for none), hasSession, agent, status, base, spec,
// ephemeral, startedAt ('' for none), lastSeq, attempt, requestId, traceId. Returns the holder when the session is busy.
const CREATE = new Script(`
local id = ARGV[2]
local session = nil
if ARGV[5] == '1' then session = ARGV[4] end
if ARGV[3] == '1' and session then
  local holder = holding(session)
  if holder then return holder end
  redis.call('SET', lockKey(session), id)
end
local key = runKey(id)
-- a run created under the id of one past its retention (not purged yet) starts afresh: new record, empty log
local old = redis.call('HMGET', key, 'agent', 'session', 'status', 'expiring')
if old[1] then
  unlist(id, old[1], old[2], old[3])
  if old[4] then redis.call('ZREM', P .. 'runs:expiring', old[4]) end
end
redis.call('DEL', key, eventsKey(id))
local seq = redis.call('INCR', P .. 'runs:seq')
redis.call('HSET', key, 'base', ARGV[8], 'status', ARGV[7], 'lastSeq', ARGV[12], 'seq', seq, 'agent', ARGV[6],
  'spec', ARGV[9], 'ephemeral', ARGV[10], 'attempt', ARGV[13], 'requestId', ARGV[14], 'traceId', ARGV[15])
if session then redis.call('HSET', key, 'session', session) end
if ARGV[11] ~= '' then redis.call('HSET', key, 'startedAt', ARGV[11]) end
list(id, ARGV[6], session, ARGV[7], seq)
return false
`)

// ARGV: prefix, runId, startedAt. Returns { 'gone' }, { 'busy', holder } or { 'started', hash }.
const START = new Script(`
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'session', 'seq')
if run[1] ~= 'queued' then return { 'gone' } end
if run[2] then
  local holder = holding(run[2])
  if holder then return { 'busy', holder } end
  redis.call('SET', lockKey(run[2]), id)
end
redis.call('HSET', key, 'status', 'running', 'startedAt', ARGV[3])
redis.call('ZREM', P .. 'runs:status:queued', id)
redis.call('ZADD', P .. 'runs:status:running', run[3], id)
return { 'started', redis.call('HGETALL', key) }
`)

// A run that ended is resumed: its next attempt, its log going on (its keys no longer expire), its end forgotten.
// ARGV: prefix, runId, exclusive, now, startedAt, requestId, traceId, spec.
// Returns { 'not_found' }, { 'in_progress' }, { 'busy', holder } or { 'reopened', hash }.
const REOPEN = new Script(`
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'session', 'expiresAt', 'expiring', 'seq', 'attempt')
if not run[1] or (run[3] and tonumber(run[3]) <= tonumber(ARGV[4])) then return { 'not_found' } end
if active(run[1]) then return { 'in_progress' } end
if ARGV[3] == '1' and run[2] then
  local holder = holding(run[2])
  if holder then return { 'busy', holder } end
  redis.call('SET', lockKey(run[2]), id)
end
redis.call('HSET', key, 'status', 'running', 'attempt', tonumber(run[6]) + 1, 'startedAt', ARGV[5], 'requestId', ARGV[6],
  'traceId', ARGV[7], 'spec', ARGV[8])
redis.call('HDEL', key, 'endedAt', 'result', 'error', 'expiresAt', 'expiring', 'cancel')
redis.call('PERSIST', key)
redis.call('PERSIST', eventsKey(id))
redis.call('ZREM', P .. 'runs:expiring', run[4])
redis.call('ZREM', P .. 'runs:status:' .. run[1], id)
redis.call('ZADD', P .. 'runs:status:running', run[5], id)
return { 'reopened', redis.call('HGETALL', key) }
`)

// ARGV: prefix, runId, channel, the seq expected first, then the events. Returns the new lastSeq, { lastSeq } when the
// batch does not follow the log, nil when the run is unknown or ended.
const APPEND = new Script(`
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'lastSeq')
if not active(run[1]) then return nil end
local last = tonumber(run[2])
if last + 1 ~= tonumber(ARGV[4]) then return { last } end
push(eventsKey(id), 5)
last = last + #ARGV - 4
redis.call('HSET', key, 'lastSeq', last)
redis.call('PUBLISH', ARGV[3], 'e:' .. id .. ':' .. last)
return last
`)

// Ends a run whose status is ARGV[4] with its last events, and gives its session back.
// ARGV: prefix, runId, channel, from, the seq expected first, status, endedAt, result, error ('' for none),
// expiresAt, ttlMs, then the events. Returns { hash, freed }, { lastSeq } when the batch does not follow the log,
// nil when the run's status is not ARGV[4].
const END = new Script(`
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'lastSeq', 'session', 'agent', 'seq')
if run[1] ~= ARGV[4] then return nil end
local last = tonumber(run[2])
if #ARGV > 11 then
  if last + 1 ~= tonumber(ARGV[5]) then return { last } end
  push(eventsKey(id), 12)
  last = last + #ARGV - 11
end
local member = field(id) .. field(run[4]) .. field(ARGV[6])
if run[3] then member = member .. field(run[3]) end
redis.call('HSET', key, 'status', ARGV[6], 'endedAt', ARGV[7], 'lastSeq', last, 'expiresAt', ARGV[10], 'expiring', member)
if ARGV[8] ~= '' then redis.call('HSET', key, 'result', ARGV[8]) end
if ARGV[9] ~= '' then redis.call('HSET', key, 'error', ARGV[9]) end
redis.call('PEXPIRE', key, ARGV[11])
redis.call('PEXPIRE', eventsKey(id), ARGV[11])
redis.call('ZREM', P .. 'runs:status:' .. run[1], id)
redis.call('ZADD', P .. 'runs:status:' .. ARGV[6], run[5], id)
redis.call('ZADD', P .. 'runs:expiring', ARGV[10], member)
redis.call('PUBLISH', ARGV[3], 'e:' .. id .. ':' .. last)
local freed = 0
if run[3] and redis.call('GET', lockKey(run[3])) == id then
  redis.call('DEL', lockKey(run[3]))
  redis.call('PUBLISH', ARGV[3], 's:' .. run[3])
  freed = 1
end
return { redis.call('HGETALL', key), freed }
`)

// ARGV: prefix, runId, channel. Returns the hash, or nil when the run is not running.
const REQUEST_CANCEL = new Script(`
local key = runKey(ARGV[2])
if redis.call('HGET', key, 'status') ~= 'running' then return nil end
redis.call('HSET', key, 'cancel', '1')
redis.call('PUBLISH', ARGV[3], 'c:' .. ARGV[2])
return redis.call('HGETALL', key)
`)

// ARGV: prefix, then session ids. Returns those whose lock is free.
const FREE_SESSIONS = new Script(`
local free = {}
for i = 2, #ARGV do
  if not holding(ARGV[i]) then free[#free + 1] = ARGV[i] end
end
return free
`)

// ARGV: prefix, now, batch. Deletes at most batch runs whose expiry passed (Redis may have dropped their keys
// already: they are unlisted all the same) and returns how many.
const PURGE = new Script(`
local now = tonumber(ARGV[2])
local members = redis.call('ZRANGEBYSCORE', P .. 'runs:expiring', '-inf', now, 'LIMIT', 0, ARGV[3])
local purged = 0
for _, member in ipairs(members) do
  local run = fields(member)
  local key = runKey(run[1])
  local current = redis.call('HMGET', key, 'status', 'expiresAt')
  -- a run created again under the same id since has a hash of its own, not expired yet: left alone
  if not current[1] or (current[2] and tonumber(current[2]) <= now) then
    redis.call('DEL', key, eventsKey(run[1]))
    unlist(run[1], run[2], run[4], run[3])
    purged = purged + 1
  end
  redis.call('ZREM', P .. 'runs:expiring', member)
end
return purged
`)

type Hash = Record<string, string>

/** The parts of a record that never change after create(), stored as one JSON field. */
type RunBase = Pick<RunRecord, 'runId' | 'agent' | 'sessionId' | 'principal' | 'background' | 'createdAt'>

function pairs (flat: string[]): Hash {
  const hash: Hash = {}
  for (let i = 0; i < flat.length; i += 2) hash[flat[i]!] = flat[i + 1]!
  return hash
}

function live (hash: Hash, now: number): boolean {
  return hash.status !== undefined && (hash.expiresAt === undefined || Number(hash.expiresAt) > now)
}

function toRecord (hash: Hash): RunRecord {
  const record = JSON.parse(hash.base!) as RunRecord
  record.status = hash.status as RunStatus
  record.attempt = Number(hash.attempt)
  record.lastSeq = Number(hash.lastSeq)
  record.requestId = hash.requestId!
  record.traceId = hash.traceId!
  if (hash.startedAt !== undefined) record.startedAt = hash.startedAt
  if (hash.endedAt !== undefined) record.endedAt = hash.endedAt
  if (hash.result !== undefined) record.result = JSON.parse(hash.result) as RunRecord['result']
  if (hash.error !== undefined) record.error = JSON.parse(hash.error) as RunRecord['error']
  return record
}

/** An event in the list: its type's length, its type, its data (its seq is its place in the list). */
function encodeEvent (event: StoredEvent): string {
  return `${event.type.length}:${event.type}${event.data}`
}

function decodeEvent (seq: number, text: string): StoredEvent {
  const colon = text.indexOf(':')
  const end = colon + 1 + Number(text.slice(0, colon))
  return { seq, type: text.slice(colon + 1, end), data: text.slice(end) }
}

function noop (): void {}

export class RedisRunStore implements RunStore {
  readonly prefix: string
  /** the pub/sub channel of every instance using this prefix */
  readonly channel: string
  readonly #connection: RedisConnection
  readonly #hub: RunWatchHub
  #subscriber: Redis | null = null
  #closed = false

  constructor (source: RedisSource, options: RedisRunStoreOptions = {}) {
    const prefix = options.prefix ?? 'fa:'
    if (typeof prefix !== 'string') throw new TypeError('prefix must be a string')
    this.prefix = prefix
    this.channel = `${prefix}runs`
    this.#connection = source instanceof RedisConnection ? source : new RedisConnection(source)
    this.#hub = new RunWatchHub({
      poll: async (runIds) => this.#pollRuns(runIds),
      pollSessions: async (sessionIds) => this.#pollSessions(sessionIds),
      pollIntervalMs: options.pollIntervalMs === undefined ? RUN_POLL_MS : checkTtl('pollIntervalMs', options.pollIntervalMs),
      // the server is away: the next tick tries again
      onPollError: noop
    })
  }

  #client (): Redis {
    if (this.#closed) throw storeClosedError()
    return this.#connection.acquire(this) as unknown as Redis
  }

  #key (id: string): string {
    return `${this.prefix}run:${id}`
  }

  #eventsKey (id: string): string {
    return `${this.prefix}run-events:${id}`
  }

  async create (run: NewRun, options: { exclusive: boolean }): Promise<CreateRunResult> {
    checkNewRun(BACKEND, true, run)
    const { record } = run
    const base: RunBase = {
      runId: record.runId,
      agent: record.agent,
      sessionId: record.sessionId,
      principal: record.principal,
      background: record.background,
      createdAt: record.createdAt
    }
    toMs('createdAt', record.createdAt)
    const holder = await CREATE.run(this.#client(), [
      this.prefix, record.runId, options.exclusive ? '1' : '0', record.sessionId ?? '', record.sessionId === null ? '0' : '1',
      record.agent, record.status, JSON.stringify(base), JSON.stringify(run.spec), run.ephemeral ? '1' : '0', record.startedAt ?? '',
      record.lastSeq, record.attempt, record.requestId, record.traceId
    ]) as string | null
    return holder === null ? { outcome: 'created' } : { outcome: 'session_busy', holder }
  }

  async reopen (run: NewRun, options: { exclusive: boolean }): Promise<ReopenRunResult> {
    const { record } = run
    toMs('startedAt', record.startedAt!)
    const client = this.#client()
    if (!storable(record.runId, true)) return { outcome: 'not_found' }
    checkText(BACKEND, true, 'requestId', record.requestId)
    checkText(BACKEND, true, 'traceId', record.traceId)
    const [outcome, value] = await REOPEN.run(client, [
      this.prefix, record.runId, options.exclusive ? '1' : '0', Date.now(), record.startedAt!, record.requestId, record.traceId,
      JSON.stringify(run.spec)
    ]) as [string, string | string[]]
    switch (outcome) {
      case 'not_found': return { outcome: 'not_found' }
      case 'in_progress': return { outcome: 'in_progress' }
      case 'busy': return { outcome: 'session_busy', holder: value as string }
      default: return { outcome: 'reopened', record: toRecord(pairs(value as string[])) }
    }
  }

  async start (runId: string, startedAt: string): Promise<StartRunResult> {
    toMs('startedAt', startedAt)
    const client = this.#client()
    if (!storable(runId, true)) return { outcome: 'gone' }
    const [outcome, value] = await START.run(client, [this.prefix, runId, startedAt]) as [string, string | string[]]
    if (outcome === 'gone') return { outcome: 'gone' }
    if (outcome === 'busy') return { outcome: 'session_busy', holder: value as string }
    return { outcome: 'started', record: toRecord(pairs(value as string[])) }
  }

  async append (runId: string, events: readonly StoredEvent[]): Promise<void> {
    const client = this.#client()
    if (events.length === 0 || !storable(runId, true)) return
    checkBatch(runId, events)
    checkEvents(BACKEND, true, events)
    const result = await APPEND.run(client, [this.prefix, runId, this.channel, events[0]!.seq, ...events.map(encodeEvent)]) as number | [number] | null
    if (typeof result === 'number') this.#hub.events(runId, result)
    else if (result !== null) throw new RunLogGapError(runId, result[0] + 1, events[0]!.seq)
  }

  /** Ends a run whose status is `from`: the record, null when its status is not `from`, or the lastSeq a batch does not follow. */
  async #end (client: Redis, runId: string, from: RunStatus, events: readonly StoredEvent[], end: RunEnd, retentionMs: number): Promise<RunRecord | { gapAfter: number } | null> {
    const endedMs = toMs('endedAt', end.endedAt)
    const expiresAt = endedMs + retentionMs
    const result = await END.run(client, [
      this.prefix, runId, this.channel, from, events.length === 0 ? 0 : events[0]!.seq, end.status, end.endedAt,
      end.result === undefined ? '' : JSON.stringify(end.result), end.error === undefined ? '' : JSON.stringify(end.error),
      expiresAt, Math.max(1, Math.ceil(expiresAt - Date.now())), ...events.map(encodeEvent)
    ]) as [string[], number] | [number] | null
    if (result === null) return null
    if (result.length === 1) return { gapAfter: result[0] }
    const record = toRecord(pairs(result[0]))
    this.#hub.events(runId, record.lastSeq)
    if (result[1] === 1) this.#hub.sessionFree(record.sessionId!)
    return record
  }

  async finish (runId: string, events: readonly StoredEvent[], end: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    const client = this.#client()
    if (!storable(runId, true)) return null
    checkBatch(runId, events)
    checkEvents(BACKEND, true, events)
    const ended = await this.#end(client, runId, 'running', events, end, retentionMs)
    if (ended !== null && 'gapAfter' in ended) throw new RunLogGapError(runId, ended.gapAfter + 1, events[0]!.seq)
    return ended
  }

  async get (runId: string): Promise<RunRecord | null> {
    const client = this.#client()
    if (!storable(runId, true)) return null
    const hash = await client.hgetall(this.#key(runId))
    return live(hash, Date.now()) ? toRecord(hash) : null
  }

  async spec (runId: string): Promise<RunSpec | null> {
    const client = this.#client()
    if (!storable(runId, true)) return null
    const [spec, expiresAt] = await client.hmget(this.#key(runId), 'spec', 'expiresAt')
    if (spec === null || (expiresAt !== null && Number(expiresAt) <= Date.now())) return null
    return JSON.parse(spec) as RunSpec
  }

  async events (runId: string, afterSeq: number, limit: number): Promise<StoredEvent[]> {
    const client = this.#client()
    if (!storable(runId, true)) return []
    const replies = await client.multi()
      .hmget(this.#key(runId), 'status', 'expiresAt')
      .lrange(this.#eventsKey(runId), afterSeq, afterSeq + limit - 1)
      .exec() as Array<[Error | null, unknown]>
    const [status, expiresAt] = replies[0]![1] as Array<string | null>
    if (status === null || (expiresAt !== null && Number(expiresAt) <= Date.now())) return []
    return (replies[1]![1] as string[]).map((text, i) => decodeEvent(afterSeq + 1 + i, text))
  }

  async cancel (runId: string, end: RunEnd, retentionMs: number): Promise<CancelRunResult> {
    const client = this.#client()
    if (!storable(runId, true)) return { outcome: 'not_found' }
    // read, then change only if the run is still as read: a run only moves forward, so this ends in a few turns
    for (let attempt = 0; attempt < CANCEL_ATTEMPTS; attempt++) {
      const hash = await client.hgetall(this.#key(runId))
      if (!live(hash, Date.now())) return { outcome: 'not_found' }
      const record = toRecord(hash)
      if (isEnded(record.status)) return { outcome: 'ended', record }
      if (record.status === 'queued') {
        // null or a gap: it started, or an event came in, meanwhile
        const ended = await this.#end(client, runId, 'queued', [endedBeforeStartEvent(record, end)], end, retentionMs)
        if (ended !== null && !('gapAfter' in ended)) return { outcome: 'cancelled', record: ended }
      } else {
        const requested = await REQUEST_CANCEL.run(client, [this.prefix, runId, this.channel]) as string[] | null
        if (requested !== null) {
          this.#hub.cancel(runId)
          return { outcome: 'requested', record: toRecord(pairs(requested)) }
        }
      }
    }
    /* c8 ignore next 2: the run changed under every attempt, a race no test provokes on purpose */
    throw new Error(`run ${JSON.stringify(runId)} changed ${CANCEL_ATTEMPTS} times during one cancel`)
  }

  watch (runId: string, listener: (change: RunChange) => void): () => void {
    this.#subscribe()
    return this.#hub.watch(runId, listener)
  }

  watchSession (sessionId: string, listener: () => void): () => void {
    this.#subscribe()
    return this.#hub.watchSession(sessionId, listener)
  }

  async listBySession (sessionId: string, query: { limit: number, cursor?: string }): Promise<RunPage> {
    return this.#page({ sessionId }, query.limit, query.cursor)
  }

  async list (query: RunListQuery): Promise<RunPage> {
    return this.#page({ sessionId: query.sessionId, agent: query.agent, status: query.status }, query.limit, query.cursor)
  }

  /**
   * Pages through the most selective sorted set the filters allow, checking each run against all of them. A
   * member whose run is gone (expired) or no longer belongs to that set is removed from it on the way.
   */
  async #page (filters: { sessionId?: string | undefined, agent?: string | undefined, status?: RunStatus | undefined }, limitOption: number, cursor: string | undefined): Promise<RunPage> {
    const client = this.#client()
    const limit = checkLimit(limitOption, MAX_RUN_LIST_LIMIT)
    const before = cursor === undefined ? null : decodeSeqCursor(cursor)
    const { sessionId, agent, status } = filters
    if ((sessionId !== undefined && !storable(sessionId, true)) || (agent !== undefined && !storable(agent, true))) return { runs: [], nextCursor: null }
    const [index, belongs] = sessionId !== undefined
      ? [`runs:session:${sessionId}`, (r: RunRecord) => r.sessionId === sessionId]
      : agent !== undefined
        ? [`runs:agent:${agent}`, (r: RunRecord) => r.agent === agent]
        : status !== undefined
          ? [`runs:status:${status}`, (r: RunRecord) => r.status === status]
          : ['runs', () => true]
    const matches = (r: RunRecord): boolean => (agent === undefined || r.agent === agent) && (status === undefined || r.status === status)
    const key = this.prefix + index
    const found: Array<{ record: RunRecord, seq: string }> = []
    const stale: string[] = []
    const batch = limit + 1
    const now = Date.now()
    for (let offset = 0; found.length <= limit; offset += batch) {
      const flat = await client.zrevrangebyscore(key, before === null ? '+inf' : `(${before}`, '-inf', 'WITHSCORES', 'LIMIT', offset, batch)
      const candidates: Array<{ id: string, seq: string }> = []
      for (let i = 0; i < flat.length; i += 2) candidates.push({ id: flat[i]!, seq: flat[i + 1]! })
      const pipeline = client.pipeline()
      for (const { id } of candidates) pipeline.hgetall(this.#key(id))
      const replies = candidates.length === 0 ? [] : await pipeline.exec() as Array<[Error | null, Hash]>
      replies.forEach(([, hash], i) => {
        const { id, seq } = candidates[i]!
        const record = live(hash, now) ? toRecord(hash) : null
        if (record === null || !belongs(record)) stale.push(id)
        else if (matches(record) && found.length <= limit) found.push({ record, seq })
      })
      if (flat.length < batch * 2) break
    }
    if (stale.length > 0) await client.zrem(key, ...stale)
    const page = found.slice(0, limit)
    const last = page.at(-1)
    return {
      runs: page.map((entry) => entry.record),
      nextCursor: found.length > limit && last !== undefined ? encodeSeqCursor(last.seq) : null
    }
  }

  async purge (now: number, batch: number): Promise<number> {
    const client = this.#client()
    if (batch < 1) return 0
    return await PURGE.run(client, [this.prefix, now, batch]) as number
  }

  /** For health checks: O(1), one PING shared with the other stores of the client. */
  probe (): Promise<void> {
    return this.#connection.probe(async () => { await this.#client().ping() })
  }

  /** Whether the store opened its own client (from a URL): then the service closes it. */
  get ownsConnection (): boolean {
    return this.#connection.owned
  }

  /** The service's logger, for the connection errors of a client opened from a URL. */
  useLogger (log: FastifyBaseLogger): void {
    this.#connection.useLogger(log)
  }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#hub.close()
    this.#subscriber?.disconnect()
    this.#subscriber = null
    await this.#connection.release(this)
  }

  async #pollRuns (runIds: string[]): Promise<RunState[]> {
    const client = this.#client()
    const ids = runIds.filter((id) => storable(id, true))
    const pipeline = client.pipeline()
    for (const id of ids) pipeline.hmget(this.#key(id), 'lastSeq', 'cancel')
    const replies = await pipeline.exec() as Array<[Error | null, Array<string | null>]>
    const states: RunState[] = []
    replies.forEach(([, [lastSeq, cancel]], i) => {
      if (lastSeq !== null) states.push({ runId: ids[i]!, lastSeq: Number(lastSeq), cancelRequested: cancel === '1' })
    })
    return states
  }

  async #pollSessions (sessionIds: string[]): Promise<string[]> {
    const client = this.#client()
    return await FREE_SESSIONS.run(client, [this.prefix, ...sessionIds.filter((id) => storable(id, true))]) as string[]
  }

  /** The store's own connection for pub/sub (a subscribed connection can do nothing else), made on the first watch. */
  #subscribe (): void {
    if (this.#subscriber !== null || this.#closed) return
    const subscriber = (this.#connection.acquire(this) as unknown as Redis).duplicate()
    this.#subscriber = subscriber
    // errors are the connection's (it reconnects and subscribes again by itself); the poll covers meanwhile
    subscriber.on('error', noop)
    subscriber.on('message', (_channel: string, message: string) => this.#heard(message))
    // (re)subscribed: what was published before is not heard, so the watchers catch up now
    subscriber.on('ready', () => { void this.#hub.refresh() })
    subscriber.subscribe(this.channel).then(() => this.#hub.refresh(), noop)
  }

  /** `e:<runId>:<lastSeq>`, `c:<runId>` or `s:<sessionId>`, from the scripts above. */
  #heard (message: string): void {
    const body = message.slice(2)
    switch (message[0]) {
      case 'e': {
        const cut = body.lastIndexOf(':')
        this.#hub.events(body.slice(0, cut), Number(body.slice(cut + 1)))
        break
      }
      case 'c': this.#hub.cancel(body); break
      default: this.#hub.sessionFree(body)
    }
  }
}
