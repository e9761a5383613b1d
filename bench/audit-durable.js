// Target 6: the JSON run of http-default with the audit log in SQLite and in PostgreSQL, against the
// default in-memory ring. Also checks that no acknowledged request lost its audit entry: each server
// reports, after close(), how many entries its store holds.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { alternate, throughputRound } from './lib/harness.js'
import { jsonBody } from './lib/agents.js'
import { cpuRatio, errorsOf, metricRows, noiseOf, target } from './lib/report.js'
import { checkEcho } from './lib/checks.js'
import { dropSchemas } from './lib/pg.js'

export const name = 'audit-durable'
export const title = 'JSON run with the SQLite and PostgreSQL audit stores, vs the memory ring (target 6)'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

async function postgresAvailable () {
  const client = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 })
  try {
    await client.connect()
    await client.query('SELECT 1')
    return true
  } catch (err) {
    return `PostgreSQL not reachable at ${PG_URL}: ${err.message}`
  } finally {
    await client.end().catch(() => {})
  }
}

export async function run ({ log }) {
  const request = { path: '/v1/agents/echo/runs', method: 'POST', headers: { 'content-type': 'application/json' }, body: jsonBody(1024), connections: 50 }
  const dir = mkdtempSync(join(tmpdir(), 'fastify-agents-bench-'))
  const schemas = []
  const pgStatus = await postgresAvailable()
  // A fresh file / schema per round: every round starts from an empty table.
  const contenders = [
    { name: 'memory ring', spec: { kind: 'service', preset: { name: 'default' } } },
    { name: 'sqlite', spec: (round) => ({ kind: 'service', preset: { name: 'sqlite', file: join(dir, `audit-${round}.db`) } }) }
  ]
  if (pgStatus === true) {
    contenders.push({
      name: 'postgres',
      spec: (round) => {
        const schema = `fa_bench_${process.pid}_${round}`
        schemas.push(schema)
        return { kind: 'service', preset: { name: 'postgres', url: PG_URL, schema } }
      }
    })
  }

  const lost = {}
  let results
  try {
    results = await alternate(contenders, async (server, contender, round) => {
      if (round === 1) await checkEcho(server.url, request)
      return throughputRound(server, request)
    }, { log })
  } finally {
    rmSync(dir, { recursive: true, force: true })
    await dropSchemas(PG_URL, [...new Set(schemas)]).catch((err) => log(`  could not drop the bench schemas: ${err.message}`))
  }
  for (const [contender, rounds] of Object.entries(results)) {
    if (contender === 'memory ring') continue
    // Every response received (warm-up, measured, the check) must have its entry; the server may have
    // answered a few more that autocannon abandoned at the end of a run.
    lost[contender] = rounds.reduce((sum, r) => sum + Math.max(0, r.warmupOk + r.ok - (r.stopped.auditCount ?? 0)), 0)
  }

  const rows = [
    ...metricRows(results, 'rps', { unit: 'req/s', baseline: 'memory ring' }),
    ...metricRows(results, 'p99', { unit: 'ms', baseline: 'memory ring' }),
    ...metricRows(results, 'cpuUsPerRequest', { unit: 'µs', baseline: 'memory ring' })
  ]
  const ratio = (contender) => rows.find((r) => r.contender === contender && r.metric === 'rps')?.ratio
  return {
    title,
    rows,
    targets: [
      target('6a', 'SQLite audit throughput / memory ring', ratio('sqlite'), '>=', 0.85),
      target('6b', 'PostgreSQL audit throughput / memory ring', ratio('postgres') ?? null, '>=', 0.85, pgStatus === true ? undefined : pgStatus)
    ],
    notes: [
      `by CPU time per request, sqlite / memory = ${cpuRatio(rows, 'sqlite', 'memory ring')?.toFixed(2)}, postgres / memory = ${cpuRatio(rows, 'postgres', 'memory ring')?.toFixed(2)} (PostgreSQL's own CPU is not counted)`,
      ...Object.entries(lost).map(([contender, n]) => `${contender}: ${n === 0 ? 'every acknowledged request has its audit entry' : `${n} audit entries missing`}`)
    ],
    lostAuditEntries: lost,
    noise: noiseOf(results),
    errors: errorsOf(results)
  }
}
