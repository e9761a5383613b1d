// The run stores under the service, over real sockets: a run streamed over SSE is stored byte for byte (its
// replay from /v1/runs/:id/events is the same text), and a second service on the same data follows a run live and
// cancels it (the run ends on the first service within a second).
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { build, listen, parseSse } from '../helper.js'
import type { ParsedEvent } from '../helper.js'
import type { Agent } from '../../lib/core/types.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { SqliteRunStore } from '../../lib/stores/sqlite-runs.js'
import type { RunStore } from '../../lib/stores/types.js'
import { cancelAskedAtHandOff, cancelAskedBeforeDeath } from '../helpers/recovery.js'
import { pgReachable, pgUrl, redisReachable, redisUrl, requireService, withPgSchema, withRedisPrefix } from '../helpers/services.js'

const deltas: Agent = {
  async * run () {
    for (let i = 1; i <= 100; i++) yield `delta ${i} é ✓ \u2028 "quoted" `
  }
}

// streams a delta every 20 ms until its run is aborted
const ticker: Agent = {
  async * run (_input, ctx) {
    for (let i = 1; ; i++) {
      await delay(20, undefined, { signal: ctx.signal })
      yield `tick ${i} `
    }
  }
}

// checkpoints, then fails unless resumed or told not to; a resumed run waits for `resumedMayFinish` when told to
let resumedMayFinish: Promise<void> = Promise.resolve()
const flaky: Agent<{ fail?: boolean, wait?: boolean }> = {
  async run (input, ctx) {
    if (ctx.resume === undefined) await ctx.checkpoint({ half: 'done' })
    if (input.fail === true && ctx.resume === undefined) throw new Error('crash after the checkpoint')
    if (input.wait === true) {
      ctx.emit('resumed.waiting')
      await resumedMayFinish
    }
    return { output: { resumed: ctx.resume !== undefined } }
  }
}

interface Stream {
  status: number
  /** everything received so far, as sent */
  text: () => string
  events: ParsedEvent[]
  next: (match: (event: ParsedEvent) => boolean, timeoutMs?: number) => Promise<ParsedEvent>
  ended: Promise<void>
}

/** Reads a Server-Sent Events response as it comes, keeping its text. */
async function stream (url: string, init: RequestInit = {}): Promise<Stream> {
  const response = await fetch(url, { ...init, headers: { accept: 'text/event-stream', ...init.headers } })
  let text = ''
  const events: ParsedEvent[] = []
  const ended = (async () => {
    const decoder = new TextDecoder()
    let parsed = 0
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true })
      const cut = text.lastIndexOf('\n\n')
      if (cut + 2 > parsed) {
        events.push(...parseSse(text.slice(parsed, cut + 2)))
        parsed = cut + 2
      }
    }
  })()
  ended.catch(() => {})
  return {
    status: response.status,
    text: () => text,
    events,
    async next (match, timeoutMs = 5_000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const found = events.find(match)
        if (found !== undefined) return found
        if (Date.now() > deadline) throw new Error(`no such event within ${timeoutMs} ms; got ${events.length} events`)
        await delay(2)
      }
    },
    ended
  }
}

/** The events of a stream's text, without comments (`: ping`). */
function eventText (text: string): string {
  return text.split('\n\n').filter((block) => block !== '' && !block.startsWith(':')).map((block) => `${block}\n\n`).join('')
}

interface Backend {
  name: string
  reachable: () => Promise<boolean>
  howTo: string
  /** a store on fresh data, and a second one on the same data (another instance's) */
  stores: (t: Test) => Promise<[RunStore, RunStore]>
}

const backends: Backend[] = [
  {
    name: 'memory (one store, two services)',
    reachable: async () => true,
    howTo: '',
    stores: async () => {
      const store = new MemoryRunStore()
      return [store, store]
    }
  },
  {
    name: 'SQLite (two connections on one file)',
    reachable: async () => true,
    howTo: '',
    stores: async (t) => {
      const file = join(t.testdir(), 'runs.db')
      return [new SqliteRunStore(file), new SqliteRunStore(file)]
    }
  },
  {
    name: 'PostgreSQL (two pools on one schema)',
    reachable: () => pgReachable(),
    howTo: 'start PostgreSQL or set PG_URL',
    stores: async (t) => {
      const schema = withPgSchema(t)
      return [new PostgresRunStore(pgUrl(), { schema }), new PostgresRunStore({ connectionString: pgUrl(), max: 4 }, { schema })]
    }
  },
  {
    name: 'Redis (two clients on one prefix)',
    reachable: () => redisReachable(),
    howTo: 'start Redis or set REDIS_URL',
    stores: async (t) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      const prefix = withRedisPrefix(t, client)
      return [new RedisRunStore(redisUrl(), { prefix }), new RedisRunStore(client, { prefix })]
    }
  }
]

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    if (!requireService(t, await backend.reachable(), backend.howTo)) return

    t.test('a run of 100 deltas over SSE is replayed from the store byte for byte', async (t) => {
      const [store] = await backend.stores(t)
      t.teardown(() => store.close?.())
      const { url } = await listen(t, { agents: { deltas }, runStore: store })
      const run = await stream(`${url}/v1/agents/deltas/runs`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: 'go' })
      })
      await run.ended
      t.equal(run.events.length, 102, 'run.started, 100 deltas, run.completed')
      t.equal(run.events.at(-1)!.event, 'run.completed')
      const runId = run.events.at(-1)!.data.runId as string
      const replay = await stream(`${url}/v1/runs/${runId}/events`)
      await replay.ended
      t.equal(replay.status, 200)
      t.equal(eventText(replay.text()), eventText(run.text()), 'the same bytes')
      const middle = await stream(`${url}/v1/runs/${runId}/events`, { headers: { 'last-event-id': '50' } })
      await middle.ended
      t.equal(eventText(middle.text()), eventText(run.text()).split('\n\n').slice(50).join('\n\n'), 'from a cursor, the rest of them')
      const record = await (await fetch(`${url}/v1/runs/${runId}`)).json()
      t.match(record, { runId, status: 'completed', lastSeq: 102, result: { runId, status: 'completed' } })
    })

    t.test('a resumed run goes on in its record and log; one whose record is gone starts afresh', async (t) => {
      const [store] = await backend.stores(t)
      t.teardown(() => store.close?.())
      const { app } = build(t, { agents: { flaky }, runStore: store })
      const start = async (payload: Record<string, unknown>) =>
        parseSse((await app.inject({ method: 'POST', url: '/v1/agents/flaky/runs', payload: { ...payload, stream: true } })).body)
      const first = await start({ input: { fail: true } })
      t.same(first.map((e) => e.event), ['run.started', 'checkpoint.saved', 'run.failed'])
      const runId = first[0]!.data.runId as string
      const resumed = await start({ input: {}, resumeRunId: runId })
      t.same(resumed.map((e) => [e.id, e.event]), [[5, 'run.started'], [6, 'run.completed']], 'its seqs go on from its log, past the marker')
      t.match(await store.get(runId), { status: 'completed', attempt: 2, lastSeq: 6 })

      const second = await start({ input: { fail: true } })
      const gone = second[0]!.data.runId as string
      t.ok(await store.purge(Date.now() + 2 * 3_600_000, 100) >= 1, 'its record purged, its checkpoint kept')
      const afresh = await start({ input: {}, resumeRunId: gone })
      t.same(afresh.map((e) => [e.id, e.event]), [[1, 'run.started'], [2, 'run.completed']])
      t.match(await store.get(gone), { status: 'completed', attempt: 1, lastSeq: 2 })
    })

    t.test('a cancel asked for before its instance died wins over recovery: a resumable agent\'s run ends cancelled, not requeued', async (t) => {
      const [store] = await backend.stores(t)
      t.teardown(() => store.close?.())
      await cancelAskedBeforeDeath(t, store)
    })

    t.test('a cancel answered 202 while a drain hands its run off: the run ends cancelled, not requeued', async (t) => {
      const stores = await backend.stores(t)
      t.teardown(async () => { await stores[0].close?.(); await stores[1].close?.() })
      await cancelAskedAtHandOff(t, stores)
    })

    t.test('a resumed run has one history: its log reads on past the first attempt\'s end, for followers live or late', async (t) => {
      const [storeA, storeB] = await backend.stores(t)
      t.teardown(async () => { await storeA.close?.(); await storeB.close?.() })
      const a = await listen(t, { agents: { flaky }, runStore: storeA })
      const b = await listen(t, { agents: { flaky }, runStore: storeB })
      const post = (body: Record<string, unknown>) => stream(`${a.url}/v1/agents/flaky/runs`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body)
      })
      const first = await post({ input: { fail: true } })
      await first.ended
      t.same(first.events.map((e) => [e.id, e.event]), [[1, 'run.started'], [2, 'checkpoint.saved'], [3, 'run.failed']])
      const runId = first.events[0]!.data.runId as string
      let release = (): void => {}
      resumedMayFinish = new Promise((resolve) => { release = resolve })
      t.teardown(() => release())
      const resumed = await post({ input: { wait: true }, resumeRunId: runId })
      await resumed.next((e) => e.event === 'resumed.waiting')
      // on another instance, while the second attempt runs: from the start, through the first attempt's end
      const live = await stream(`${b.url}/v1/runs/${runId}/events`)
      await live.next((e) => e.event === 'resumed.waiting')
      release()
      await resumed.ended
      await live.ended
      t.same(live.events.map((e) => [e.id, e.event]), [
        [1, 'run.started'], [2, 'checkpoint.saved'], [3, 'run.failed'], [4, 'run.requeued'], [5, 'run.started'], [6, 'resumed.waiting'], [7, 'run.completed']
      ], 'both attempts, one sequence of ids, to the last attempt\'s end')
      t.same(live.events[3]!.data, { attempt: 2, reason: 'RESUMED' })
      t.match(live.events[4]!.data, { runId, attempt: 2 })
      t.equal(eventText(live.text()), eventText(first.text()) + live.text().split('\n\n').filter((b) => b.startsWith('id: 4\n')).join('') + '\n\n' +
        eventText(resumed.text()), 'byte for byte what each attempt sent')
      const late = await stream(`${b.url}/v1/runs/${runId}/events`, { headers: { 'last-event-id': '3' } })
      await late.ended
      t.same(late.events.map((e) => e.id), [4, 5, 6, 7], 'a rejoin from the first attempt\'s end gets the second')
      const done = await stream(`${b.url}/v1/runs/${runId}/events`, { headers: { 'last-event-id': '7' } })
      await done.ended
      t.same(done.events, [], 'a rejoin from the last end: nothing')
      t.match(await (await fetch(`${b.url}/v1/runs/${runId}`)).json(), { status: 'completed', attempt: 2, lastSeq: 7 })
    })

    t.test('a second service follows a run live and cancels it: it ends on the first within a second', async (t) => {
      const [storeA, storeB] = await backend.stores(t)
      t.teardown(async () => { await storeA.close?.(); await storeB.close?.() })
      const a = await listen(t, { agents: { ticker }, runStore: storeA })
      const b = await listen(t, { agents: { ticker }, runStore: storeB })
      const run = await stream(`${a.url}/v1/agents/ticker/runs`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: null })
      })
      const runId = (await run.next((e) => e.event === 'run.started')).data.runId as string
      const follower = await stream(`${b.url}/v1/runs/${runId}/events`)
      t.equal(follower.status, 200)
      // live: an event produced on A after the follower joined reaches it
      const joined = run.events.length
      await follower.next((e) => e.id > joined + 3)
      const cancel = await fetch(`${b.url}/v1/runs/${runId}/cancel`, { method: 'POST' })
      const started = Date.now()
      t.equal(cancel.status, 202)
      const failed = await run.next((e) => e.event === 'run.failed', 1_000)
      const elapsed = Date.now() - started
      t.ok(elapsed < 1_000, `run.failed on A ${elapsed} ms after the cancel on B`)
      t.comment(`cancel on B → run.failed on A: ${elapsed} ms`)
      t.match(failed.data, { error: { code: 'CANCELLED' } })
      await run.ended
      await follower.ended
      t.equal(eventText(follower.text()), eventText(run.text()), 'the follower got every event, the same bytes, in order')
      t.match(await (await fetch(`${b.url}/v1/runs/${runId}`)).json(), { status: 'cancelled', error: { code: 'CANCELLED' } })
      t.equal((await fetch(`${b.url}/v1/runs/${runId}/cancel`, { method: 'POST' })).status, 409, 'RUN_ALREADY_ENDED')
    })
  })
}
