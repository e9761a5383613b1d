// Stream clients for the tests about sockets: an SSE reader over fetch and a WebSocket client, each
// collecting what arrives and able to wait for the next thing that matches.
import { WebSocket } from 'ws'
import type { ClientOptions } from 'ws'
import type { IncomingMessage } from 'node:http'
import { parseSse } from '../helper.js'
import type { ParsedEvent } from '../helper.js'

type Waiter<T> = { match: (item: T) => boolean, resolve: (item: T) => void, reject: (error: Error) => void }

/** Items as they arrive, and `next(match)` for the first one (seen or to come) that matches. */
class Inbox<T> {
  readonly items: T[] = []
  #waiters: Array<Waiter<T>> = []
  #ended: Error | null = null
  #taken = new Set<number>()

  push (item: T): void {
    this.items.push(item)
    const index = this.items.length - 1
    const waiter = this.#waiters.find((w) => w.match(item))
    if (waiter === undefined) return
    this.#waiters.splice(this.#waiters.indexOf(waiter), 1)
    this.#taken.add(index)
    waiter.resolve(item)
  }

  end (error: Error): void {
    this.#ended = error
    for (const waiter of this.#waiters.splice(0)) waiter.reject(error)
  }

  /** The first matching item that no earlier `next` returned, arrived or to come. */
  next (match: (item: T) => boolean, timeoutMs = 10_000): Promise<T> {
    const index = this.items.findIndex((item, i) => !this.#taken.has(i) && match(item))
    if (index >= 0) {
      this.#taken.add(index)
      return Promise.resolve(this.items[index]!)
    }
    if (this.#ended !== null) return Promise.reject(this.#ended)
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`nothing matched within ${timeoutMs} ms; got ${JSON.stringify(this.items)}`)), timeoutMs)
      this.#waiters.push({
        match,
        resolve: (item) => { clearTimeout(timer); resolve(item) },
        reject: (error) => { clearTimeout(timer); reject(error) }
      })
    })
  }
}

export interface SseClient {
  status: number
  headers: Headers
  events: ParsedEvent[]
  next(type: string): Promise<ParsedEvent>
  /** resolves when the server ends the stream */
  ended: Promise<void>
  /** the client goes away */
  close(): void
}

/** POSTs a run with `Accept: text/event-stream` and reads the events as they come. */
export async function openSse (url: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<SseClient> {
  return readSse(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...headers },
    body: JSON.stringify(body)
  })
}

/** Follows a run's log (`GET /v1/runs/:runId/events`) as the events come. */
export async function followRun (url: string, runId: string, headers: Record<string, string> = {}, query = ''): Promise<SseClient> {
  return readSse(`${url}/v1/runs/${runId}/events${query}`, { headers: { accept: 'text/event-stream', ...headers } })
}

async function readSse (target: string, init: RequestInit): Promise<SseClient> {
  const controller = new AbortController()
  const response = await fetch(target, { ...init, signal: controller.signal })
  const inbox = new Inbox<ParsedEvent>()
  const ended = (async () => {
    let buffer = ''
    const decoder = new TextDecoder()
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true })
        const cut = buffer.lastIndexOf('\n\n')
        if (cut < 0) continue
        for (const event of parseSse(buffer.slice(0, cut + 2))) inbox.push(event)
        buffer = buffer.slice(cut + 2)
      }
      inbox.end(new Error('the stream ended'))
    } catch (error) {
      inbox.end(error as Error)
    }
  })()
  return {
    status: response.status,
    headers: response.headers,
    events: inbox.items,
    next: (type) => inbox.next((event) => event.event === type),
    ended,
    close: () => controller.abort()
  }
}

export interface Frame {
  type: string
  runId?: string
  ref?: string | number
  seq?: number
  data?: any
  error?: { code: string, message: string }
}

export interface WsClient {
  socket: WebSocket
  /** the 101 response */
  upgrade: IncomingMessage
  frames: Frame[]
  send(message: unknown): void
  next(match: (frame: Frame) => boolean): Promise<Frame>
  /** resolves with the close code and reason */
  closed: Promise<{ code: number, reason: string }>
}

/** Opens a WebSocket to `/v1/ws` and collects its frames. */
export async function openWs (url: string, options: ClientOptions & { path?: string } = {}): Promise<WsClient> {
  const socket = new WebSocket(url.replace(/^http/, 'ws') + (options.path ?? '/v1/ws'), options)
  const inbox = new Inbox<Frame>()
  let upgrade: IncomingMessage | undefined
  socket.on('upgrade', (response) => { upgrade = response })
  socket.on('message', (data) => inbox.push(JSON.parse(String(data)) as Frame))
  const closed = new Promise<{ code: number, reason: string }>((resolve) => {
    socket.on('close', (code, reason) => {
      inbox.end(new Error(`closed ${code}`))
      resolve({ code, reason: String(reason) })
    })
  })
  await new Promise<void>((resolve, reject) => {
    socket.once('open', resolve)
    socket.once('error', reject)
  })
  socket.on('error', () => {})
  return {
    socket,
    upgrade: upgrade!,
    frames: inbox.items,
    send: (message) => socket.send(typeof message === 'string' ? message : JSON.stringify(message)),
    next: (match) => inbox.next(match),
    closed
  }
}

