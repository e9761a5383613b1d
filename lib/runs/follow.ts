import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RunHost } from './host.js'
import type { RunRecord, StoredEvent } from '../stores/types.js'
import { endsRun } from './events.js'
import { SseStream, formatSseEvent } from './sse.js'

/** Events read from the store at a time, at most: what a follower holds beyond its socket's buffer. */
const PAGE = 256
/** The first read's page, before the run's events are known: a page of large events must not overrun the bound. */
const FIRST_PAGE = 16
/**
 * About how many bytes a page holds: the store stops there (RunStore.events' budget), and the next page asks for as
 * many events as fit, were each the largest just read (for a store that does not keep to a budget).
 */
export const PAGE_BYTES = 256 * 1024

/** How many events to read next, after `page`, for pages of about `bytes` (one at least, `PAGE` at most). */
export function nextPageSize (page: readonly StoredEvent[], bytes: number): number {
  let largest = 1
  for (const event of page) largest = Math.max(largest, event.data.length)
  return Math.max(1, Math.min(PAGE, Math.floor(bytes / largest)))
}

/**
 * Whether a page holds all the log had after its cursor: read short, neither for its count (`asked`) nor for its
 * budget (a page that reached its budget may have stopped there).
 */
export function readWhole (page: readonly StoredEvent[], asked: number, budget: number): boolean {
  if (page.length >= asked) return false
  let bytes = 0
  for (const event of page) bytes += event.data.length
  return bytes < budget
}

const FOLLOWER = Symbol('fastify-agents.follower')
type FollowerResponse = ServerResponse & { [FOLLOWER]: RunFollower }

function onFollowerClose (this: FollowerResponse): void {
  this[FOLLOWER].stop()
}

/**
 * `GET /v1/runs/:runId/events`: the run's stored events after a cursor, then live ones until the terminal
 * event, then the end. Every event is written from its stored JSON, so a replay is byte for byte what the run's
 * own stream sent. A follower never slows the run: a replay goes at the pace of its socket (the next page is
 * read once the socket holds less than half the bound), while the run's new events are written as they come; a
 * follower whose socket then holds more than the bound is cut, and rejoins from its last id. A store that fails
 * ends the stream with an `error` event, never a gap. A run resumed under its id (`resumeRunId`) has one log: an
 * attempt's terminal event followed by more (`run.requeued { reason: 'RESUMED' }`, the next attempt) is not the end.
 */
export class RunFollower {
  readonly #service: RunHost
  readonly #request: FastifyRequest
  readonly #runId: string
  readonly #stream: SseStream
  #after: number
  #page = FIRST_PAGE
  /** whether the last event written was a terminal one that ended a full page: the end, unless the log goes on */
  #afterTerminal = false
  #unwatch: (() => void) | null = null
  #pumping = false
  #again = false
  #done = false
  /** while waiting for a full socket to drain: told when the run has new events */
  #onNews: (() => void) | null = null

  constructor (service: RunHost, request: FastifyRequest, reply: FastifyReply, record: RunRecord, after: number) {
    this.#service = service
    this.#request = request
    this.#runId = record.runId
    this.#after = after
    reply.hijack()
    this.#stream = new SseStream(reply.raw, reply.getHeaders() as Record<string, string>)
    const raw = reply.raw as FollowerResponse
    raw[FOLLOWER] = this
    raw.on('close', onFollowerClose)
    service.stats.gauge('followers', 1)
    // a rejoin from the terminal event's own id (or past it) ends at once, with no events
    if (record.status !== 'queued' && record.status !== 'running' && after >= record.lastSeq) {
      this.#finish()
      return
    }
    service.heartbeat.add(this.#stream)
    // the head goes now: a follower waiting for the run's next event should not wait for its headers too
    reply.raw.flushHeaders()
    // watched before the first read: an event stored in between is read by one or the other
    this.#unwatch = service.settings.runStore.watch(this.#runId, () => this.#pump())
    this.#pump()
  }

  /** The client went away. */
  stop (): void {
    this.#stream.closed()
    this.#release()
  }

  #pump (): void {
    if (this.#done) return
    if (this.#pumping) {
      this.#again = true
      this.#onNews?.()
      return
    }
    this.#pumping = true
    this.#read().catch((err: unknown) => this.#fail(err)).finally(() => {
      this.#pumping = false
      if (this.#again && !this.#done) {
        this.#again = false
        this.#pump()
      }
    })
  }

  async #read (): Promise<void> {
    const store = this.#service.settings.runStore
    const bound = this.#service.settings.maxStreamBufferBytes
    // A replay goes out while the socket holds less than half the bound, and waits for it to drain; the run's news
    // sends the rest of a page whatever the socket holds. A follower that stays behind a live run is cut once its
    // socket holds more than the bound; a replay alone never cuts its own follower (it did, before the client got a
    // byte, at every rejoin: a page of large events was past the bound by itself).
    let room = bound / 2
    for (;;) {
      this.#again = false
      const asked = this.#page
      const budget = Math.min(PAGE_BYTES, bound / 4)
      const events = await store.events(this.#runId, this.#after, asked, budget)
      if (this.#done) return
      if (events.length === 0) {
        // nothing after a terminal event: that was the end (read in full pages up to it); else the next
        // notification brings more, unless the run is gone (purged, or ephemeral)
        if (this.#afterTerminal || await store.get(this.#runId) === null) this.#finish()
        return
      }
      this.#page = nextPageSize(events, budget)
      // a page read short has all there was (see endsRun)
      const whole = readWhole(events, asked, budget)
      for (let next = 0; next < events.length;) {
        next = this.#write(events, next, room, whole)
        if (next < 0) return
        if (this.#stream.buffered > bound) {
          this.#service.stats.count('slowConsumers')
          this.#stream.cut()
          return
        }
        if (this.#stream.buffered <= bound / 2) continue
        const news = await new Promise<boolean>((resolve) => {
          const forget = this.#stream.onDrained(() => { this.#onNews = null; resolve(false) })
          this.#onNews = () => { forget(); this.#onNews = null; resolve(true) }
        })
        // the client went away meanwhile
        if (this.#done) return
        room = news ? Infinity : bound / 2
      }
    }
  }

  /**
   * Writes the events from `from` while the socket holds less than `room` (one event at least); the index after the
   * last one written, or -1 once the run's terminal event is written as the end (`whole`: the page has all there was).
   */
  #write (events: StoredEvent[], from: number, room: number, whole: boolean): number {
    const held = this.#stream.buffered
    let text = ''
    let next = from
    for (; next < events.length && (next === from || held + text.length < room); next++) {
      const event = events[next]!
      this.#after = event.seq
      const end = endsRun(events, next, whole)
      this.#afterTerminal = end === undefined
      if (end === true) {
        this.#stream.write(text)
        this.#finish(formatSseEvent({ seq: event.seq, type: event.type, json: event.data }))
        return -1
      }
      text += formatSseEvent({ seq: event.seq, type: event.type, json: event.data })
    }
    this.#stream.write(text)
    return next
  }

  #fail (err: unknown): void {
    this.#request.log.error({ err, runId: this.#runId }, 'could not read the run\'s events')
    // no id: a client's Last-Event-ID stays at the last event it really got
    this.#finish(`event: error\ndata: ${JSON.stringify({ error: { code: 'STORE_UNAVAILABLE', message: 'The run store could not be read: rejoin from the last event id' } })}\n\n`)
  }

  #finish (last?: string): void {
    if (this.#done) return
    if (last !== undefined) this.#stream.write(last)
    this.#stream.end()
    this.#release()
  }

  #release (): void {
    if (this.#done) return
    this.#done = true
    this.#unwatch?.()
    this.#unwatch = null
    this.#service.heartbeat.delete(this.#stream)
    this.#service.stats.gauge('followers', -1)
    this.#service.audit.record(this.#request, 200)
  }
}
