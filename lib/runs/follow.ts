import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AgentServiceCore } from '../core/service.js'
import type { RunRecord, StoredEvent } from '../stores/types.js'
import { SseStream, formatSseEvent } from './sse.js'

/** Events read from the store at a time: what a follower holds beyond its socket's buffer. */
const PAGE = 256

function terminal (type: string): boolean {
  return type === 'run.completed' || type === 'run.failed'
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
 * ends the stream with an `error` event, never a gap.
 */
export class RunFollower {
  readonly #service: AgentServiceCore
  readonly #request: FastifyRequest
  readonly #runId: string
  readonly #stream: SseStream
  #after: number
  #unwatch: (() => void) | null = null
  #pumping = false
  #again = false
  #done = false
  /** while waiting for a full socket to drain: told when the run has new events */
  #onNews: (() => void) | null = null

  constructor (service: AgentServiceCore, request: FastifyRequest, reply: FastifyReply, record: RunRecord, after: number) {
    this.#service = service
    this.#request = request
    this.#runId = record.runId
    this.#after = after
    reply.hijack()
    this.#stream = new SseStream(reply.raw, reply.getHeaders() as Record<string, string>)
    const raw = reply.raw as FollowerResponse
    raw[FOLLOWER] = this
    raw.on('close', onFollowerClose)
    service.stats.followers++
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
    for (;;) {
      this.#again = false
      const events = await store.events(this.#runId, this.#after, PAGE)
      if (this.#done) return
      if (events.length === 0) {
        // nothing new: the next notification brings more, unless the run is gone (purged, or ephemeral)
        if (await store.get(this.#runId) === null) this.#finish()
        return
      }
      if (!this.#write(events)) return
      if (this.#stream.buffered > bound) {
        this.#service.stats.slowConsumers++
        this.#stream.cut()
        return
      }
      // a socket holding half the bound: the next page waits for it to drain, or for the run's next events
      if (this.#stream.buffered > bound / 2) {
        // On news while stuck, what the run sent goes to the socket too, and a socket past the bound is cut
        // above; a client that went away meanwhile is seen by the next read.
        await new Promise<void>((resolve) => {
          const forget = this.#stream.onDrained(() => { this.#onNews = null; resolve() })
          this.#onNews = () => { forget(); this.#onNews = null; resolve() }
        })
      }
    }
  }

  /** Writes the events; false once the terminal one is written (the response has ended). */
  #write (events: StoredEvent[]): boolean {
    let text = ''
    for (const event of events) {
      if (terminal(event.type)) {
        this.#stream.write(text)
        this.#after = event.seq
        this.#finish(formatSseEvent({ seq: event.seq, type: event.type, json: event.data }))
        return false
      }
      text += formatSseEvent({ seq: event.seq, type: event.type, json: event.data })
      this.#after = event.seq
    }
    this.#stream.write(text)
    return true
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
    this.#service.stats.followers--
    this.#service.audit.record(this.#request, 200)
  }
}
