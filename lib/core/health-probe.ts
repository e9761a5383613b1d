import type { DbCheck, HealthResponse } from '../../schemas/health.js'
import type { DbHealthResult } from './types.js'

export type { DbCheck }

export type HealthProbe = () => Promise<DbHealthResult>

interface HealthLike { health(): Promise<DbHealthResult> }
interface PgPoolLike { query(sql: string): Promise<unknown>, connect: unknown }
interface SqliteLike { prepare(sql: string): { get(): unknown }, pragma: unknown }
interface RedisLike { ping(): Promise<string> }

function has (value: object, ...methods: string[]): boolean {
  return methods.every((m) => typeof (value as Record<string, unknown>)[m] === 'function')
}

/** Adapts the `db` option to one probe function, or returns null when it is none of the known shapes. */
export function toHealthProbe (db: object): HealthProbe | null {
  if (has(db, 'health')) return () => (db as HealthLike).health()
  if (has(db, 'query', 'connect')) return async () => { await (db as PgPoolLike).query('SELECT 1'); return true }
  if (has(db, 'prepare', 'pragma')) return async () => { (db as SqliteLike).prepare('SELECT 1').get(); return true }
  if (has(db, 'ping')) return async () => (await (db as RedisLike).ping()) === 'PONG'
  return null
}

/** Runs the probe with its own deadline; a rejection, `false`, `ok: false` or a hang is unhealthy. */
export async function runHealthProbe (probe: HealthProbe, timeoutMs: number): Promise<DbCheck> {
  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_resolve, reject) => {
    // Not unref()ed: the answer to a request in flight depends on it; it is cleared as soon as the probe settles.
    timer = setTimeout(() => reject(new Error(`health probe timed out after ${timeoutMs} ms`)), timeoutMs)
  })
  try {
    const result = await Promise.race([probe(), deadline])
    clearTimeout(timer)
    const latencyMs = Math.round(performance.now() - started)
    if (typeof result === 'boolean') return result ? { status: 'ok', latencyMs } : { status: 'error', latencyMs, error: 'probe reported unhealthy' }
    const check: DbCheck = { status: result.ok ? 'ok' : 'error', latencyMs: result.latencyMs ?? latencyMs }
    if (!result.ok) check.error = result.error ?? 'probe reported unhealthy'
    return check
  } catch (err) {
    clearTimeout(timer)
    return { status: 'error', latencyMs: Math.round(performance.now() - started), error: (err as Error)?.message ?? String(err) }
  }
}

export type HealthReport = HealthResponse

/** Liveness plus a live probe of each check (the `db` option, the stores), each call: no cached answer hides an outage. */
export async function healthReport (checks: ReadonlyMap<string, HealthProbe>, timeoutMs: number): Promise<HealthReport> {
  const report: HealthReport = { status: 'ok', uptimeSeconds: Math.floor(process.uptime()), checks: {} }
  const names = [...checks.keys()]
  const results = await Promise.all(names.map((name) => runHealthProbe(checks.get(name)!, timeoutMs)))
  names.forEach((name, i) => {
    ;(report.checks as Record<string, DbCheck>)[name] = results[i]!
    if (results[i]!.status !== 'ok') report.status = 'degraded'
  })
  return report
}
