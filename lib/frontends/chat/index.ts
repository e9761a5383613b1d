import fp from 'fastify-plugin'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { documentAnswer } from '../document.js'
import { InputValidationError } from '../../core/errors.js'
import type { AgentServiceCore } from '../../service/service.js'
import { ProjectedStream } from '../stream.js'
import { requestsOf, runInProgress } from '../runs.js'
import { continueTurn, openConversation, startTurn } from '../conversation.js'
import type { Conversation, ConversationProtocol } from '../conversation.js'
import { chatHistory } from './history.js'
import { UI_MESSAGE_STREAM_HEADERS, UiMessageStreamProjection } from './ui-message-stream.js'
import { ChatMessages, ChatParams, ChatRequest, ChatStreamParams, ChatStreamQuery, UiMessageStreamDescription } from '../../../schemas/chat.js'
import type { UiMessage } from '../../../schemas/chat.js'
import { errorResponses } from '../../../schemas/common.js'
import { routePluginScope } from '../../service/composition.js'

export type ChatPluginOptions = Record<never, never>

/** The stream's media type in the document (the route answers through a hijacked reply, never serialized). */
const documentStream = documentAnswer({ description: 'The run as an AI SDK UI message stream', stream: UiMessageStreamDescription })
// response schemas made once, not per service: each object's serializer is compiled once per process (lib/core/serializers.ts)
const streamAnswer = { type: 'string', description: UiMessageStreamDescription }
const noRunAnswer = { type: 'null', description: 'The chat has no run in progress' }

const CHAT: ConversationProtocol = { kind: 'chat', headers: UI_MESSAGE_STREAM_HEADERS, cancelOnClose: false }

interface ApprovalAnswer { id: string, approved: boolean, reason: string | undefined }

/** The approval responses (`addToolApprovalResponse`) an assistant message carries: its tool parts in `approval-responded`. */
function approvalAnswers (message: UiMessage): ApprovalAnswer[] {
  const answers: ApprovalAnswer[] = []
  for (const part of message.parts as Array<{ state?: unknown, approval?: { id?: unknown, approved?: unknown, reason?: unknown } }>) {
    const approval = part.approval
    if (part.state !== 'approval-responded' || typeof approval?.id !== 'string' || typeof approval.approved !== 'boolean') continue
    answers.push({ id: approval.id, approved: approval.approved, reason: typeof approval.reason === 'string' ? approval.reason : undefined })
  }
  return answers
}

/** A user message's text: its text parts, joined. */
function textOf (message: UiMessage, index: number): string {
  const texts = (message.parts as Array<{ type: string, text?: unknown }>).filter((part) => part.type === 'text' && typeof part.text === 'string')
  if (texts.length === 0) throw new InputValidationError(`body/messages/${index}/parts must have a text part`)
  return texts.map((part) => part.text).join('')
}

/**
 * The longest path parameter the router takes (Fastify's `maxParamLength`, in UTF-16 code units after decoding):
 * the app's, not ours, when the service is mounted in a host app.
 */
function routeParamLimit (fastify: FastifyInstance): number {
  const config = fastify.initialConfig as { maxParamLength: number, routerOptions?: { maxParamLength: number } }
  const routers = config.routerOptions?.maxParamLength ?? config.maxParamLength
  // 100 may be only routerOptions' default, beside a (deprecated) top-level maxParamLength the router uses: the smaller
  return routers === 100 ? Math.min(routers, config.maxParamLength) : routers
}

/**
 * A chat id must be reachable in the resume URL (`…/chat/<encodeURIComponent(id)>/stream`, what the SDK builds):
 * refused here, at once, rather than accepted and then unresumable. (A lone surrogate, which no URL holds, is
 * refused before, as text no store keeps.)
 */
function checkResumable (id: string, maxParamLength: number): void {
  if (id === '.' || id === '..') throw new InputValidationError('body/id must not be "." or "..": a URL path cannot hold it')
  if (id.length > maxParamLength) {
    throw new InputValidationError(`body/id must be at most ${maxParamLength} characters (UTF-16 code units) here, the router's maxParamLength, ` +
      'or the chat could not be resumed (GET …/chat/:id/stream)')
  }
}

function approvalDecided (service: AgentServiceCore): (approvalId: string) => Promise<boolean> {
  return async (approvalId) => (await service.settings.approvalStore.get(approvalId))?.status !== 'pending'
}

/**
 * `/agents/:name/chat`: the AI SDK's chat protocol (docs/front-ends.md) over the run pipeline. A chat id names a session in
 * the caller's own space; the agent gets the last user message's text and the session's own history. Every chat run
 * is `onDisconnect: 'continue'` (a response ends at an approval, a page reloads and resumes) and `multitask:
 * 'interrupt'` (a new message replaces a run still going, or waiting, in the chat).
 */
const chat: FastifyPluginAsyncTypebox<ChatPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'chatPlugin')
  const service = fastify.agentService
  const { settings } = service
  const decided = approvalDecided(service)
  const maxIdLength = routeParamLimit(fastify)

  /** The rest of the run after the approvals a chat request answers, decided first (only the chat's own). */
  function continueAfter (request: FastifyRequest, reply: FastifyReply, answers: ApprovalAnswer[], conversation: Conversation): Promise<FastifyReply> {
    const decisions = answers.map(({ id, approved, reason }) => ({ id, decision: { approved, comment: reason } }))
    return continueTurn(service, request, reply, CHAT, conversation, decisions, (approvals) => ({
      // the client answered the requests of one response at once (a step's approvals): it has them all
      deliveredThrough: requestsOf(approvals.map((approval) => approval.id)),
      projection: (delivered) => new UiMessageStreamProjection({ delivered }),
      approvalDecided: decided
    }))
  }

  fastify.post('/agents/:name/chat', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', swaggerTransform: documentStream },
    schema: {
      operationId: 'chatWithAgent',
      summary: 'Chat with an agent (AI SDK UI message stream)',
      description: 'What `useChat` (DefaultChatTransport) sends: `{ id, messages, trigger, messageId }`. The last user ' +
        'message\'s text is the run\'s input, the chat\'s session (named by `id` in the caller\'s own space) its history; ' +
        'an assistant message carrying approval responses decides them (compare-and-set, only the chat\'s own approvals) ' +
        'and streams the rest of the same run.',
      tags: ['front ends'],
      params: ChatParams,
      body: ChatRequest,
      response: { 200: streamAnswer, ...errorResponses(400, 401, 403, 404, 409, 413, 415, 429, 500, 503) }
    }
  }, async (request, reply) => {
    const body = request.body
    const conversation = openConversation(service, request, CHAT, request.params.name, body.id, (id) => checkResumable(id, maxIdLength))
    const index = body.messages.length - 1
    const last = body.messages[index]!
    if (last.role === 'assistant') {
      const answers = approvalAnswers(last)
      if (answers.length > 0) return continueAfter(request, reply, answers, conversation)
    }
    if (last.role !== 'user') throw new InputValidationError(`body/messages/${index} must be a user message, or an assistant message with approval responses`)
    const input = textOf(last, index)
    return startTurn(service, request, reply, CHAT, conversation, {
      input, inputPath: `body/messages/${index}/parts/text`, metadata: { chatId: body.id }, projection: new UiMessageStreamProjection()
    })
  })

  fastify.get('/agents/:name/chat/:id/messages', {
    config: { access: 'run' },
    schema: {
      operationId: 'getChatMessages',
      summary: 'A chat\'s messages, to seed useChat after a reload',
      description: 'The chat\'s history as the AI SDK\'s UIMessage[] (`useChat({ id, messages, resume: true })`): each ' +
        'run\'s user message and the assistant message its stream showed, built from the same chunks. A run still in ' +
        'progress gives only its user message (the resumed stream brings the answer); a chat with no messages yet, `[]`.',
      tags: ['front ends'],
      params: ChatStreamParams,
      response: { 200: ChatMessages, ...errorResponses(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => {
    const { caller: { principal }, sessionId } = openConversation(service, request, CHAT, request.params.name, request.params.id)
    return chatHistory(service, sessionId, principal)
  })

  fastify.get('/agents/:name/chat/:id/stream', {
    config: { access: 'run', swaggerTransform: documentStream },
    schema: {
      operationId: 'resumeChatStream',
      summary: 'Resume a chat\'s stream',
      description: 'What `useChat({ resume: true })` asks on load: 204 when the chat has no run in progress, else that ' +
        'run\'s stream from its start (the same message id), then live. At an approval still pending it ends, as the chat ' +
        'response does, unless `approvals=wait`.',
      tags: ['front ends'],
      params: ChatStreamParams,
      querystring: ChatStreamQuery,
      response: {
        200: streamAnswer,
        204: noRunAnswer,
        ...errorResponses(400, 401, 403, 404, 429, 500, 503)
      }
    }
  }, async (request, reply) => {
    const { name, id } = request.params
    const { caller: { principal }, sessionId } = openConversation(service, request, CHAT, name, id)
    const run = await runInProgress(service, sessionId, principal)
    if (run === null) return reply.code(204).send()
    service.audit.note(request, { runId: run.runId })
    const throughApprovals = request.query.approvals === 'wait'
    new ProjectedStream(service, request, reply, CHAT.headers, CHAT.cancelOnClose).follow(run.runId, { after: 0, projection: () => new UiMessageStreamProjection({ throughApprovals }), approvalDecided: decided })
    return reply
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const chatPlugin = fp(chat, { fastify: '5.x', name: 'fastify-agents-chat', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default chatPlugin
