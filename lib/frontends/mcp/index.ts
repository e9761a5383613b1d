// MCP (docs/front-ends.md, "MCP"): every agent a tool, every call a run, on /v1/mcp. One route plugin; the SDK
// (@modelcontextprotocol/sdk, an optional peer) is loaded by the first MCP request (501 MCP_UNAVAILABLE without it).
import fp from 'fastify-plugin'
import type { FastifyPluginAsync } from 'fastify'
import { documentAnswer } from '../document.js'
import { routePluginScope } from '../../service/composition.js'
import { JsonTooDeepError, McpUnavailableError, MethodNotAllowedError, UnstorableInputError } from '../../core/errors.js'
import { jsonDeeperThan, unstorableText } from '../../core/validation.js'
import { errorResponses } from '../../../schemas/common.js'
import { McpDescription, McpJsonRpcMessage, McpStreamDescription } from './schemas.js'
import type { McpBody } from './server.js'

export type McpPluginOptions = Record<never, never>

export type McpModule = typeof import('./server.js')
export type McpLoader = () => Promise<McpModule>

// @modelcontextprotocol/sdk is an optional peer dependency: importing the package never loads it, the first MCP request does.
const defaultLoader: McpLoader = () => import('./server.js')
let loading: Promise<McpModule> | null = null

function isMissing (error: unknown): boolean {
  const { code, message } = error as { code?: unknown, message?: unknown }
  // only the SDK itself: one that is there but fails to load says so
  return code === 'ERR_MODULE_NOT_FOUND' && typeof message === 'string' && message.includes('\'@modelcontextprotocol/sdk')
}

/**
 * The MCP module (and with it @modelcontextprotocol/sdk), loaded once by the process; MCP_UNAVAILABLE when the SDK is
 * not installed. A service's own `loader` (tests) is asked every time instead.
 */
export function loadMcp (loader?: McpLoader): Promise<McpModule> {
  const unavailable = (error: unknown): never => { throw isMissing(error) ? new McpUnavailableError() : error }
  if (loader !== undefined) return loader().catch(unavailable)
  loading ??= defaultLoader().catch((error: unknown) => {
    loading = null
    return unavailable(error)
  })
  return loading
}

/** The document shows the JSON-RPC body and both answers of a 200 (the route reads and writes them itself). */
const documentExchange = documentAnswer({
  description: 'The JSON-RPC response, or (a request) a stream of JSON-RPC messages ending with it',
  json: McpJsonRpcMessage,
  stream: McpStreamDescription,
  body: McpJsonRpcMessage,
  responses: { 202: { description: 'A notification or a response (an elicitation\'s answer) accepted', type: 'null' } }
})

const mcp: FastifyPluginAsync<McpPluginOptions> = async (fastify) => {
  routePluginScope(fastify, 'mcpPlugin')
  const service = fastify.agentService
  const { settings } = service
  // a service's own loader (tests), else the module the process loads once
  const injectedLoader = settings.injected.mcpLoader as McpLoader | undefined

  // A body that is not JSON gets JSON-RPC's parse error (from the SDK), not the service's 400: kept as text.
  // What no store or log could take is refused as everywhere else.
  const parseJson = fastify.getDefaultJsonParser(fastify.initialConfig.onProtoPoisoning!, fastify.initialConfig.onConstructorPoisoning!)
  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    const body: McpBody = { text: text as string }
    if (jsonDeeperThan(body.text, settings.maxJsonDepth)) return done(new JsonTooDeepError(settings.maxJsonDepth), undefined)
    parseJson(request, body.text, (error: Error | null, parsed?: unknown) => {
      // (__proto__ too: what the service's parser refuses)
      if (error !== null) return done(null, body)
      const bad = body.text.includes('\\u') ? unstorableText(parsed, 'body') : null
      if (bad !== null) return done(new UnstorableInputError(bad.path, bad.holds), undefined)
      body.parsed = parsed
      done(null, body)
    })
  })

  fastify.post('/mcp', {
    bodyLimit: settings.bodyLimit,
    config: { access: 'run', swaggerTransform: documentExchange },
    schema: {
      summary: 'The MCP endpoint (Streamable HTTP): every agent a tool',
      operationId: 'postMcp',
      description: McpDescription,
      tags: ['front ends'],
      response: errorResponses(400, 401, 403, 406, 413, 415, 429, 501, 503)
    }
  }, async (request, reply) => {
    const { answerMcp } = await loadMcp(injectedLoader)
    await answerMcp(service, request, reply, request.body as McpBody)
    return reply
  })

  // stateless: no stream of the server's own to open, no session to end (the SDK's client takes a 405 for both);
  // left out of the document, which has nothing to say of them
  for (const method of ['GET', 'DELETE'] as const) {
    fastify.route({
      method,
      url: '/mcp',
      config: { access: 'run' },
      schema: { hide: true },
      handler: async (request, reply) => {
        void reply.header('allow', 'POST')
        throw new MethodNotAllowedError(method, request.url)
      }
    })
  }
}

/** `/mcp` (mounted under `/v1` by the service unless `mcp: false`). */
// encapsulate: a route plugin keeps its prefix and scope; fp() only adds the name and the dependency check
export const mcpPlugin = fp(mcp, { fastify: '5.x', name: 'fastify-agents-mcp', dependencies: ['fastify-agents-core', 'fastify-agents-request-context'], encapsulate: true })
export default mcpPlugin
