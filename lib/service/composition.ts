// A route plugin's scope, wherever it is registered (README, "Each concern on its own"): the hook plugins its routes
// need given the options, without which it is refused at registration rather than served with less than they ask
// for, and the way the service answers (validation, body parsing, the error shape).
import type { FastifyContextConfig, FastifyInstance } from 'fastify'
import { buildErrorHandler } from '../core/error-reply.js'
import { JsonTooDeepError, MissingPluginError, UnstorableInputError } from '../core/errors.js'
import type { Settings } from './settings.js'
import { formatSchemaErrors, jsonDeeperThan, strictValidatorCompiler, unstorableText } from '../core/validation.js'

/** A hook plugin, by its fastify-plugin name and the name it is exported under. */
export interface HookPlugin {
  readonly name: string
  readonly exported: string
}

export const REQUEST_CONTEXT = { name: 'fastify-agents-request-context', exported: 'requestContextPlugin' } as const
export const DRAIN = { name: 'fastify-agents-drain', exported: 'drainPlugin' } as const
export const AUDIT = { name: 'fastify-agents-audit', exported: 'auditPlugin' } as const
export const CORS = { name: 'fastify-agents-cors', exported: 'corsPlugin' } as const
export const AUTH = { name: 'fastify-agents-auth', exported: 'authPlugin' } as const
export const RATE_LIMIT = { name: 'fastify-agents-rate-limit', exported: 'rateLimitPlugin' } as const
export const IDEMPOTENCY = { name: 'fastify-agents-idempotency', exported: 'idempotencyPlugin' } as const

/** The plugin that registers every hook plugin in its order (app/pipeline.ts). */
export const REQUEST_PIPELINE = { name: 'fastify-agents-request-pipeline', exported: 'requestPipelinePlugin' } as const

interface Need {
  plugin: HookPlugin
  /** what asks for it */
  why: string
}

/**
 * The hook plugins a route with this `config` needs, in the order they run. Health (`public`) needs no credential,
 * no budget and answers while draining; the Admin API (`admin`) has its own token, but counts against the rate limit.
 */
function neededPlugins (settings: Settings, config: FastifyContextConfig | undefined): Need[] {
  const open = config?.public === true
  const needs: Need[] = []
  if (!open) needs.push({ plugin: DRAIN, why: 'the drain on close' })
  needs.push({ plugin: AUDIT, why: 'the audit log' })
  if (settings.cors !== null) needs.push({ plugin: CORS, why: 'the cors option' })
  if (settings.auth !== null && !open && config?.admin !== true) needs.push({ plugin: AUTH, why: 'the auth option' })
  if (settings.rateLimit !== null && !open) needs.push({ plugin: RATE_LIMIT, why: 'the rateLimit option' })
  if (settings.idempotency !== null && config?.idempotency === true) needs.push({ plugin: IDEMPOTENCY, why: 'the idempotency option' })
  return needs
}

const SERVICE_SCOPE = Symbol('fastify-agents.service-scope')

/**
 * Answers the routes of `fastify`'s scope as the service does, unless an enclosing scope does already: strict
 * validation (no coercion, no silently stripped properties), JSON bodies only, no deeper than `maxJsonDepth` and
 * holding only text a store can keep, and every error in the service's shape.
 */
export function answerAsTheService (fastify: FastifyInstance): void {
  // a decorator is seen by the scope's children only: a route plugin inside the service's scope skips all this
  if (fastify.hasDecorator(SERVICE_SCOPE)) return
  fastify.decorate(SERVICE_SCOPE, true)
  const { settings } = fastify.agentService
  fastify.setValidatorCompiler(strictValidatorCompiler)
  fastify.setSchemaErrorFormatter(formatSchemaErrors)
  fastify.setErrorHandler(buildErrorHandler(settings.exposeErrors))
  // Our bodies are JSON only: anything else is a 415, not a 400 from a body that parsed as a string.
  fastify.removeContentTypeParser('text/plain')
  // Nesting deeper than a store or a log line can walk is refused before it is parsed, let alone run.
  // So is text no store can keep (NUL, lone surrogates): JSON text holds them only as \u escapes.
  const parseJson = fastify.getDefaultJsonParser(fastify.initialConfig.onProtoPoisoning!, fastify.initialConfig.onConstructorPoisoning!)
  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    if (jsonDeeperThan(text, settings.maxJsonDepth)) return done(new JsonTooDeepError(settings.maxJsonDepth), undefined)
    parseJson(request, text, (error: Error | null, parsed?: unknown) => {
      const bad = error === null && text.includes('\\u') ? unstorableText(parsed, 'body') : null
      if (bad !== null) return done(new UnstorableInputError(bad.path, bad.holds), undefined)
      done(error, parsed)
    })
  })
  fastify.addHook('preValidation', (request, _reply, done) => {
    const bad = unstorableText(request.params, 'params') ?? unstorableText(request.query, 'querystring')
    done(bad === null ? undefined : new UnstorableInputError(bad.path, bad.holds))
  })
}

/**
 * Refuses, as each route of `fastify` is added, a route whose needed hook plugins are not registered before it (in
 * its scope or an enclosing one: only those hooks run for it). `plugin` names the route plugin in the message.
 */
function requireHookPlugins (fastify: FastifyInstance, plugin: string): void {
  const { settings } = fastify.agentService
  fastify.addHook('onRoute', (route) => {
    const missing = neededPlugins(settings, route.config).filter(({ plugin: hook }) => !fastify.hasPlugin(hook.name))
    if (missing.length === 0) return
    const names = missing.map(({ plugin: hook, why }) => `${hook.exported} (${why})`)
    throw new MissingPluginError(`${plugin} cannot serve ${[route.method].flat().join(',')} ${route.url} without ${names.join(', ')}: ` +
      `register ${REQUEST_PIPELINE.exported} (or ${missing.length === 1 ? 'that plugin' : 'those plugins'}) before it, in its scope or an enclosing one`)
  })
}

/** A route plugin's scope: refused without the hook plugins its routes need, and answered as the service answers. */
export function routePluginScope (fastify: FastifyInstance, plugin: string): void {
  requireHookPlugins(fastify, plugin)
  answerAsTheService(fastify)
}
