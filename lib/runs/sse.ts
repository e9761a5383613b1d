import type { ServerResponse } from 'node:http'
import { Socket } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { RunHost } from './host.js'
import type { AgentRun, RunEvent, RunListener } from './run.js'

export const SSE_HEARTBEAT_MS = 15_000

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no'
}

/** One event on the wire: `id: <seq>`, `event: <type>`, `data: <json>`, blank line. A stored event is the same bytes. */
export function formatSseEvent (event: { seq: number, type: string, json: string }): string {
  return `id: ${event.seq}\nevent: ${event.type}\ndata: ${event.json}\n\n`
}

/** A burst of events this large goes to the socket at once, without waiting for the tick's end: the socket says when it is full. */
const FLUSH_BYTES = 16 * 1024

function flushStream (stream: SseStream): void {
  stream.flush()
}

/**
 * One Server-Sent Events response: `id: <seq>`, `event: <type>`, `data: <json>` per event. What is sent in one
 * tick goes out in one write, at the tick's end (in order, with the end of the response when that comes too).
 */
export class SseStream {
  readonly raw: ServerResponse
  #open = true
  /** what this tick sent, not yet written */
  #pending = ''
  /** the head has gone out with a first write */
  #started = false

  /** The caller tells the stream when its response closes (`closed()`): one 'close' listener serves both. */
  constructor (raw: ServerResponse, headers: Record<string, string | number | string[]>) {
    this.raw = raw
    // Object.assign, not `{ ...headers, more }`: a spread followed by properties is V8's slow path
    raw.writeHead(200, Object.assign({}, headers, SSE_HEADERS))
    // Node keeps the response head (`_header`) for the response's life as a rope of small strings; measuring
    // it makes V8 flatten it in place into one string (an idle stream holds less).
    const head = (raw as { _header?: unknown })._header
    if (typeof head === 'string') Buffer.byteLength(head)
  }

  /** The response closed (finished, or the client went away): nothing more is written. */
  closed (): void {
    this.#open = false
    this.#pending = ''
  }

  get open (): boolean {
    return this.#open && !this.raw.writableEnded
  }

  /** Sends the event; false when the socket holds more than it can take (the caller may wait for `drained()`). */
  send (event: { seq: number, type: string, json: string }): boolean {
    return this.write(formatSseEvent(event))
  }

  /** Sends raw text (already formatted events): the same as send, for a batch. */
  write (text: string): boolean {
    if (!this.open) return true
    if (this.#pending === '') process.nextTick(flushStream, this)
    this.#pending += text
    if (this.#pending.length >= FLUSH_BYTES) this.flush()
    return !this.needsDrain
  }

  /** Writes what this tick sent (the tick's end does it by itself). */
  flush (): void {
    const text = this.#pending
    this.#pending = ''
    if (text === '' || !this.open) return
    const raw = this.raw
    const socket = raw.socket
    // Node writes each chunk of a chunked response as four buffers under a cork; once the head is out and nothing
    // waits in the response itself, a real socket takes the chunk as one string (an injected request's is a stand-in)
    if (this.#started && socket instanceof Socket && raw.chunkedEncoding && raw.writableLength === socket.writableLength) {
      socket.write(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`)
    } else {
      this.#started = true
      raw.write(text)
    }
  }

  /** What the socket (and this tick) holds unsent. */
  get buffered (): number {
    return this.raw.writableLength + this.#pending.length
  }

  /** Whether the socket holds more than it takes at once (a writer waits for `drained()`). */
  get needsDrain (): boolean {
    return this.raw.writableNeedDrain || this.raw.socket?.writableNeedDrain === true
  }

  /** Calls `done` once the socket has taken what it held, or the response closed; the function returned forgets it. */
  onDrained (done: () => void): () => void {
    const raw = this.raw
    const socket = raw.socket
    const off = (): void => {
      raw.off('drain', once)
      raw.off('close', once)
      socket?.off('drain', once)
    }
    const once = (): void => {
      off()
      done()
    }
    raw.on('drain', once)
    raw.on('close', once)
    socket?.on('drain', once)
    return off
  }

  /** Resolves once the socket has taken what it held, or the response closed. */
  drained (): Promise<void> {
    return new Promise((resolve) => { this.onDrained(resolve) })
  }

  /** Cuts the connection (a reader too far behind): the client sees it close, and may rejoin from its last id. */
  cut (): void {
    this.#open = false
    this.#pending = ''
    this.raw.destroy()
  }

  comment (text: string): void {
    this.write(`: ${text}\n\n`)
  }

  #sentAtBeat = -1

  /**
   * The heartbeat's tick: a `: ping`, unless the socket took nothing of what waits for it since the last tick —
   * a reader that stays behind that long is cut (it may rejoin from its last id); what it held goes with it.
   */
  beat (): void {
    if (!this.open) return
    const sent = this.raw.socket?.bytesWritten ?? 0
    if (this.buffered > 0 && sent === this.#sentAtBeat) {
      this.cut()
      return
    }
    this.#sentAtBeat = sent
    this.comment('ping')
  }

  /** Ends the response, with a last event when one is given. */
  end (last?: { seq: number, type: string, json: string }): void {
    if (this.open) {
      const text = last === undefined ? this.#pending : this.#pending + formatSseEvent(last)
      this.raw.end(text === '' ? undefined : text)
    }
    this.#open = false
    this.#pending = ''
  }
}

/**
 * One timer for every open stream's `: ping` comment, rather than a timer per stream: ten thousand idle
 * streams cost ten thousand set entries, not ten thousand timers.
 */
export class SseHeartbeat {
  #streams = new Set<SseStream>()
  #timer: NodeJS.Timeout | null = null
  readonly intervalMs: number

  constructor (intervalMs = SSE_HEARTBEAT_MS) {
    this.intervalMs = intervalMs
  }

  add (stream: SseStream): void {
    this.#streams.add(stream)
    if (this.#timer === null) {
      this.#timer = setInterval(() => { for (const s of this.#streams) s.beat() }, this.intervalMs)
      this.#timer.unref()
    }
  }

  delete (stream: SseStream): void {
    this.#streams.delete(stream)
    if (this.#streams.size === 0 && this.#timer !== null) {
      clearInterval(this.#timer)
      this.#timer = null
    }
  }

  get size (): number {
    return this.#streams.size
  }
}

const SSE_RUN = Symbol('fastify-agents.sse-run')
type SseResponse = ServerResponse & { [SSE_RUN]: SseRun }

/** The client closing the stream aborts the run (one listener function for every stream). */
function onSseClose (this: SseResponse): void {
  this[SSE_RUN].closed()
}

/**
 * A run streamed as Server-Sent Events: the run's listener, the stream, and what happens at the end. An
 * object with methods rather than closures, and nothing awaiting the run: an idle stream (a model thinking,
 * an approval waiting) holds only this, its run and its session.
 */
export class SseRun implements RunListener {
  readonly #service: RunHost
  readonly #request: FastifyRequest
  readonly #run: AgentRun
  readonly #stream: SseStream
  // only the terminal event matters to idempotency: keeping every latest event would hold run.started
  // (and its data) for as long as an idle stream stays open
  #final: RunEvent | undefined

  constructor (service: RunHost, request: FastifyRequest, reply: FastifyReply, run: AgentRun) {
    this.#service = service
    this.#request = request
    this.#run = run
    reply.hijack()
    // A hijacked reply skips Fastify's header handling: copy what the hooks set (X-Request-ID, CORS).
    this.#stream = new SseStream(reply.raw, reply.getHeaders() as Record<string, string>)
    service.heartbeat.add(this.#stream)
    const raw = reply.raw as SseResponse
    raw[SSE_RUN] = this
    raw.on('close', onSseClose)
  }

  runEvent (event: RunEvent): void {
    // The terminal event goes out with the end of the response (#end): one write less per stream, and a
    // client that has seen run.completed finds its idempotency record written.
    if (event.type === 'run.completed' || event.type === 'run.failed') this.#final = event
    else {
      this.#stream.send(event)
      // a reader this far behind is cut (a connection-bound run is cancelled by it, as by any disconnect), once: a
      // `continue` run goes on sending to the stream it cut, whose socket still says what it held
      if (this.#stream.open && this.#stream.buffered > this.#service.settings.maxStreamBufferBytes) {
        this.#service.stats.count('slowConsumers')
        this.#stream.cut()
      }
    }
  }

  /**
   * Before the agent is asked for more: a connection-bound run waits while its client does not keep up; a
   * `continue` run never waits for anyone.
   */
  backpressure (): Promise<void> | null {
    if (this.#run.options.onDisconnect === 'continue' || !this.#stream.open || !this.#stream.needsDrain) return null
    return this.#stream.drained()
  }

  runSettled (): void {
    this.#end().catch(
      // Nothing in #end is known to throw (the idempotency store's failures are caught and logged inside),
      // but nothing awaits it either: a rejection must not become an unhandled one.
      /* c8 ignore next */
      (err: unknown) => this.#request.log.error({ err }, 'could not end an SSE stream'))
  }

  closed (): void {
    this.#stream.closed()
    if (this.#run.options.onDisconnect === 'cancel') this.#run.abort('CANCELLED')
  }

  async #end (): Promise<void> {
    // an idempotency key's record is written before the stream ends: a retry after the end is a replay
    await this.#service.settleStream(this.#request, this.#final)
    // and its audit entry is in the store before the client sees the end (docs/stores.md)
    await this.#service.audit.commit(this.#request, 200)
    this.#service.heartbeat.delete(this.#stream)
    this.#stream.end(this.#final)
  }
}
