import type { ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AgentServiceCore } from '../service/service.js'
import { endsTheRun } from './run-events.js'
import type { LoggedEvent, RunEvent } from './run-events.js'
import type { AgentRun, RunListener, RunOutcome } from '../runs/run.js'
import { SseStream } from '../runs/sse.js'
import { cancelRun } from './runs.js'
import { followRun } from './follow.js'

/**
 * A run spoken in a front end's protocol: SSE text per event, and whether the response must end. An event read from
 * the log may be an attempt's end that the run goes on after (`goesOn`): news, not the end.
 */
export interface Projection {
  push(event: LoggedEvent, approvalDecided?: boolean): string
  readonly ended: boolean
}

export interface FollowOptions {
  /** Read the log after this seq. */
  after: number
  /**
   * The event an earlier response already carried the run up to (an approval being answered): the events up to it
   * are delivered already, and what the projection learns from them (`run.started`, tool calls, approvals) is
   * handed to `projection`.
   */
  deliveredThrough?: (event: RunEvent) => boolean
  projection: (delivered: RunEvent[]) => Projection
  /** Whether an `approval.requested` read from the log was decided already (a replay goes on past it). */
  approvalDecided?: (approvalId: string) => Promise<boolean>
}

const STREAM = Symbol('fastify-agents.projected-stream')
const STOPPED = Symbol('fastify-agents.stream-ended')
type StreamResponse = ServerResponse & { [STREAM]: ProjectedStream }

function onStreamClose (this: StreamResponse): void {
  this[STREAM].closed()
}

/** What a projection learns from the events an earlier response carried (the deltas are only text). */
function learnable (type: string): boolean {
  return type === 'run.started' || type.startsWith('tool.') || type.startsWith('approval.')
}

function approvalIdOf (event: RunEvent): string {
  return (event.data as { approval: { id: string } }).approval.id
}

/**
 * One response of a front-end protocol (the AI SDK's UI message stream, AG-UI): the run's events projected,
 * written as they come, until the projection ends the response — at the run's end, or at an approval, where the
 * run goes on without this response. Its events come from the run itself (`attach`, a run this request started)
 * or from the run's log (`follow`: a continuation, a resume; on any instance sharing the run store). Like every
 * stream of the service: the heartbeat, a reader more than `maxStreamBufferBytes` behind is cut, the request
 * audited when the response ends.
 */
export class ProjectedStream implements RunListener {
  readonly #service: AgentServiceCore
  readonly #request: FastifyRequest
  readonly #stream: SseStream
  readonly #cancelOnClose: boolean
  /** stops a follower's read of the log (made when it follows: an attached stream has none) */
  #stop: AbortController | null = null
  #projection: Projection | null = null
  #runId: string | null = null
  /** the seq of the last event the run itself handed this stream */
  #lastSeq = 0
  #done = false

  /** `cancelOnClose`: a client that leaves before the projection ended cancels the run (else the run goes on). */
  constructor (service: AgentServiceCore, request: FastifyRequest, reply: FastifyReply, headers: Record<string, string>, cancelOnClose: boolean) {
    this.#service = service
    this.#request = request
    this.#cancelOnClose = cancelOnClose
    reply.hijack()
    // A hijacked reply skips Fastify's header handling: copy what the hooks set (X-Request-ID, CORS).
    this.#stream = new SseStream(reply.raw, Object.assign({}, reply.getHeaders() as Record<string, string>, headers))
    service.heartbeat.add(this.#stream)
    const raw = reply.raw as StreamResponse
    raw[STREAM] = this
    raw.on('close', onStreamClose)
  }

  /** A run this request has prepared: its events come from the run itself, live. Call before `run.start()`. */
  attach (run: AgentRun, projection: Projection): void {
    this.#runId = run.runId
    this.#projection = projection
    run.listen(this)
  }

  runEvent (event: RunEvent): void {
    this.#lastSeq = event.seq
    if (!this.#done) this.#write(this.#projection!.push(event))
  }

  /**
   * A run that stops here without ending (handed to another instance at a drain, or taken over after its lease
   * lapsed) goes on elsewhere, in the same log: the response follows it there, with the same projection.
   */
  runSettled (outcome: RunOutcome): void {
    if (this.#done || outcome.status !== 'detached') return
    const projection = this.#projection!
    this.follow(this.#runId!, { after: this.#lastSeq, projection: () => projection })
  }

  /** A run in progress here or elsewhere: its events from the log, then live ones. */
  follow (runId: string, options: FollowOptions): void {
    this.#runId = runId
    // the head goes now: a client waiting for the run's next event should not wait for its headers too
    this.#stream.raw.flushHeaders()
    this.#pump(runId, options).catch((err: unknown) => {
      // the client sees its connection fail rather than a clean end: a resume can pick up from there
      this.#request.log.error({ err, runId }, 'could not read the run\'s events')
      this.#stream.cut()
    })
  }

  async #pump (runId: string, options: FollowOptions): Promise<void> {
    const delivered: RunEvent[] = []
    let projection = options.deliveredThrough === undefined ? options.projection(delivered) : null
    this.#projection = projection
    this.#stop ??= new AbortController()
    for await (const event of followRun(this.#service.settings.runStore, runId, options.after, this.#stop.signal)) {
      if (projection === null) {
        if (learnable(event.type)) delivered.push(event)
        const through = options.deliveredThrough!(event)
        // (the run ended before it reached the event it was delivered through: the end is what there is to show)
        if (!through && !endsTheRun(event)) continue
        projection = this.#projection = options.projection(delivered)
        if (through) continue
      }
      const decided = event.type === 'approval.requested' && options.approvalDecided !== undefined &&
        await options.approvalDecided(approvalIdOf(event))
      if (!this.#write(projection.push(event, decided))) return
      // pull-based: the next page is read once the socket has taken this one
      if (this.#stream.needsDrain) await this.#stream.drained()
    }
    // the run is gone (purged, ephemeral), or the client left
    await this.#end()
  }

  /** Writes the text; false once the response is over (ended by the projection, or cut). */
  #write (text: string): boolean {
    if (this.#done) return false
    if (this.#projection!.ended) {
      void this.#end(text)
      return false
    }
    if (text !== '') this.#stream.write(text)
    if (this.#stream.buffered > this.#service.settings.maxStreamBufferBytes) {
      this.#service.stats.count('slowConsumers')
      this.#stream.cut()
      return false
    }
    return true
  }

  /** The response closed: we ended it, or the client left (or was cut). */
  closed (): void {
    if (this.#done) return
    this.#stream.closed()
    this.#release()
    this.#service.audit.record(this.#request, 200)
    if (this.#cancelOnClose && this.#runId !== null && this.#projection?.ended !== true) {
      cancelRun(this.#service, this.#runId).catch((err: unknown) => this.#request.log.error({ err, runId: this.#runId }, 'could not cancel the run'))
    }
  }

  /** The projection's last text (if any) goes out once the request's audit entry is in the store (docs/stores.md). */
  async #end (text = ''): Promise<void> {
    if (this.#done) return
    this.#release()
    await this.#service.audit.commit(this.#request, 200)
    if (text !== '') this.#stream.write(text)
    this.#stream.end()
  }

  #release (): void {
    this.#done = true
    this.#service.heartbeat.delete(this.#stream)
    // a reason of our own: the default is a DOMException, costly to make for every stream that ends
    this.#stop?.abort(STOPPED)
  }
}

/**
 * SSE frames from a pull-based source (A2A's streaming answers), written as the socket takes them; `onClose` is
 * told when the client leaves before the end (so that the source stops waiting for the run).
 */
export async function writeFrames (
  service: AgentServiceCore, request: FastifyRequest, reply: FastifyReply, headers: Record<string, string>,
  frames: AsyncGenerator<string, void, undefined>, onClose: () => void
): Promise<void> {
  reply.hijack()
  const raw = reply.raw
  const stream = new SseStream(raw, Object.assign({}, reply.getHeaders() as Record<string, string>, headers))
  service.heartbeat.add(stream)
  let ended = false
  raw.on('close', () => {
    if (ended) return
    stream.closed()
    onClose()
  })
  try {
    for await (const frame of frames) {
      // the client left (while the socket drained): nothing more is pulled
      if (!stream.open) break
      if (!stream.write(frame)) await stream.drained()
    }
  } finally {
    ended = true
    service.heartbeat.delete(stream)
    // the response ends once the request's audit entry is in the store (docs/stores.md)
    await service.audit.commit(request, 200)
    stream.end()
  }
}
