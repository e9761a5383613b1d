import { connect } from 'node:net'
import type { Socket } from 'node:net'
import t from 'tap'
import { createAgentService } from '../../app/service.js'
import { echo } from '../helper.js'

interface RawResponse { status: number, headers: Record<string, string>, body: Record<string, unknown> | null, closedAt: number }

function open (port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket))
    socket.once('error', reject)
  })
}

/** What the server sends on `socket` until it closes the connection. */
function responseOf (socket: Socket): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    let text = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { text += chunk })
    socket.once('error', reject)
    socket.once('close', () => {
      const [head = '', body = ''] = text.split('\r\n\r\n')
      const [statusLine = '', ...lines] = head.split('\r\n')
      const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]))
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: body === '' ? null : JSON.parse(body) as Record<string, unknown>, closedAt: Date.now() })
    })
  })
}

async function send (port: number, text: string): Promise<RawResponse> {
  const socket = await open(port)
  const response = responseOf(socket)
  socket.write(text)
  return response
}

t.test('1,100 stalled bodies each get 408 in our shape and are closed while others are served', async (t) => {
  // the headers get as long as the whole request: 1,100 connections on a busy machine may have their headers
  // parsed after a shorter headers timeout, though they were sent at once (answered as that timeout, rightly)
  const service = createAgentService({ agents: { echo }, logger: false, headersTimeoutMs: 1_500, bodyTimeoutMs: 1_500 })
  t.teardown(() => service.close(0))
  const { port, url } = await service.listen({ port: 0, host: '127.0.0.1' })
  const stalled: Array<Promise<RawResponse>> = []
  const started = Date.now()
  // Each writes as soon as it is connected (the headers timeout counts from the connection). In batches: a burst
  // of 1,100 SYNs would overflow the listen backlog and wait for retransmits.
  for (let batch = 0; batch < 11; batch++) {
    await Promise.all(Array.from({ length: 100 }, async (_, i) => {
      const socket = await open(port)
      stalled[batch * 100 + i] = responseOf(socket)
      socket.write(`POST /v1/agents/echo/runs HTTP/1.1\r\nHost: x\r\nX-Request-ID: stalled-${batch * 100 + i}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"input":')
    }))
  }
  // meanwhile the others are served
  t.equal((await fetch(`${url}/health`)).status, 200)
  const run = await fetch(`${url}/v1/agents/echo/runs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"input":"ok"}' })
  t.equal(run.status, 200)
  const answers = await Promise.all(stalled)
  t.equal(answers.length, 1_100)
  t.equal(answers.filter((a) => a.status === 408).length, 1_100, 'each stalled body got 408')
  const odd = answers.findIndex((a, i) => !(a.body?.code === 'REQUEST_TIMEOUT' && a.body.message === 'The request body did not arrive within 1500 ms' &&
    a.body.requestId === `stalled-${i}` && a.headers['x-request-id'] === `stalled-${i}` &&
    typeof a.body.traceId === 'string' && a.headers.connection === 'close'))
  t.equal(odd, -1, `in our shape, with the request's own id (the first not: ${JSON.stringify(answers[odd])})`)
  t.ok(answers.every((a) => a.closedAt - started >= 1_400), 'not before the body timeout')
  t.equal((await fetch(`${url}/health`)).status, 200, 'and the server still serves')
})

t.test('headers that do not arrive in time: 408 in our shape, with a new request id', async (t) => {
  const service = createAgentService({ agents: { echo }, logger: false, headersTimeoutMs: 200, bodyTimeoutMs: 5_000 })
  t.teardown(() => service.close(0))
  const { port } = await service.listen({ port: 0, host: '127.0.0.1' })
  const started = Date.now()
  const res = await send(port, 'GET /health HTTP/1.1\r\nHost: x\r\n')
  t.ok(Date.now() - started < 4_000, 'at the headers timeout, not the body timeout')
  t.equal(res.status, 408)
  t.match(res.body, { statusCode: 408, error: 'Request Timeout', code: 'REQUEST_TIMEOUT', message: 'The request headers did not arrive within 200 ms', requestId: String, traceId: String })
  t.equal(res.headers['x-request-id'], res.body!.requestId)
})

t.test('what Node\'s parser refuses is answered in our shape with an X-Request-ID', async (t) => {
  const service = createAgentService({ agents: { echo }, logger: false })
  t.teardown(() => service.close(0))
  const { port } = await service.listen({ port: 0, host: '127.0.0.1' })
  const cases: Array<[string, string, number, string]> = [
    ['a CR in a header value', 'GET /health HTTP/1.1\r\nHost: x\r\nX-Bad: a\rb\r\n\r\n', 400, 'MALFORMED_REQUEST'],
    ['headers over 16 KiB', `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'HEADERS_TOO_LARGE'],
    ['Content-Length with Transfer-Encoding', 'POST /v1/agents/echo/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400, 'MALFORMED_REQUEST'],
    ['an unknown method', 'FROB /health HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'MALFORMED_REQUEST']
  ]
  for (const [name, request, status, code] of cases) {
    const res = await send(port, request)
    t.equal(res.status, status, name)
    t.match(res.body, { statusCode: status, code, requestId: String, traceId: String }, name)
    t.equal(res.headers['x-request-id'], res.body!.requestId, name)
    t.equal(res.headers['content-type'], 'application/json; charset=utf-8', name)
  }
})

t.test('a kept-alive connection: a malformed request after a good one still gets our answer', async (t) => {
  const service = createAgentService({ agents: { echo }, logger: false })
  t.teardown(() => service.close(0))
  const { port } = await service.listen({ port: 0, host: '127.0.0.1' })
  const socket = await open(port)
  let text = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { text += chunk })
  const closed = new Promise((resolve) => socket.once('close', resolve))
  socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n')
  await new Promise((resolve) => socket.once('data', resolve))
  socket.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Bad: a\rb\r\n\r\n')
  await closed
  const [, first = '', second = ''] = text.split(/HTTP\/1\.1 /)
  t.match(first, /^200 /)
  t.match(second, /^400 Bad Request\r\n[^]*X-Request-ID: [^]*"code":"MALFORMED_REQUEST"/)
})

t.test('a connection reset, or a response already under way, is only closed', async (t) => {
  const service = createAgentService({ agents: { echo }, logger: false })
  t.teardown(() => service.close(0))
  await service.app.ready()
  const written: string[] = []
  let destroyed = 0
  const socket = { destroyed: false, writable: true, _httpMessage: { headersSent: true, writableEnded: false }, write (text: string) { written.push(text) }, destroy () { destroyed++ } }
  service.app.server.emit('clientError', Object.assign(new Error('reset'), { code: 'ECONNRESET' }), socket)
  t.equal(destroyed, 0, 'a reset connection is left to Node')
  service.app.server.emit('clientError', Object.assign(new Error('bad'), { code: 'HPE_INVALID_METHOD' }), socket)
  t.same(written, [], 'no second head on a response under way')
  t.equal(destroyed, 1)
  service.app.server.emit('clientError', Object.assign(new Error('bad'), { code: 'HPE_INVALID_METHOD' }), { ...socket, _httpMessage: undefined, writable: false })
  t.same(written, [], 'nothing written to a socket that cannot take it')
  service.app.server.emit('clientError', Object.assign(new Error('bad'), { code: 'HPE_INVALID_METHOD' }), { ...socket, destroyed: true })
  t.equal(destroyed, 2, 'a destroyed socket is left alone')
})

t.test('a headers timeout longer than the body timeout is refused', async (t) => {
  t.throws(() => createAgentService({ agents: { echo }, headersTimeoutMs: 2_000, bodyTimeoutMs: 1_000 }), /headersTimeoutMs must not be greater than bodyTimeoutMs/)
})
