import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { AgentNotFoundError, SessionNotFoundError } from '../lib/core/errors.js'
import { randomId } from '../lib/core/ids.js'
import { requestContextOf } from '../lib/core/request-context.js'
import { ownedSession } from '../lib/runs/sessions.js'
import type { SessionWithMessages as SessionRecord } from '../lib/stores/types.js'
import { errorResponses } from '../schemas/common.js'
import { RunPage, SessionRunsQuery } from '../schemas/runs.js'
import { CreateSessionRequest, ForkSessionRequest, ForkedSession, Session, SessionListQuery, SessionPage, SessionParams, SessionWithMessages } from '../schemas/sessions.js'
import { forkSession } from '../lib/runs/rewind.js'
import { routePluginScope } from '../lib/service/composition.js'

const DEFAULT_SESSION_RUNS_LIMIT = 20
const DEFAULT_SESSIONS_LIMIT = 20
// made once, not per service: its serializer is compiled once per process (lib/core/serializers.ts)
const deleted = { type: 'null', description: 'Deleted' }

export type SessionsPluginOptions = Record<never, never>

const sessions: FastifyPluginAsyncTypebox<SessionsPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'sessionsPlugin')
  const service = fastify.agentService
  const { settings } = service
  const store = settings.sessionStore

  /** The caller's own session, else 404. */
  async function callersSession (request: FastifyRequest, id: string): Promise<SessionRecord> {
    const session = await ownedSession(store, id, requestContextOf(request).principal)
    if (session === null) throw new SessionNotFoundError(id)
    service.audit.note(request, { sessionId: session.id })
    return session
  }

  fastify.post('/sessions', {
    config: { access: 'run' },
    bodyLimit: settings.bodyLimit,
    schema: {
      operationId: 'createSession',
      summary: 'Create a session',
      tags: ['sessions'],
      body: CreateSessionRequest,
      response: { 201: Session, ...errorResponses(400, 401, 403, 404, 413, 415, 429, 503) }
    },
    // `curl -X POST /v1/sessions` with no body is a session without options, not a 400
    preValidation: async (request) => { request.body ??= {} }
  }, async (request, reply) => {
    const context = requestContextOf(request)
    const body = request.body
    if (body.agent !== undefined && !settings.agents.has(body.agent)) throw new AgentNotFoundError(body.agent)
    const session = await store.create({ id: randomId(), agent: body.agent ?? null, principal: context.principal, metadata: body.metadata ?? {} }, settings.sessionTtlMs)
    service.audit.note(request, { sessionId: session.id })
    return reply.code(201).send(session)
  })

  fastify.get('/sessions', {
    config: { access: 'run' },
    schema: {
      operationId: 'listSessions',
      summary: 'The caller\'s own sessions, most recently active first',
      description: 'Unexpired sessions of the caller (never another principal\'s), optionally only those of one agent, ' +
        'paged by `nextCursor`. A chat\'s session carries its chat id in `metadata.chatId`.',
      tags: ['sessions'],
      querystring: SessionListQuery,
      response: { 200: SessionPage, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => {
    const { limit = DEFAULT_SESSIONS_LIMIT, cursor, agent } = request.query
    if (agent !== undefined && !settings.agents.has(agent)) throw new AgentNotFoundError(agent)
    return store.listByPrincipal(requestContextOf(request).principal, {
      limit, ...(cursor === undefined ? {} : { cursor }), ...(agent === undefined ? {} : { agent })
    })
  })

  fastify.get('/sessions/:id', {
    config: { access: 'run' },
    schema: {
      operationId: 'getSession',
      summary: 'Get a session with its messages',
      tags: ['sessions'],
      params: SessionParams,
      response: { 200: SessionWithMessages, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => callersSession(request, request.params.id))

  fastify.get('/sessions/:id/runs', {
    config: { access: 'run' },
    schema: {
      operationId: 'listSessionRuns',
      summary: 'A session\'s runs, most recent first',
      tags: ['sessions', 'runs'],
      params: SessionParams,
      querystring: SessionRunsQuery,
      response: { 200: RunPage, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => {
    const session = await callersSession(request, request.params.id)
    const { limit = DEFAULT_SESSION_RUNS_LIMIT, cursor } = request.query
    return settings.runStore.listBySession(session.id, cursor === undefined ? { limit } : { limit, cursor })
  })

  fastify.post('/sessions/:id/fork', {
    config: { access: 'run' },
    bodyLimit: settings.bodyLimit,
    schema: {
      operationId: 'forkSession',
      summary: 'Fork a session before or after one of its runs',
      description: 'A new session of the caller and the same agent whose messages are the source\'s up to `beforeRunId` ' +
        '(not included) or `afterRunId` (included), or all of them; the source is unchanged. A fork point that is not a ' +
        'run of the session is 400.',
      tags: ['sessions'],
      params: SessionParams,
      body: ForkSessionRequest,
      response: { 201: ForkedSession, ...errorResponses(400, 401, 403, 404, 413, 415, 429, 503) }
    },
    preValidation: async (request) => { request.body ??= {} }
  }, async (request, reply) => {
    const source = await callersSession(request, request.params.id)
    const { metadata, ...point } = request.body
    const fork = await forkSession(settings, source, point, metadata)
    service.audit.note(request, { sessionId: fork.id })
    return reply.code(201).send(fork)
  })

  fastify.delete('/sessions/:id', {
    config: { access: 'run' },
    schema: {
      operationId: 'deleteSession',
      summary: 'Delete a session',
      tags: ['sessions'],
      params: SessionParams,
      response: { 204: deleted, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request, reply) => {
    const session = await callersSession(request, request.params.id)
    await store.delete(session.id)
    return reply.code(204).send()
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const sessionsPlugin = fp(sessions, { fastify: '5.x', name: 'fastify-agents-sessions', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default sessionsPlugin
