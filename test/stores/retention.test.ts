// Retention (docs/stores.md) in each durable store: old audit entries and approvals that are no longer pending are purged in
// bounded batches, by the service's periodic, unref'd purge.
import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { postgresStores } from '../../lib/stores/postgres.js'
import { sqliteStores } from '../../lib/stores/sqlite.js'
import type { ApprovalStore, AuditStore, StoreSet } from '../../lib/stores/types.js'
import { auditCount, build, echo, eventually } from '../helper.js'
import { pgUrl, requirePg, withPgSchema } from '../helpers/services.js'
import { approval, auditEntry } from '../../lib/testing/conformance.js'

const DAY = 24 * 60 * 60_000

async function closeAll (set: StoreSet): Promise<void> {
  for (const store of new Set(Object.values(set).map((s) => ('store' in s ? s.store : s) as { close?: () => Promise<void> }))) await store.close?.()
}

function retentionConformance (t: Test, name: string, open: (t: Test) => Required<StoreSet>): void {
  t.test(`${name}: audit entries older than the cutoff go, oldest first, a batch at a time`, async (t) => {
    const set = open(t)
    t.teardown(() => closeAll(set))
    const audit = set.auditStore as Required<AuditStore>
    const now = Date.now()
    await audit.append([0, 1, 2, 3, 4].map((i) => auditEntry(i, { at: new Date(now - 3 * DAY + i).toISOString() })))
    await audit.append([5, 6, 7].map((i) => auditEntry(i, { at: new Date(now - 1_000 + i).toISOString() })))
    t.equal(await audit.purge(now - DAY, 2), 2)
    t.equal(await audit.purge(now - DAY, 2), 2)
    t.equal(await audit.purge(now - DAY, 2), 1)
    t.equal(await audit.purge(now - DAY, 2), 0, 'nothing left to purge')
    t.equal(await auditCount(audit), 3)
    t.same((await audit.query({ limit: 10 })).entries.map((e) => e.id), ['entry-7', 'entry-6', 'entry-5'], 'the recent ones are kept')
  })

  t.test(`${name}: approvals no longer pending, or long expired, go after their retention; pending ones stay`, async (t) => {
    const set = open(t)
    t.teardown(() => closeAll(set))
    const approvals = set.approvalStore as Required<ApprovalStore>
    const now = Date.now()
    const old = new Date(now - 10 * DAY).toISOString()
    const decision = { approved: true, comment: null, decidedBy: 'ops', decidedAt: old }
    await approvals.create(approval('old-approved', { status: 'approved', requestedAt: old, decision }))
    await approvals.create(approval('old-cancelled', { status: 'cancelled', requestedAt: old }))
    await approvals.create(approval('old-expired-pending', { requestedAt: old, expiresAt: new Date(now - 9 * DAY).toISOString() }))
    await approvals.create(approval('old-still-pending', { requestedAt: old, expiresAt: new Date(now + DAY).toISOString() }))
    await approvals.create(approval('recent-approved', { status: 'approved', decision }))
    t.equal(await approvals.purge(now - 7 * DAY, 2), 2, 'a bounded batch')
    t.equal(await approvals.purge(now - 7 * DAY, 2), 1)
    t.equal(await approvals.purge(now - 7 * DAY, 2), 0)
    for (const id of ['old-approved', 'old-cancelled', 'old-expired-pending']) t.equal(await approvals.get(id), null, id)
    t.equal((await approvals.get('old-still-pending'))?.status, 'pending')
    t.equal((await approvals.get('recent-approved'))?.status, 'approved')
  })

  t.test(`${name}: the service purges on its own timer with auditRetentionMs`, async (t) => {
    const set = open(t)
    const { runStore: _runs, webhookStore: _outbox, ...stores } = set
    const service = build(t, { agents: { echo }, ...stores, auditRetentionMs: 1, approvalRetentionMs: 1 })
    t.teardown(() => closeAll(set))
    const res = await service.app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: 1 } })
    t.equal(res.statusCode, 200)
    const core = service.app.agentService
    await eventually(async () => (await auditCount(set.auditStore)) > 0)
    core.stopPurging()
    core.startPurging(service.app.log, 20)
    await eventually(async () => (await auditCount(set.auditStore)) === 0, 5_000, 'the audit entries purged')
  })
}

retentionConformance(t, 'SQLite', (t) => sqliteStores(join(t.testdir(), 'retention.db')))
if (await requirePg(t)) retentionConformance(t, 'PostgreSQL', (t) => postgresStores({ connectionString: pgUrl(), schema: withPgSchema(t) }))

t.test('a purge that fails is logged and tried again on the next tick', async (t) => {
  const { MemoryApprovalStore, MemoryAuditStore } = await import('../../lib/stores/memory.js')
  const { Writable } = await import('node:stream')
  const warnings: string[] = []
  const stream = new Writable({ write (chunk: Buffer, _e, cb) { const line = JSON.parse(chunk.toString()) as { level: number, msg: string }; if (line.level === 40) warnings.push(line.msg); cb() } })
  const failing = async (): Promise<number> => { throw new Error('down') }
  const service = build(t, {
    agents: { echo },
    auditStore: Object.assign(new MemoryAuditStore(), { purge: failing }),
    approvalStore: Object.assign(new MemoryApprovalStore(), { purge: failing }),
    logger: { level: 'warn', stream }
  })
  await service.app.ready()
  service.app.agentService.stopPurging()
  service.app.agentService.startPurging(service.app.log, 20)
  await eventually(() => warnings.includes('could not purge old audit entries') && warnings.includes('could not purge old approvals'))
  t.pass('both logged')
})
