// /chat/completions: what most chat front ends speak. Every completion is an ephemeral run (store: false): the
// caller owns the conversation and sends it whole, so the earlier messages are the run's ctx.history as given.
import type { FastifyInstance } from 'fastify'
import { documentAnswer } from '../document.js'
import { AgentNotFoundError, ForbiddenError, runFailureError } from '../../core/errors.js'
import { requestContextOf } from '../../core/request-context.js'
import { outputText } from '../run-events.js'
import { prepareRun } from '../../runs/start.js'
import { ProjectedStream } from '../stream.js'
import { ChatChunkProjection, finishReasonOf } from './chat-projection.js'
import { parseChatMessages } from './input.js'
import { ChatCompletion, ChatCompletionRequest, ChatStreamDescription, openAiErrors } from './schemas.js'

const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({ 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })

const documentStream = documentAnswer({ description: 'The completion, or (stream) its chunks', json: ChatCompletion, stream: ChatStreamDescription })

export function chatRoutes (fastify: FastifyInstance): void {
  const service = fastify.agentService
  const { settings } = service

  fastify.post('/chat/completions', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', idempotency: true, swaggerTransform: documentStream },
    schema: {
      operationId: 'createChatCompletion',
      summary: 'Create a chat completion (run an agent as a model)',
      description: 'Chat Completions: `model` is the agent, the last message the user\'s input, the earlier user and assistant ' +
        'messages its ctx.history (an ephemeral run: nothing is kept). JSON, or `chat.completion.chunk` frames with ' +
        '`stream: true` (`stream_options.include_usage` adds the usage). The text only: the agent\'s own tool calls stay in ' +
        'the run, and an approval it asks for waits for a decision made elsewhere while the stream stays open.',
      tags: ['openai'],
      body: ChatCompletionRequest,
      response: { 200: ChatCompletion, ...openAiErrors(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503, 504) }
    }
  }, async (request, reply) => {
    const body = request.body as ChatCompletionRequest
    const model = body.model
    if (!settings.agents.has(model)) throw new AgentNotFoundError(model)
    if (!service.hasAccess(request, 'run', model)) throw new ForbiddenError(`The token lacks the role for run on agent "${model}"`)
    service.audit.note(request, { agent: model })
    const { text, history } = parseChatMessages(body.messages)
    const run = await prepareRun({
      service,
      agent: model,
      request: { input: text, store: false, metadata: body.metadata ?? undefined },
      caller: requestContextOf(request),
      log: request.log,
      auditedRequest: request,
      inputPath: `body/messages/${body.messages.length - 1}/content`,
      history
    })
    const head = { id: `chatcmpl-${run.runId}`, created: Math.floor(Date.now() / 1000), model }
    if (body.stream === true) {
      new ProjectedStream(service, request, reply, SSE_HEADERS, true).attach(run, new ChatChunkProjection(head, body.stream_options?.include_usage === true))
      run.start()
      return reply
    }
    // a client that leaves before its answer cancels the run (a run that has ended ignores it)
    reply.raw.on('close', () => { if (!reply.raw.writableFinished) run.abort('CANCELLED') })
    run.start()
    const outcome = await run.done
    if (service.drain.draining) void reply.header('connection', 'close')
    if (outcome.status !== 'completed') {
      throw runFailureError(outcome, model, run.options.timeoutMs, reply.raw.destroyed)
    }
    const { result } = outcome
    return {
      id: head.id,
      object: 'chat.completion' as const,
      created: head.created,
      model,
      system_fingerprint: null,
      choices: [{
        index: 0,
        message: { role: 'assistant' as const, content: outputText(result.output), refusal: null, annotations: [] },
        logprobs: null,
        finish_reason: finishReasonOf(result.finishReason)
      }],
      usage: { prompt_tokens: result.usage.inputTokens, completion_tokens: result.usage.outputTokens, total_tokens: result.usage.totalTokens }
    }
  })
}
