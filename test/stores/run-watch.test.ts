import t from 'tap'
import { RunWatchHub } from '../../lib/stores/run-watch.js'
import type { RunState } from '../../lib/stores/run-watch.js'
import type { RunChange } from '../../lib/stores/types.js'
import { eventually, sleep } from '../helper.js'

t.test('the hub passes on news only: events in order, a cancel once, freed sessions', async (t) => {
  const hub = new RunWatchHub()
  const heard: RunChange[] = []
  const stop = hub.watch('r', (change) => heard.push(change))
  t.ok(hub.watching('r'))
  t.notOk(hub.watching('other'))
  hub.events('r', 2)
  hub.events('r', 1)
  hub.events('r', 2)
  hub.cancel('r')
  hub.cancel('r')
  hub.events('other', 5)
  hub.cancel('other')
  t.same(heard, [{ kind: 'events', lastSeq: 2 }, { kind: 'cancel' }])
  let freed = 0
  const stopSession = hub.watchSession('s', () => { freed++ })
  const stopSession2 = hub.watchSession('s', () => { freed++ })
  hub.sessionFree('s')
  hub.sessionFree('nobody')
  t.equal(freed, 2)
  stopSession()
  stopSession2()
  stopSession2()
  hub.sessionFree('s')
  t.equal(freed, 2, 'stopped')
  stop()
  stop()
  t.notOk(hub.watching('r'))
  hub.close()
})

t.test('the poll makes up lost notifications, one poll at a time, only while something is watched', async (t) => {
  const states = new Map<string, RunState>()
  const freeSessions: string[] = []
  let polls = 0
  let fail = false
  const errors: unknown[] = []
  let release: (() => void) | null = null
  const hub = new RunWatchHub({
    pollIntervalMs: 10,
    poll: async (ids) => {
      polls++
      if (fail) throw new Error('store down')
      if (release === null && ids.includes('slow')) await new Promise<void>((resolve) => { release = resolve })
      return ids.flatMap((id) => states.has(id) ? [states.get(id)!] : [])
    },
    pollSessions: async (ids) => ids.filter((id) => freeSessions.includes(id)),
    onPollError: (error) => errors.push(error)
  })
  await sleep(30)
  t.equal(polls, 0, 'nothing watched, no poll')
  const heard: RunChange[] = []
  const stop = hub.watch('a', (change) => heard.push(change))
  states.set('a', { runId: 'a', lastSeq: 3, cancelRequested: true })
  await eventually(() => heard.length === 2)
  t.same(heard, [{ kind: 'cancel' }, { kind: 'events', lastSeq: 3 }])
  let freed = false
  const stopSession = hub.watchSession('s', () => { freed = true })
  freeSessions.push('s')
  await eventually(() => freed)
  fail = true
  await eventually(() => errors.length > 0)
  fail = false
  // a slow poll is not doubled
  const stopSlow = hub.watch('slow', () => {})
  await eventually(() => release !== null)
  const during = polls
  await sleep(50)
  t.equal(polls, during, 'no second poll while one is on its way')
  release!()
  stopSlow()
  stop()
  stopSession()
  const after = polls
  await sleep(50)
  t.ok(polls <= after + 1, 'the poll stops with the last watcher')
  const byDefault = new RunWatchHub({ poll: async () => [] })
  byDefault.watch('d', () => {})()
  const sessionsOnly = new RunWatchHub({ pollIntervalMs: 10, poll: async () => { polls++; return [] } })
  const stopOnly = sessionsOnly.watchSession('x', () => {})
  await sleep(40)
  stopOnly()
  sessionsOnly.close()
  hub.close()
})

t.test('refresh polls at once (a backend whose notifications just reconnected catches up)', async (t) => {
  let polls = 0
  const hub = new RunWatchHub({ pollIntervalMs: 60_000, poll: async (ids) => { polls++; return ids.map((runId) => ({ runId, lastSeq: 4, cancelRequested: false })) } })
  t.teardown(() => hub.close())
  const heard: RunChange[] = []
  const stop = hub.watch('r', (change) => heard.push(change))
  t.teardown(stop)
  await hub.refresh()
  t.equal(polls, 1)
  t.same(heard, [{ kind: 'events', lastSeq: 4 }])
})
