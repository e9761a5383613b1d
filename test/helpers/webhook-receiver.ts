// A webhook endpoint for tests: a node:http server on 127.0.0.1 that checks every delivery with the standardwebhooks
// package's own Webhook.verify, records it, and answers as the test says (a status, or no answer at all). It can go
// down (nothing listens on its port: connections are refused) and come back up on the same port.
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { randomBytes } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { Webhook } from 'standardwebhooks'
import type { Test } from 'tap'

export interface Delivery {
  id: string
  timestamp: string
  signature: string
  contentType: string | undefined
  /** the body as received */
  body: string
  /** the body as Webhook.verify parsed it; null when it did not verify */
  payload: any
  verified: boolean
  verifyError: string | null
}

/** What the receiver does with the n-th request (from 0): answer with a status (and headers), or never answer ('hang'). */
export type Answer = (delivery: Delivery, n: number) => number | { status: number, headers: Record<string, string> } | 'hang'

export interface Receiver {
  url: string
  secret: string
  deliveries: Delivery[]
  answer: Answer
  down(): Promise<void>
  up(): Promise<void>
  /** how many deliveries carried each webhook-id */
  counts(): Map<string, number>
}

export function newSecret (): string {
  return `whsec_${randomBytes(32).toString('base64')}`
}

export async function receiver (t: Test, answer: Answer = () => 204, secret = newSecret()): Promise<Receiver> {
  const verifier = new Webhook(secret)
  const hanging = new Set<ServerResponse>()
  const handle = (request: IncomingMessage, response: ServerResponse): void => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString()
      const header = (name: string): string => String(request.headers[name] ?? '')
      const delivery: Delivery = {
        id: header('webhook-id'),
        timestamp: header('webhook-timestamp'),
        signature: header('webhook-signature'),
        contentType: request.headers['content-type'],
        body,
        payload: null,
        verified: false,
        verifyError: null
      }
      try {
        delivery.payload = verifier.verify(body, {
          'webhook-id': delivery.id, 'webhook-timestamp': delivery.timestamp, 'webhook-signature': delivery.signature
        })
        delivery.verified = true
      } catch (error) {
        delivery.verifyError = (error as Error).message
      }
      const n = state.deliveries.length
      state.deliveries.push(delivery)
      const answer = state.answer(delivery, n)
      if (answer === 'hang') {
        hanging.add(response)
        return
      }
      if (typeof answer === 'number') response.writeHead(answer).end()
      else response.writeHead(answer.status, answer.headers).end()
    })
  }
  let server = createServer(handle)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  let listening = true

  const close = async (): Promise<void> => {
    if (!listening) return
    listening = false
    for (const response of hanging) response.destroy()
    hanging.clear()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
  const state: Receiver = {
    url: `http://127.0.0.1:${port}/hooks`,
    secret,
    deliveries: [],
    answer,
    down: close,
    async up () {
      if (listening) return
      server = createServer(handle)
      server.listen(port, '127.0.0.1')
      await once(server, 'listening')
      listening = true
    },
    counts () {
      const counts = new Map<string, number>()
      for (const delivery of state.deliveries) counts.set(delivery.id, (counts.get(delivery.id) ?? 0) + 1)
      return counts
    }
  }
  t.teardown(close)
  return state
}
