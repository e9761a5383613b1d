import t from 'tap'
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { once } from 'node:events'
import { Writable } from 'node:stream'
import { SseStream } from '../../../lib/runs/sse.js'

const event = (seq: number, type = 'message.delta'): { seq: number, type: string, json: string } => ({ seq, type, json: `{"text":"${seq}"}` })

/** A node:http server whose one route hands its response to `handle`; `get` reads a whole response as text, raw. */
async function serve (t: { teardown: (fn: () => void) => void }, handle: (res: http.ServerResponse) => void): Promise<{ port: number }> {
  const server = http.createServer((_req, res) => handle(res))
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { port: (server.address() as AddressInfo).port }
}

/** Sends `request` over a socket of its own and reads until the server closes it or `until` matches. */
async function exchange (port: number, request: string, until: RegExp): Promise<string> {
  const socket = net.connect(port, '127.0.0.1')
  socket.setEncoding('latin1')
  let text = ''
  socket.write(request)
  for await (const chunk of socket) {
    text += chunk as string
    if (until.test(text)) break
  }
  socket.destroy()
  return text
}

/** Counts the writes a response makes: through the response (head, fallback, end) and straight to its socket. */
function countWrites (res: http.ServerResponse): { response: string[], socket: string[] } {
  const seen = { response: [] as string[], socket: [] as string[] }
  const write = res.write.bind(res)
  res.write = ((chunk: string) => { seen.response.push(chunk); return write(chunk) }) as typeof res.write
  const socket = res.socket!
  const socketWrite = socket.write.bind(socket)
  socket.write = ((chunk: string, ...rest: never[]) => { seen.socket.push(chunk); return socketWrite(chunk, ...rest) }) as typeof socket.write
  return seen
}

t.test('the events of one tick go out in one write, in order; the terminal event goes with the end', async (t) => {
  let seen: ReturnType<typeof countWrites> | undefined
  const { port } = await serve(t, (res) => {
    seen = countWrites(res)
    const stream = new SseStream(res, { 'x-request-id': 'r1' })
    stream.send(event(1, 'run.started'))
    setImmediate(() => {
      stream.send(event(2))
      stream.comment('ping')
      stream.send(event(3))
      setImmediate(() => {
        stream.send(event(4))
        stream.end(event(5, 'run.completed'))
      })
    })
  })
  const text = await exchange(port, 'POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n', /\r\n0\r\n\r\n$/)
  t.match(text, /^HTTP\/1.1 200 OK\r\n/)
  t.match(text, /x-request-id: r1\r\n/)
  t.match(text, /transfer-encoding: chunked/i)
  const body = text.slice(text.indexOf('\r\n\r\n') + 4)
  // the chunks, as a client's HTTP parser reads them
  let decoded = ''
  for (let rest = body; ;) {
    const line = rest.indexOf('\r\n')
    const size = parseInt(rest.slice(0, line), 16)
    if (size === 0) break
    decoded += rest.slice(line + 2, line + 2 + size)
    t.equal(rest.slice(line + 2 + size, line + 4 + size), '\r\n', 'each chunk ends with CRLF')
    rest = rest.slice(line + 4 + size)
  }
  t.equal(decoded, [
    'id: 1\nevent: run.started\ndata: {"text":"1"}\n\n',
    'id: 2\nevent: message.delta\ndata: {"text":"2"}\n\n',
    ': ping\n\n',
    'id: 3\nevent: message.delta\ndata: {"text":"3"}\n\n',
    'id: 4\nevent: message.delta\ndata: {"text":"4"}\n\n',
    'id: 5\nevent: run.completed\ndata: {"text":"5"}\n\n'
  ].join(''))
  t.same(seen!.response, ['id: 1\nevent: run.started\ndata: {"text":"1"}\n\n'], 'the first tick goes through the response, with its head')
  t.equal(seen!.socket.filter((w) => w.includes('id: 2')).length, 1)
  t.match(seen!.socket.find((w) => w.includes('id: 2')), /id: 2[^]*: ping[^]*id: 3/, 'the second tick is one write to the socket')
  t.notOk(seen!.socket.some((w) => w.includes('id: 4') && !w.includes('id: 5')), 'the last tick goes out with the end')
})

t.test('a reader that does not read: the stream says when the socket is full, and when it has taken what it held', async (t) => {
  let stream: SseStream | undefined
  const { port } = await serve(t, (res) => { stream = new SseStream(res, {}) })
  const socket = net.connect(port, '127.0.0.1')
  t.teardown(() => socket.destroy())
  socket.write('POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n')
  socket.pause()
  while (stream === undefined) await new Promise((resolve) => setImmediate(resolve))
  t.equal(stream.needsDrain, false)
  t.equal(stream.write('x'.repeat(100)), true, 'a little goes at the tick\'s end')
  await new Promise((resolve) => setImmediate(resolve))
  // a burst past 16 KiB goes at once: the socket's answer is what backpressure reads
  const block = `data: ${'y'.repeat(64 * 1024)}\n\n`
  let writes = 0
  while (stream.write(block) && writes < 10_000) writes++
  t.ok(writes < 10_000, `the socket filled up after ${writes} blocks`)
  t.equal(stream.needsDrain, true)
  t.ok(stream.buffered > 0)
  let drained = false
  const wait = stream.drained().then(() => { drained = true })
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.notOk(drained, 'no drain while the reader reads nothing')
  socket.resume()
  await wait
  t.equal(stream.needsDrain, false, 'drained once the reader read')
  // a wait forgotten before the drain calls nothing
  let called = false
  const forget = stream.onDrained(() => { called = true })
  forget()
  stream.end()
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.notOk(called)
})

t.test('a response the socket does not take directly: HTTP/1.0 (no chunks), not attached yet, holding data of its own', async (t) => {
  // HTTP/1.0: no chunked encoding, the events go through the response as they are
  let seen: ReturnType<typeof countWrites> | undefined
  const { port } = await serve(t, (res) => {
    seen = countWrites(res)
    const stream = new SseStream(res, {})
    stream.send(event(1, 'run.started'))
    setImmediate(() => {
      stream.send(event(2))
      setImmediate(() => stream.end())
    })
  })
  const text = await exchange(port, 'POST / HTTP/1.0\r\ncontent-length: 0\r\n\r\n', /id: 2[^]*\n\n$/)
  t.match(text, /\r\n\r\nid: 1\nevent: run.started\ndata: \{"text":"1"\}\n\nid: 2\nevent: message.delta/)
  t.ok(seen!.response.some((w) => w.includes('id: 2')), 'through the response, which frames nothing')

  // fakes for the states a real response is rarely caught in
  const writes: string[] = []
  const base = { writeHead: () => {}, on: () => {}, off: () => {}, writableEnded: false, writableNeedDrain: false, chunkedEncoding: true, write: (s: string) => { writes.push(s); return true } }
  const socketless = new SseStream({ ...base, socket: null, writableLength: 0 } as never, {})
  socketless.write('a')
  socketless.flush()
  socketless.write('b')
  socketless.flush()
  t.same(writes, ['a', 'b'], 'a response not attached to its socket yet writes through itself')
  t.equal(socketless.needsDrain, false)
  const forget = socketless.onDrained(() => {})
  forget()
  const socket = new net.Socket()
  Object.defineProperty(socket, 'writableLength', { value: 0 })
  socket.write = (() => t.fail('straight to the socket')) as never
  const holding = new SseStream({ ...base, socket, writableLength: 5 } as never, {})
  holding.write('c')
  holding.flush()
  holding.write('d')
  holding.flush()
  t.same(writes, ['a', 'b', 'c', 'd'], 'a response holding data of its own writes through itself, behind it')
  // an injected request's response (light-my-request) has a stand-in for a socket, which drops what it is given
  const standIn = new Writable({ write: (_chunk, _encoding, done) => { t.fail('to the stand-in'); done() } })
  const injected = new SseStream({ ...base, socket: standIn, writableLength: 0 } as never, {})
  injected.write('e')
  injected.flush()
  injected.write('f')
  injected.flush()
  t.same(writes, ['a', 'b', 'c', 'd', 'e', 'f'], 'a stand-in socket gets nothing straight')
})

t.test('what a tick sent is dropped when the client leaves or is cut before the tick ends', async (t) => {
  const writes: string[] = []
  const raw = { writeHead: () => {}, on: () => {}, writableEnded: false, write: (s: string) => { writes.push(s); return true }, destroy: () => {}, writableLength: 0, socket: null }
  const left = new SseStream(raw as never, {})
  left.write('a')
  left.closed()
  const cut = new SseStream(raw as never, {})
  cut.write('b')
  cut.cut()
  await new Promise((resolve) => setImmediate(resolve))
  t.same(writes, [])
  t.equal(left.buffered, 0)
})
