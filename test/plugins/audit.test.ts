import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import { postgresStores } from '../../lib/stores/postgres.js'

import { createAgentService } from '../../app/service.js'
import { auditCount, closeStores, echo, parseSse } from '../helper.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import type { StoreSet } from '../../lib/stores/types.js'

async function exercise (stores: StoreSet): Promise<void> {
  const service = createAgentService({ agents: { echo }, logger: false, ...stores })
  const app = service.app
  const first = (await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'one' } })).json()
  const streamed = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 'two', sessionId: first.sessionId, stream: true } })
  if (parseSse(streamed.body).at(-1)!.event !== 'run.completed') throw new Error('stream failed')
  await app.inject({ method: 'GET', url: '/v1/agents/nope' })
  // closed right away: the queued audit entries must be written on close, not lost
  await service.close(1_000)
}

async function durable (t: Test, open: () => StoreSet): Promise<void> {
  const stores = open()
  await exercise(stores)
  await closeStores([stores])
  const again = open()
  t.teardown(() => closeStores([again]))
  t.equal(await auditCount(again.auditStore), 3, 'every request audited, none lost on close')
  const page = await again.auditStore!.query({ limit: 10 })
  t.same(page.entries.map((e) => e.status), [404, 200, 200], 'most recent first')
  const sessions = await again.sessionStore!.list({ limit: 10 })
  t.equal(sessions.sessions.length, 1)
  const session = await again.sessionStore!.get(sessions.sessions[0]!.id)
  t.equal(session!.turns, 2, 'runs wrote their turns through the session store')
  t.same(session!.messages.map((m) => m.content), ['one', 'one', 'two', 'two'])
}

t.test('SQLite: the service writes audit entries and sessions that survive a restart', async (t) => {
  const file = join(await mkdtemp(join(tmpdir(), 'fa-audit-')), 'data.db')
  await durable(t, () => sqliteStores(file))
})

t.test('PostgreSQL: the service writes audit entries and sessions that survive a restart', async (t) => {
  if (!await requirePg(t)) return
  const schema = withPgSchema(t)
  await durable(t, () => postgresStores(pgUrl(), { schema }))
})
