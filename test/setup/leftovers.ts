// What the test suite must not leave behind: tables in PostgreSQL's `public` schema and Redis keys under `fa:` — the
// defaults a developer's own instance uses on the same servers (every test works in a schema or key prefix of its
// own, test/helpers/services.ts). tap runs before.ts ahead of the suite and after.ts once it is over (.taprc), each
// of which runs this file (`snapshot`, then `check`): what is there at the end and was not at the start was made by
// the suite, and fails it. Compared, never assumed empty.
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import pg from 'pg'
import { Redis } from 'ioredis'
import { pgUrl, redisUrl } from '../helpers/services.js'

/** The defaults' tables and keys as they stand; null for a server that does not answer (its tests skip). */
export interface Leftovers {
  tables: string[] | null
  keys: string[] | null
}

export const SNAPSHOT = join(process.cwd(), '.tap', 'leftovers-before.json')

async function publicTables (): Promise<string[] | null> {
  const client = new pg.Client({ connectionString: pgUrl(), connectionTimeoutMillis: 2_000 })
  client.on('error', () => {})
  try {
    await client.connect()
  } catch {
    return null
  }
  try {
    const { rows } = await client.query<{ name: string }>(
      "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' AND table_name LIKE 'fa\\_%'")
    return rows.map((row) => row.name).sort()
  } finally {
    await client.end()
  }
}

async function defaultKeys (): Promise<string[] | null> {
  const client = new Redis(redisUrl(), { lazyConnect: true, connectTimeout: 2_000, maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  try {
    await client.connect()
  } catch {
    client.disconnect()
    return null
  }
  try {
    const keys: string[] = []
    let cursor = '0'
    do {
      const [next, found] = await client.scan(cursor, 'MATCH', 'fa:*', 'COUNT', 1_000)
      keys.push(...found)
      cursor = next
    } while (cursor !== '0')
    return keys.sort()
  } finally {
    await client.quit()
  }
}

export async function snapshot (): Promise<Leftovers> {
  const [tables, keys] = await Promise.all([publicTables(), defaultKeys()])
  return { tables, keys }
}

/** What `after` holds that `before` did not, one line each; nothing for a server that was not reachable both times. */
export function madeSince (before: Leftovers, after: Leftovers): string[] {
  const made: string[] = []
  const added = (was: string[] | null, is: string[] | null): string[] => {
    if (was === null || is === null) return []
    const had = new Set(was)
    return is.filter((name) => !had.has(name))
  }
  for (const table of added(before.tables, after.tables)) made.push(`PostgreSQL (PG_URL's database): table public.${table}`)
  for (const key of added(before.keys, after.keys)) made.push(`Redis (REDIS_URL's database): key ${key}`)
  return made
}

export async function saveSnapshot (): Promise<void> {
  await mkdir(dirname(SNAPSHOT), { recursive: true })
  await writeFile(SNAPSHOT, JSON.stringify(await snapshot()))
}

/** The lines that fail the suite; none when the snapshot before it is missing (a run that did not start with before.ts). */
export async function checkSnapshot (): Promise<string[]> {
  let before: Leftovers
  try {
    before = JSON.parse(await readFile(SNAPSHOT, 'utf8')) as Leftovers
  } catch {
    return []
  }
  return madeSince(before, await snapshot())
}

// `node leftovers.js snapshot|check`
const command = process.argv[2]
if (command === 'snapshot') await saveSnapshot()
if (command === 'check') {
  const made = await checkSnapshot()
  if (made.length > 0) {
    process.stderr.write(`not ok - the tests left data where a developer's own instance keeps its own (use a schema or key prefix of the test's, test/helpers/services.ts):\n${made.map((line) => `  ${line}\n`).join('')}`)
    process.exitCode = 1
  }
}
