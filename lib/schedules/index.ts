// The schedules' routes (docs/schedules.md): a principal's schedules, created, read, changed, deleted and fired by
// hand; another principal's schedule is not found, never forbidden. Every field is checked before anything is
// stored (a 400 naming it); the firing itself is the scheduler's (scheduler.ts).
import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { AgentNotFoundError, ForbiddenError, ScheduleNotFoundError, SessionNotFoundError } from '../core/errors.js'
import { randomId } from '../core/ids.js'
import { decodeSeqCursor, encodeSeqCursor } from '../core/cursors.js'
import { requestContextOf } from '../core/request-context.js'
import { routePluginScope } from '../service/composition.js'
import { ownedSession } from '../runs/sessions.js'
import { queueRun } from '../runs/start.js'
import type { RunRecord, ScheduleRow, ScheduleState } from '../stores/types.js'
import { errorResponses } from '../../schemas/common.js'
import { QueuedRun, RunPage, SessionRunsQuery } from '../../schemas/runs.js'
import {
  CreateScheduleRequest, Schedule, ScheduleListQuery, SchedulePage, ScheduleParams, UpdateScheduleRequest
} from '../../schemas/schedules.js'
import type { Trigger } from './policy.js'
import { checkTrigger, firstDue, recordManualRun, wakeOf } from './policy.js'

export type SchedulesPluginOptions = Record<never, never>

const DEFAULT_LIMIT = 20
/** A PATCH racing the scheduler's writes reads the row again this many times before it gives up (a 503). */
const WRITE_ATTEMPTS = 20


const schedules: FastifyPluginAsyncTypebox<SchedulesPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'schedulesPlugin')
  const service = fastify.agentService
  const { settings } = service
  const store = settings.scheduleStore

  /** The caller's own schedule, else 404 (another principal's included). */
  async function callersSchedule (request: FastifyRequest, id: string): Promise<ScheduleRow> {
    const row = await store.get(id)
    if (row === null || row.principal !== requestContextOf(request).principal) throw new ScheduleNotFoundError(id)
    return row
  }

  /** The agent exists and the caller may run it; the input passes the agent's schema; the session is the caller's. */
  async function checkRun (request: FastifyRequest, agent: string, input: unknown, sessionId: string | null): Promise<void> {
    if (!settings.agents.has(agent)) throw new AgentNotFoundError(agent)
    if (!service.hasAccess(request, 'run', agent)) throw new ForbiddenError(`The token lacks the role for run on agent "${agent}"`)
    const validate = settings.agentSchemas.get(agent)?.validate
    if (validate !== undefined) await validate(input, 'body/input')
    if (sessionId !== null && await ownedSession(settings.sessionStore, sessionId, requestContextOf(request).principal) === null) {
      throw new SessionNotFoundError(sessionId)
    }
  }

  fastify.post('/schedules', {
    config: { access: 'run' },
    bodyLimit: settings.bodyLimit,
    schema: {
      operationId: 'createSchedule',
      summary: 'Create a schedule: runs of an agent on a cron expression, an interval or once',
      tags: ['schedules'],
      body: CreateScheduleRequest,
      response: { 201: Schedule, ...errorResponses(400, 401, 403, 404, 413, 415, 429, 503) }
    }
  }, async (request, reply) => {
    const body = request.body
    const now = Date.now()
    const trigger: Trigger = { cron: body.cron ?? null, everyMs: body.everyMs ?? null, at: body.at ?? null, timezone: body.timezone ?? 'UTC' }
    checkTrigger(trigger, now)
    const sessionId = body.sessionId ?? null
    await checkRun(request, body.agent, body.input, sessionId)
    const enabled = body.enabled ?? true
    const createdAt = new Date(now).toISOString()
    const id = randomId()
    const state: ScheduleState = {
      schedule: {
        id,
        agent: body.agent,
        principal: requestContextOf(request).principal,
        input: body.input,
        ...trigger,
        sessionId,
        overlap: body.overlap ?? 'skip',
        enabled,
        nextRunAt: enabled ? firstDue(trigger, now) : null,
        lastRunAt: null,
        lastRunId: null,
        lastSkippedAt: null,
        metadata: body.metadata ?? {},
        createdAt,
        updatedAt: createdAt
      },
      fire: null,
      waiting: null,
      runs: []
    }
    await store.insert({ id, principal: state.schedule.principal, createdAt: now, wakeAt: wakeOf(state, now), state })
    return reply.code(201).send(state.schedule)
  })

  fastify.get('/schedules', {
    config: { access: 'run' },
    schema: {
      operationId: 'listSchedules',
      summary: 'The caller\'s own schedules, most recently created first',
      tags: ['schedules'],
      querystring: ScheduleListQuery,
      response: { 200: SchedulePage, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => {
    const { limit = DEFAULT_LIMIT, cursor } = request.query
    const page = await store.list({ limit, principal: requestContextOf(request).principal, ...(cursor === undefined ? {} : { cursor }) })
    return { schedules: page.rows.map((row) => row.state.schedule), nextCursor: page.nextCursor }
  })

  fastify.get('/schedules/:id', {
    config: { access: 'run' },
    schema: {
      operationId: 'getSchedule',
      summary: 'Get a schedule',
      tags: ['schedules'],
      params: ScheduleParams,
      response: { 200: Schedule, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => (await callersSchedule(request, request.params.id)).state.schedule)

  fastify.patch('/schedules/:id', {
    config: { access: 'run' },
    bodyLimit: settings.bodyLimit,
    schema: {
      operationId: 'updateSchedule',
      summary: 'Change a schedule (any field but its agent)',
      description: 'A trigger given (`cron`, `everyMs` or `at`) replaces the schedule\'s; its next due time is computed ' +
        'again when the trigger, the time zone or `enabled` changes. `sessionId: null` gives every fire a new session again.',
      tags: ['schedules'],
      params: ScheduleParams,
      body: UpdateScheduleRequest,
      response: { 200: Schedule, ...errorResponses(400, 401, 403, 404, 413, 415, 429, 503) }
    }
  }, async (request) => {
    const body = request.body
    for (let attempt = 0; attempt < WRITE_ATTEMPTS; attempt++) {
      const row = await callersSchedule(request, request.params.id)
      const now = Date.now()
      const state = structuredClone(row.state)
      const { schedule } = state
      const triggerGiven = body.cron !== undefined || body.everyMs !== undefined || body.at !== undefined
      const trigger: Trigger = triggerGiven
        ? { cron: body.cron ?? null, everyMs: body.everyMs ?? null, at: body.at ?? null, timezone: body.timezone ?? schedule.timezone }
        : { cron: schedule.cron, everyMs: schedule.everyMs, at: schedule.at, timezone: body.timezone ?? schedule.timezone }
      const retimed = triggerGiven || (body.timezone !== undefined && body.timezone !== schedule.timezone) ||
        (body.enabled === true && !schedule.enabled)
      // a one-shot schedule that fired keeps its past `at`: only a new one is checked for being in the future
      if (retimed) checkTrigger(trigger, now)
      const sessionId = body.sessionId === undefined ? schedule.sessionId : body.sessionId
      const input = body.input === undefined ? schedule.input : body.input
      if (body.input !== undefined || (sessionId !== null && sessionId !== schedule.sessionId)) await checkRun(request, schedule.agent, input, sessionId)
      Object.assign(schedule, trigger, { input, sessionId, updatedAt: new Date(now).toISOString() })
      if (body.overlap !== undefined) schedule.overlap = body.overlap
      if (body.metadata !== undefined) schedule.metadata = body.metadata
      if (body.enabled !== undefined) schedule.enabled = body.enabled
      if (!schedule.enabled) {
        schedule.nextRunAt = null
        state.waiting = null
      } else if (retimed) {
        schedule.nextRunAt = firstDue(trigger, now)
      }
      const written = await store.write(row.id, row.revision, { wakeAt: wakeOf(state, now), state })
      if (written !== null) return written.state.schedule
    }
    throw Object.assign(new Error('The schedule kept changing while it was updated: try again'), { statusCode: 503, code: 'STORE_UNAVAILABLE' })
  })

  fastify.delete('/schedules/:id', {
    config: { access: 'run' },
    schema: {
      operationId: 'deleteSchedule',
      summary: 'Delete a schedule (its runs stay)',
      tags: ['schedules'],
      params: ScheduleParams,
      response: { 204: { type: 'null', description: 'Deleted' }, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request, reply) => {
    const row = await callersSchedule(request, request.params.id)
    await store.delete(row.id)
    return reply.code(204).send()
  })

  fastify.get('/schedules/:id/runs', {
    config: { access: 'run' },
    schema: {
      operationId: 'listScheduleRuns',
      summary: 'A schedule\'s runs, most recent first',
      description: 'Its last 100 runs still kept by the run store (`runRetentionMs`).',
      tags: ['schedules', 'runs'],
      params: ScheduleParams,
      querystring: SessionRunsQuery,
      response: { 200: RunPage, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => {
    const row = await callersSchedule(request, request.params.id)
    const { limit = DEFAULT_LIMIT, cursor } = request.query
    const from = cursor === undefined ? 0 : Number(decodeSeqCursor(cursor))
    const ids = row.state.runs.slice(from, from + limit)
    const records = await Promise.all(ids.map((runId) => settings.runStore.get(runId)))
    const runs = records.filter((record): record is RunRecord => record !== null)
    return { runs, nextCursor: from + limit < row.state.runs.length ? encodeSeqCursor(from + limit) : null }
  })

  fastify.post('/schedules/:id/trigger', {
    config: { access: 'run' },
    schema: {
      operationId: 'triggerSchedule',
      summary: 'Fire a schedule now: a background run, as its due times start',
      tags: ['schedules'],
      params: ScheduleParams,
      response: { 202: QueuedRun, ...errorResponses(400, 401, 403, 404, 409, 429, 503) }
    }
  }, async (request, reply) => {
    const row = await callersSchedule(request, request.params.id)
    const { schedule } = row.state
    if (!service.hasAccess(request, 'run', schedule.agent)) throw new ForbiddenError(`The token lacks the role for run on agent "${schedule.agent}"`)
    const now = Date.now()
    const record = await queueRun({
      service,
      agent: schedule.agent,
      request: { input: schedule.input, sessionId: schedule.sessionId ?? undefined, metadata: schedule.metadata, multitask: 'enqueue' },
      caller: requestContextOf(request),
      log: request.log,
      auditedRequest: request,
      schedule: { id: schedule.id, scheduledFor: new Date(now).toISOString() }
    })
    service.recordScheduleFire(schedule.agent, 'started')
    // recorded as the schedule's last run (read again when the scheduler wrote in between)
    let current: ScheduleRow | null = row
    for (let attempt = 0; current !== null && attempt < WRITE_ATTEMPTS; attempt++) {
      const state = recordManualRun(current.state, record.runId, now)
      if (await store.write(current.id, current.revision, { wakeAt: wakeOf(state, Date.now()), state }) !== null) break
      current = await store.get(current.id)
    }
    const { runId, sessionId, requestId, traceId } = record
    return reply.code(202).header('location', `${fastify.prefix.replace(/\/$/, '')}/runs/${runId}`).send({ runId, sessionId, status: 'queued' as const, requestId, traceId })
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const schedulesPlugin = fp(schedules, { fastify: '5.x', name: 'fastify-agents-schedules', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default schedulesPlugin
