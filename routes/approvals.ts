import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import { ApprovalAlreadyDecidedError, ApprovalExpiredError, ApprovalNotFoundError } from '../lib/core/errors.js'
import { requestContextOf } from '../lib/core/request-context.js'
import type { ApprovalRecord } from '../lib/stores/types.js'
import { Approval, ApprovalList, ApprovalListQuery, ApprovalParams, DecideApprovalRequest } from '../schemas/approvals.js'
import { errorResponses } from '../schemas/common.js'
import { routePluginScope } from '../lib/service/composition.js'
import { decisionOf } from '../lib/runs/decisions.js'

export type ApprovalsPluginOptions = Record<never, never>

/** Why a decision was not taken, as the error answered. */
const refusals = { not_found: ApprovalNotFoundError, expired: ApprovalExpiredError, already_decided: ApprovalAlreadyDecidedError }

/** The approval's run, agent and session go into the request's audit entry. */
function noted (approval: ApprovalRecord): { agent: string, runId: string, sessionId: string } {
  return { agent: approval.agent, runId: approval.runId, sessionId: approval.sessionId }
}

/**
 * `/approvals`: the pending list, one approval, and the decision. Approvals are an operator concern:
 * whoever may read them sees all of them, whichever principal started the run.
 */
const approvals: FastifyPluginAsyncTypebox<ApprovalsPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'approvalsPlugin')
  const service = fastify.agentService
  const { settings } = service
  const store = settings.approvalStore

  fastify.get('/approvals', {
    config: { access: 'readApprovals' },
    schema: {
      operationId: 'listApprovals',
      summary: 'List pending approvals',
      tags: ['approvals'],
      querystring: ApprovalListQuery,
      response: { 200: ApprovalList, ...errorResponses(400, 401, 403, 429, 500, 503) }
    }
  }, async (request) => {
    const { agent, runId } = request.query
    return { approvals: await store.listPending({ agent, runId }) }
  })

  fastify.get('/approvals/:id', {
    config: { access: 'readApprovals' },
    schema: {
      operationId: 'getApproval',
      summary: 'Get one approval, whatever its status',
      tags: ['approvals'],
      params: ApprovalParams,
      response: { 200: Approval, ...errorResponses(400, 401, 403, 404, 429, 500, 503) }
    }
  }, async (request) => {
    const approval = await store.get(request.params.id)
    if (approval === null) throw new ApprovalNotFoundError(request.params.id)
    service.audit.note(request, noted(approval))
    return approval
  })

  fastify.post('/approvals/:id', {
    config: { access: 'decideApprovals', idempotency: true },
    bodyLimit: settings.bodyLimit,
    schema: {
      operationId: 'decideApproval',
      summary: 'Decide a pending approval',
      description: 'A compare-and-set on `pending`: of concurrent decisions exactly one wins (200), the others get 409 ' +
        '`APPROVAL_ALREADY_DECIDED`; an expired approval gets 409 `APPROVAL_EXPIRED`. `payload` (only with `approved: true`) ' +
        'edits what is approved, checked against the approval\'s `schema` (400 naming the field, the approval still pending); ' +
        '`response` answers the agent in words. The waiting run resumes within 1 s, on whichever instance it runs.',
      tags: ['approvals'],
      params: ApprovalParams,
      body: DecideApprovalRequest,
      response: { 200: Approval, ...errorResponses(400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503) }
    }
  }, async (request) => {
    const id = request.params.id
    const body = request.body
    const context = requestContextOf(request)
    // read first: an edited payload is checked against the approval's schema, and the decision keeps what was approved
    const approval = await store.get(id)
    if (approval === null) throw new ApprovalNotFoundError(id)
    service.audit.note(request, noted(approval))
    // Without auth everyone is 'anonymous', which says nothing about who decided.
    const result = await store.decide(id, decisionOf(approval, body, body.decidedBy ?? (context.principal === 'anonymous' ? null : context.principal)))
    // (not found: gone between the read and the decision)
    if (result.outcome !== 'decided') throw new refusals[result.outcome](id)
    request.log.info({ approvalId: id, status: result.approval.status, principal: context.principal }, 'approval decided')
    return result.approval
  })
}

// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const approvalsPlugin = fp(approvals, { fastify: '5.x', name: 'fastify-agents-approvals', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default approvalsPlugin
