import t from 'tap'
import { RunLog } from '../../../lib/runs/log.js'
import type { RunEvent } from '../../../lib/runs/run.js'
import type { StoredEvent } from '../../../lib/stores/types.js'

const event = (seq: number): RunEvent => ({ seq, type: 'message.delta', data: { text: String(seq) }, json: `{"text":"${seq}"}` })

function logOf (store: object, onLost = (): void => {}): { log: RunLog, stored: number[][], failures: () => number } {
  const stored: number[][] = []
  let failures = 0
  const log = new RunLog({
    store: store as never,
    runId: 'r',
    retentionMs: 1000,
    log: { error: () => {}, warn: () => {} } as never,
    owner: 'me',
    onFailure: () => { failures++ },
    onLost,
    onStored: (events) => { stored.push(events.map((e) => e.seq)) }
  })
  return { log, stored, failures: () => failures }
}

t.test('an in-process store takes each event at once; one it refuses is written in front of the next', async (t) => {
  const kept: StoredEvent[] = []
  let refuse = 0
  const store = {
    appendNow: (_runId: string, events: StoredEvent[]) => {
      if (refuse > 0) { refuse--; throw new Error('refused') }
      kept.push(...events)
    },
    append: async (_runId: string, events: StoredEvent[]) => {
      if (refuse > 0) { refuse--; throw new Error('refused') }
      kept.push(...events)
    }
  }
  const { log, stored, failures } = logOf(store)
  log.event(event(1))
  t.same(stored, [[1]], 'stored before event() returns')
  refuse = 2
  log.event(event(2))
  log.event(event(3))
  await log.flush()
  t.equal(failures(), 2, 'both refusals are counted: the one at once and the batched one')
  log.event(event(4))
  await log.flush()
  t.same(kept.map((e) => e.seq), [1, 2, 3, 4], 'in order, nothing lost')
  log.event(event(5))
  t.same(kept.map((e) => e.seq), [1, 2, 3, 4, 5], 'at once again once nothing waits')
})

t.test('an in-process store that says the run is another instance\'s: the log stops at once, and writes nothing more', async (t) => {
  let calls = 0
  let lost = 0
  const store = {
    appendNow: () => { calls++; throw Object.assign(new Error('lease lost'), { code: 'FA_RUN_LEASE_LOST' }) },
    finish: async () => { calls++; return null }
  }
  const { log, failures } = logOf(store, () => { lost++ })
  log.event(event(1))
  t.equal(lost, 1)
  log.event(event(2))
  await log.finish(event(3), { status: 'failed', code: 'CANCELLED', message: '', error: null, durationMs: 0 })
  t.equal(calls, 1, 'nothing is written after the takeover')
  t.equal(failures(), 0, 'a takeover is not a failure')
})
