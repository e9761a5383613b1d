// PostgreSQL and Redis for the store tests: where they are, whether they answer, and a namespace per test
// (a schema, a key prefix) that is dropped in teardown, so that test files can run side by side.
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { eventually } from '../../lib/testing/check.js'

export function pgUrl (): string {
  return process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
}

export function redisUrl (): string {
  return process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
}

export async function pgReachable (url = pgUrl()): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 })
  try {
    await client.connect()
    await client.end()
    return true
  } catch {
    return false
  }
}

export async function redisReachable (url = redisUrl()): Promise<boolean> {
  // no retries: a refused connection should answer now, not after ioredis' reconnection attempts
  const client = new Redis(url, { lazyConnect: true, connectTimeout: 2000, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try {
    await client.connect()
    await client.quit()
    return true
  } catch {
    client.disconnect()
    return false
  }
}

/** The part of a tap Test that `requireService` uses (a stub in the tests of this helper). */
export interface ServiceTest {
  plan: (n: number, comment?: string) => void
  fail: (message: string) => unknown
}

/**
 * Whether a test file can go on. An unreachable server skips the file (plan 0, saying how to run it), except
 * under CI, where a skipped suite would pass unnoticed: there it fails.
 */
export function requireService (t: ServiceTest, reachable: boolean, howTo: string): boolean {
  if (reachable) return true
  if (process.env.CI !== undefined && process.env.CI !== '' && process.env.CI !== 'false') {
    t.fail(`not reachable and CI is set: ${howTo}`)
  } else {
    t.plan(0, `skipped, not reachable: ${howTo}`)
  }
  return false
}

export async function requirePg (t: ServiceTest): Promise<boolean> {
  return requireService(t, await pgReachable(),
    'PostgreSQL store tests need a server: start PostgreSQL on 127.0.0.1:5432 (user postgres, database test) or set PG_URL')
}

export async function requireRedis (t: ServiceTest): Promise<boolean> {
  return requireService(t, await redisReachable(),
    'Redis store tests need a server: start Redis on 127.0.0.1:6379 or set REDIS_URL')
}

function uniqueName (): string {
  return `fa_test_${randomBytes(6).toString('hex')}`
}

/**
 * A fresh schema name, dropped with everything in it when `t` ends. The connections of the child processes given
 * it (pgChildEnv) are ended first: the server still runs the statements a child killed with SIGKILL had sent, and
 * its store's first use made the schema again after it was dropped.
 */
export function withPgSchema (t: Test, pool?: pg.Pool): string {
  const schema = uniqueName()
  t.teardown(async () => {
    const client = pool ?? new pg.Client(pgUrl())
    if (client instanceof pg.Client) await client.connect()
    try {
      const children = async (): Promise<number> => (await client.query(
        'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1', [schema])).rows[0].n
      await eventually(async () => await children() === 0, 10_000, `the connections of ${schema}'s child processes ended`)
      await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
    } finally {
      if (client instanceof pg.Client) await client.end()
    }
  })
  return schema
}

/** What a child process that works in `schema` adds to its environment: its connections carry the schema's name. */
export function pgChildEnv (schema: string): { PGAPPNAME: string } {
  return { PGAPPNAME: schema }
}

/** A fresh key prefix; its keys are deleted when `t` ends. */
export function withRedisPrefix (t: Test, client?: Redis): string {
  const prefix = `${uniqueName()}:`
  t.teardown(async () => {
    const redis = client ?? new Redis(redisUrl())
    try {
      let cursor = '0'
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500)
        if (keys.length > 0) await redis.del(...keys)
        cursor = next
      } while (cursor !== '0')
    } finally {
      if (client === undefined) await redis.quit()
    }
  })
  return prefix
}
