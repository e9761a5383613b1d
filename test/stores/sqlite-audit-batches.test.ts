import t from 'tap'
import { join } from 'node:path'
import { SqliteAuditStore } from '../../lib/stores/sqlite.js'
import type { AuditEntry } from '../../lib/stores/types.js'

// The SQLite audit store appends a batch as multi-row INSERTs of 32, 16, ... 1 rows (bench/audit-durable.js):
// whatever the batch size, every entry is written once and in order.
t.test('batches of every size keep their entries and their order', async (t) => {
  const store = new SqliteAuditStore(join(t.testdir(), 'audit.db'))
  t.teardown(() => store.close())
  const sizes = [1, 2, 3, 31, 32, 33, 63, 64, 100]
  for (const n of sizes) {
    await store.append(Array.from({ length: n }, (_, i): AuditEntry => ({
      id: `${n}-${i}`, at: '2026-01-01T00:00:00.000Z', requestId: 'r', method: 'POST', route: '/v1/agents/:name/runs',
      url: '/v1/agents/echo/runs', status: i % 2 === 0 ? 200 : 500, durationMs: 1, principal: 'anonymous', ip: '127.0.0.1',
      ...(i % 3 === 0 ? { agent: 'echo' } : {})
    })))
  }
  await store.append([])
  const expected = sizes.flatMap((n) => Array.from({ length: n }, (_, i) => `${n}-${i}`))
  t.equal(await store.count(), expected.length)
  const ids: string[] = []
  let cursor: string | undefined
  do {
    const page = await store.query({ limit: 500, cursor })
    ids.push(...page.entries.map((e) => e.id))
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  t.same(ids.reverse(), expected)
  const echo = await store.query({ limit: 500, agent: 'echo' })
  t.equal(echo.entries.length, sizes.reduce((sum, n) => sum + Math.ceil(n / 3), 0), 'the agent column is written for every row')
})
