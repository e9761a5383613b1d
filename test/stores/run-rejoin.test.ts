// Issue 23 item 5, on every run store: a `continue` run streams large events past two followers that never read;
// once it has ended, a rejoin from Last-Event-ID 124 gets every event after it through the terminal one, byte for
// byte. It got none: a page of large events was past maxStreamBufferBytes by itself, so the follower cut its own
// connection before the client got a byte — at every rejoin. Pages are sized by the events last read.
import { once } from 'node:events'
import { connect } from 'node:net'
import type { Socket } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { Redis } from 'ioredis'
import { followRun } from '../../lib/frontends/follow.js'
import { PAGE_BYTES, nextPageSize } from '../../lib/runs/follow.js'
import { MemoryRunStore } from '../../lib/stores/memory-runs.js'
import { PostgresRunStore } from '../../lib/stores/postgres-runs.js'
import { RedisRunStore } from '../../lib/stores/redis-runs.js'
import { SqliteRunStore } from '../../lib/stores/sqlite-runs.js'
import type { RunStore, StoredEvent } from '../../lib/stores/types.js'
import { eventually, listen, parseSse, sleep } from '../helper.js'
import { pgReachable, pgUrl, redisReachable, redisUrl, requireService, withPgSchema, withRedisPrefix } from '../helpers/services.js'

const BOUND = 64 * 1024
const DELTA = 'x'.repeat(8 * 1024)
const DELTAS = 400

interface Backend {
  name: string
  reachable: () => Promise<boolean>
  howTo: string
  store: (t: Test) => RunStore
}

const backends: Backend[] = [
  { name: 'memory', reachable: async () => true, howTo: '', store: () => new MemoryRunStore() },
  { name: 'SQLite', reachable: async () => true, howTo: '', store: (t) => new SqliteRunStore(join(t.testdir(), 'runs.db')) },
  {
    name: 'PostgreSQL',
    reachable: () => pgReachable(),
    howTo: 'start PostgreSQL or set PG_URL',
    store: (t) => new PostgresRunStore(pgUrl(), { schema: withPgSchema(t) })
  },
  {
    name: 'Redis',
    reachable: () => redisReachable(),
    howTo: 'start Redis or set REDIS_URL',
    store: (t) => {
      const client = new Redis(redisUrl())
      t.teardown(() => client.quit())
      return new RedisRunStore(client, { prefix: withRedisPrefix(t, client) })
    }
  }
]

/** A raw HTTP client that sends its request and then reads nothing. */
function stalled (t: Test, port: number, request: string): Socket {
  const socket = connect(port, '127.0.0.1')
  socket.write(request)
  socket.pause()
  t.teardown(() => socket.destroy())
  return socket
}

for (const backend of backends) {
  t.test(`${backend.name}: a rejoin after two stalled followers gets every event after its cursor, through the terminal one`, async (t) => {
    if (!requireService(t, await backend.reachable(), backend.howTo)) return
    const store = backend.store(t)
    t.teardown(() => store.close?.())
    // the bytes of each page the store hands out once the rejoin is on its way: the rejoin's, and a stalled
    // follower's read of the run's news begun late (notifications come late on some backends), sized from the
    // small run.started it read before
    const pages: number[] = []
    let counting = false
    const events = store.events.bind(store)
    store.events = async (runId, afterSeq, limit, budget) => {
      const counted = counting
      const page = await events(runId, afterSeq, limit, budget)
      if (counted) pages.push(page.reduce((sum, event) => sum + event.data.length, 0))
      return page
    }
    let go!: () => void
    const gate = new Promise<void>((resolve) => { go = resolve })
    const { service, port, url } = await listen(t, {
      runStore: store,
      maxStreamBufferBytes: BOUND,
      agents: {
        firehose: {
          async * run () {
            await gate
            for (let i = 0; i < DELTAS; i++) yield DELTA
            return { output: 'done' }
          }
        }
      }
    })
    const stats = service.app.agentService.stats

    // the run's own client, which reads what comes
    const body = JSON.stringify({ input: null, stream: true, onDisconnect: 'continue' })
    const client = connect(port, '127.0.0.1')
    t.teardown(() => client.destroy())
    client.write(`POST /v1/agents/firehose/runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
    let head = ''
    while (!/"runId":"[^"]+"/.test(head)) head += String((await once(client, 'data'))[0])
    client.resume()
    const runId = /"runId":"([^"]+)"/.exec(head)![1]!

    for (let i = 0; i < 2; i++) stalled(t, port, `GET /v1/runs/${runId}/events HTTP/1.1\r\nhost: x\r\n\r\n`)
    await eventually(() => stats.followers === 2, 10_000, 'two followers')
    go()
    const record = await eventually(async () => {
      const found = await store.get(runId)
      return found?.status === 'completed' && found
    }, 60_000, 'the run completed')
    t.equal(record.lastSeq, DELTAS + 2, 'run.started, the deltas, run.completed')

    counting = true
    const rejoin = await fetch(`${url}/v1/runs/${runId}/events`, { headers: { 'last-event-id': '124' } })
    t.equal(rejoin.status, 200)
    const text = await rejoin.text()
    const got = parseSse(text)
    t.equal(got.length, record.lastSeq - 124, `every event after 124 (got ${got.length})`)
    t.same(got.map((event) => event.id), Array.from({ length: record.lastSeq - 124 }, (_, i) => 125 + i), 'in order, none missing')
    t.equal(got.at(-1)?.event, 'run.completed', 'through the terminal one')
    counting = false
    const stored: StoredEvent[] = await events(runId, 124, 1_000)
    const sent = stored.map((event) => `id: ${event.seq}\nevent: ${event.type}\ndata: ${event.data}\n\n`).join('')
    t.ok(text.split('\n\n').filter((block) => block !== '' && !block.startsWith(':')).map((block) => `${block}\n\n`).join('') === sent,
      'byte for byte the stored events')
    const budget = Math.min(PAGE_BYTES, BOUND / 4)
    const over = pages.filter((bytes) => bytes > budget + DELTA.length + 100)
    t.same(over, [], `each page holds about ${budget} bytes, or one event (the store stops at its budget)`)
  })
}

t.test('the front ends\' follower reads pages of about PAGE_BYTES too, whatever the events\' size', async (t) => {
  const store = new MemoryRunStore()
  const now = new Date().toISOString()
  await store.create({
    record: { runId: 'r', agent: 'a', sessionId: null, principal: 'p', status: 'running', background: false, attempt: 1, lastSeq: 0, createdAt: now, startedAt: now, requestId: 'q', traceId: 't' },
    spec: { input: null },
    ephemeral: false,
    detachable: false,
    lease: { owner: 'me', until: Date.now() + 60_000 }
  }, { exclusive: false })
  const big = JSON.stringify({ text: 'y'.repeat(64 * 1024) })
  const small = JSON.stringify({ text: 'z' })
  const log: StoredEvent[] = Array.from({ length: 300 }, (_, i) => ({ seq: i + 1, type: 'message.delta', data: i < 100 ? small : big }))
  await store.append('r', log, 'me')
  await store.finish('r', [{ seq: 301, type: 'run.completed', data: '{}' }], { status: 'completed', endedAt: now }, 60_000, 'me')
  const events = store.events.bind(store)
  const follow = async (keepsBudget: boolean): Promise<Array<{ limit: number, bytes: number }>> => {
    const pages: Array<{ limit: number, bytes: number }> = []
    store.events = async (runId, afterSeq, limit, budget) => {
      const page = await events(runId, afterSeq, limit, keepsBudget ? budget : undefined)
      pages.push({ limit, bytes: page.reduce((sum, event) => sum + event.data.length, 0) })
      return page
    }
    let seq = 0
    for await (const event of followRun(store, 'r', 0)) t.equal(event.seq, ++seq)
    t.equal(seq, 301, 'every event, in order')
    return pages
  }
  // the store stops each page at its budget: none holds more than PAGE_BYTES and one event
  const kept = await follow(true)
  t.same(kept.slice(0, 2).map((page) => page.limit), [16, 256], 'a first page of 16; small events: full pages')
  t.ok(kept.every((page) => page.bytes < PAGE_BYTES + big.length), `none past PAGE_BYTES and one event (${kept.map((page) => page.bytes).join(', ')})`)
  // A store that does not keep to a budget reads by count: the page after small events, sized for them, may come
  // whole. From there on, pages are sized for the large ones.
  const pages = await follow(false)
  const large = pages.findIndex((page) => page.bytes > PAGE_BYTES)
  t.equal(large, 1, 'the page that met the large events')
  t.ok(pages.slice(large + 1).every((page) => page.bytes <= PAGE_BYTES), `then none past PAGE_BYTES (${pages.map((page) => page.bytes).join(', ')})`)
  t.equal(nextPageSize([], PAGE_BYTES), 256, 'nothing read: the largest page')
  t.equal(nextPageSize(log.slice(100, 101), 1), 1, 'one event at least')
})

t.test('a continue run\'s own stream, cut for staying behind, is counted once', async (t) => {
  const { service, port } = await listen(t, {
    maxStreamBufferBytes: BOUND,
    agents: { firehose: { async * run () { for (let i = 0; i < DELTAS; i++) yield DELTA } } }
  })
  const body = JSON.stringify({ input: null, stream: true, onDisconnect: 'continue' })
  stalled(t, port, `POST /v1/agents/firehose/runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
  const store = service.app.agentService.settings.runStore
  await eventually(async () => (await store.list({ limit: 1 })).runs[0]?.status === 'completed', 30_000, 'the run completed')
  t.equal(service.app.agentService.stats.slowConsumers, 1)
})

t.test('a rejoin whose client leaves while its follower waits for the socket: let go, not counted as slow', async (t) => {
  const store = new MemoryRunStore()
  const reads: number[] = []
  const events = store.events.bind(store)
  store.events = async (runId, afterSeq, limit) => {
    reads.push(afterSeq)
    return events(runId, afterSeq, limit)
  }
  // more than the kernel's socket buffers take, so that the follower waits
  const { service, port } = await listen(t, {
    runStore: store,
    maxStreamBufferBytes: BOUND,
    agents: { firehose: { async * run () { for (let i = 0; i < 2_000; i++) yield DELTA; return { output: 'done' } } } }
  })
  const stats = service.app.agentService.stats
  const { runId } = (await service.app.inject({ method: 'POST', url: '/v1/agents/firehose/runs', payload: { input: null } })).json()
  const leaving = stalled(t, port, `GET /v1/runs/${runId as string}/events HTTP/1.1\r\nhost: x\r\nlast-event-id: 124\r\n\r\n`)
  await eventually(async () => {
    const read = reads.length
    await sleep(50)
    return read > 0 && reads.length === read
  }, 10_000, 'the follower waits for its socket')
  t.equal(stats.followers, 1, 'it has not reached the end')
  t.ok(reads.at(-1)! < 2_000, `it has not read the whole log (at ${reads.at(-1)!})`)
  leaving.destroy()
  await eventually(() => stats.followers === 0, 10_000, 'the follower let go')
  t.equal(stats.slowConsumers, 0, 'not counted as slow')
})
