import fp from 'fastify-plugin'
import type { Static } from '@sinclair/typebox'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { documentAnswer } from '../document.js'
import { InputValidationError } from '../../core/errors.js'
import { requestsOf } from '../runs.js'
import { continueTurn, openConversation, startTurn } from '../conversation.js'
import type { Conversation, ConversationProtocol } from '../conversation.js'
import { AG_UI_HEADERS, AgUiProjection, parseInterruptId } from './events.js'
import { AgUiApprovalAnswer, AgUiStreamDescription, RunAgentInput } from '../../../schemas/ag-ui.js'
import type { AgUiMessage, AgUiResumeEntry } from '../../../schemas/ag-ui.js'
import { AgentParams } from '../../../schemas/agents.js'
import { errorResponses } from '../../../schemas/common.js'
import { routePluginScope } from '../../service/composition.js'

export type AgUiPluginOptions = Record<never, never>

/** The stream's media type in the document (the route answers through a hijacked reply, never serialized). */
const documentStream = documentAnswer({ description: 'The run as AG-UI events', stream: AgUiStreamDescription })
// made once, not per service: its serializer is compiled once per process (lib/core/serializers.ts)
const streamAnswer = { type: 'string', description: AgUiStreamDescription }

const AG_UI: ConversationProtocol = { kind: 'ag-ui', headers: AG_UI_HEADERS, cancelOnClose: true }

/** The last user message's text: its content, or the text parts of its content. */
function inputOf (messages: AgUiMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    if (message.role !== 'user') continue
    if (typeof message.content === 'string') return message.content
    const parts = Array.isArray(message.content) ? message.content as Array<{ type?: unknown, text?: unknown }> : []
    const texts = parts.filter((part) => part.type === 'text' && typeof part.text === 'string')
    if (texts.length === 0) throw new InputValidationError(`body/messages/${i}/content must be a string or have a text part`)
    return texts.map((part) => part.text).join('')
  }
  throw new InputValidationError('body/messages must have a user message (or body/resume answer an interrupt)')
}

/** A resume entry as a decision: `resolved` with `{ approved, comment?, payload?, response? }`, or `cancelled` (a rejection). */
function decisionOf (entry: AgUiResumeEntry, index: number, isAnswer: (payload: unknown) => payload is Static<typeof AgUiApprovalAnswer>): Static<typeof AgUiApprovalAnswer> {
  if (entry.status === 'cancelled') return { approved: false }
  if (!isAnswer(entry.payload)) {
    throw new InputValidationError(`body/resume/${index}/payload must be { approved: boolean, comment?: string (at most 2000 characters), payload?: the edited payload, response?: string (at most 10000 characters) }`)
  }
  return entry.payload
}

/**
 * `/agents/:name/ag-ui`: AG-UI (docs/front-ends.md) over the run pipeline. A thread id names a session in the caller's own
 * space; the agent gets the last user message's text and the session's own history. An approval ends the AG-UI run
 * as an interrupt while the service's run waits (`onDisconnect: 'continue'`); the next input's `resume` decides it
 * and streams the rest as a new AG-UI run. A client that leaves before its AG-UI run ended (`abortRun()`) cancels
 * the service's run, as a connection-bound run. A new message replaces a run in progress (`multitask: 'interrupt'`).
 */
const agUi: FastifyPluginAsyncTypebox<AgUiPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'agUiPlugin')
  const service = fastify.agentService
  const { settings } = service
  // TypeBox's value module (dozens of files) is loaded when the plugin is registered, not with the package
  const { Value } = await import('@sinclair/typebox/value')
  const isAnswer = (payload: unknown): payload is Static<typeof AgUiApprovalAnswer> => Value.Check(AgUiApprovalAnswer, payload)

  function resume (request: FastifyRequest, reply: FastifyReply, input: RunAgentInput, conversation: Conversation): Promise<FastifyReply> {
    const interrupted = new Map<string, string | undefined>()
    const answers = input.resume!.map((entry, i) => {
      const { approvalId, agUiRunId } = parseInterruptId(entry.interruptId)
      interrupted.set(approvalId, agUiRunId)
      return { id: approvalId, decision: decisionOf(entry, i, isAnswer), path: `body/resume/${i}/payload` }
    })
    return continueTurn(service, request, reply, AG_UI, conversation, answers, ([approval]) => {
      // the first one asked: where the AG-UI run that the client's answer continues was interrupted. HttpAgent sends
      // no parentRunId: the interrupt's id names the AG-UI run it interrupted (the service run's id when the client
      // answered with a bare approval id)
      const parentRunId = input.parentRunId ?? interrupted.get(approval!.id) ?? approval!.runId
      return {
        deliveredThrough: requestsOf([approval!.id]),
        projection: (delivered) => new AgUiProjection({ threadId: input.threadId, runId: input.runId, parentRunId, delivered })
      }
    })
  }

  fastify.post('/agents/:name/ag-ui', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', swaggerTransform: documentStream },
    schema: {
      operationId: 'runAgUiAgent',
      summary: 'Run an agent as an AG-UI agent',
      description: 'Takes AG-UI\'s `RunAgentInput` (what `HttpAgent` sends) and answers its events as SSE. `threadId` names a ' +
        'session in the caller\'s own space; the last user message\'s text is the input. An approval ends the AG-UI run ' +
        'as an interrupt; `resume: [{ interruptId, status, payload: { approved, comment?, payload?, response? } }]` decides it (compare-and-set, ' +
        'only the thread\'s own) and streams the rest of the same run as a new AG-UI run with `parentRunId`.',
      tags: ['front ends'],
      params: AgentParams,
      body: RunAgentInput,
      response: { 200: streamAnswer, ...errorResponses(400, 401, 403, 404, 409, 413, 415, 429, 500, 503) }
    }
  }, async (request, reply) => {
    const input = request.body
    const conversation = openConversation(service, request, AG_UI, request.params.name, input.threadId)
    if (input.resume !== undefined && input.resume.length > 0) return resume(request, reply, input, conversation)
    return startTurn(service, request, reply, AG_UI, conversation, {
      input: inputOf(input.messages),
      inputPath: 'body/messages/content',
      metadata: { threadId: input.threadId },
      projection: new AgUiProjection({ threadId: input.threadId, runId: input.runId })
    })
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const agUiPlugin = fp(agUi, { fastify: '5.x', name: 'fastify-agents-ag-ui', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default agUiPlugin
