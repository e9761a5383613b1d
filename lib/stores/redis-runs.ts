// The Redis run store, shared by every instance on the server. A run is a hash (`run:<id>`) and a list of its
// events (`run-events:<id>`); a session's lock is a key (`run-session:<id>`) naming the run that holds it; sorted
// sets by order of creation (a counter, `runs:seq`) list the runs (all, per session, per agent, per status) and
// `runs:expiring` the ended ones by expiry. Leases (docs/runs.md): a running run's hash names its `owner` and
// `leaseUntil`; `runs:leases` lists the leased runs by `leaseUntil` (so that lapsed ones are a range) and `runs:queue`
// the queued detachable runs by order of creation (what `claim` takes from). Every write is one Lua script, which
// publishes what it changed on the store's channel; each store listens on a connection of its own (a duplicate of
// the client) and polls for what a lost message did not tell.
// The scripts derive the keys of other runs from the prefix: one Redis server, not a Cluster.
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { checkTtl } from './common.js'
import { RUN_POLL_MS, storable } from './run-policy.js'
import type { RunCondition, StoredRun } from './run-policy.js'
import { BackedRunStore } from './run-store.js'
import type { RunBackend, RunEnded, RunFilters, Taken } from './run-store.js'
import { RunSignals } from './run-watch.js'
import type { RunState } from './run-watch.js'
import { RedisScript, RedisStore, subscription } from './redis-connection.js'
import { GroupCommit } from './group-commit.js'
import type { RedisSource, RedisStoreOptions, Subscription } from './redis-connection.js'
import type { NewRun, RunEnd, RunLease, RunRecord, RunSpec, RunStatus, StoredEvent } from './types.js'

export interface RedisRunStoreOptions extends RedisStoreOptions {
  /** how often watchers poll for what a lost message did not tell them (default 1,000 ms) */
  pollIntervalMs?: number
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
  redis.call('ZREM', P .. 'runs:queue', id)
  redis.call('ZREM', P .. 'runs:leases', id)
end
-- the holder of a session, unless it has ended (or is gone): then the lock is free
local function holding (session)
  local holder = redis.call('GET', lockKey(session))
  if holder and active(redis.call('HGET', runKey(holder), 'status')) then return holder end
  return nil
end
-- ARGV[from..to] (to: the last of ARGV, unless given)
local function push (key, from, to)
  to = to or #ARGV
  for i = from, to, 1000 do redis.call('RPUSH', key, unpack(ARGV, i, math.min(i + 999, to))) end
end
-- Whether a run (its status, lastSeq, owner, leaseUntil and cancel, as HMGET gives them) is as the caller read it:
-- ARGV[n..n+4] are the status, then the lastSeq, the owner, the time the lease ended before, the cancel ('1' or '0'),
-- each '' when not checked (see RunCondition in run-policy.ts).
local function meets (run, n)
  if run[1] ~= ARGV[n] then return false end
  if ARGV[n + 1] ~= '' and tonumber(run[2]) ~= tonumber(ARGV[n + 1]) then return false end
  if ARGV[n + 2] ~= '' and run[3] ~= ARGV[n + 2] then return false end
  if ARGV[n + 3] ~= '' and not (run[4] and tonumber(run[4]) < tonumber(ARGV[n + 3])) then return false end
  if ARGV[n + 4] ~= '' and (run[5] == '1') ~= (ARGV[n + 4] == '1') then return false end
  return true
end
local function lease (id, key, owner, untilMs)
  redis.call('HSET', key, 'owner', owner, 'leaseUntil', untilMs)
  redis.call('ZADD', P .. 'runs:leases', untilMs, id)
end
-- queued → running under a lease (its session taken by the caller)
local function startRun (id, key, seq, startedAt, owner, untilMs)
  redis.call('HSET', key, 'status', 'running', 'startedAt', startedAt)
  redis.call('ZREM', P .. 'runs:status:queued', id)
  redis.call('ZREM', P .. 'runs:queue', id)
  redis.call('ZADD', P .. 'runs:status:running', seq, id)
  lease(id, key, owner, untilMs)
end
`

// ARGV: prefix, runId, exclusive, session ('' and hasSession '0' for none), hasSession, agent, status, base, spec,
// ephemeral, startedAt ('' for none), lastSeq, attempt, requestId, traceId, detachable, lease owner ('' for none),
// lease until, channel, tag. Returns the holder when the session is busy.
const CREATE = new RedisScript(LUA_COMMON + `
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
  'spec', ARGV[9], 'ephemeral', ARGV[10], 'attempt', ARGV[13], 'requestId', ARGV[14], 'traceId', ARGV[15], 'detachable', ARGV[16])
if session then redis.call('HSET', key, 'session', session) end
if ARGV[11] ~= '' then redis.call('HSET', key, 'startedAt', ARGV[11]) end
if ARGV[17] ~= '' then lease(id, key, ARGV[17], ARGV[18]) end
list(id, ARGV[6], session, ARGV[7], seq)
if ARGV[7] == 'queued' and ARGV[16] == '1' then
  redis.call('ZADD', P .. 'runs:queue', seq, id)
  redis.call('PUBLISH', ARGV[19], 'q:' .. ARGV[20])
end
return false
`)

// ARGV: prefix, runId, startedAt, lease owner, lease until. Returns { 'gone' }, { 'busy', holder } or { 'started', hash }.
const START = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local queued = redis.call('HMGET', key, 'status', 'session', 'seq')
if queued[1] ~= 'queued' then return { 'gone' } end
if queued[2] then
  local holder = holding(queued[2])
  if holder and holder ~= id then return { 'busy', holder } end
  redis.call('SET', lockKey(queued[2]), id)
end
startRun(id, key, queued[3], ARGV[3], ARGV[4], ARGV[5])
return { 'started', redis.call('HGETALL', key) }
`)

// The oldest queued detachable runs whose session is free (or theirs already), at most limit, each started under the
// lease. ARGV: prefix, lease owner, lease until, startedAt, limit. Returns their hashes.
const CLAIM = new RedisScript(LUA_COMMON + `
local limit = tonumber(ARGV[5])
local claimed = {}
local after = '-inf'
while #claimed < limit do
  local batch = redis.call('ZRANGEBYSCORE', P .. 'runs:queue', after, '+inf', 'WITHSCORES', 'LIMIT', 0, 100)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id = batch[i]
    after = '(' .. batch[i + 1]
    local key = runKey(id)
    local queued = redis.call('HMGET', key, 'status', 'session', 'seq', 'detachable')
    local holder = queued[2] and holding(queued[2])
    if queued[1] ~= 'queued' or queued[4] ~= '1' then
      -- every move out of the queue takes the run out of it: not expected, but never claimed
      redis.call('ZREM', P .. 'runs:queue', id)
    elseif not holder or holder == id then
      if queued[2] then redis.call('SET', lockKey(queued[2]), id) end
      startRun(id, key, queued[3], ARGV[4], ARGV[2], ARGV[3])
      claimed[#claimed + 1] = redis.call('HGETALL', key)
      if #claimed == limit then break end
    end
  end
end
return claimed
`)

// A run that ended is resumed: its next attempt, its log going on (its keys no longer expire) after the event given
// (its next attempt follows its last one's terminal event, after the event that says so), its end forgotten.
// ARGV: prefix, runId, takeSession, startedAt, requestId, traceId, spec, detachable, lease owner ('' for none), lease
// until, channel, the condition (5 fields, see meets), the event. Returns nil when the run is not as the condition
// says, { 'busy', holder } or { 'reopened', hash }.
const REOPEN = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'lastSeq', 'owner', 'leaseUntil', 'cancel', 'session', 'expiring', 'seq', 'attempt')
if not meets(run, 12) then return nil end
if ARGV[3] == '1' and run[6] then
  local holder = holding(run[6])
  if holder then return { 'busy', holder } end
  redis.call('SET', lockKey(run[6]), id)
end
redis.call('RPUSH', eventsKey(id), ARGV[17])
local last = tonumber(run[2]) + 1
redis.call('HSET', key, 'status', 'running', 'attempt', tonumber(run[9]) + 1, 'startedAt', ARGV[4], 'requestId', ARGV[5],
  'traceId', ARGV[6], 'spec', ARGV[7], 'detachable', ARGV[8], 'lastSeq', last)
redis.call('PUBLISH', ARGV[11], 'e:' .. id .. ':' .. last)
redis.call('HDEL', key, 'endedAt', 'result', 'error', 'expiresAt', 'expiring', 'cancel')
if ARGV[9] ~= '' then lease(id, key, ARGV[9], ARGV[10]) end
redis.call('PERSIST', key)
redis.call('PERSIST', eventsKey(id))
redis.call('ZREM', P .. 'runs:expiring', run[7])
redis.call('ZREM', P .. 'runs:status:' .. run[1], id)
redis.call('ZADD', P .. 'runs:status:running', run[8], id)
return { 'reopened', redis.call('HGETALL', key) }
`)

// Appends the batches of a group of runs, in one call (one round trip), with one message naming them all: each one
// only if its run is running under its owner's lease and its log's lastSeq is the one given. ARGV: prefix, channel,
// then for each run: runId, owner, lastSeq, the batch's length, its events. Returns for each run in order its new
// lastSeq, or false (nil) when nothing was appended.
const APPEND_GROUP = new RedisScript(LUA_COMMON + `
local results, told = {}, {}
local i = 3
while i <= #ARGV do
  local id, owner, after, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local from, to = i + 4, i + 3 + n
  i = to + 1
  local key = runKey(id)
  local run = redis.call('HMGET', key, 'status', 'lastSeq', 'owner')
  local result = false
  if run[1] == 'running' and run[3] == owner and tonumber(run[2]) == after then
    push(eventsKey(id), from, to)
    result = after + n
    redis.call('HSET', key, 'lastSeq', result)
    told[#told + 1] = { id, result }
  end
  results[#results + 1] = result
end
if #told > 0 then redis.call('PUBLISH', ARGV[2], 'g:' .. cjson.encode(told)) end
return results
`)

// Ends a run as the condition says it is with its last events, gives its session back and its lease up.
// ARGV: prefix, runId, channel, tag, the condition (5 fields, see meets), status, endedAt, result, error ('' for
// none), expiresAt, ttlMs, then the events. Returns { hash, freed } (freed: 1 the session was given back, 2 and runs
// are queued), nil when the run is not as the condition says.
const END = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'lastSeq', 'owner', 'leaseUntil', 'cancel', 'session', 'agent', 'seq')
if not meets(run, 5) then return nil end
local last = tonumber(run[2])
if #ARGV > 15 then
  push(eventsKey(id), 16)
  last = last + #ARGV - 15
end
local member = field(id) .. field(run[7]) .. field(ARGV[10])
if run[6] then member = member .. field(run[6]) end
redis.call('HSET', key, 'status', ARGV[10], 'endedAt', ARGV[11], 'lastSeq', last, 'expiresAt', ARGV[14], 'expiring', member)
redis.call('HDEL', key, 'owner', 'leaseUntil')
if ARGV[12] ~= '' then redis.call('HSET', key, 'result', ARGV[12]) end
if ARGV[13] ~= '' then redis.call('HSET', key, 'error', ARGV[13]) end
redis.call('PEXPIRE', key, ARGV[15])
redis.call('PEXPIRE', eventsKey(id), ARGV[15])
redis.call('ZREM', P .. 'runs:status:' .. run[1], id)
redis.call('ZREM', P .. 'runs:queue', id)
redis.call('ZREM', P .. 'runs:leases', id)
redis.call('ZADD', P .. 'runs:status:' .. ARGV[10], run[8], id)
redis.call('ZADD', P .. 'runs:expiring', ARGV[14], member)
redis.call('PUBLISH', ARGV[3], 'e:' .. id .. ':' .. last)
local freed = 0
if run[6] and redis.call('GET', lockKey(run[6])) == id then
  redis.call('DEL', lockKey(run[6]))
  redis.call('PUBLISH', ARGV[3], 's:' .. run[6])
  freed = 1
  -- a queued run may have waited for this session
  if redis.call('ZCARD', P .. 'runs:queue') > 0 then
    redis.call('PUBLISH', ARGV[3], 'q:' .. ARGV[4])
    freed = 2
  end
end
return { redis.call('HGETALL', key), freed }
`)

// A running run goes back to the queue (its next attempt, its session kept, no lease) with the event given.
// ARGV: prefix, runId, channel, tag, the condition (5 fields, see meets), the event. Returns the hash, nil when the
// run is not as the condition says.
const REQUEUE = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'lastSeq', 'owner', 'leaseUntil', 'cancel', 'attempt', 'seq')
if not meets(run, 5) then return nil end
redis.call('RPUSH', eventsKey(id), ARGV[10])
local last = tonumber(run[2]) + 1
redis.call('HSET', key, 'status', 'queued', 'attempt', tonumber(run[6]) + 1, 'lastSeq', last, 'detachable', '1')
redis.call('HDEL', key, 'startedAt', 'owner', 'leaseUntil', 'cancel')
redis.call('ZREM', P .. 'runs:leases', id)
redis.call('ZREM', P .. 'runs:status:running', id)
redis.call('ZADD', P .. 'runs:status:queued', run[7], id)
redis.call('ZADD', P .. 'runs:queue', run[7], id)
redis.call('PUBLISH', ARGV[3], 'e:' .. id .. ':' .. last)
redis.call('PUBLISH', ARGV[3], 'q:' .. ARGV[4])
return redis.call('HGETALL', key)
`)

// ARGV: prefix, owner, until, then run ids. Returns the ids whose lease owner still holds (now until then).
const RENEW = new RedisScript(LUA_COMMON + `
local renewed = {}
for i = 4, #ARGV do
  local key = runKey(ARGV[i])
  local run = redis.call('HMGET', key, 'status', 'owner')
  if run[1] == 'running' and run[2] == ARGV[2] then
    lease(ARGV[i], key, ARGV[2], ARGV[3])
    renewed[#renewed + 1] = ARGV[i]
  end
end
return renewed
`)

// ARGV: prefix, now, limit. Returns the hashes of running runs whose lease ended before now, soonest ended first.
const LAPSED = new RedisScript(LUA_COMMON + `
local found = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'runs:leases', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))) do
  local key = runKey(id)
  if redis.call('HGET', key, 'status') == 'running' then
    found[#found + 1] = redis.call('HGETALL', key)
  else
    -- every end and requeue takes the run out of the set: not expected, but never reported
    redis.call('ZREM', P .. 'runs:leases', id)
  end
end
return found
`)

// ARGV: prefix, runId, channel. Returns the hash, or nil when the run is not running.
const REQUEST_CANCEL = new RedisScript(LUA_COMMON + `
local key = runKey(ARGV[2])
if redis.call('HGET', key, 'status') ~= 'running' then return nil end
redis.call('HSET', key, 'cancel', '1')
redis.call('PUBLISH', ARGV[3], 'c:' .. ARGV[2])
return redis.call('HGETALL', key)
`)

// ARGV: prefix, then session ids. Returns those whose lock is free.
const FREE_SESSIONS = new RedisScript(LUA_COMMON + `
local free = {}
for i = 2, #ARGV do
  if not holding(ARGV[i]) then free[#free + 1] = ARGV[i] end
end
return free
`)

// ARGV: prefix, now, batch. Deletes at most batch runs whose expiry passed (Redis may have dropped their keys
// already: they are unlisted all the same) and returns how many.
const PURGE = new RedisScript(LUA_COMMON + `
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

// KEYS: none. ARGV: prefix, runId, now. Deletes an ended run, unexpired, with its log and its places in the lists.
const DELETE = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'agent', 'session', 'expiring', 'expiresAt')
if not run[1] or active(run[1]) or (run[5] and tonumber(run[5]) <= tonumber(ARGV[3])) then return 0 end
redis.call('DEL', key, eventsKey(id))
unlist(id, run[2], run[3], run[1])
if run[4] then redis.call('ZREM', P .. 'runs:expiring', run[4]) end
return 1
`)

// KEYS: none. ARGV: prefix, runId, first index, last index, now, budget (0: none). The events of the page within the
// budget (withinBudget, run-policy.ts: an event goes while the data of those before it are under it), as stored; none
// for a run absent or expired.
const EVENTS = new RedisScript(LUA_COMMON + `
local run = redis.call('HMGET', runKey(ARGV[2]), 'status', 'expiresAt')
if not run[1] or (run[2] and tonumber(run[2]) <= tonumber(ARGV[5])) then return {} end
local page, taken, budget = {}, 0, tonumber(ARGV[6])
if budget <= 0 then budget = math.huge end
for _, item in ipairs(redis.call('LRANGE', eventsKey(ARGV[2]), ARGV[3], ARGV[4])) do
  if taken >= budget then break end
  page[#page + 1] = item
  local colon = string.find(item, ':', 1, true)
  taken = taken + #item - colon - tonumber(string.sub(item, 1, colon - 1))
end
return page
`)

type Hash = Record<string, string>

/** The parts of a record that never change after create(), stored as one JSON field. */
type RunBase = Pick<RunRecord, 'runId' | 'agent' | 'sessionId' | 'principal' | 'background' | 'createdAt' | 'scheduleId' | 'scheduledFor'>

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

/** One run's batch waiting for its group's script. */
interface Appending {
  client: Redis
  runId: string
  events: readonly StoredEvent[]
  owner: string
  lastSeq: number
}

/** A write's condition as the scripts take it (see meets): five fields, '' where not checked. */
function conditionArgs (condition: RunCondition): Array<string | number> {
  return [
    condition.status, condition.lastSeq ?? '', condition.owner ?? '', condition.lapsedBefore ?? '',
    condition.cancelRequested === undefined ? '' : condition.cancelRequested ? '1' : '0'
  ]
}

function toState (hash: Hash): StoredRun {
  return {
    record: toRecord(hash),
    detachable: hash.detachable === '1',
    cancelRequested: hash.cancel === '1',
    lease: hash.status === 'running' && hash.owner !== undefined && hash.leaseUntil !== undefined ? { owner: hash.owner, until: Number(hash.leaseUntil) } : null
  }
}

/** detachable, the lease's owner ('' for none) and until: as CREATE and REOPEN take them. */
function leaseArgs (run: NewRun): Array<string | number> {
  return [run.detachable ? '1' : '0', run.lease?.owner ?? '', run.lease?.until ?? '']
}

class RedisRunBackend extends RedisStore implements RunBackend {
  readonly name = 'Redis'
  readonly text = 'utf8'
  /** the pub/sub channel of every instance using this prefix */
  readonly channel: string
  readonly signals: RunSignals
  #subscriber: Subscription | null = null
  /** names this store in what it publishes of the queue: its own messages it has told its watchers already */
  readonly #tag = randomUUID()
  /**
   * The appends that come while one is in flight go together in the next one: every run's in one script call, with
   * one message (see docs/stores.md, "Group commit").
   */
  readonly appends = new GroupCommit<Appending, number | null>({
    write: async (items) => this.#appendGroup(items),
    key: (item) => item.runId,
    // a script call costs mostly per call and per run: a run streaming a delta per tick is written a few at a time
    windowMs: 5
  })

  constructor (source: RedisSource, options: RedisRunStoreOptions = {}) {
    super(source, options)
    this.channel = `${this.prefix}runs`
    this.signals = new RunSignals({
      poll: async (runIds) => this.#pollRuns(runIds),
      pollSessions: async (sessionIds) => this.#pollSessions(sessionIds),
      pollIntervalMs: options.pollIntervalMs === undefined ? RUN_POLL_MS : checkTtl('pollIntervalMs', options.pollIntervalMs),
      // the server is away: the next tick tries again
      onPollError: noop
    })
  }

  #client (): Redis {
    return this.client() as Redis
  }

  #key (id: string): string {
    return `${this.prefix}run:${id}`
  }

  check (): void {
    this.#client()
  }

  async insert (run: NewRun, takeSession: boolean): Promise<string | null> {
    const { record } = run
    const base: RunBase = {
      runId: record.runId,
      agent: record.agent,
      sessionId: record.sessionId,
      principal: record.principal,
      background: record.background,
      createdAt: record.createdAt
    }
    if (record.scheduleId !== undefined) {
      base.scheduleId = record.scheduleId
      base.scheduledFor = record.scheduledFor!
    }
    return await CREATE.run(this.#client(), [
      this.prefix, record.runId, takeSession ? '1' : '0', record.sessionId ?? '', record.sessionId === null ? '0' : '1',
      record.agent, record.status, JSON.stringify(base), JSON.stringify(run.spec), run.ephemeral ? '1' : '0', record.startedAt ?? '',
      record.lastSeq, record.attempt, record.requestId, record.traceId, ...leaseArgs(run), this.channel, this.#tag
    ]) as string | null
  }

  async read (runId: string): Promise<StoredRun | null> {
    const hash = await this.#client().hgetall(this.#key(runId))
    return live(hash, Date.now()) ? toState(hash) : null
  }

  async spec (runId: string): Promise<RunSpec | null> {
    const [spec, expiresAt] = await this.#client().hmget(this.#key(runId), 'spec', 'expiresAt')
    if (spec === null || (expiresAt !== null && Number(expiresAt) <= Date.now())) return null
    return JSON.parse(spec) as RunSpec
  }

  async events (runId: string, afterSeq: number, limit: number, budget: number): Promise<StoredEvent[]> {
    const page = await EVENTS.run(this.#client(), [this.prefix, runId, afterSeq, afterSeq + limit - 1, Date.now(), budget === Infinity ? 0 : budget]) as string[]
    return page.map((text, i) => decodeEvent(afterSeq + 1 + i, text))
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string, lastSeq: number, urgent = false): Promise<number | null> {
    // urgent (a durable step waits for it): written at the end of this turn, with every batch the turn adds, not after the window
    return this.appends.add({ client: this.#client(), runId, events, owner, lastSeq }, urgent)
  }

  async #appendGroup (items: readonly Appending[]): Promise<Array<number | null>> {
    const args: Array<string | number> = [this.prefix, this.channel]
    for (const { runId, events, owner, lastSeq } of items) {
      args.push(runId, owner, lastSeq, events.length)
      for (const event of events) args.push(encodeEvent(event))
    }
    return await APPEND_GROUP.run(items[0]!.client, args) as Array<number | null>
  }

  async end (runId: string, condition: RunCondition, events: readonly StoredEvent[], end: RunEnd, expiresAt: number): Promise<RunEnded | null> {
    const result = await END.run(this.#client(), [
      this.prefix, runId, this.channel, this.#tag, ...conditionArgs(condition), end.status, end.endedAt,
      end.result === undefined ? '' : JSON.stringify(end.result), end.error === undefined ? '' : JSON.stringify(end.error),
      expiresAt, Math.max(1, Math.ceil(expiresAt - Date.now())), ...events.map(encodeEvent)
    ]) as [string[], number] | null
    if (result === null) return null
    const [hash, freed] = result
    const record = toRecord(pairs(hash))
    return { record, freed: freed > 0 ? record.sessionId : null, queueWaits: freed === 2 }
  }

  async start (runId: string, startedAt: string, lease: RunLease): Promise<Taken | null> {
    const [outcome, value] = await START.run(this.#client(), [this.prefix, runId, startedAt, lease.owner, lease.until]) as [string, string | string[]]
    if (outcome === 'gone') return null
    return outcome === 'busy' ? { holder: value as string } : { record: toRecord(pairs(value as string[])) }
  }

  async requeue (runId: string, condition: RunCondition, event: StoredEvent): Promise<RunRecord | null> {
    const hash = await REQUEUE.run(this.#client(), [this.prefix, runId, this.channel, this.#tag, ...conditionArgs(condition), encodeEvent(event)]) as string[] | null
    return hash === null ? null : toRecord(pairs(hash))
  }

  async reopen (runId: string, condition: RunCondition, event: StoredEvent, run: NewRun, takeSession: boolean): Promise<Taken | null> {
    const { record } = run
    const result = await REOPEN.run(this.#client(), [
      this.prefix, runId, takeSession ? '1' : '0', record.startedAt!, record.requestId, record.traceId, JSON.stringify(run.spec),
      ...leaseArgs(run), this.channel, ...conditionArgs(condition), encodeEvent(event)
    ]) as [string, string | string[]] | null
    /* c8 ignore next: the run changed between the read and the script, a race no test provokes on purpose */
    if (result === null) return null
    return result[0] === 'busy' ? { holder: result[1] as string } : { record: toRecord(pairs(result[1] as string[])) }
  }

  async requestCancel (runId: string): Promise<RunRecord | null> {
    const hash = await REQUEST_CANCEL.run(this.#client(), [this.prefix, runId, this.channel]) as string[] | null
    return hash === null ? null : toRecord(pairs(hash))
  }

  async claim (lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]> {
    const claimed = await CLAIM.run(this.#client(), [this.prefix, lease.owner, lease.until, startedAt, limit]) as string[][]
    return claimed.map((flat) => toRecord(pairs(flat)))
  }

  async renew (owner: string, runIds: readonly string[], until: number): Promise<string[]> {
    return await RENEW.run(this.#client(), [this.prefix, owner, until, ...runIds]) as string[]
  }

  async lapsed (now: number, limit: number): Promise<StoredRun[]> {
    const found = await LAPSED.run(this.#client(), [this.prefix, now, limit]) as string[][]
    return found.map((flat) => toState(pairs(flat)))
  }

  /**
   * Pages through the most selective sorted set the filters allow, checking each run against all of them. A
   * member whose run is gone (expired) or no longer belongs to that set is removed from it on the way. The
   * principal has no set of its own: it is checked on the runs the other filters read (an admin search).
   */
  async page (filters: RunFilters, before: string | null, limit: number): Promise<Array<{ record: RunRecord, place: string }>> {
    const client = this.#client()
    const { sessionId, agent, status, principal } = filters
    const [index, belongs] = sessionId !== undefined
      ? [`runs:session:${sessionId}`, (r: RunRecord) => r.sessionId === sessionId]
      : agent !== undefined
        ? [`runs:agent:${agent}`, (r: RunRecord) => r.agent === agent]
        : status !== undefined
          ? [`runs:status:${status}`, (r: RunRecord) => r.status === status]
          : ['runs', () => true]
    const matches = (r: RunRecord): boolean => (agent === undefined || r.agent === agent) && (status === undefined || r.status === status) &&
      (principal === undefined || r.principal === principal)
    const key = this.prefix + index
    const found: Array<{ record: RunRecord, place: string }> = []
    const stale: string[] = []
    const now = Date.now()
    for (let offset = 0; found.length < limit; offset += limit) {
      const flat = await client.zrevrangebyscore(key, before === null ? '+inf' : `(${before}`, '-inf', 'WITHSCORES', 'LIMIT', offset, limit)
      const candidates: Array<{ id: string, place: string }> = []
      for (let i = 0; i < flat.length; i += 2) candidates.push({ id: flat[i]!, place: flat[i + 1]! })
      const pipeline = client.pipeline()
      for (const { id } of candidates) pipeline.hgetall(this.#key(id))
      const replies = candidates.length === 0 ? [] : await pipeline.exec() as Array<[Error | null, Hash]>
      replies.forEach(([, hash], i) => {
        const { id, place } = candidates[i]!
        const record = live(hash, now) ? toRecord(hash) : null
        if (record === null || !belongs(record)) stale.push(id)
        else if (matches(record) && found.length < limit) found.push({ record, place })
      })
      if (flat.length < limit * 2) break
    }
    if (stale.length > 0) await client.zrem(key, ...stale)
    return found
  }

  async remove (runId: string): Promise<boolean> {
    return await DELETE.run(this.#client(), [this.prefix, runId, Date.now()]) === 1
  }

  async purge (now: number, batch: number): Promise<number> {
    return await PURGE.run(this.#client(), [this.prefix, now, batch]) as number
  }

  protected override stop (): void {
    this.signals.close()
    this.#subscriber?.disconnect()
    this.#subscriber = null
  }

  async #pollRuns (runIds: string[]): Promise<RunState[]> {
    const client = this.#client()
    const ids = runIds.filter((id) => storable(id, this.text))
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
    return await FREE_SESSIONS.run(this.#client(), [this.prefix, ...sessionIds.filter((id) => storable(id, this.text))]) as string[]
  }

  /** The store's own connection for pub/sub, made on the first watch. */
  listen (): void {
    if (this.#subscriber !== null || this.closed) return
    this.#subscriber = subscription(this.#client(), this.channel, (message) => this.signals.heard(message, this.#tag), () => this.#catchUp())
  }

  #catchUp (): void {
    void this.signals.refresh()
    this.signals.queue()
  }
}

export class RedisRunStore extends BackedRunStore {
  readonly #redis: RedisRunBackend

  constructor (source: RedisSource, options: RedisRunStoreOptions = {}) {
    const backend = new RedisRunBackend(source, options)
    super(backend)
    this.#redis = backend
  }

  /** the pub/sub channel of every instance using this prefix */
  get channel (): string {
    return this.#redis.channel
  }

  /** Groups of appends written so far (each one script call): what the tests and the bench count. */
  get groupWrites (): number {
    return this.#redis.appends.writes
  }

  get prefix (): string {
    return this.#redis.prefix
  }

  get ownsConnection (): boolean {
    return this.#redis.ownsConnection
  }

  async probe (): Promise<void> {
    await this.#redis.probe()
  }

  /** The service's logger, for the connection errors of a client opened from a URL. */
  useLogger (log: FastifyBaseLogger): void {
    this.#redis.useLogger(log)
  }
}
