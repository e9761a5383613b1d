// /models: the agents the caller may run, as models.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AgentNotFoundError, ForbiddenError } from '../../core/errors.js'
import { Model, ModelList, ModelParams, openAiErrors } from './schemas.js'

const OWNER = 'fastify-agents'

export function modelsRoutes (fastify: FastifyInstance): void {
  const service = fastify.agentService
  const { settings } = service
  const created = Math.floor(Date.parse(service.startedAt) / 1000)
  const modelOf = (id: string): Model => ({ id, object: 'model', created, owned_by: OWNER })
  const mayRun = (request: FastifyRequest, name: string): boolean => service.hasAccess(request, 'run', name)

  fastify.get('/models', {
    config: { access: 'run' },
    schema: {
      operationId: 'listModels',
      summary: 'List models (the agents the caller may run)',
      tags: ['openai'],
      response: { 200: ModelList, ...openAiErrors(400, 401, 403, 429, 503) }
    }
  }, async (request) => ({ object: 'list' as const, data: [...settings.agents.keys()].filter((name) => mayRun(request, name)).map(modelOf) }))

  fastify.get('/models/:model', {
    config: { access: 'run' },
    schema: {
      operationId: 'getModel',
      summary: 'Get a model (an agent)',
      tags: ['openai'],
      params: ModelParams,
      response: { 200: Model, ...openAiErrors(400, 401, 403, 404, 429, 503) }
    }
  }, async (request) => {
    const { model } = request.params as { model: string }
    if (!settings.agents.has(model)) throw new AgentNotFoundError(model)
    if (!mayRun(request, model)) throw new ForbiddenError(`The token lacks the role for run on agent "${model}"`)
    return modelOf(model)
  })
}
