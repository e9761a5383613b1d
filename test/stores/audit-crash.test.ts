// Audit durability under kill -9 (docs/stores.md): a child-process service with its audit log in SQLite or in
// PostgreSQL serves a burst of runs and approval decisions and is killed with SIGKILL mid-burst. Every request
// the client saw a 2xx for has its audit entry (by request id): its entry was committed before its answer.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { PostgresAuditStore } from '../../lib/stores/postgres.js'
import { SqliteAuditStore } from '../../lib/stores/sqlite.js'
import type { AuditStore } from '../../lib/stores/types.js'
import { pgChildEnv, pgUrl, requirePg, withPgSchema } from '../helpers/services.js'

const RUNS = 300
const DECISIONS = 100
const ROUNDS = 2
const CONCURRENCY = 32
// each append waits this long first (the fixture's AUDIT_DELAY_MS), as behind other traffic on a busy database:
// entries written after their answers would be lost by the dozen
const AUDIT_DELAY_MS = 20

/** Every request id the store holds an entry for. */
async function storedIds (store: AuditStore): Promise<Set<string>> {
  const ids = new Set<string>()
  let cursor: string | undefined
  do {
    const page = await store.query({ limit: 500, cursor })
    for (const entry of page.entries) ids.add(entry.requestId)
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  return ids
}

/** One round: the child serves the burst, is killed once a third of it is answered; what the client saw 2xx for. */
async function burst (t: Test, env: Record<string, string>, round: number): Promise<{ acknowledged: string[], answered: number }> {
  const script = fileURLToPath(new URL('../fixtures/audit-burst.js', import.meta.url))
  const child = spawn(process.execPath, [script], { env: { ...process.env, ...env, APPROVALS: String(DECISIONS), AUDIT_DELAY_MS: String(AUDIT_DELAY_MS) }, stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  t.teardown(() => { child.kill('SIGKILL') })
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      if (out.includes('\n')) resolve(Number(out.trim()))
    })
    child.once('exit', () => reject(new Error('the child exited before listening')))
  })
  const base = `http://127.0.0.1:${port}`
  const acknowledged: string[] = []
  let answered = 0
  const send = async (i: number): Promise<void> => {
    // runs and decisions interleaved: one decision every fourth request
    const decision = i % 4 === 3 && i / 4 < DECISIONS
    const id = `r${round}-${i}`
    const url = decision ? `${base}/v1/approvals/ap-${Math.floor(i / 4)}` : `${base}/v1/agents/echo/runs`
    const body = decision ? { approved: true } : { input: { i } }
    try {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': id }, body: JSON.stringify(body) })
      await res.arrayBuffer()
      answered++
      if (res.status >= 200 && res.status < 300) acknowledged.push(id)
      if (answered === Math.floor((RUNS + DECISIONS) / 3)) child.kill('SIGKILL')
    } catch {
      // the child is dead: the requests in flight fail
    }
  }
  // CONCURRENCY clients, each sending its next request once answered, until the child dies
  let next = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < RUNS + DECISIONS && child.exitCode === null && child.signalCode === null) await send(next++)
  }))
  await exited
  return { acknowledged, answered }
}

async function crashRounds (t: Test, env: (round: number) => Record<string, string>, open: (round: number) => AuditStore): Promise<void> {
  for (let round = 0; round < ROUNDS; round++) {
    const { acknowledged, answered } = await burst(t, env(round), round)
    const store = open(round)
    const ids = await storedIds(store)
    await store.close?.()
    const missing = acknowledged.filter((id) => !ids.has(id))
    t.ok(acknowledged.length >= (RUNS + DECISIONS) / 3 - 1 && answered < RUNS + DECISIONS, `killed mid-burst: ${acknowledged.length} acknowledged of ${RUNS + DECISIONS} sent (${answered} answered)`)
    t.same(missing, [], `kill -9 round ${round + 1}: ${missing.length} acknowledged requests without an audit entry (${ids.size} entries stored)`)
  }
}

t.test('SQLite: every acknowledged request has its audit entry after kill -9', async (t) => {
  // t.testdir() makes the folder afresh: once
  const dir = t.testdir()
  const file = (round: number): string => join(dir, `audit-${round}.db`)
  await crashRounds(t, (round) => ({ AUDIT_SQLITE: file(round) }), (round) => new SqliteAuditStore(file(round)))
})

t.test('PostgreSQL: every acknowledged request has its audit entry after kill -9', async (t) => {
  if (!await requirePg(t)) return
  const schemas = [withPgSchema(t), withPgSchema(t)]
  await crashRounds(t, (round) => ({ AUDIT_PG: pgUrl(), AUDIT_SCHEMA: schemas[round]!, ...pgChildEnv(schemas[round]!) }), (round) => new PostgresAuditStore(pgUrl(), { schema: schemas[round] }))
})
