// Log lines: in plugin mode ours carry the request id the client sees; client errors are one info line without a
// stack, server errors keep the error.
import t from 'tap'
import Fastify from 'fastify'
import agentService from '../../app/plugin.js'
import type { Agent } from '../../lib/core/types.js'
import { build, echo } from '../helper.js'

type Line = Record<string, any>

function sink (): { lines: Line[], stream: { write (line: string): void } } {
  const lines: Line[] = []
  return { lines, stream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } }
}

const failing: Agent = { async run () { throw new Error('boom') } }

t.test('plugin mode: our log lines carry our request id beside the host\'s reqId', async (t) => {
  const { lines, stream } = sink()
  const app = Fastify({ logger: { level: 'info', stream } })
  t.teardown(() => app.close())
  app.get('/host', async (request) => { request.log.info('host line'); return 'ok' })
  await app.register(agentService, { agents: { echo, failing } })
  const res = await app.inject({ method: 'GET', url: '/v1/agents/nope', headers: { 'x-request-id': 'client-id-1' } })
  t.equal(res.headers['x-request-id'], 'client-id-1')
  const ours = lines.filter((line) => line.requestId === 'client-id-1')
  t.ok(ours.length >= 2, 'the error line and the response line')
  t.match(ours.find((line) => line.msg === 'request completed'), { reqId: String, requestId: 'client-id-1', res: { statusCode: 404 } })
  const error = ours.find((line) => line.msg === 'Agent "nope" not found')
  t.match(error, { level: 30, statusCode: 404, code: 'AGENT_NOT_FOUND' }, 'a 404 is an info line with its code')
  t.equal(error?.err, undefined, 'without the error and its stack')
  await app.inject({ method: 'GET', url: '/host' })
  t.equal(lines.find((line) => line.msg === 'host line')!.requestId, undefined, "the host's own routes are left as they are")
})

t.test('client errors log at info without a stack; 5xx keep the error', async (t) => {
  const { lines, stream } = sink()
  const { app } = build(t, { agents: { echo, failing }, logger: { level: 'info', stream } })
  await app.inject({ method: 'GET', url: '/v1/unknown' })
  await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { nope: 1 } })
  await app.inject({ method: 'POST', url: '/v1/agents/failing/runs', payload: { input: 1 } })
  const clientErrors = lines.filter((line) => typeof line.code === 'string' && line.statusCode >= 400 && line.statusCode < 500)
  t.same(clientErrors.map((line) => [line.level, line.code]), [[30, 'ROUTE_NOT_FOUND'], [30, 'FST_ERR_VALIDATION']])
  t.ok(clientErrors.every((line) => line.err === undefined), 'no stack')
  const serverError = lines.find((line) => line.level === 50 && line.err !== undefined)
  t.match(serverError, { err: { stack: String } }, 'a 500 keeps its error and stack')
})
