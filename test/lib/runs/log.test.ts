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
    finish: async () => { calls++; return null },
    // taken over by another instance, which runs it now
    get: async () => ({ status: 'running', lastSeq: 1 })
  }
  const { log, failures } = logOf(store, () => { lost++ })
  log.event(event(1))
  t.equal(lost, 1)
  log.event(event(2))
  t.equal(await log.finish(event(3), { status: 'failed', code: 'CANCELLED', message: '', error: null, durationMs: 0 }, { leaseUntil: Infinity }), 'INSTANCE_LOST',
    'no terminal event is this instance\'s to send')
  t.equal(calls, 1, 'nothing is written after the takeover')
  t.equal(failures(), 0, 'a takeover is not a failure')
})

const completed = (seq: number): RunEvent => ({ seq, type: 'run.completed', data: { output: 'done' }, json: '{"output":"done"}' })
const outcome = { status: 'completed', result: { output: 'done' }, durationMs: 1 } as never
const unavailable = (): Error => Object.assign(new Error('did not answer'), { code: 'STORE_UNAVAILABLE' })
const record = (extra: Record<string, unknown>) => ({ runId: 'r', traceId: 't', status: 'completed', lastSeq: 3, ...extra })

t.test('the end is tried again through an outage: the terminal event as stored is the one to send', async (t) => {
  let refuse = 2
  const finished: StoredEvent[][] = []
  const store = {
    append: async () => { throw unavailable() },
    finish: async (_runId: string, events: StoredEvent[]) => {
      if (refuse-- > 0) throw unavailable()
      finished.push(events)
      return record({})
    }
  }
  const { log, stored, failures } = logOf(store)
  log.event(event(1))
  log.event(event(2))
  await log.flush()
  const terminal = completed(3)
  t.equal(await log.finish(terminal, outcome, { leaseUntil: Date.now() + 60_000 }), terminal)
  t.equal(failures(), 3, 'the failed append and both failed ends are counted')
  t.same(finished.map((events) => events.map((e) => e.seq)), [[1, 2, 3]], 'the events the append could not store go with the end')
  t.same(stored, [[1, 2, 3]])
})

t.test('an end the store never takes while the lease lasts, or a closed store: no terminal event to send', async (t) => {
  let calls = 0
  const down = { finish: async () => { calls++; throw unavailable() } }
  const started = Date.now()
  t.equal(await logOf(down).log.finish(completed(1), outcome, { leaseUntil: Date.now() + 250 }), 'STORE_UNAVAILABLE')
  t.ok(calls > 1 && Date.now() - started < 2_000, `tried ${calls} times, until the lease ended`)
  calls = 0
  const closed = { finish: async () => { calls++; throw Object.assign(new Error('the store is closed'), { code: 'FA_STORE_CLOSED' }) } }
  t.equal(await logOf(closed).log.finish(completed(1), outcome, { leaseUntil: Date.now() + 60_000 }), 'STORE_UNAVAILABLE')
  t.equal(calls, 1, 'a closed store is not asked again')
  calls = 0
  const closedBehind = {
    finish: async () => { calls++; throw Object.assign(new Error('failed'), { code: 'STORE_UNAVAILABLE', cause: { code: 'FA_STORE_CLOSED' } }) }
  }
  t.equal(await logOf(closedBehind).log.finish(completed(1), outcome, { leaseUntil: Date.now() + 60_000 }), 'STORE_UNAVAILABLE')
  t.equal(calls, 1, 'nor one behind a deadline')
})

t.test('a cancel asked for first: the store ended the run cancelled, and that is the terminal event to send', async (t) => {
  const store = { finish: async () => record({ status: 'cancelled', traceId: 'trace' }) }
  const { log, stored } = logOf(store)
  const sent = await log.finish(completed(1), outcome, { leaseUntil: Infinity })
  t.same(sent, {
    seq: 1,
    type: 'run.failed',
    data: { error: { code: 'CANCELLED', message: 'The run was cancelled' }, traceId: 'trace' },
    json: '{"error":{"code":"CANCELLED","message":"The run was cancelled"},"traceId":"trace"}'
  })
  t.same(stored, [[1]])
})

t.test('a run ended by another write: its stored terminal event is sent, and what was stored from the batch on told', async (t) => {
  const kept: StoredEvent[] = [
    { seq: 2, type: 'message.delta', data: '{"text":"2"}' },
    { seq: 3, type: 'run.failed', data: '{"error":{"code":"INSTANCE_LOST","message":"lost"},"traceId":"t"}' }
  ]
  const reads: Array<[number, number]> = []
  let gets = 0
  const store = {
    append: async () => { throw unavailable() },
    // the lease lapsed meanwhile: another instance ended the run
    finish: async () => { throw Object.assign(new Error('lease lost'), { code: 'FA_RUN_LEASE_LOST' }) },
    get: async () => {
      if (gets++ === 0) throw unavailable()
      return record({ status: 'failed' })
    },
    events: async (_runId: string, after: number, limit: number) => { reads.push([after, limit]); return kept }
  }
  let lost = 0
  const { log, stored } = logOf(store, () => { lost++ })
  log.event(event(2))
  await log.flush()
  t.same(await log.finish(completed(3), outcome, { leaseUntil: Date.now() + 60_000 }), {
    seq: 3, type: 'run.failed', data: { error: { code: 'INSTANCE_LOST', message: 'lost' }, traceId: 't' }, json: kept[1]!.data
  })
  t.equal(lost, 1)
  t.same(reads, [[1, 2]], 'read from the first event of the batch to the end')
  t.same(stored, [[2, 3]])

  // one that ended, then gone before its events were read (an ephemeral run's second): nothing to send
  const gone = { finish: async () => null, get: async () => record({}), events: async () => [] }
  t.equal(await logOf(gone).log.finish(completed(3), outcome, { leaseUntil: Infinity }), 'INSTANCE_LOST')
  const purged = { finish: async () => null, get: async () => null }
  t.equal(await logOf(purged).log.finish(completed(3), outcome, { leaseUntil: Infinity }), 'INSTANCE_LOST')
  // a store that cannot be read: what it holds is not known
  const unreadable = { finish: async () => null, get: async () => { throw new Error('broken') } }
  t.equal(await logOf(unreadable).log.finish(completed(3), outcome, { leaseUntil: Infinity }), 'STORE_UNAVAILABLE')
  const eventsUnreadable = { finish: async () => null, get: async () => record({}), events: async () => { throw new Error('broken') } }
  t.equal(await logOf(eventsUnreadable).log.finish(completed(3), outcome, { leaseUntil: Infinity }), 'STORE_UNAVAILABLE')
})

t.test('the first write waits a moment: a run that ends meanwhile writes its first events with its end, in one write', async (t) => {
  const writes: string[] = []
  const store = {
    append: async (_runId: string, events: StoredEvent[]) => { writes.push(`append ${events.map((e) => e.seq).join(',')}`) },
    finish: async (_runId: string, events: StoredEvent[]) => {
      writes.push(`finish ${events.map((e) => e.seq).join(',')}`)
      return record({})
    }
  }
  // a JSON run of a quick agent: run.started, then its end before the first write went
  const quick = logOf(store)
  quick.log.event(event(1))
  await new Promise((resolve) => setImmediate(resolve))
  t.same(writes, [], 'nothing written at once')
  const terminal = completed(2)
  t.equal(await quick.log.finish(terminal, outcome, { leaseUntil: Infinity }), terminal)
  t.same(writes, ['finish 1,2'], 'one write: the first event with the end')
  t.same(quick.stored, [[1, 2]])

  // a longer run: its first events gather for the moment, then go in one append; the next ones as they come
  writes.length = 0
  const longer = logOf(store)
  longer.log.event(event(1))
  await new Promise((resolve) => setImmediate(resolve))
  longer.log.event(event(2))
  await longer.log.flush()
  t.same(writes, ['append 1,2'])
  longer.log.event(event(3))
  await longer.log.flush()
  t.same(writes, ['append 1,2', 'append 3'], 'later writes do not wait')
})

t.test('durable(seq): waits for the write on its way, tries a refused one again while the lease lasts, then gives up; a lost run rejects', async (t) => {
  const kept: number[] = []
  let refuse = 0
  let lost = false
  const store = {
    append: async (_runId: string, events: StoredEvent[]) => {
      if (lost) throw Object.assign(new Error('lease lost'), { code: 'FA_RUN_LEASE_LOST' })
      if (refuse > 0) { refuse--; throw Object.assign(new Error('away'), { code: 'STORE_UNAVAILABLE' }) }
      kept.push(...events.map((e) => e.seq))
    }
  }
  const { log } = logOf(store)
  const lease = { leaseUntil: Date.now() + 10_000 }
  log.event(event(1))
  await log.durable(1, lease)
  t.same(kept, [1], 'the first write\'s wait is cut short: the step waits for its event')
  await log.durable(1, lease)

  refuse = 2
  log.event(event(2))
  await log.durable(2, lease)
  t.same(kept, [1, 2], 'refused twice, then taken')

  refuse = 100
  log.event(event(3))
  await t.rejects(log.durable(3, { leaseUntil: Date.now() + 250 }), { code: 'STORE_UNAVAILABLE', message: 'the run store did not take step event 3 of run r' })

  refuse = 0
  lost = true
  log.event(event(4))
  await t.rejects(log.durable(4, lease), { code: 'FA_RUN_LEASE_LOST' })
})

t.test('a run whose result is in (ending) leaves its first write to its end: one write, however long its turn takes', async (t) => {
  const appended: number[][] = []
  const finished: number[][] = []
  const store = {
    append: async (_runId: string, events: StoredEvent[]) => { appended.push(events.map((e) => e.seq)) },
    finish: async (_runId: string, events: StoredEvent[]) => {
      finished.push(events.map((e) => e.seq))
      return { status: 'completed' }
    }
  }
  const { log, stored } = logOf(store)
  log.event(event(1))
  log.ending()
  // past the first write's wait (10 ms): the session's turn being written, say
  await new Promise((resolve) => setTimeout(resolve, 40))
  t.same(appended, [], 'nothing written alone')
  const end: RunEvent = { seq: 2, type: 'run.completed', data: { output: 1 }, json: '{"output":1}' }
  const kept = await log.finish(end, { status: 'completed', result: { output: 1 } as never, durationMs: 1 }, { leaseUntil: Date.now() + 60_000 })
  t.equal(kept, end)
  t.same(finished, [[1, 2]], 'the first events with the end, in one write')
  t.same(stored, [[1, 2]])
})

t.test('a durable step\'s batch is appended as urgent; once the run is ending, what is left goes with the end, in one write', async (t) => {
  const appended: Array<{ seqs: number[], urgent: boolean }> = []
  const finished: number[][] = []
  let answer = (): void => {}
  const store = {
    append: async (_runId: string, events: StoredEvent[], _owner: string, urgent: boolean) => {
      appended.push({ seqs: events.map((e) => e.seq), urgent })
      // the second batch's answer is held: the run's end comes while it is in flight
      if (appended.length === 2) await new Promise<void>((resolve) => { answer = resolve })
    },
    finish: async (_runId: string, events: StoredEvent[]) => {
      finished.push(events.map((e) => e.seq))
      return { status: 'completed', traceId: 't' }
    }
  }
  const { log } = logOf(store)
  const lease = { leaseUntil: Date.now() + 60_000 }
  log.event(event(1))
  await log.durable(1, lease)
  t.same(appended, [{ seqs: [1], urgent: true }], 'a step waits for it: urgent')
  log.event(event(2))
  await Promise.resolve()
  await Promise.resolve()
  t.same(appended.at(-1), { seqs: [2], urgent: false }, 'nobody waits for a delta')
  log.event(event(3))
  log.event(event(4))
  const terminal: RunEvent = { seq: 5, type: 'run.completed', data: { output: 'x' }, json: '{"output":"x"}' }
  const ending = log.finish(terminal, { status: 'completed', result: { output: 'x' }, durationMs: 0 } as never, lease)
  answer()
  t.equal(await ending, terminal)
  t.same(appended.map((a) => a.seqs), [[1], [2]], 'no append after the end began')
  t.same(finished, [[3, 4, 5]], 'the events left go with the end')
})
