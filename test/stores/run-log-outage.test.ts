// A run store stall shorter than the lease, for real (a private Redis and a private PostgreSQL frozen with SIGSTOP
// for 3 s mid-run, storeTimeoutMs 1 s, two instances on the store). Writes of the run's log pass their deadline
// while the store is frozen, and are applied when it wakes: the retries bring events it holds already, which it
// acknowledges (appends are idempotent by seq). The run completes on its own instance, a follower on the other
// sees every event, and the end sent to the run's client is the one stored.
import { setTimeout as delay } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import { eventually, listen } from '../helper.js'
import type { Agent } from '../../lib/core/types.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import type { RunStore } from '../../lib/stores/types.js'
import { privatePostgres, privateRedis } from '../helpers/private-servers.js'
import type { PrivateServer } from '../helpers/private-servers.js'
import { followRun, openSse } from '../helpers/streams.js'
import type { ParsedEvent } from '../helper.js'

// instances and servers take seconds to start on a busy machine
t.setTimeout(120_000)

const DELTAS = 50
const STEP_MS = 100

// a delta every 100 ms for 5 s: the stall comes and goes while it runs
const steady: Agent = {
  async * run (_input, ctx) {
    for (let i = 1; i <= DELTAS; i++) {
      await delay(STEP_MS, undefined, { signal: ctx.signal })
      yield `${i} `
    }
  }
}

interface Backend {
  name: string
  server: (t: Test) => Promise<PrivateServer | null>
  /** a run store on the server (each instance has its own) */
  store: (url: string) => RunStore
}

const backends: Backend[] = [
  { name: 'Redis', server: privateRedis, store: (url) => new RedisRunStore(url, { prefix: 'stall:' }) },
  { name: 'PostgreSQL', server: privatePostgres, store: (url) => new PostgresRunStore(url, { schema: 'stall' }) }
]

/**
 * Follows a run's log to its end as a client would: a follower whose read of the store fails gets `event: error`
 * (no id) and the end of its stream, and rejoins from the last id it got, again until the store answers.
 */
async function followToEnd (url: string, runId: string, onJoined: () => void): Promise<{ events: ParsedEvent[], rejoins: number }> {
  const events: ParsedEvent[] = []
  let rejoins = -1
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    rejoins++
    const last = events.at(-1)
    const follower = await followRun(url, runId, last === undefined ? {} : { 'last-event-id': String(last.id) })
    if (rejoins === 0) onJoined()
    await follower.ended
    events.push(...follower.events.filter((event) => !Number.isNaN(event.id)))
    const end = events.at(-1)
    if (end?.event === 'run.completed' || end?.event === 'run.failed') return { events, rejoins }
    await delay(100)
  }
  throw new Error(`the run's end not followed within a minute; got ${events.length} events`)
}

for (const backend of backends) {
  t.test(`${backend.name} frozen 3 s mid-run, shorter than the lease: the run completes on its own instance, nothing lost or wedged`, async (t) => {
    const server = await backend.server(t)
    if (server === null) return
    const stores = [backend.store(server.url), backend.store(server.url)]
    t.teardown(async () => { for (const store of stores) await store.close?.() })
    const options = { agents: { steady }, storeTimeoutMs: 1_000, runLeaseMs: 15_000 }
    const a = await listen(t, { ...options, runStore: stores[0] })
    const b = await listen(t, { ...options, runStore: stores[1] })
    // the tables (or scripts) are made before the run: the first calls may take longer than the deadline
    await eventually(async () => (await fetch(`${b.url}/v1/runs/warm-up`)).status === 404, 10_000, 'the stores answering')

    const run = await openSse(a.url, '/v1/agents/steady/runs', { input: null })
    const started = await run.next('run.started')
    const runId = started.data.runId as string
    let joined = (): void => {}
    const following = new Promise<void>((resolve) => { joined = resolve })
    const follower = followToEnd(b.url, runId, joined)
    await following
    await eventually(() => run.events.length >= 5, 10_000, 'the run going')
    await server.freeze()
    await delay(3_000)
    await server.thaw()
    await run.ended
    const followed = await follower
    t.comment(`the follower rejoined ${followed.rejoins} times`)

    t.ok(a.service.app.agentService.stats.runLogFailures > 0, `the stall was felt: ${a.service.app.agentService.stats.runLogFailures} writes past their deadline`)
    t.same(run.events.map((e) => e.id), Array.from({ length: DELTAS + 2 }, (_, i) => i + 1), 'the client got every event')
    t.match(run.events.at(-1), { event: 'run.completed', data: { runId, status: 'completed' } })
    t.same(followed.events, run.events, 'the follower on the other instance got every event, as sent')
    const record = await (await fetch(`${b.url}/v1/runs/${runId}`)).json() as { result: unknown }
    t.match(record, { status: 'completed', attempt: 1, lastSeq: DELTAS + 2 }, 'completed on its own instance, not lost')
    t.same(record.result, run.events.at(-1)!.data, 'the end sent is the one stored')
  })
}
