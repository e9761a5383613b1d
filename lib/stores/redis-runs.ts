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
import type { Redis } from 'ioredis'
import { RunLeaseLostError, RunLogConflictError, RunLogGapError } from '../core/errors.js'
import {
  cancelledFinish, cancelledRequeue, checkLimit, checkTtl, decodeSeqCursor, encodeSeqCursor, endedBeforeStartEvent, requeuedEvent, toMs
} from './common.js'
import { MAX_RUN_LIST_LIMIT, RUN_POLL_MS, checkBatch, checkEvents, checkNewRun, checkText, isEnded, storable } from './run-common.js'
import { RunWatchHub } from './run-watch.js'
import type { RunState } from './run-watch.js'
import { RedisScript, RedisStore } from './redis-connection.js'
import { GroupCommit } from './group-commit.js'
import type { RedisSource, RedisStoreOptions } from './redis-connection.js'
import type {
  CancelRunResult, CreateRunResult, LapsedRun, NewRun, ReopenRunResult, RunChange, RunEnd, RunLease, RunListQuery, RunPage, RunRecord,
  RunSpec, RunStatus, RunStore, StartRunResult, StoredEvent
} from './types.js'

export interface RedisRunStoreOptions extends RedisStoreOptions {
  /** how often watchers poll for what a lost message did not tell them (default 1,000 ms) */
  pollIntervalMs?: number
}

const BACKEND = 'Redis'
/** How many times a read-then-write (cancel, requeue, abandon) reads again while the run changes under it (it only moves forward). */
const READ_ATTEMPTS = 5

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
-- Of the events ARGV[from..to] (seqs from \`first\` on; to: the last of ARGV, unless given), those the log of id (its
-- lastSeq \`last\`) does not hold yet: a retried write brings events the log holds already, acknowledged again when
-- they are the same (see unheldEvents in common.ts). Returns the index in ARGV of the first event to push (past
-- \`to\`: none), or { last } when the rest does not follow the log, or { 'conflict', seq } for a held seq with another event.
local function unheld (id, last, first, from, to)
  local n = (to or #ARGV) - from + 1
  if first < 1 then return { last } end
  local skip = 0
  if first <= last then
    skip = math.min(n, last - first + 1)
    local held = redis.call('LRANGE', eventsKey(id), first - 1, first + skip - 2)
    for i = 1, skip do
      if held[i] ~= ARGV[from + i - 1] then return { 'conflict', first + i - 1 } end
    end
  end
  if skip < n and first + skip ~= last + 1 then return { last } end
  return from + skip
end
-- a running run held by the owner \`value\` (kind 'owner'), or whose lease ended before the time \`value\` ('lapsed')
local function held (status, owner, untilMs, kind, value)
  if status ~= 'running' then return false end
  if kind == 'owner' then return owner == value end
  return untilMs and tonumber(untilMs) < tonumber(value)
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
// ARGV: prefix, runId, exclusive, now, startedAt, requestId, traceId, spec, detachable, lease owner ('' for none), lease until,
// channel, lastSeq and attempt as read, the event. Returns { 'not_found' }, { 'in_progress' }, { 'busy', holder },
// { 'again' } when the run changed since it was read, or { 'reopened', hash }.
const REOPEN = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'session', 'expiresAt', 'expiring', 'seq', 'attempt', 'lastSeq')
if not run[1] or (run[3] and tonumber(run[3]) <= tonumber(ARGV[4])) then return { 'not_found' } end
if active(run[1]) then return { 'in_progress' } end
if tonumber(run[7]) ~= tonumber(ARGV[13]) or tonumber(run[6]) ~= tonumber(ARGV[14]) then return { 'again' } end
if ARGV[3] == '1' and run[2] then
  local holder = holding(run[2])
  if holder then return { 'busy', holder } end
  redis.call('SET', lockKey(run[2]), id)
end
redis.call('RPUSH', eventsKey(id), ARGV[15])
local last = tonumber(run[7]) + 1
redis.call('HSET', key, 'status', 'running', 'attempt', tonumber(run[6]) + 1, 'startedAt', ARGV[5], 'requestId', ARGV[6],
  'traceId', ARGV[7], 'spec', ARGV[8], 'detachable', ARGV[9], 'lastSeq', last)
redis.call('PUBLISH', ARGV[12], 'e:' .. id .. ':' .. last)
redis.call('HDEL', key, 'endedAt', 'result', 'error', 'expiresAt', 'expiring', 'cancel')
if ARGV[10] ~= '' then lease(id, key, ARGV[10], ARGV[11]) end
redis.call('PERSIST', key)
redis.call('PERSIST', eventsKey(id))
redis.call('ZREM', P .. 'runs:expiring', run[4])
redis.call('ZREM', P .. 'runs:status:' .. run[1], id)
redis.call('ZADD', P .. 'runs:status:running', run[5], id)
return { 'reopened', redis.call('HGETALL', key) }
`)

// Appends the batches of a group of runs, in one call (one round trip), with one message naming them all; only the
// lease's owner appends to a running run. ARGV: prefix, channel, then for each run: runId, owner, the batch's first
// seq, its length, its events. Returns for each run in order its new lastSeq, { lastSeq } when the batch does not
// follow the log, { 'conflict', seq } (see unheld), 'lost' when the run is not running under owner's lease, false
// (nil) when the run is unknown or ended.
const APPEND_GROUP = new RedisScript(LUA_COMMON + `
local results, told = {}, {}
local i = 3
while i <= #ARGV do
  local id, owner, first, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local from, to = i + 4, i + 3 + n
  i = to + 1
  local key = runKey(id)
  local run = redis.call('HMGET', key, 'status', 'lastSeq', 'owner')
  local result = false
  if active(run[1]) then
    if run[1] ~= 'running' or run[3] ~= owner then
      result = 'lost'
    else
      local last = tonumber(run[2])
      result = last
      if n > 0 then
        local start = unheld(id, last, first, from, to)
        if type(start) == 'table' then
          result = start
        elseif start <= to then
          push(eventsKey(id), start, to)
          last = last + to - start + 1
          redis.call('HSET', key, 'lastSeq', last)
          told[#told + 1] = id
          told[#told + 1] = last
          result = last
        end
      end
    end
  end
  results[#results + 1] = result
end
if #told > 0 then redis.call('PUBLISH', ARGV[2], 'g:' .. cjson.encode(told)) end
return results
`)

// Ends a run whose status is ARGV[5] with its last events, gives its session back and its lease up.
// ARGV: prefix, runId, channel, tag, from, condition ('none'; 'owner': the lease is ARGV[7]'s; 'lapsed': the lease
// ended before ARGV[7]), its value, the batch's first seq, status, endedAt, result, error ('' for none), expiresAt,
// ttlMs, then the events. Returns { hash, freed } (freed: 1 the session was given back, 2 and runs are queued),
// { lastSeq } when the batch does not follow the log, { 'conflict', seq } (see unheld), { 'cancel', traceId } when
// a running run's cancel was asked for and the end given is not the cancelled one (the caller ends it so: see
// cancelledFinish), 'lost' when the run is not ARGV[7]'s, nil when the run's status is not ARGV[5] (or its lease did
// not lapse).
const END = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'lastSeq', 'session', 'agent', 'seq', 'owner', 'leaseUntil', 'cancel', 'traceId')
if run[1] ~= ARGV[5] then return nil end
if ARGV[6] == 'owner' and run[6] ~= ARGV[7] then return 'lost' end
if ARGV[6] == 'lapsed' and not held(run[1], run[6], run[7], 'lapsed', ARGV[7]) then return nil end
if run[1] == 'running' and run[8] == '1' and ARGV[9] ~= 'cancelled' then return { 'cancel', run[9] } end
local last = tonumber(run[2])
if #ARGV > 14 then
  local from = unheld(id, last, tonumber(ARGV[8]), 15)
  if type(from) == 'table' then return from end
  if from <= #ARGV then
    push(eventsKey(id), from)
    last = last + #ARGV - from + 1
  end
end
local member = field(id) .. field(run[4]) .. field(ARGV[9])
if run[3] then member = member .. field(run[3]) end
redis.call('HSET', key, 'status', ARGV[9], 'endedAt', ARGV[10], 'lastSeq', last, 'expiresAt', ARGV[13], 'expiring', member)
redis.call('HDEL', key, 'owner', 'leaseUntil')
if ARGV[11] ~= '' then redis.call('HSET', key, 'result', ARGV[11]) end
if ARGV[12] ~= '' then redis.call('HSET', key, 'error', ARGV[12]) end
redis.call('PEXPIRE', key, ARGV[14])
redis.call('PEXPIRE', eventsKey(id), ARGV[14])
redis.call('ZREM', P .. 'runs:status:' .. run[1], id)
redis.call('ZREM', P .. 'runs:queue', id)
redis.call('ZREM', P .. 'runs:leases', id)
redis.call('ZADD', P .. 'runs:status:' .. ARGV[9], run[5], id)
redis.call('ZADD', P .. 'runs:expiring', ARGV[13], member)
redis.call('PUBLISH', ARGV[3], 'e:' .. id .. ':' .. last)
local freed = 0
if run[3] and redis.call('GET', lockKey(run[3])) == id then
  redis.call('DEL', lockKey(run[3]))
  redis.call('PUBLISH', ARGV[3], 's:' .. run[3])
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
// ARGV: prefix, runId, channel, tag, condition ('owner' or 'lapsed', as END's), its value, lastSeq and attempt as
// read, the event. Returns the hash, 'again' when the run changed since it was read, 'cancel' when its cancel was
// asked for (nothing written: the caller ends it cancelled, see cancelledRequeue), nil when the condition fails.
const REQUEUE = new RedisScript(LUA_COMMON + `
local id = ARGV[2]
local key = runKey(id)
local run = redis.call('HMGET', key, 'status', 'owner', 'leaseUntil', 'lastSeq', 'attempt', 'seq', 'cancel')
if not held(run[1], run[2], run[3], ARGV[5], ARGV[6]) then return nil end
if tonumber(run[4]) ~= tonumber(ARGV[7]) or tonumber(run[5]) ~= tonumber(ARGV[8]) then return 'again' end
if run[7] == '1' then return 'cancel' end
redis.call('RPUSH', eventsKey(id), ARGV[9])
local last = tonumber(run[4]) + 1
redis.call('HSET', key, 'status', 'queued', 'attempt', tonumber(run[5]) + 1, 'lastSeq', last, 'detachable', '1')
redis.call('HDEL', key, 'startedAt', 'owner', 'leaseUntil', 'cancel')
redis.call('ZREM', P .. 'runs:leases', id)
redis.call('ZREM', P .. 'runs:status:running', id)
redis.call('ZADD', P .. 'runs:status:queued', run[6], id)
redis.call('ZADD', P .. 'runs:queue', run[6], id)
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
  if held(run[1], run[2], false, 'owner', ARGV[2]) then
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

/** A batch the scripts refused: { lastSeq } when it does not follow the log, { 'conflict', seq } (see `unheld`). */
type Refusal = [number] | ['conflict', number]

/** What APPEND_GROUP answers for a run: the new lastSeq, a refusal, 'lost', or null (the run is unknown or ended). */
type AppendResult = number | Refusal | 'lost' | null

/** One run's batch waiting for its group's script. */
interface Appending {
  client: Redis
  runId: string
  events: readonly StoredEvent[]
  owner: string
}

/** The error of a refused batch. */
function refused (runId: string, refusal: Refusal, events: readonly StoredEvent[]): Error {
  return refusal.length === 2 ? new RunLogConflictError(runId, refusal[1]) : new RunLogGapError(runId, refusal[0] + 1, events[0]!.seq)
}

/** What a write asks of a run's lease: nothing, to be `owner`'s, or to have lapsed before a time (epoch ms). */
type LeaseCondition = ['none', ''] | ['owner', string] | ['lapsed', string]

/** As the scripts' `held`: running, and its lease `owner`'s or lapsed before the time given. */
function held (hash: Hash, [kind, value]: LeaseCondition): boolean {
  if (hash.status !== 'running') return false
  return kind === 'owner' ? hash.owner === value : Number(hash.leaseUntil) < Number(value)
}

/** detachable, the lease's owner ('' for none) and until: as CREATE and REOPEN take them. */
function leaseArgs (run: NewRun): Array<string | number> {
  return [run.detachable ? '1' : '0', run.lease?.owner ?? '', run.lease?.until ?? '']
}

export class RedisRunStore extends RedisStore implements RunStore {
  /** the pub/sub channel of every instance using this prefix */
  readonly channel: string
  readonly #hub: RunWatchHub
  #subscriber: Redis | null = null
  readonly #queueWatchers = new Set<() => void>()
  /** names this store in what it publishes of the queue: its own messages it has told its watchers already */
  readonly #tag = randomUUID()
  /**
   * The appends that come while one is in flight go together in the next one: every run's in one script call, with
   * one message (see docs/stores.md, "Group commit").
   */
  readonly #appends = new GroupCommit<Appending, AppendResult>({
    write: async (items) => this.#appendGroup(items),
    key: (item) => item.runId,
    // a script call costs mostly per call and per run: a run streaming a delta per tick is written a few at a time
    windowMs: 5
  })

  constructor (source: RedisSource, options: RedisRunStoreOptions = {}) {
    super(source, options)
    this.channel = `${this.prefix}runs`
    this.#hub = new RunWatchHub({
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
      record.lastSeq, record.attempt, record.requestId, record.traceId, ...leaseArgs(run), this.channel, this.#tag
    ]) as string | null
    if (holder !== null) return { outcome: 'session_busy', holder }
    if (record.status === 'queued' && run.detachable) this.#notifyQueue()
    return { outcome: 'created' }
  }

  async reopen (run: NewRun, options: { exclusive: boolean }): Promise<ReopenRunResult> {
    const { record } = run
    toMs('startedAt', record.startedAt!)
    const client = this.#client()
    if (!storable(record.runId, true)) return { outcome: 'not_found' }
    checkText(BACKEND, true, 'requestId', record.requestId)
    checkText(BACKEND, true, 'traceId', record.traceId)
    // read, then change only if the run is still as read (its marker event is made from what was read)
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const [lastSeq, runAttempt] = await client.hmget(this.#key(record.runId), 'lastSeq', 'attempt')
      const marker = requeuedEvent({ lastSeq: Number(lastSeq) }, Number(runAttempt) + 1, 'RESUMED')
      const [outcome, value] = await REOPEN.run(client, [
        this.prefix, record.runId, options.exclusive ? '1' : '0', Date.now(), record.startedAt!, record.requestId, record.traceId,
        JSON.stringify(run.spec), ...leaseArgs(run), this.channel, lastSeq ?? '', runAttempt ?? '', encodeEvent(marker)
      ]) as [string, string | string[]]
      switch (outcome) {
        /* c8 ignore next: the run changed between the read and the script, a race no test provokes on purpose */
        case 'again': continue
        case 'not_found': return { outcome: 'not_found' }
        case 'in_progress': return { outcome: 'in_progress' }
        case 'busy': return { outcome: 'session_busy', holder: value as string }
        default: {
          const reopened = toRecord(pairs(value as string[]))
          this.#hub.events(reopened.runId, reopened.lastSeq)
          return { outcome: 'reopened', record: reopened }
        }
      }
    }
    /* c8 ignore next 2: the run changed under every attempt, a race no test provokes on purpose */
    throw new Error(`run ${JSON.stringify(record.runId)} changed ${READ_ATTEMPTS} times during one reopen`)
  }

  async start (runId: string, startedAt: string, lease: RunLease): Promise<StartRunResult> {
    toMs('startedAt', startedAt)
    const client = this.#client()
    if (!storable(runId, true)) return { outcome: 'gone' }
    const [outcome, value] = await START.run(client, [this.prefix, runId, startedAt, lease.owner, lease.until]) as [string, string | string[]]
    if (outcome === 'gone') return { outcome: 'gone' }
    if (outcome === 'busy') return { outcome: 'session_busy', holder: value as string }
    return { outcome: 'started', record: toRecord(pairs(value as string[])) }
  }

  async claim (lease: RunLease, startedAt: string, limit: number): Promise<RunRecord[]> {
    toMs('startedAt', startedAt)
    const claimed = await CLAIM.run(this.#client(), [this.prefix, lease.owner, lease.until, startedAt, limit]) as string[][]
    return claimed.map((flat) => toRecord(pairs(flat)))
  }

  async append (runId: string, events: readonly StoredEvent[], owner: string): Promise<void> {
    const client = this.#client()
    if (!storable(runId, true)) return
    checkBatch(runId, events)
    checkEvents(BACKEND, true, events)
    // an empty batch is sent all the same: a writer that lost the lease hears it
    const result = await this.#appends.add({ client, runId, events, owner })
    if (result === 'lost') throw new RunLeaseLostError(runId)
    if (typeof result === 'number') this.#hub.events(runId, result)
    else if (result !== null) throw refused(runId, result, events)
  }

  /** Groups of appends written so far (each one script call): what the tests and the bench count. */
  get groupWrites (): number {
    return this.#appends.writes
  }

  async #appendGroup (items: readonly Appending[]): Promise<AppendResult[]> {
    const args: Array<string | number> = [this.prefix, this.channel]
    for (const { runId, events, owner } of items) {
      args.push(runId, owner, events.length === 0 ? 0 : events[0]!.seq, events.length)
      for (const event of events) args.push(encodeEvent(event))
    }
    return await APPEND_GROUP.run(items[0]!.client, args) as AppendResult[]
  }

  /**
   * Ends a run whose status is `from` (and whose lease is as `condition` says): the record, null when its status is
   * not `from` (or its lease did not lapse), or the refusal of a batch that does not follow the log. A running run
   * whose cancel was asked for ends cancelled (see cancelledFinish). Throws when it is not the owner's.
   */
  async #end (client: Redis, runId: string, from: RunStatus, condition: LeaseCondition, events: readonly StoredEvent[], end: RunEnd, retentionMs: number): Promise<RunRecord | { refusal: Refusal } | null> {
    const endedMs = toMs('endedAt', end.endedAt)
    const expiresAt = endedMs + retentionMs
    const result = await END.run(client, [
      this.prefix, runId, this.channel, this.#tag, from, ...condition, events.length === 0 ? 0 : events[0]!.seq, end.status,
      end.endedAt, end.result === undefined ? '' : JSON.stringify(end.result), end.error === undefined ? '' : JSON.stringify(end.error),
      expiresAt, Math.max(1, Math.ceil(expiresAt - Date.now())), ...events.map(encodeEvent)
    ]) as [string[], number] | ['cancel', string] | Refusal | 'lost' | null
    if (result === 'lost') throw new RunLeaseLostError(runId)
    if (result === null) return null
    if (result[0] === 'cancel') {
      // a cancel asked for first wins (the script writes nothing then): the run ends cancelled, under the same condition
      const cancelled = cancelledFinish(result[1] as string, events, end)
      return this.#end(client, runId, from, condition, cancelled.events, cancelled.end, retentionMs)
    }
    if (!Array.isArray(result[0])) return { refusal: result as Refusal }
    const [hash, freed] = result as [string[], number]
    const record = toRecord(pairs(hash))
    this.#hub.events(runId, record.lastSeq)
    if (freed > 0) this.#hub.sessionFree(record.sessionId!)
    if (freed === 2) this.#notifyQueue()
    return record
  }

  async finish (runId: string, events: readonly StoredEvent[], end: RunEnd, retentionMs: number, owner: string): Promise<RunRecord | null> {
    const client = this.#client()
    if (!storable(runId, true)) return null
    checkBatch(runId, events)
    checkEvents(BACKEND, true, events)
    // a queued run (an old owner's late finish after a requeue, too) has nothing to finish: null, as for an ended one
    const ended = await this.#end(client, runId, 'running', ['owner', owner], events, end, retentionMs)
    if (ended !== null && 'refusal' in ended) throw refused(runId, ended.refusal, events)
    return ended
  }

  async renew (owner: string, runIds: readonly string[], until: number): Promise<string[]> {
    const client = this.#client()
    return await RENEW.run(client, [this.prefix, owner, until, ...runIds.filter((id) => storable(id, true))]) as string[]
  }

  async lapsed (now: number, limit: number): Promise<LapsedRun[]> {
    // (a negative LIMIT count would be no limit at all)
    const found = await LAPSED.run(this.#client(), [this.prefix, now, Math.max(0, limit)]) as string[][]
    return found.map((flat) => {
      const hash = pairs(flat)
      return { record: toRecord(hash), detachable: hash.detachable === '1', cancelRequested: hash.cancel === '1' }
    })
  }

  async requeue (runId: string, condition: { owner: string } | { lapsedBefore: number }, reason: 'SHUTDOWN' | 'INSTANCE_LOST', cancelled: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    return this.#onLease(runId, condition, async (client, record, leased) => {
      const event = requeuedEvent(record, record.attempt + 1, reason)
      const result = await REQUEUE.run(client, [
        this.prefix, runId, this.channel, this.#tag, ...leased, record.lastSeq, record.attempt, encodeEvent(event)
      ]) as string[] | 'again' | 'cancel' | null
      if (result === 'cancel') {
        // its cancel stays asked for: ended under the same condition, or read again should the run move meanwhile
        const ending = cancelledRequeue(true, record, cancelled)!
        return this.#endLeased(client, runId, leased, ending.events, ending.end, retentionMs)
      }
      if (result === 'again' || result === null) return result === 'again' ? undefined : null
      this.#hub.events(runId, event.seq)
      this.#notifyQueue()
      return toRecord(pairs(result))
    })
  }

  async abandon (runId: string, lapsedBefore: number, end: RunEnd, retentionMs: number): Promise<RunRecord | null> {
    return this.#onLease(runId, { lapsedBefore }, (client, record, leased) =>
      this.#endLeased(client, runId, leased, [endedBeforeStartEvent(record, end)], end, retentionMs))
  }

  /** Ends a running run under its lease's condition (see #end); undefined when its owner wrote meanwhile (read again). */
  async #endLeased (client: Redis, runId: string, leased: LeaseCondition, events: readonly StoredEvent[], end: RunEnd, retentionMs: number): Promise<RunRecord | null | undefined> {
    const ended = await this.#end(client, runId, 'running', leased, events, end, retentionMs)
    return ended !== null && 'refusal' in ended ? undefined : ended
  }

  /**
   * A compare-and-set on a run's lease whose event is made from the run as read: `write` writes only while the
   * run is as read (else it resolves undefined and the run is read again; it only moves forward, so not for long).
   */
  async #onLease (
    runId: string, condition: { owner: string } | { lapsedBefore: number },
    write: (client: Redis, record: RunRecord, leased: LeaseCondition) => Promise<RunRecord | null | undefined>
  ): Promise<RunRecord | null> {
    const client = this.#client()
    if (!storable(runId, true)) return null
    const leased: LeaseCondition = 'owner' in condition ? ['owner', condition.owner] : ['lapsed', String(condition.lapsedBefore)]
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const hash = await client.hgetall(this.#key(runId))
      if (!held(hash, leased)) return null
      const written = await write(client, toRecord(hash), leased)
      if (written !== undefined) return written
    }
    /* c8 ignore next 2: the run changed under every attempt, a race no test provokes on purpose */
    throw new Error(`run ${JSON.stringify(runId)} changed ${READ_ATTEMPTS} times during one compare-and-set on its lease`)
  }

  watchQueue (listener: () => void): () => void {
    this.#subscribe()
    this.#queueWatchers.add(listener)
    return () => { this.#queueWatchers.delete(listener) }
  }

  #notifyQueue (): void {
    for (const listener of [...this.#queueWatchers]) listener()
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
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const hash = await client.hgetall(this.#key(runId))
      if (!live(hash, Date.now())) return { outcome: 'not_found' }
      const record = toRecord(hash)
      if (isEnded(record.status)) return { outcome: 'ended', record }
      if (record.status === 'queued') {
        // null or refused: it started, or an event came in, meanwhile
        const ended = await this.#end(client, runId, 'queued', ['none', ''], [endedBeforeStartEvent(record, end)], end, retentionMs)
        if (ended !== null && !('refusal' in ended)) return { outcome: 'cancelled', record: ended }
      } else {
        const requested = await REQUEST_CANCEL.run(client, [this.prefix, runId, this.channel]) as string[] | null
        if (requested !== null) {
          this.#hub.cancel(runId)
          return { outcome: 'requested', record: toRecord(pairs(requested)) }
        }
      }
    }
    /* c8 ignore next 2: the run changed under every attempt, a race no test provokes on purpose */
    throw new Error(`run ${JSON.stringify(runId)} changed ${READ_ATTEMPTS} times during one cancel`)
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
    return this.#page({ sessionId: query.sessionId, agent: query.agent, status: query.status, principal: query.principal }, query.limit, query.cursor)
  }

  /**
   * Pages through the most selective sorted set the filters allow, checking each run against all of them. A
   * member whose run is gone (expired) or no longer belongs to that set is removed from it on the way. The
   * principal has no set of its own: it is checked on the runs the other filters read (an admin search).
   */
  async #page (filters: { sessionId?: string | undefined, agent?: string | undefined, status?: RunStatus | undefined, principal?: string | undefined }, limitOption: number, cursor: string | undefined): Promise<RunPage> {
    const client = this.#client()
    const limit = checkLimit(limitOption, MAX_RUN_LIST_LIMIT)
    const before = cursor === undefined ? null : decodeSeqCursor(cursor)
    const { sessionId, agent, status, principal } = filters
    for (const value of [sessionId, agent, principal]) if (value !== undefined && !storable(value, true)) return { runs: [], nextCursor: null }
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

  async delete (runId: string): Promise<boolean> {
    const client = this.#client()
    if (!storable(runId, true)) return false
    return await DELETE.run(client, [this.prefix, runId, Date.now()]) === 1
  }

  async purge (now: number, batch: number): Promise<number> {
    const client = this.#client()
    if (batch < 1) return 0
    return await PURGE.run(client, [this.prefix, now, batch]) as number
  }

  protected override stop (): void {
    this.#hub.close()
    this.#queueWatchers.clear()
    this.#subscriber?.disconnect()
    this.#subscriber = null
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
    if (this.#subscriber !== null || this.closed) return
    const subscriber = this.#client().duplicate()
    this.#subscriber = subscriber
    // errors are the connection's (it reconnects and subscribes again by itself); the poll covers meanwhile
    subscriber.on('error', noop)
    subscriber.on('message', (_channel: string, message: string) => this.#heard(message))
    // (re)subscribed: what was published before is not heard, so the watchers catch up now
    subscriber.on('ready', () => this.#catchUp())
    subscriber.subscribe(this.channel).then(() => this.#catchUp(), noop)
  }

  #catchUp (): void {
    void this.#hub.refresh()
    this.#notifyQueue()
  }

  /** `e:<runId>:<lastSeq>`, `g:[runId, lastSeq, …]`, `c:<runId>`, `s:<sessionId>` or `q:<tag>`, from the scripts above. */
  #heard (message: string): void {
    const body = message.slice(2)
    switch (message[0]) {
      case 'e': {
        const cut = body.lastIndexOf(':')
        this.#hub.events(body.slice(0, cut), Number(body.slice(cut + 1)))
        break
      }
      case 'g': {
        // a group of appends: runId, lastSeq, runId, lastSeq…
        const told = JSON.parse(body) as Array<string | number>
        for (let i = 0; i < told.length; i += 2) this.#hub.events(told[i] as string, told[i + 1] as number)
        break
      }
      case 'c': this.#hub.cancel(body); break
      // a run was queued, or a session freed while runs are queued: by another store (this one told its watchers)
      case 'q': if (body !== this.#tag) this.#notifyQueue(); break
      default: this.#hub.sessionFree(body)
    }
  }
}
