import { Writable } from 'node:stream'
import t from 'tap'
import pino from 'pino'
import { createAgentService } from '../../app/service.js'
import { RouteIndex, errorBody } from '../../lib/core/error-reply.js'
import { echo } from '../helper.js'

t.test('a pino instance is used as the logger, with the request id on every line', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const logger = pino({ level: 'info' }, new Writable({ write (chunk: Buffer, _enc, cb) { lines.push(JSON.parse(chunk.toString())); cb() } }))
  const service = createAgentService({ agents: { echo }, logger })
  t.teardown(() => service.close(0))
  const res = await service.app.inject({ method: 'GET', url: '/v1/agents', headers: { 'x-request-id': 'log-me' } })
  t.equal(res.statusCode, 200)
  t.ok(lines.some((line) => line.reqId === 'log-me' && line.msg === 'request completed'))
})

t.test('listen() binds the host option, or the one given; the url brackets IPv6', async (t) => {
  const service = createAgentService({ agents: { echo }, logger: false, host: '127.0.0.1' })
  t.teardown(() => service.close(0))
  const bound = await service.listen({ port: 0 })
  t.match(bound, { host: '127.0.0.1', port: Number, url: `http://127.0.0.1:${bound.port}` })
  t.equal((await fetch(`${bound.url}/health`)).status, 200)
  const six = createAgentService({ agents: { echo }, logger: false })
  t.teardown(() => six.close(0))
  const ipv6 = await six.listen({ port: 0, host: '::1' }).catch(() => null)
  if (ipv6 === null) return t.comment('no IPv6 loopback here')
  t.equal(ipv6.url, `http://[::1]:${ipv6.port}`)
})

t.test('the route index answers 405 for wildcard and multi-method routes', async (t) => {
  const index = new RouteIndex()
  index.add('/files/*', ['GET', 'HEAD'])
  index.add('/items/:id', 'DELETE')
  index.add('/items/:id', 'GET')
  t.same(index.allowed('/files/a/b.txt'), ['GET', 'HEAD'])
  t.same(index.allowed('/items/7'), ['DELETE', 'GET'])
  t.same(index.allowed('/items/7/'), ['DELETE', 'GET'], 'a trailing slash is the same path')
  t.same(index.allowed('/items'), [])
  t.same(index.allowed('/a.b'), [], 'dots are literal')
})

t.test('error bodies for statuses without a name and errors without a message', async (t) => {
  const request = { headers: {}, agentsContext: null } as never
  t.match(errorBody(request, 499, { message: undefined }, false), { statusCode: 499, error: 'Error', message: '' })
})

t.test('without a logger option the standalone server logs at info', async (t) => {
  const service = createAgentService({ agents: { echo } })
  t.teardown(() => service.close(0))
  t.equal(service.app.log.level, 'info')
})
