// How a run ends, on every run store, through the service: its terminal event is stored before anyone is sent it
// (a store whose finishing write is held: the client has not been sent the end until the write is let go), and a
// cancel answered 202 ends the run CANCELLED even when it lands while the completion is being written (cancel and
// finish are one compare-and-set in the store).
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { eventually, listen } from '../helper.js'
import type { Agent } from '../../lib/core/types.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { SqliteRunStore } from '../../lib/stores/sqlite-runs.js'
import type { RunStore } from '../../lib/stores/types.js'
import { pgReachable, pgUrl, redisReachable, redisUrl, requireService, withPgSchema, withRedisPrefix } from '../helpers/services.js'
import { followRun, openSse } from '../helpers/streams.js'
import type { SseClient } from '../helpers/streams.js'

const deltas: Agent = {
  async * run () {
    yield 'one '
    yield 'two '
    yield 'three'
  }
}

interface Backend {
  name: string
  reachable: () => Promise<boolean>
  howTo: string
  store: (t: Test) => Promise<RunStore>
}

const backends: Backend[] = [
  { name: 'memory', reachable: async () => true, howTo: '', store: async () => new MemoryRunStore() },
  { name: 'SQLite', reachable: async () => true, howTo: '', store: async (t) => new SqliteRunStore(join(t.testdir(), 'runs.db')) },
  {
    name: 'PostgreSQL',
    reachable: () => pgReachable(),
    howTo: 'start PostgreSQL or set PG_URL',
    store: async (t) => new PostgresRunStore(pgUrl(), { schema: withPgSchema(t) })
  },
  {
    name: 'Redis',
    reachable: () => redisReachable(),
    howTo: 'start Redis or set REDIS_URL',
    store: async (t) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisRunStore(client, { prefix: withRedisPrefix(t, client) })
    }
  }
]

/** The store, with every `finish` held until `release()`; `held()` says how many are. */
function holdingFinish (store: RunStore): { store: RunStore, held: () => number, release: () => void } {
  let release = (): void => {}
  const gate = new Promise<void>((resolve) => { release = resolve })
  let held = 0
  const holding = new Proxy(store, {
    get (target, property) {
      if (property === 'finish') {
        return async (...args: Parameters<RunStore['finish']>) => {
          held++
          await gate
          return target.finish(...args)
        }
      }
      const value = Reflect.get(target, property, target) as unknown
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
    }
  })
  return { store: holding, held: () => held, release }
}

/** The store, whose first `finish` is applied but answered as a deadline passed (its answer lost on the way). */
function losingFirstAnswer (store: RunStore): RunStore {
  let lost = false
  return new Proxy(store, {
    get (target, property) {
      if (property === 'finish') {
        return async (...args: Parameters<RunStore['finish']>) => {
          const record = await target.finish(...args)
          if (lost) return record
          lost = true
          throw Object.assign(new Error('runStore.finish() did not answer within 5000 ms'), { code: 'STORE_UNAVAILABLE' })
        }
      }
      const value = Reflect.get(target, property, target) as unknown
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
    }
  })
}

/** Whether an event of `type` reaches the client within `ms` (false: it did not, so far). */
async function arrives (client: SseClient, type: string, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (client.events.some((event) => event.event === type)) return true
    await delay(5)
  }
  return client.events.some((event) => event.event === type)
}

const terminal = (event: { event: string }): boolean => event.event === 'run.completed' || event.event === 'run.failed'

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    if (!requireService(t, await backend.reachable(), backend.howTo)) return

    t.test('the terminal event is stored before anyone is sent it: held in its write, the client has not got it', async (t) => {
      const store = await backend.store(t)
      t.teardown(() => store.close?.())
      const holding = holdingFinish(store)
      const { url } = await listen(t, { agents: { deltas }, runStore: holding.store })
      // (teardowns run last first: the service closes once its run may end)
      t.teardown(holding.release)
      const run = await openSse(url, '/v1/agents/deltas/runs', { input: null })
      await eventually(() => holding.held() === 1, 10_000, 'the finish held')
      // what came before the end reaches the client; the end itself does not while its write is held
      await eventually(() => run.events.length >= 4, 10_000, 'the events before the end')
      const runId = run.events[0]!.data.runId as string
      t.notOk(await arrives(run, 'run.completed', 500), 'not sent while its write is held')
      t.match(await store.get(runId), { status: 'running' })
      holding.release()
      await run.ended
      t.same(run.events.map((e) => [e.id, e.event]), [[1, 'run.started'], [2, 'message.delta'], [3, 'message.delta'], [4, 'message.delta'], [5, 'run.completed']])
      const [stored] = await store.events(runId, 4, 1)
      t.same(JSON.parse(stored!.data), run.events.at(-1)!.data, 'the event sent is the one stored')
      t.match(await store.get(runId), { status: 'completed', lastSeq: 5 })
    })

    t.test('an end applied though its answer was lost: tried again, the run ends once, and its client gets the end stored', async (t) => {
      const store = await backend.store(t)
      t.teardown(() => store.close?.())
      const { app } = await listen(t, { agents: { deltas }, runStore: losingFirstAnswer(store) }).then(({ service }) => service)
      const res = await app.inject({ method: 'POST', url: '/v1/agents/deltas/runs', payload: { input: null } })
      t.equal(res.statusCode, 200)
      const runId = res.json().runId as string
      const record = (await store.get(runId))!
      t.match(record, { status: 'completed', lastSeq: 5 })
      t.same(res.json(), record.result, 'the answer is the result stored')
      t.same((await store.events(runId, 0, 10)).map((e) => e.seq), [1, 2, 3, 4, 5], 'each event once')
      t.equal(app.agentService.stats.runLogFailures, 1, 'the lost answer counted')
    })

    t.test('a cancel answered 202 while the completion is being written ends the run CANCELLED, for everyone', async (t) => {
      const store = await backend.store(t)
      t.teardown(() => store.close?.())
      const holding = holdingFinish(store)
      const { url } = await listen(t, { agents: { deltas }, runStore: holding.store })
      t.teardown(holding.release)

      // a background run (nobody attached) and a streamed one: both completed by their agent, their end held
      const queued = await fetch(`${url}/v1/agents/deltas/runs`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: null, background: true })
      })
      t.equal(queued.status, 202)
      const background = (await queued.json() as { runId: string }).runId
      const streamed = await openSse(url, '/v1/agents/deltas/runs', { input: null })
      await eventually(() => holding.held() === 2 && streamed.events.length >= 4, 10_000, 'both finishes held')
      const runId = streamed.events[0]!.data.runId as string
      const follower = await followRun(url, background)
      for (const id of [background, runId]) {
        const cancel = await fetch(`${url}/v1/runs/${id}/cancel`, { method: 'POST' })
        t.equal(cancel.status, 202, 'the run is still running: the cancel is accepted')
      }
      holding.release()
      await streamed.ended
      await follower.ended
      t.match(streamed.events.at(-1), { id: 5, event: 'run.failed', data: { error: { code: 'CANCELLED', message: 'The run was cancelled' } } },
        'its client is sent the end the store kept')
      t.notOk(streamed.events.some((e) => e.event === 'run.completed'))
      t.match(follower.events.at(-1), { id: 5, event: 'run.failed', data: { error: { code: 'CANCELLED' } } })
      for (const id of [background, runId]) {
        t.match(await (await fetch(`${url}/v1/runs/${id}`)).json(), { status: 'cancelled', lastSeq: 5, error: { code: 'CANCELLED' } })
        t.notOk('result' in (await store.get(id))!, 'no result')
        const again = await fetch(`${url}/v1/runs/${id}/cancel`, { method: 'POST' })
        t.match({ status: again.status, body: await again.json() }, { status: 409, body: { code: 'RUN_ALREADY_ENDED' } })
      }
      t.same(streamed.events.filter(terminal).length, 1, 'one terminal event')
    })
  })
}
