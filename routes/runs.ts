import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { seqParam } from '../lib/core/cursors.js'
import { RunAlreadyEndedError, RunRecordNotFoundError } from '../lib/core/errors.js'
import { requestContextOf } from '../lib/core/request-context.js'
import { RunFollower } from '../lib/runs/follow.js'
import { cancelledEnd } from '../lib/runs/start.js'
import type { RunRecord } from '../lib/stores/types.js'
import { errorResponses } from '../schemas/common.js'
import { RunEventsQuery, RunParams, RunRecord as RunRecordSchema } from '../schemas/runs.js'
import { routePluginScope } from '../lib/service/composition.js'

export type RunsPluginOptions = Record<never, never>

// made once, not per service: its serializer is compiled once per process (lib/core/serializers.ts)
const eventStream = { type: 'string' }

const ended = (record: RunRecord): boolean => record.status !== 'queued' && record.status !== 'running'

/**
 * `/runs/:runId`: a run as a resource (docs/runs.md). Every route checks ownership first: another principal's
 * run, an unknown or an expired one is 404 `RUN_NOT_FOUND`; only then the request (400), then the state (409).
 */
const runs: FastifyPluginAsyncTypebox<RunsPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'runsPlugin')
  const service = fastify.agentService
  const { settings } = service
  const store = settings.runStore

  async function ownedRun (request: FastifyRequest, runId: string): Promise<RunRecord> {
    const record = await store.get(runId)
    if (record === null || record.principal !== requestContextOf(request).principal) throw new RunRecordNotFoundError(runId)
    service.audit.note(request, { agent: record.agent, runId, sessionId: record.sessionId ?? undefined })
    return record
  }

  fastify.get('/runs/:runId', {
    config: { access: 'run' },
    schema: {
      operationId: 'getRun',
      summary: 'Get a run',
      tags: ['runs'],
      params: RunParams,
      response: { 200: RunRecordSchema, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => ownedRun(request, request.params.runId))

  fastify.get('/runs/:runId/events', {
    config: { access: 'run' },
    schema: {
      operationId: 'getRunEvents',
      summary: 'Follow a run: its events after a cursor, then live ones until the end',
      description: 'Server-Sent Events, byte for byte as the run first sent them. The cursor is `Last-Event-ID` (wins) or ' +
        '`?after=<seq>`, default 0. A rejoin from the terminal event\'s own id ends at once. A follower too far behind ' +
        'is disconnected (rejoin from its last id); a store that fails ends the stream with an `error` event.',
      tags: ['runs'],
      params: RunParams,
      querystring: RunEventsQuery,
      response: {
        200: { description: 'The run\'s events', content: { 'text/event-stream': { schema: eventStream } } },
        ...errorResponses(400, 401, 403, 404, 429, 503)
      }
    }
  }, async (request, reply) => {
    const record = await ownedRun(request, request.params.runId)
    const lastEventId = request.headers['last-event-id']
    const after = lastEventId !== undefined
      ? seqParam(String(lastEventId), 'Last-Event-ID')
      : request.query.after === undefined ? 0 : seqParam(request.query.after, 'querystring/after')
    new RunFollower(service, request, reply, record, after)
    return reply
  })

  fastify.post('/runs/:runId/cancel', {
    config: { access: 'run' },
    schema: {
      operationId: 'cancelRun',
      summary: 'Cancel a run',
      description: 'The run ends with `run.failed` `CANCELLED` within a second, on whichever instance runs it; a queued run ' +
        'ends at once. 202 with the record as it was; an ended run is 409 `RUN_ALREADY_ENDED`.',
      tags: ['runs'],
      params: RunParams,
      response: { 202: RunRecordSchema, ...errorResponses(400, 401, 403, 404, 409, 429, 503) }
    }
  }, async (request, reply) => {
    const runId = request.params.runId
    const record = await ownedRun(request, runId)
    if (ended(record)) throw new RunAlreadyEndedError(runId)
    const result = await store.cancel(runId, cancelledEnd(), settings.runRetentionMs)
    if (result.outcome === 'not_found') throw new RunRecordNotFoundError(runId)
    if (result.outcome === 'ended') throw new RunAlreadyEndedError(runId)
    // on this instance, at once (the store tells the others)
    if (result.outcome === 'requested') service.runs.get(runId)?.abort('CANCELLED')
    // a queued run never ran: nobody else gives its quota slot back
    if (result.outcome === 'cancelled') await service.quotas?.release(record.principal, runId)
    request.log.info({ runId, principal: record.principal }, 'run cancelled')
    return reply.code(202).send(result.record)
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const runsPlugin = fp(runs, { fastify: '5.x', name: 'fastify-agents-runs', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default runsPlugin
