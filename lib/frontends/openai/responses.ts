// /responses: the Responses API over the run pipeline. A response is a view of a run: `resp_<runId>` is its first
// stretch, `resp_<runId>_<seq>` the stretch after the approval requested at `seq` (the answer's response). Nothing
// is stored for a response but what its run keeps (RunSpec.frontend: the request's previous_response_id and
// instructions), so any instance sharing the run store answers for it, for as long as the run is retained.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { documentAnswer } from '../document.js'
import {
  AgentNotFoundError, ApprovalNotFoundError, ForbiddenError, InputValidationError, InvalidCursorParamError, ResponseNotFoundError,
  RunInProgressError
} from '../../core/errors.js'
import { requestContextOf } from '../../core/request-context.js'
import type { RunEvent } from '../run-events.js'
import { prepareRun, queueRun } from '../../runs/start.js'
import type { RunRecord, RunSpec } from '../../stores/types.js'
import { followRun } from '../follow.js'
import { cancelRun, clientGone, decideOwnApproval } from '../runs.js'
import { ProjectedStream } from '../stream.js'
import { parseResponseInput } from './input.js'
import { ResponseProjection } from './response-projection.js'
import type { ResponseHead } from './response-projection.js'
import {
  DeletedResponse, ResponseObject, ResponseParams, ResponseQuery, ResponseRequest, ResponseStreamDescription, openAiErrors
} from './schemas.js'

const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({ 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
const JSON_TYPE = 'application/json; charset=utf-8'
const ID = /^resp_([0-9a-f-]{36})(?:_([1-9][0-9]{0,15}))?$/
const CURSOR = /^(0|[1-9][0-9]{0,15})$/
/** Events read from the store at a time. */
const PAGE = 256
/** How long a cancel waits for the run's end before answering the response as it stands. */
const CANCEL_WAIT_MS = 5_000

export function responseId (runId: string, after = 0): string {
  return after === 0 ? `resp_${runId}` : `resp_${runId}_${after}`
}

function parseResponseId (id: string): { runId: string, after: number } | null {
  const match = ID.exec(id)
  return match === null ? null : { runId: match[1]!, after: match[2] === undefined ? 0 : Number(match[2]) }
}

function seconds (iso: string): number {
  return Math.floor(Date.parse(iso) / 1000)
}

/** The document shows both answers of a 200: the response object, or its events. */
const documentStream = documentAnswer({ description: 'The response, or (stream) its events', json: ResponseObject, stream: ResponseStreamDescription })

/** What the run keeps for its responses (RunSpec.frontend). */
interface Kept {
  created_at?: number
  previous_response_id?: string | null
  instructions?: string | null
}

/** A response of the caller's: its run, and where in the run's log it starts. */
interface Owned {
  record: RunRecord
  after: number
  /** the approval.requested the response starts after (a continuation) */
  boundary: RunEvent | null
}

export function responsesRoutes (fastify: FastifyInstance): void {
  const service = fastify.agentService
  const { settings } = service
  const store = settings.runStore

  /** The caller's response `id`, or RESPONSE_NOT_FOUND (unknown, another principal's, past its run's retention). */
  async function owned (request: FastifyRequest, id: string): Promise<Owned> {
    const parsed = parseResponseId(id)
    if (parsed === null) throw new ResponseNotFoundError(id)
    const record = await store.get(parsed.runId)
    if (record === null || record.principal !== requestContextOf(request).principal) throw new ResponseNotFoundError(id)
    let boundary: RunEvent | null = null
    if (parsed.after > 0) {
      const [stored] = await store.events(parsed.runId, parsed.after - 1, 1)
      if (stored?.type !== 'approval.requested') throw new ResponseNotFoundError(id)
      boundary = { seq: stored.seq, type: stored.type, data: JSON.parse(stored.data) }
    }
    service.audit.note(request, { agent: record.agent, runId: record.runId, sessionId: record.sessionId ?? undefined })
    if (!service.hasAccess(request, 'run', record.agent)) throw new ForbiddenError(`The token lacks the role for run on agent "${record.agent}"`)
    return { record, after: parsed.after, boundary }
  }

  /** The seq of the last approval.requested before `to` (0 for none): where the response before `to`'s starts. */
  async function approvalsBefore (runId: string, to: number): Promise<number> {
    let last = 0
    let after = 0
    // `to` is an event of the log: every page up to it is full
    for (;;) {
      const page = await store.events(runId, after, PAGE)
      for (const stored of page) {
        if (stored.seq >= to) return last
        if (stored.type === 'approval.requested') last = stored.seq
      }
      after = page.at(-1)!.seq
    }
  }

  /** What a response shows beside its events, read back from its run. */
  async function headOf ({ record, after, boundary }: Owned, spec?: RunSpec | null): Promise<ResponseHead> {
    spec ??= await store.spec(record.runId)
    const kept = (spec?.frontend ?? {}) as Kept
    const head: ResponseHead = {
      id: responseId(record.runId, after),
      runId: record.runId,
      createdAt: kept.created_at ?? seconds(record.createdAt),
      model: record.agent,
      previousResponseId: kept.previous_response_id ?? null,
      instructions: kept.instructions ?? null,
      metadata: (spec?.metadata ?? {}) as Record<string, string>,
      conversation: record.sessionId,
      background: record.background,
      queued: record.background && after === 0
    }
    if (boundary !== null) {
      // the answer's response came to be when the approval it answers was asked for
      head.createdAt = seconds((boundary.data as { approval: { requestedAt: string } }).approval.requestedAt)
      head.previousResponseId = responseId(record.runId, await approvalsBefore(record.runId, after))
    }
    return head
  }

  /** The response as its stored events make it (no waiting for more). */
  async function storedResponse (head: ResponseHead, after: number): Promise<ResponseProjection> {
    const projection = new ResponseProjection(head, { sse: false })
    for (;;) {
      const page = await store.events(head.runId, after, PAGE)
      for (const stored of page) {
        projection.push({ seq: stored.seq, type: stored.type, data: JSON.parse(stored.data) })
        if (projection.ended) return projection
      }
      if (page.length < PAGE) return projection
      after = page.at(-1)!.seq
    }
  }

  /** The response once it has ended (or the run is gone, or `signal` aborts): its events from the log as they come. */
  async function endedResponse (head: ResponseHead, after: number, signal: AbortSignal): Promise<ResponseProjection> {
    const projection = new ResponseProjection(head, { sse: false })
    for await (const event of followRun(store, head.runId, after, signal)) {
      projection.push(event)
      if (projection.ended) break
    }
    return projection
  }

  function sendResponse (reply: FastifyReply, projection: ResponseProjection): FastifyReply {
    if (service.drain.draining) void reply.header('connection', 'close')
    return reply.type(JSON_TYPE).send(JSON.stringify(projection.response()))
  }

  /**
   * Answers a response of a run in progress: streamed, or as JSON once it has ended. A client that leaves before
   * the end of a response that is not a background one cancels the run, as a disconnect does.
   */
  async function answer (request: FastifyRequest, reply: FastifyReply, head: ResponseHead, after: number, stream: boolean): Promise<FastifyReply> {
    if (stream) {
      new ProjectedStream(service, request, reply, SSE_HEADERS, !head.background).follow(head.runId, { after, projection: () => new ResponseProjection(head) })
      return reply
    }
    const gone = clientGone(reply.raw)
    if (!head.background) gone.addEventListener('abort', () => { cancelQuietly(request, head.runId) }, { once: true })
    return sendResponse(reply, await endedResponse(head, after, gone))
  }

  function cancelQuietly (request: FastifyRequest, runId: string): void {
    // (an end that came first is a warning too: nothing was left to cancel)
    cancelRun(service, runId).catch((err: unknown) => { request.log.warn({ err, runId }, 'could not cancel the run') })
  }

  /** The previous response named, of the caller's: where its run stands. */
  async function previous (request: FastifyRequest, id: string): Promise<Owned & { approvalAt: number | null }> {
    let found: Owned
    try {
      found = await owned(request, id)
    } catch (err) {
      if (err instanceof ResponseNotFoundError) throw new InputValidationError(`body/previous_response_id: response "${id}" not found`)
      throw err
    }
    // where that response ended: at an approval (its last item), or at its run's end
    let after = found.after
    for (;;) {
      const page = await store.events(found.record.runId, after, PAGE)
      for (const stored of page) {
        if (stored.type === 'approval.requested') return { ...found, approvalAt: stored.seq }
        if (stored.type === 'run.completed' || stored.type === 'run.failed') return { ...found, approvalAt: null }
      }
      if (page.length < PAGE) return { ...found, approvalAt: null }
      after = page.at(-1)!.seq
    }
  }

  /**
   * The answers to the approvals the previous response ended at: decided (compare-and-set, only the caller's own
   * approvals of that run), then the rest of the same run is this response. A decision that lost the race (decided
   * elsewhere meanwhile, expired) is in the run's log all the same.
   */
  async function continueRun (request: FastifyRequest, reply: FastifyReply, body: ResponseRequest, prior: Owned & { approvalAt: number | null }, answers: ReturnType<typeof parseResponseInput>['approvals']): Promise<FastifyReply> {
    const { record } = prior
    if (prior.approvalAt === null) throw new InputValidationError(`body/input: response "${body.previous_response_id}" asked for no approval`)
    const principal = requestContextOf(request).principal
    for (const answer of answers) {
      const approval = await settings.approvalStore.get(answer.id)
      if (approval === null || approval.runId !== record.runId || approval.principal !== principal) throw new ApprovalNotFoundError(answer.id)
      await decideOwnApproval(service, answer.id, { principal, agent: record.agent }, { approved: answer.approve, comment: answer.reason })
    }
    const [stored] = await store.events(record.runId, prior.approvalAt - 1, 1)
    const head = await headOf({ record, after: prior.approvalAt, boundary: { seq: stored!.seq, type: stored!.type, data: JSON.parse(stored!.data) } })
    return answer(request, reply, head, prior.approvalAt, body.stream === true)
  }

  fastify.post('/responses', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', idempotency: true, swaggerTransform: documentStream },
    schema: {
      operationId: 'createResponse',
      summary: 'Create a response (run an agent as a model)',
      description: 'The Responses API (Open Responses): `model` is the agent. JSON, or its events as SSE with `stream: true`; ' +
        '`background: true` answers at once (queued). `previous_response_id` or `conversation` continue a session; `store: ' +
        'false` is an ephemeral run. An approval ends the response (completed, its last item an `mcp_approval_request`) ' +
        'while the run waits; an `mcp_approval_response` item with `previous_response_id` answers it and this response is ' +
        'the rest of the same run.',
      tags: ['openai'],
      body: ResponseRequest,
      response: { 200: ResponseObject, ...openAiErrors(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503) }
    }
  }, async (request, reply) => {
    const body = request.body as ResponseRequest
    const model = body.model
    if (!settings.agents.has(model)) throw new AgentNotFoundError(model)
    if (!service.hasAccess(request, 'run', model)) throw new ForbiddenError(`The token lacks the role for run on agent "${model}"`)
    service.audit.note(request, { agent: model })
    const parsed = parseResponseInput(body.input ?? undefined)
    const conversation = typeof body.conversation === 'string' ? body.conversation : body.conversation?.id
    const previousId = body.previous_response_id ?? undefined
    if (previousId !== undefined && conversation !== undefined) throw new InputValidationError('body/conversation cannot be combined with previous_response_id')
    const ephemeral = body.store === false
    if (ephemeral && (previousId !== undefined || conversation !== undefined)) {
      throw new InputValidationError(`body/${previousId !== undefined ? 'previous_response_id' : 'conversation'} is not allowed with store: false (an ephemeral run has no session)`)
    }
    const prior = previousId === undefined ? null : await previous(request, previousId)
    if (parsed.approvals.length > 0) {
      if (prior === null) throw new InputValidationError('body/input: mcp_approval_response items need previous_response_id (the response that asked)')
      return continueRun(request, reply, body, prior, parsed.approvals)
    }
    let sessionId = conversation
    if (prior !== null) {
      if (prior.record.sessionId === null) throw new InputValidationError(`body/previous_response_id: response "${previousId}" was not stored (store: false)`)
      sessionId = prior.record.sessionId
    }
    const caller = requestContextOf(request)
    const createdAt = Math.floor(Date.now() / 1000)
    const kept: Kept = { created_at: createdAt, previous_response_id: previousId ?? null, instructions: body.instructions ?? null }
    const metadata = body.metadata ?? {}
    const options = {
      service,
      agent: model,
      request: { input: parsed.text, sessionId, store: body.store ?? undefined, metadata, onDisconnect: 'continue' as const, multitask: 'interrupt' as const },
      caller,
      log: request.log,
      auditedRequest: request,
      inputPath: 'body/input',
      history: parsed.history,
      frontend: kept as Record<string, unknown>,
      // a run that may wait for its session (a conversation's) stops waiting when its client leaves
      signal: sessionId === undefined ? undefined : clientGone(reply.raw)
    }
    const headOfRun = (runId: string, runSession: string | null, background: boolean): ResponseHead => ({
      id: responseId(runId),
      runId,
      createdAt,
      model,
      previousResponseId: kept.previous_response_id!,
      instructions: kept.instructions!,
      metadata,
      conversation: runSession,
      background,
      queued: background
    })
    if (body.background === true) {
      const queued = await queueRun(options)
      const head = headOfRun(queued.runId, queued.sessionId, true)
      if (body.stream === true) return answer(request, reply, head, 0, true)
      return sendResponse(reply, new ResponseProjection(head, { sse: false }))
    }
    const run = await prepareRun(options)
    const head = headOfRun(run.runId, run.sessionId, false)
    if (body.stream === true) {
      new ProjectedStream(service, request, reply, SSE_HEADERS, true).attach(run, new ResponseProjection(head))
      run.start()
      return reply
    }
    run.start()
    return answer(request, reply, head, 0, false)
  })

  fastify.get('/responses/:id', {
    config: { access: 'run', swaggerTransform: documentStream },
    schema: {
      operationId: 'getResponse',
      summary: 'Retrieve a response',
      description: 'The response as it stands; with `stream=true` its events after `starting_after` (the same sequence_numbers ' +
        'as first sent), then live ones until it ends — from any instance, for as long as its run is retained.',
      tags: ['openai'],
      params: ResponseParams,
      querystring: ResponseQuery,
      response: { 200: ResponseObject, ...openAiErrors(400, 401, 403, 404, 429, 503) }
    }
  }, async (request, reply) => {
    const found = await owned(request, (request.params as { id: string }).id)
    const { stream, starting_after: startingAfter } = request.query as ResponseQuery
    let cursor: number | undefined
    if (startingAfter !== undefined) {
      if (!CURSOR.test(startingAfter)) throw new InvalidCursorParamError('querystring/starting_after')
      cursor = Number(startingAfter)
    }
    const head = await headOf(found)
    if (stream !== true) return sendResponse(reply, await storedResponse(head, found.after))
    // a follower: its leaving never cancels the run
    new ProjectedStream(service, request, reply, SSE_HEADERS, false).follow(head.runId, {
      after: found.after,
      projection: () => new ResponseProjection(head, cursor === undefined ? {} : { startingAfter: cursor })
    })
    return reply
  })

  fastify.post('/responses/:id/cancel', {
    config: { access: 'run' },
    schema: {
      operationId: 'cancelResponse',
      summary: 'Cancel a response',
      description: 'Cancels its run (on whichever instance runs it) and answers the response once it has ended (`cancelled`). ' +
        'A response whose run has ended: 409 `RUN_ALREADY_ENDED`.',
      tags: ['openai'],
      params: ResponseParams,
      response: { 200: ResponseObject, ...openAiErrors(400, 401, 403, 404, 409, 429, 503) }
    }
  }, async (request, reply) => {
    const found = await owned(request, (request.params as { id: string }).id)
    await cancelRun(service, found.record.runId)
    const head = await headOf(found)
    return sendResponse(reply, await endedResponse(head, found.after, AbortSignal.timeout(CANCEL_WAIT_MS)))
  })

  fastify.delete('/responses/:id', {
    config: { access: 'run' },
    schema: {
      operationId: 'deleteResponse',
      summary: 'Delete a response',
      description: 'Deletes its run\'s record and event log (every response of the run goes with them); its session keeps ' +
        'its messages. A run in progress: 409 `RUN_IN_PROGRESS` (cancel it first).',
      tags: ['openai'],
      params: ResponseParams,
      response: { 200: DeletedResponse, ...openAiErrors(400, 401, 403, 404, 409, 429, 503) }
    }
  }, async (request) => {
    const { record } = await owned(request, (request.params as { id: string }).id)
    if (record.status === 'queued' || record.status === 'running') throw new RunInProgressError(record.runId)
    // deleted by another request since it was read
    /* c8 ignore next */
    if (!await store.delete(record.runId)) throw new ResponseNotFoundError((request.params as { id: string }).id)
    return { id: (request.params as { id: string }).id, object: 'response' as const, deleted: true as const }
  })
}
