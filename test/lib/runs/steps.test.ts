// The journal of durable steps (lib/runs/steps.ts) and the decision check (lib/runs/decisions.ts), on their own.
import t from 'tap'
import { readApprovals, readJournal } from '../../../lib/runs/steps.js'
import { decisionOf } from '../../../lib/runs/decisions.js'
import type { ApprovalRecord, StoredEvent } from '../../../lib/stores/types.js'

const step = (seq: number, name: string, index: number, output: unknown): StoredEvent => ({ seq, type: 'step.completed', data: JSON.stringify({ name, index, output }) })

t.test('readJournal: sources in order, the first found keeps an index; a log shorter than said (purged) ends its source', async (t) => {
  const logs: Record<string, StoredEvent[]> = {
    own: [{ seq: 1, type: 'run.started', data: '{}' }, step(2, 'a', 0, 'mine')],
    source: [step(1, 'a', 0, 'theirs'), step(2, 'b', 1, { n: 1 }), step(3, 'b', 1, 'twice')]
  }
  const reads: string[] = []
  const read = async (runId: string, after: number, limit: number) => {
    reads.push(`${runId}>${after}`)
    return logs[runId]!.filter((e) => e.seq > after).slice(0, limit)
  }
  const journal = await readJournal(read, [{ runId: 'own', lastSeq: 5 }, { runId: 'source', lastSeq: 3, foreign: true }])
  t.same([...journal.values()], [
    { name: 'a', index: 0, json: '"mine"' },
    { name: 'b', index: 1, json: '{"n":1}', foreign: true }
  ])
  t.same(reads, ['own>0', 'own>2', 'source>0'], 'the own log ended before its lastSeq: no more reads of it')
})

t.test('readApprovals: the approvals asked, in order, each with its decision; a decision of one not asked in the log is left out', async (t) => {
  const record = (id: string, status: ApprovalRecord['status']): ApprovalRecord => ({
    id, runId: 'r', agent: 'x', sessionId: 's', principal: 'p', action: 'act', payload: null, reason: null, status,
    requestedAt: '2026-11-27T00:00:00.000Z', expiresAt: '2026-11-27T01:00:00.000Z'
  })
  const event = (seq: number, type: string, approval: ApprovalRecord): StoredEvent => ({ seq, type, data: JSON.stringify({ approval }) })
  const log = [
    event(1, 'approval.decided', record('elsewhere', 'approved')),
    event(2, 'approval.requested', record('a', 'pending')),
    step(3, 'x', 0, null),
    event(4, 'approval.requested', record('b', 'pending')),
    event(5, 'approval.decided', record('a', 'rejected')),
    event(6, 'approval.requested', record('a', 'pending'))
  ]
  const read = async (_runId: string, after: number, limit: number) => log.filter((e) => e.seq > after).slice(0, limit)
  t.same(await readApprovals(read, 'r', 9), [
    { approval: record('a', 'pending'), decided: record('a', 'rejected') },
    { approval: record('b', 'pending') }
  ])
  t.same(await readApprovals(read, 'r', 3), [{ approval: record('a', 'pending') }], 'up to lastSeq only')
})

t.test('decisionOf: the compiled schemas are kept for a few hundred approvals, the oldest dropped first', async (t) => {
  const approval = (n: number): ApprovalRecord => ({
    id: `a${n}`, runId: 'r', agent: 'x', sessionId: 's', principal: 'p', action: 'act', payload: n, reason: null, status: 'pending',
    requestedAt: new Date().toISOString(), expiresAt: new Date().toISOString(), schema: { type: 'integer', maximum: n }
  })
  for (let n = 0; n < 300; n++) t.equal(decisionOf(approval(n), { approved: true, payload: n }, null).payload, n)
  t.throws(() => decisionOf(approval(1), { approved: true, payload: 2 }, null), { statusCode: 400, message: 'body/payload must be <= 1' }, 'compiled again after it was dropped')
})
