// Instances of the service in processes of their own (test/fixtures/recovery-instance.ts) sharing one PostgreSQL
// schema, for the fault tests of background runs (docs/runs.md) and bench/recovery.js: killed with SIGKILL, drained with SIGTERM.
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import type { Test } from 'tap'
import { pgChildEnv, pgUrl, redisUrl, withPgSchema, withRedisPrefix } from './services.js'

export interface Instance {
  name: string
  url: string
  child: ChildProcess
  /** resolves when the process has exited */
  exited: Promise<unknown>
  /** SIGKILL: no drain, no last write; its leases lapse */
  kill(): Promise<void>
  /** SIGTERM: a drain (its resumable runs handed off), then the process exits */
  drain(): Promise<void>
}

export interface InstanceOptions {
  url: string
  schema: string
  name: string
  /** the file the agents record their executions in */
  executions: string
  runLeaseMs: number
  drainMs?: number
  storeTimeoutMs?: number
  /** the run and session stores on Redis under this prefix, instead of PostgreSQL (`url`, `schema` unused) */
  redis?: { url: string, prefix: string }
  /** with `redis`: the checkpoints in this SQLite file, shared by the instances (else each keeps its own in memory) */
  checkpointFile?: string
  /** the adapters' durable agents too (test/fixtures/adapter-agents.ts) */
  adapters?: boolean
}

const FIXTURE = new URL('../fixtures/recovery-instance.js', import.meta.url)

/** Starts an instance; resolves once it listens. */
export async function startInstance (options: InstanceOptions): Promise<Instance> {
  const child = spawn(process.execPath, [FIXTURE.pathname], {
    env: {
      ...process.env,
      PG_URL: options.url,
      SCHEMA: options.schema,
      ...(options.schema === '' ? {} : pgChildEnv(options.schema)),
      INSTANCE: options.name,
      EXECUTIONS: options.executions,
      RUN_LEASE_MS: String(options.runLeaseMs),
      DRAIN_MS: String(options.drainMs ?? 100),
      ...(options.storeTimeoutMs === undefined ? {} : { STORE_TIMEOUT_MS: String(options.storeTimeoutMs) }),
      ...(options.redis === undefined ? {} : { REDIS_URL: options.redis.url, REDIS_PREFIX: options.redis.prefix }),
      ...(options.checkpointFile === undefined ? {} : { CHECKPOINT_FILE: options.checkpointFile }),
      ...(options.adapters === true ? { ADAPTER_AGENTS: '1' } : {})
    },
    stdio: ['pipe', 'pipe', 'inherit']
  })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const match = /"port":(\d+)/.exec(out)
      if (match !== null) resolve(Number(match[1]))
    })
    void exited.then(() => reject(new Error(`instance ${options.name} exited before listening`)))
  })
  return {
    name: options.name,
    url: `http://127.0.0.1:${port}`,
    child,
    exited,
    async kill () {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      await exited
    },
    async drain () {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      await exited
    }
  }
}

/** What the agents of the instances recorded (test/fixtures/recovery-instance.ts), in order. */
export interface Execution { run_id: string, instance: string, kind: 'start' | 'step' | 'stop' | 'end' | 'model', step: number, at: number, key?: string }

export function executions (file: string, runId?: string): Execution[] {
  let text = ''
  try {
    text = readFileSync(file, 'utf8')
  } catch {} // nothing recorded yet
  const rows = text.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as Execution)
  return runId === undefined ? rows : rows.filter((row) => row.run_id === runId)
}

/**
 * The runs two instances executed at once: each instance executes a run once at most (a new process for each
 * restart), from its `start` to its last row (a step, its `stop` when aborted, its `end`); two of these
 * intervals of one run that intersect are one too many.
 */
export function overlapping (rows: readonly Execution[]): string[] {
  const spans = new Map<string, Map<string, { from: number, to: number }>>()
  for (const row of rows) {
    const byInstance = spans.get(row.run_id) ?? new Map<string, { from: number, to: number }>()
    spans.set(row.run_id, byInstance)
    const span = byInstance.get(row.instance)
    if (span === undefined) byInstance.set(row.instance, { from: row.at, to: row.at })
    else span.to = Math.max(span.to, row.at)
  }
  const found: string[] = []
  for (const [runId, byInstance] of spans) {
    const list = [...byInstance.values()].sort((a, b) => a.from - b.from)
    if (list.some((span, i) => i > 0 && span.from < list[i - 1]!.to)) found.push(runId)
  }
  return found
}

/** Percentile of a sample (nearest rank). */
export { percentile } from '../helper.js'

// An instance fences its runs off with a third of a lease left unrenewed: with CI's four test processes on two
// cores, a 500 ms lease (a 167 ms margin) was sometimes lost to load alone, before the fault the test makes.
export const LEASE_MS = 1_000

/** Instances on a schema of the test's own (`pool`'s server at `url`), killed in teardown before the schema goes. */
export function cluster (t: Test, pool: pg.Pool, url: string, options: { dropSchema?: boolean } = {}) {
  const started: Instance[] = []
  t.teardown(async () => { await Promise.all(started.map((instance) => instance.kill())) })
  const schema = options.dropSchema === false ? 'recovery' : withPgSchema(t, pool)
  const dir = mkdtempSync(join(tmpdir(), 'fa-recovery-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, 'executions.jsonl')
  return {
    schema,
    executions: (runId?: string) => executions(file, runId),
    async start (name: string, runLeaseMs = LEASE_MS, drainMs = 100, storeTimeoutMs?: number): Promise<Instance> {
      const instance = await startInstance({ url, schema, name, executions: file, runLeaseMs, drainMs, ...(storeTimeoutMs === undefined ? {} : { storeTimeoutMs }) })
      started.push(instance)
      return instance
    },
    async record (runId: string): Promise<{ status: string, attempt: number, lease_until: Date | null }> {
      const { rows } = await pool.query(`SELECT status, attempt, lease_until FROM ${pg.escapeIdentifier(schema)}.fa_runs WHERE run_id = $1`, [runId])
      return rows[0]
    },
    async count (statuses: string[]): Promise<number> {
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${pg.escapeIdentifier(schema)}.fa_runs WHERE status = ANY($1)`, [statuses])
      return rows[0].n
    }
  }
}

/** POSTs a background run; resolves with its id (on a 202). */
export async function postBackground (instance: Instance, agent: string, input: unknown): Promise<string> {
  const res = await fetch(`${instance.url}/v1/agents/${agent}/runs`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input, background: true })
  })
  if (res.status !== 202) throw new Error(`${res.status} ${await res.text()}`)
  return (await res.json() as { runId: string }).runId
}

export type Backend = 'postgres' | 'redis'

/**
 * Instances whose run and session stores are on `backend` (a schema or a key prefix of the test's own; with Redis,
 * the checkpoints in a SQLite file they share), killed in teardown; the file their agents append to. `adapters`: the
 * adapters' durable agents too.
 */
export function storeCluster (t: Test, backend: Backend, admin: pg.Pool | null, options: { adapters?: boolean } = {}) {
  const started: Instance[] = []
  t.teardown(async () => { await Promise.all(started.map((instance) => instance.kill())) })
  const dir = mkdtempSync(join(tmpdir(), 'fa-steps-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, 'executions.jsonl')
  const place = backend === 'postgres'
    ? { url: pgUrl(), schema: withPgSchema(t, admin!) }
    : { url: '', schema: '', redis: { url: redisUrl(), prefix: withRedisPrefix(t) }, checkpointFile: join(dir, 'checkpoints.db') }
  return {
    executions: (runId: string) => executions(file, runId),
    async start (name: string, runLeaseMs = LEASE_MS): Promise<Instance> {
      const instance = await startInstance({ ...place, name, executions: file, runLeaseMs, adapters: options.adapters })
      started.push(instance)
      return instance
    }
  }
}
