// Runs as resources (issue #14): what the run's record and event log cost. An SSE run of 100 deltas and a JSON
// run with the log in each backend, against the same runs with a run store that keeps nothing; and how soon a
// follower on another instance sees each event (PostgreSQL, Redis), measured in one process with two services.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { Redis } from 'ioredis'
import { readdirSync, readFileSync } from 'node:fs'
import { alternate, config, processTime, throughputRound } from './lib/harness.js'
import { roundTrips } from './pg-round-trips.js'
import { dropSchemas } from './lib/pg.js'
import { jsonBody } from './lib/agents.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, target } from './lib/report.js'
import { checkEcho, checkSseRun } from './lib/checks.js'

export const name = 'run-log'
export const title = 'The run record and event log: SSE and JSON runs with each backend vs none; cross-instance follower lag'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
// BENCH_JSON_WARMUP=<s>: the JSON rounds' warm-up, every contender alike (default BENCH_WARMUP's 2 s). At 2 s the
// all-PostgreSQL server has served ~4k runs, V8 still compiling its code: bench/README.md, "Warm-up".
const JSON_WARMUP = Number(process.env.BENCH_JSON_WARMUP ?? config.warmup)
const DELTAS = 100

/** The pids of the database servers' processes on this machine (every PostgreSQL backend, redis-server). */
function serverPids (names) {
  const pids = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim()
      if (names.some((name) => comm.startsWith(name))) pids.push(Number(entry))
    } catch {}
  }
  return pids
}

/**
 * A round, with the CPU the database server used meanwhile (µs per request; its backends come and go, so they are
 * read again at the end: a process gone meanwhile is not counted). Other sessions on the same server count too.
 */
async function withServerCpu (names, round) {
  const before = new Map(serverPids(names).map((pid) => [pid, processTime(pid)]))
  const result = await round()
  let ticks = 0
  for (const pid of serverPids(names)) ticks += processTime(pid) - (before.get(pid) ?? 0)
  // the warm-up's requests are not in result.ok: counted per measured request over warm-up + measured time
  result.dbCpuUsPerRequest = result.ok > 0 ? (ticks * 10_000) / (result.ok + (result.warmupOk ?? 0)) : null
  return result
}

const DB_SERVERS = { postgres: ['postgres'], redis: ['redis-server'] }

/** A contender's cost against a baseline's, CPU per unit, as the targets put it (baseline / contender), with its spread. */
function costRatio (results, contender, baseline, pick = (r) => r.cpuUsPerRequest) {
  const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)]
  const c = results[contender]?.map(pick)
  const b = results[baseline]?.map(pick)
  if (c === undefined || b === undefined || c.some((v) => typeof v !== 'number') || b.some((v) => typeof v !== 'number')) return undefined
  const perRound = c.map((v, i) => b[i] / v)
  return { ratio: median(b) / median(c), min: Math.min(...perRound), max: Math.max(...perRound) }
}

async function reachable () {
  const status = { pg: false, redis: false }
  const client = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 })
  try { await client.connect(); status.pg = true } catch {} finally { await client.end().catch(() => {}) }
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await redis.connect(); status.redis = true } catch {} finally { redis.disconnect() }
  return status
}

async function cleanUp (schemas, prefixes) {
  await dropSchemas(PG_URL, schemas)
  if (prefixes.length > 0) {
    const redis = new Redis(REDIS_URL)
    try {
      for (const prefix of prefixes) {
        const keys = await redis.keys(`${prefix}*`)
        if (keys.length > 0) await redis.del(...keys)
      }
    } finally { redis.disconnect() }
  }
}

function contendersOf (status, dir, schemas, prefixes) {
  const list = [
    { name: 'no log', spec: { kind: 'service', preset: { name: 'no-log' } } },
    { name: 'memory', spec: { kind: 'service', preset: { name: 'default' } } },
    { name: 'sqlite', spec: (round) => ({ kind: 'service', preset: { name: 'runs-sqlite', file: join(dir, `runs-${round}-${Math.random()}.db`) } }) }
  ]
  if (status.pg) {
    list.push({
      name: 'postgres',
      spec: (round) => {
        const schema = `fa_bench_runs_${process.pid}_${round}_${schemas.length}`
        schemas.push(schema)
        return { kind: 'service', preset: { name: 'runs-postgres', url: PG_URL, schema } }
      }
    })
  }
  if (status.redis) {
    list.push({
      name: 'redis',
      spec: (round) => {
        const prefix = `fa-bench-${process.pid}-${round}-${prefixes.length}:`
        prefixes.push(prefix)
        return { kind: 'service', preset: { name: 'runs-redis', url: REDIS_URL, prefix } }
      }
    })
  }
  return list
}

/** Two services on one shared store: a run streams on A, B follows it; lag = arrival on B − emission on A. */
async function followerLag (lib, stores, log) {
  const { createAgentService } = lib
  const times = new Map()
  const agents = {
    paced: {
      async * run (input) {
        for (let i = 0; i < input.events; i++) {
          times.set(i + 2, performance.now())
          yield 'x'
          await new Promise((resolve) => setTimeout(resolve, 2))
        }
      }
    }
  }
  const a = createAgentService({ logger: false, agents, runStore: stores[0] })
  const b = createAgentService({ logger: false, agents, runStore: stores[1] })
  const urlA = (await a.listen({ port: 0, host: '127.0.0.1' })).url
  const urlB = (await b.listen({ port: 0, host: '127.0.0.1' })).url
  const lags = []
  try {
    for (let round = 0; round < 5; round++) {
      const res = await fetch(`${urlA}/v1/agents/paced/runs`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { events: 200 }, onDisconnect: 'continue' }) })
      const reader = res.body.getReader()
      const first = new TextDecoder().decode((await reader.read()).value)
      const runId = /"runId":"([^"]+)"/.exec(first)[1]
      const follow = await fetch(`${urlB}/v1/runs/${runId}/events`)
      const decoder = new TextDecoder()
      let buffer = ''
      for await (const chunk of follow.body) {
        const now = performance.now()
        buffer += decoder.decode(chunk, { stream: true })
        for (const match of buffer.matchAll(/id: (\d+)\nevent: message\.delta/g)) {
          const sent = times.get(Number(match[1]))
          if (sent !== undefined) { lags.push(now - sent); times.delete(Number(match[1])) }
        }
        buffer = buffer.slice(buffer.lastIndexOf('\n\n') + 2)
      }
      await reader.cancel()
    }
  } finally {
    await a.close(0)
    await b.close(0)
  }
  lags.sort((x, y) => x - y)
  const pick = (q) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))]
  log(`  follower lag over ${lags.length} events: p50 ${pick(0.5).toFixed(1)} ms, p99 ${pick(0.99).toFixed(1)} ms`)
  return { events: lags.length, p50: pick(0.5), p99: pick(0.99) }
}

/** The SSE part alone (BENCH_RUN_LOG): each backend's ratio of CPU per stream against the log in memory. */
function onlySse (sseResults, names) {
  const rows = metricRows(sseResults, 'cpuUsPerRequest', { unit: 'µs', baseline: 'memory' })
  const targets = []
  const notes = []
  for (const [name, line] of [['sqlite', 0.80], ['redis', 0.80], ['postgres', 0.70]]) {
    const r = names.includes(name) ? costRatio(sseResults, name, 'memory') : undefined
    if (r === undefined) continue
    targets.push(target('26', `SSE of 100 deltas, log in ${name} / in memory, CPU per stream`, r.ratio, '>=', line))
    notes.push(`log in ${name} / in memory, CPU per stream: ${r.ratio.toFixed(2)} (rounds ${r.min.toFixed(2)}-${r.max.toFixed(2)})`)
  }
  const noise = noiseOf(sseResults)
  return { title, rows, targets, notes, noise, errors: errorsOf(sseResults) }
}

export async function run ({ log }) {
  const status = await reachable()
  const dir = mkdtempSync(join(tmpdir(), 'fastify-agents-bench-runs-'))
  const schemas = []
  const prefixes = []
  const sse = { path: '/v1/agents/ticker/runs', method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify({ input: { deltas: DELTAS } }), connections: 50 }
  const json = { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json' }, body: jsonBody(1024), connections: 50 }
  // BENCH_RUN_LOG=sqlite[,redis,...]: only the SSE part, memory against the backends named (while iterating on one)
  const only = process.env.BENCH_RUN_LOG?.split(',').filter((name) => name !== '')
  try {
    log('SSE, 100 deltas')
    const sseContenders = contendersOf(status, dir, schemas, prefixes).filter((c) => only === undefined || c.name === 'memory' || only.includes(c.name))
    const sseResults = await alternate(sseContenders, async (server, c, round) => {
      if (round === 1) await checkSseRun(server.url, sse, DELTAS)
      const servers = DB_SERVERS[c.name]
      return servers === undefined ? throughputRound(server, sse) : withServerCpu(servers, () => throughputRound(server, sse))
    }, { log })
    if (only !== undefined) return onlySse(sseResults, only)
    log('JSON')
    const jsonContenders = contendersOf(status, dir, schemas, prefixes).slice(0, 2)
    if (status.pg) {
      jsonContenders.push({
        name: 'all-postgres',
        spec: (round) => {
          const schema = `fa_bench_all_${process.pid}_${round}_${schemas.length}`
          schemas.push(schema)
          return { kind: 'service', preset: { name: 'all-postgres', url: PG_URL, schema } }
        }
      })
    }
    const jsonResults = await alternate(jsonContenders, async (server, c, round) => {
      if (round === 1) await checkEcho(server.url, json)
      return c.name === 'all-postgres' ? withServerCpu(DB_SERVERS.postgres, () => throughputRound(server, json, { warmup: JSON_WARMUP })) : throughputRound(server, json, { warmup: JSON_WARMUP })
    }, { log })
    const rows = [
      ...metricRows(sseResults, 'rps', { unit: 'streams/s', baseline: 'no log' }),
      ...metricRows(sseResults, 'cpuUsPerRequest', { unit: 'µs', baseline: 'no log' }),
      ...metricRows(jsonResults, 'rps', { unit: 'req/s', baseline: 'no log' }).map((r) => ({ ...r, contender: `JSON ${r.contender}` })),
      ...metricRows(jsonResults, 'cpuUsPerRequest', { unit: 'µs', baseline: 'no log' }).map((r) => ({ ...r, contender: `JSON ${r.contender}` }))
    ]
    const ratio = (contender) => rows.find((r) => r.contender === contender && r.metric === 'rps')?.ratio
    const targets = [
      target('14a', 'SSE with the log in memory / without', ratio('memory'), '>=', 0.90),
      target('14b', 'SSE with the log in SQLite / without', ratio('sqlite'), '>=', 0.75),
      target('14e', 'JSON with the log in memory / without', ratio('JSON memory'), '>=', 0.90)
    ]
    if (status.redis) targets.push(target('14c', 'SSE with the log in Redis / without', ratio('redis'), '>=', 0.75))
    if (status.pg) targets.push(target('14d', 'SSE with the log in PostgreSQL / without', ratio('postgres'), '>=', 0.60))
    // issue 26: CPU per unit of the service process against the same run with every store in memory
    const spread = (r) => r === undefined ? 'n/a' : `${r.ratio.toFixed(2)} (rounds ${r.min.toFixed(2)}-${r.max.toFixed(2)})`
    const withDb = (r) => (r.cpuUsPerRequest ?? 0) + (r.dbCpuUsPerRequest ?? 0)
    const group = {}
    for (const [id, name, line] of [['26a', 'sqlite', 0.80], ['26b', 'redis', 0.80], ['26c', 'postgres', 0.70]]) {
      const r = costRatio(sseResults, name, 'memory')
      if (r === undefined) continue
      group[name] = { cpu: r, withServer: name === 'sqlite' ? r : costRatio(sseResults, name, 'memory', withDb) }
      targets.push(target(id, `SSE of 100 deltas, log in ${name} / in memory, CPU per stream`, r.ratio, '>=', line))
    }
    const jsonPg = costRatio(jsonResults, 'all-postgres', 'memory')
    if (jsonPg !== undefined) targets.push(target('26d', 'JSON run, every store on PostgreSQL / in memory, CPU per request', jsonPg.ratio, '>=', 0.50))
    let trips
    if (status.pg) {
      log('round trips to PostgreSQL per JSON run')
      trips = await roundTrips(undefined, { runs: 200, log })
      targets.push(target('26e', 'round trips to PostgreSQL per JSON run, all stores on PostgreSQL', trips.perRun, '<=', 4))
    }
    const notes = [
      `by CPU per stream: memory ${cpuRatio(rows, 'memory', 'no log')?.toFixed(2)}, sqlite ${cpuRatio(rows, 'sqlite', 'no log')?.toFixed(2)}` +
        (status.pg ? `, postgres ${cpuRatio(rows, 'postgres', 'no log')?.toFixed(2)}` : '') + (status.redis ? `, redis ${cpuRatio(rows, 'redis', 'no log')?.toFixed(2)}` : '')
    ]
    for (const [name, r] of Object.entries(group)) {
      notes.push(`issue 26, log in ${name} / in memory, CPU per stream: ${spread(r.cpu)}; counting the database server's CPU: ${spread(r.withServer)}`)
    }
    if (jsonPg !== undefined) {
      notes.push(`issue 26, JSON run all-PostgreSQL / all-memory, CPU per request: ${spread(jsonPg)}; counting PostgreSQL's CPU: ${spread(costRatio(jsonResults, 'all-postgres', 'memory', withDb))}`)
    }
    if (trips !== undefined) notes.push(`issue 26, round trips to PostgreSQL per JSON run: ${trips.perRun.toFixed(2)}`)
    const lag = {}
    const lib = await import('fastify-agents')
    if (status.pg) {
      log('follower lag, PostgreSQL')
      const schema = `fa_bench_lag_${process.pid}`
      schemas.push(schema)
      lag.postgres = await followerLag(lib, [lib.postgresStores(PG_URL, { schema }).runStore, lib.postgresStores(PG_URL, { schema }).runStore], log)
      targets.push(target('14f', 'cross-instance follower lag p99, PostgreSQL (ms)', lag.postgres.p99, '<', 50))
    }
    if (status.redis) {
      log('follower lag, Redis')
      const prefix = `fa-bench-lag-${process.pid}:`
      prefixes.push(prefix)
      lag.redis = await followerLag(lib, [lib.redisStores(REDIS_URL, { prefix }).runStore, lib.redisStores(REDIS_URL, { prefix }).runStore], log)
      targets.push(target('14g', 'cross-instance follower lag p99, Redis (ms)', lag.redis.p99, '<', 50))
    }
    const jsonNoise = noiseOf(jsonResults)
    const sseNoise = noiseOf(sseResults)
    return {
      title, rows, targets, notes, lag, roundTrips: trips?.perRun,
      noise: { rounds: sseNoise.rounds + jsonNoise.rounds, noisy: sseNoise.noisy + jsonNoise.noisy, max: Math.max(sseNoise.max ?? 0, jsonNoise.max ?? 0) },
      errors: errorsOf(sseResults) + errorsOf(jsonResults)
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
    await cleanUp(schemas, prefixes)
  }
}
