// Agents as models (README, "Agents as models"): the OpenAI-shaped routes that every OpenAI SDK, the AI SDK's Open
// Responses provider and chat front ends speak, with `model` = the agent's name. One route plugin; its errors in
// OpenAI's shape.
import fp from 'fastify-plugin'
import type { FastifyPluginAsync } from 'fastify'
import { routePluginScope } from '../../service/composition.js'
import { chatRoutes } from './chat.js'
import { buildOpenAiErrorHandler } from './errors.js'
import { modelsRoutes } from './models.js'
import { responsesRoutes } from './responses.js'

export type OpenAiPluginOptions = Record<never, never>

const openAi: FastifyPluginAsync<OpenAiPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'openAiPlugin')
  // after routePluginScope: in a scope of its own, the service's error handler would answer in the service's shape
  fastify.setErrorHandler(buildOpenAiErrorHandler(fastify.agentService.settings.exposeErrors))
  modelsRoutes(fastify)
  responsesRoutes(fastify)
  chatRoutes(fastify)
}

/** `/models`, `/responses`, `/chat/completions` (mounted under `/v1` by the service unless `openaiCompat: false`). */
// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const openAiPlugin = fp(openAi, { fastify: '5.x', name: 'fastify-agents-openai', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default openAiPlugin
