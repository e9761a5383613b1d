import type { Registry } from 'prom-client'
import type { ErrorObject, ValidateFunction } from 'ajv'
import { AgentNamePattern } from '../../schemas/common.js'
import { storeMethods } from '../../schemas/options.js'
import * as generatedValidators from './options-validators.js'
import { jwtAlgorithms } from '../auth/credentials.js'
import { DEFAULT_DRAIN_TIMEOUT_MS } from './drain.js'
import { DEFAULT_MAX_RUN_ATTEMPTS, DEFAULT_RUN_CONCURRENCY, DEFAULT_RUN_LEASE_MS } from '../runs/worker.js'
import { InvalidOptionsError } from '../core/errors.js'
import { toHealthProbe } from '../core/health-probe.js'
import { compileAgentSchemas } from '../core/agent-schemas.js'
import type { CompiledAgentSchemas } from '../core/agent-schemas.js'
import { resolveWebhooks, webhookProblems } from '../webhooks/options.js'
import type { WebhookSettings } from '../webhooks/options.js'
import type { WebhookTuning } from '../webhooks/dispatcher.js'
import type { RunSettings } from '../runs/host.js'
import type { QuotaSettings } from '../quotas/quotas.js'
import type { HealthProbe } from '../core/health-probe.js'
import { storeDeadlines } from '../stores/deadline.js'
import { MemoryCheckpointStore, memoryStores } from '../stores/memory.js'
import { MemoryRunStore } from '../stores/memory-runs.js'
import type { ApprovalStore, AuditStore, CheckpointStore, IdempotencyStore, RunStore, ScheduleStore, SessionStore } from '../stores/types.js'
import type { SchedulerHooks } from '../schedules/scheduler.js'
import type {
  AdminApiOptions, Agent, AgentServiceOptions, ApiKeyAuthOptions as ApiKeyAuth, JwtAuthOptions as JwtAuth, RateLimitOptions
} from '../core/types.js'

export const DEFAULT_SESSION_TTL_MS = 30 * 60_000
export const DEFAULT_HEALTH_TIMEOUT_MS = 2_000
export const DEFAULT_STORE_TIMEOUT_MS = 5_000
export const DEFAULT_BODY_LIMIT = 1024 * 1024
export const DEFAULT_IDEMPOTENCY_TTL_MS = 24 * 60 * 60_000
export const DEFAULT_IDEMPOTENCY_LEASE_MS = 60_000
export const DEFAULT_ADMIN_PREFIX = '/admin'
export const DEFAULT_RUN_RETENTION_MS = 60 * 60_000
export const DEFAULT_MAX_STREAM_BUFFER_BYTES = 8 * 1024 * 1024
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000
export const DEFAULT_AUDIT_RETENTION_MS = 30 * 24 * 60 * 60_000
export const DEFAULT_APPROVAL_RETENTION_MS = 7 * 24 * 60 * 60_000
export const DEFAULT_BODY_TIMEOUT_MS = 30_000
export const DEFAULT_MAX_JSON_DEPTH = 64
export const DEFAULT_LIVE_INTERVAL_MS = 2000
/** a minute: an open console tab costs one audit entry a minute (docs/operations.md, the operator console) */
export const DEFAULT_LIVE_FEED_MS = 60_000

export interface AdminApiSettings {
  readonly prefix: string
  readonly bearerToken: string | null
  /** the live feed's snapshot interval, and how long one of its connections (one audit entry) lasts */
  readonly liveIntervalMs: number
  readonly liveFeedMs: number
  readonly auditStore: AuditStore
  readonly checkpointStore: CheckpointStore
}

/** The options, checked and resolved once at registration. Frozen: nothing changes it afterwards. */
export interface Settings extends RunSettings {
  readonly agents: ReadonlyMap<string, Agent>
  /** each agent with an `input` or `output` schema: its input's validator and both as JSON Schema, made once */
  readonly agentSchemas: ReadonlyMap<string, CompiledAgentSchemas>
  /** what the options allow but a careful reader would want to hear of: logged once the app is ready */
  readonly warnings: readonly string[]
  readonly auditStore: AuditStore
  readonly sessionStore: SessionStore
  readonly approvalStore: ApprovalStore
  readonly checkpointStore: CheckpointStore
  readonly runStore: RunStore
  readonly runRetentionMs: number
  readonly auditRetentionMs: number
  readonly approvalRetentionMs: number
  readonly runLeaseMs: number
  readonly runConcurrency: number
  readonly maxRunAttempts: number
  readonly maxStreamBufferBytes: number
  /** the `webhooks` option, its outbox (`webhookStore`) with the store deadline; null without it */
  readonly webhooks: WebhookSettings | null
  /** the `quotas` option, its store (`quotaStore`) with the store deadline; null without it */
  readonly quotas: QuotaSettings | null
  /** the schedules (`scheduleStore`, docs/schedules.md) with the store deadline */
  readonly scheduleStore: ScheduleStore
  readonly idempotency: { readonly store: IdempotencyStore, readonly ttlMs: number, readonly lockLeaseMs: number } | null
  readonly auth: ApiKeyAuth | JwtAuth | null
  readonly rateLimit: RateLimitOptions | null
  readonly cors: string | null
  readonly websocket: boolean
  /** /v1/models, /v1/responses, /v1/chat/completions */
  readonly openaiCompat: boolean
  /** /v1/mcp */
  readonly mcp: boolean
  readonly requestTimeoutMs: number | null
  readonly host: string
  readonly publicUrl: string | null
  readonly exposeErrors: boolean
  /** the live probes of health checks, by name: `db` (the option), then each store that can be probed */
  readonly checks: ReadonlyMap<string, HealthProbe>
  /** every store the service uses, each once, as given (without the deadline wrapper): the service closes those that own their connection */
  readonly stores: readonly object[]
  readonly healthTimeoutMs: number
  readonly storeTimeoutMs: number
  readonly sessionTtlMs: number
  readonly adminApi: AdminApiSettings | null
  readonly bodyLimit: number
  readonly headersTimeoutMs: number
  readonly bodyTimeoutMs: number
  readonly maxJsonDepth: number
  readonly trustProxy: boolean
  readonly docs: boolean
  readonly drainTimeoutMs: number
  /** the host's prom-client Registry (`metrics.registry`); null: the Admin API makes its own */
  readonly metricsRegistry: Registry | null
  /** per-service replacements (tests): see INJECT */
  readonly injected: Injected
}

/**
 * Per-service replacements, for tests, given as `{ ...options, [INJECT]: { … } }`: how fast the webhooks retry, what
 * loads the A2A and MCP modules. Outside the documented options (a symbol key: the options schema sees string keys only), and
 * held by one service, never by the process.
 */
export const INJECT = Symbol.for('fastify-agents.inject')
export interface Injected {
  readonly webhookTuning?: Partial<WebhookTuning>
  /** resolves to the A2A module (lib/frontends/a2a/protocol.ts) */
  readonly a2aLoader?: () => Promise<unknown>
  /** resolves to the MCP module (lib/frontends/mcp/server.ts) */
  readonly mcpLoader?: () => Promise<unknown>
  /** what the scheduler does between a claim and its run (the kill -9 test) */
  readonly scheduleHooks?: SchedulerHooks
}

// The options' validators: Ajv's code generated from their schemas (test/app/options-validators.test.ts keeps it so),
// so that no process compiles them
const { options: validateOptions, adminApi: validateAdminApi, apiKeyAuth: validateApiKeyAuth, jwtAuth: validateJwtAuth } =
  generatedValidators as unknown as Record<'options' | 'adminApi' | 'apiKeyAuth' | 'jwtAuth', ValidateFunction>

const agentName = new RegExp(AgentNamePattern)
let adminApiTrueWarned = false

function pointerSegment (key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1')
}

/** `errors` of a validator that just failed (Ajv always sets them then). */
function describe (errors: ErrorObject[] | null | undefined, prefix = ''): string[] {
  // The unions (adminApi, auth) are checked branch by branch below: at the top level their anyOf noise is
  // dropped here, but not in the branch's own errors (prefix '/adminApi' or '/auth'), which say what is wrong.
  return (errors as ErrorObject[])
    .filter((e) => e.keyword !== 'anyOf' && !(prefix === '' && /^\/(adminApi|auth)(\/|$)/.test(e.instancePath)))
    .map((e) => {
      const path = prefix + e.instancePath
      if (e.keyword === 'additionalProperties') return `${path}/${pointerSegment(String(e.params.additionalProperty))} is not a known option`
      return `${path === '' ? '/' : path} ${e.message}`
    })
}

const prefixSegment = /^[A-Za-z0-9._~-]+$/

function adminApiProblems (adminApi: AdminApiOptions): string[] {
  const problems: string[] = []
  // A token with whitespace could never be sent intact in an Authorization header.
  if (adminApi.bearerToken !== undefined && /\s/.test(adminApi.bearerToken)) problems.push('/adminApi/bearerToken must not contain whitespace')
  const prefix = adminApi.prefix ?? DEFAULT_ADMIN_PREFIX
  if (!prefix.startsWith('/')) problems.push('/adminApi/prefix must start with "/"')
  if (prefix.endsWith('/')) problems.push('/adminApi/prefix must not end with "/"')
  else if (prefix.startsWith('/') && !prefix.slice(1).split('/').every((s) => prefixSegment.test(s) && s !== '.' && s !== '..')) {
    // route syntax (":id", "*"), empty or dot segments would mount the API somewhere else than it says
    problems.push('/adminApi/prefix must be "/"-separated segments of A-Z a-z 0-9 . _ ~ - (no empty, "." or ".." segment)')
  }
  for (const taken of ['/v1', '/health', '/docs']) {
    if (prefix === taken || prefix.startsWith(taken + '/')) problems.push(`/adminApi/prefix must not clash with ${taken}`)
  }
  return problems
}

function authProblems (auth: unknown): string[] {
  if (typeof auth !== 'object' || auth === null) return ['/auth must be object']
  const strategy = (auth as { strategy?: unknown }).strategy
  if (strategy === 'api-key') return validateApiKeyAuth(auth) ? [] : describe(validateApiKeyAuth.errors, '/auth')
  if (strategy !== 'jwt') return ['/auth/strategy must be "api-key" or "jwt"']
  if (!validateJwtAuth(auth)) return describe(validateJwtAuth.errors, '/auth')
  const jwt = auth as JwtAuth
  if (jwt.secret === undefined && jwt.publicKey === undefined) return ['/auth must have secret (HS256) or publicKey (RS/ES/EdDSA)']
  const algorithms = jwt.algorithms ?? []
  const problems: string[] = []
  if (jwt.secret !== undefined && algorithms.some((a) => !a.startsWith('HS'))) problems.push('/auth/algorithms must be HS* with a secret')
  if (jwt.publicKey !== undefined && algorithms.some((a) => a.startsWith('HS'))) problems.push('/auth/algorithms must not be HS* with a publicKey')
  if (jwt.secret !== undefined && jwt.publicKey !== undefined) problems.push('/auth must have secret or publicKey, not both')
  if (problems.length === 0 && jwt.publicKey !== undefined) {
    try {
      jwtAlgorithms(jwt)
    } catch (error) {
      problems.push((error as Error).message)
    }
  }
  return problems
}

/** An agent's schemas and flags (its run() is checked with the options); its compiled schemas go into `compiled`. */
function agentProblems (name: string, agent: Agent | null | undefined, compiled: Map<string, CompiledAgentSchemas>): string[] {
  if (typeof agent !== 'object' || agent === null) return []
  const path = `/agents/${pointerSegment(name)}`
  const { schemas, problems } = compileAgentSchemas(path, agent.input, agent.output)
  if (agent.input !== undefined || agent.output !== undefined) compiled.set(name, schemas)
  if (agent.resumable !== undefined && typeof agent.resumable !== 'boolean') problems.push(`${path}/resumable must be boolean`)
  return problems
}

/**
 * Checks every option and resolves defaults. Throws one InvalidOptionsError naming every bad path,
 * so nothing is registered and no port is bound with a wrong option.
 */
export function resolveSettings (options: AgentServiceOptions): Settings {
  if (typeof options !== 'object' || options === null) throw new InvalidOptionsError('/ must be object')
  const problems: string[] = []
  if (!validateOptions(options)) problems.push(...describe(validateOptions.errors))

  const agentSchemas = new Map<string, CompiledAgentSchemas>()
  for (const [name, agent] of Object.entries(options.agents ?? {})) {
    if (!agentName.test(name)) problems.push(`/agents/${pointerSegment(name)} is not a valid agent name (${AgentNamePattern})`)
    problems.push(...agentProblems(name, agent, agentSchemas))
  }

  let adminApi = options.adminApi
  if (adminApi === true) {
    adminApi = { enabled: true }
    if (!adminApiTrueWarned) {
      adminApiTrueWarned = true
      process.emitWarning('adminApi: true is deprecated; use adminApi: { enabled: true }', { code: 'FASTIFY_AGENTS_DEP001', type: 'DeprecationWarning' })
    }
  }
  if (adminApi !== undefined) {
    if (typeof adminApi !== 'object' || adminApi === null) problems.push('/adminApi must be true or an object')
    else if (!validateAdminApi(adminApi)) problems.push(...describe(validateAdminApi.errors, '/adminApi'))
    else problems.push(...adminApiProblems(adminApi as AdminApiOptions))
  }

  if (options.auth !== undefined) problems.push(...authProblems(options.auth))
  if (typeof options.webhooks === 'object' && options.webhooks !== null) problems.push(...webhookProblems(options.webhooks))
  if (typeof options.quotas === 'object' && options.quotas !== null && options.quotas.maxConcurrentRuns === undefined && options.quotas.tokens === undefined) {
    problems.push('/quotas must set maxConcurrentRuns, tokens or both')
  }

  let dbProbe: HealthProbe | null = null
  if (typeof options.db === 'object' && options.db !== null) {
    dbProbe = toHealthProbe(options.db)
    if (dbProbe === null) problems.push('/db must have health(), or be a pg Pool, a better-sqlite3 Database or an ioredis client')
  }

  // a bound of the memory run store made here: a store that was given is bounded by its own options
  if (options.maxRetainedRuns !== undefined && options.runStore !== undefined) {
    problems.push('/maxRetainedRuns bounds the memory run store the service makes: with runStore, give the bound to that store (memoryStores({ maxRetainedRuns }))')
  }

  // Node bounds the headers within the whole request's time: a longer headers timeout would never apply
  if ((options.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS) > (options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS)) {
    problems.push('/headersTimeoutMs must not be greater than bodyTimeoutMs')
  }

  if (problems.length > 0) throw new InvalidOptionsError(problems.join('; '))

  const defaults = memoryStores({ maxRetainedRuns: options.maxRetainedRuns })
  const admin = adminApi as Exclude<AgentServiceOptions['adminApi'], true | undefined> | undefined
  const given = {
    auditStore: options.auditStore ?? admin?.auditStore ?? defaults.auditStore,
    sessionStore: options.sessionStore ?? defaults.sessionStore,
    approvalStore: options.approvalStore ?? defaults.approvalStore,
    // the same rule as the audit store: the service writes where the admin API reads
    checkpointStore: options.checkpointStore ?? admin?.checkpointStore ?? defaults.checkpointStore,
    idempotencyStore: options.idempotency?.store ?? defaults.idempotency.store,
    runStore: options.runStore ?? defaults.runStore,
    // the outbox is used (probed, closed) only with webhooks to deliver
    webhookStore: options.webhooks === undefined ? undefined : options.webhookStore ?? defaults.webhookStore,
    // likewise the quotas' counts, only with quotas to count
    quotaStore: options.quotas === undefined ? undefined : options.quotaStore ?? defaults.quotaStore,
    scheduleStore: options.scheduleStore ?? defaults.scheduleStore,
    adminAuditStore: admin?.auditStore,
    adminCheckpointStore: admin?.checkpointStore
  }
  const storeTimeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS
  const withDeadline = storeDeadlines(storeTimeoutMs)
  const auditStore = withDeadline(given.auditStore, storeMethods.auditStore, 'auditStore')
  const checkpointStore = withDeadline(given.checkpointStore, storeMethods.checkpointStore, 'checkpointStore')
  // each store once, under the first option that names it (the defaults of unused options left out)
  const stores = new Map<object, string>()
  for (const [name, store] of Object.entries(given)) {
    if (store === undefined || stores.has(store) || (name === 'idempotencyStore' && options.idempotency === undefined)) continue
    stores.set(store, name)
  }
  const warnings: string[] = []
  // a run another instance takes over resumes from its checkpoint: one this process keeps in memory is not there
  // (docs/durable-agents.md, "Stores")
  const resumable = Object.entries(options.agents).filter(([, agent]) => agent.resumable === true).map(([name]) => name)
  if (resumable.length > 0 && !(given.runStore instanceof MemoryRunStore) && given.checkpointStore instanceof MemoryCheckpointStore) {
    warnings.push(`agents ${resumable.join(', ')} are resumable and their runs shared with other instances (runStore), but checkpoints are kept in this process's memory: a run another instance takes over starts again from its beginning (the steps in its log, ctx.step's, are still replayed); give a checkpointStore the instances share (postgresStores() and sqliteStores() include one)`)
  }
  const rateLimitRedis = options.rateLimit?.redis as { ping?: unknown } | undefined
  const checks = new Map<string, HealthProbe>()
  if (dbProbe !== null) checks.set('db', dbProbe)
  for (const [store, name] of stores) {
    const probe = (store as { probe?: () => Promise<void> }).probe
    if (typeof probe === 'function') checks.set(name, async () => { await probe.call(store); return true })
  }
  if (typeof rateLimitRedis?.ping === 'function') checks.set('rateLimit', toHealthProbe(rateLimitRedis as object)!)

  return Object.freeze({
    agents: new Map(Object.entries(options.agents)),
    agentSchemas,
    warnings,
    auditStore,
    sessionStore: withDeadline(given.sessionStore, storeMethods.sessionStore, 'sessionStore'),
    // waitForDecision waits for a person, as long as the approval allows: it has no deadline
    approvalStore: withDeadline(given.approvalStore, storeMethods.approvalStore.filter((m) => m !== 'waitForDecision'), 'approvalStore'),
    checkpointStore,
    // watch and watchSession answer at once (they only register a listener): no deadline
    runStore: withDeadline(given.runStore, [
      ...storeMethods.runStore.filter((m) => m !== 'watch' && m !== 'watchSession' && m !== 'watchQueue'),
      ...(typeof given.runStore.createWithSession === 'function' ? ['createWithSession'] : [])
    ], 'runStore'),
    runRetentionMs: options.runRetentionMs ?? DEFAULT_RUN_RETENTION_MS,
    auditRetentionMs: options.auditRetentionMs ?? DEFAULT_AUDIT_RETENTION_MS,
    approvalRetentionMs: options.approvalRetentionMs ?? DEFAULT_APPROVAL_RETENTION_MS,
    runLeaseMs: options.runLeaseMs ?? DEFAULT_RUN_LEASE_MS,
    runConcurrency: options.runConcurrency ?? DEFAULT_RUN_CONCURRENCY,
    maxRunAttempts: options.maxRunAttempts ?? DEFAULT_MAX_RUN_ATTEMPTS,
    maxStreamBufferBytes: options.maxStreamBufferBytes ?? DEFAULT_MAX_STREAM_BUFFER_BYTES,
    webhooks: given.webhookStore === undefined
      ? null
      : resolveWebhooks(options.webhooks!, withDeadline(given.webhookStore, storeMethods.webhookStore, 'webhookStore')),
    quotas: given.quotaStore === undefined
      ? null
      : Object.freeze({
        store: withDeadline(given.quotaStore, storeMethods.quotaStore, 'quotaStore'),
        maxConcurrentRuns: options.quotas!.maxConcurrentRuns ?? null,
        tokens: options.quotas!.tokens ?? null
      }),
    // watch answers at once (it only registers a listener): no deadline
    scheduleStore: withDeadline(given.scheduleStore, storeMethods.scheduleStore.filter((m) => m !== 'watch'), 'scheduleStore'),
    idempotency: options.idempotency === undefined
      ? null
      : Object.freeze({
        store: withDeadline(given.idempotencyStore, storeMethods.idempotencyStore, 'idempotencyStore'),
        ttlMs: options.idempotency.ttlMs ?? DEFAULT_IDEMPOTENCY_TTL_MS,
        lockLeaseMs: options.idempotency.lockLeaseMs ?? DEFAULT_IDEMPOTENCY_LEASE_MS
      }),
    auth: options.auth ?? null,
    rateLimit: options.rateLimit ?? null,
    cors: options.cors ?? null,
    websocket: options.websocket ?? false,
    openaiCompat: options.openaiCompat ?? true,
    mcp: options.mcp ?? true,
    requestTimeoutMs: options.requestTimeoutMs ?? null,
    host: options.host ?? '0.0.0.0',
    publicUrl: options.publicUrl ?? null,
    exposeErrors: options.exposeErrors ?? false,
    checks,
    stores: [...stores.keys()],
    healthTimeoutMs: options.healthTimeoutMs ?? DEFAULT_HEALTH_TIMEOUT_MS,
    storeTimeoutMs,
    sessionTtlMs: options.sessionTtlMs ?? DEFAULT_SESSION_TTL_MS,
    adminApi: admin?.enabled === true
      ? Object.freeze({
        prefix: admin.prefix ?? DEFAULT_ADMIN_PREFIX,
        bearerToken: admin.bearerToken ?? null,
        liveIntervalMs: admin.liveIntervalMs ?? DEFAULT_LIVE_INTERVAL_MS,
        liveFeedMs: admin.liveFeedMs ?? DEFAULT_LIVE_FEED_MS,
        // the admin API reads what the service writes, whichever option named the store
        auditStore: admin.auditStore === undefined ? auditStore : withDeadline(admin.auditStore, storeMethods.auditStore, 'adminApi.auditStore'),
        checkpointStore: admin.checkpointStore === undefined ? checkpointStore : withDeadline(admin.checkpointStore, storeMethods.checkpointStore, 'adminApi.checkpointStore')
      })
      : null,
    bodyLimit: options.bodyLimit ?? DEFAULT_BODY_LIMIT,
    headersTimeoutMs: options.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS,
    maxJsonDepth: options.maxJsonDepth ?? DEFAULT_MAX_JSON_DEPTH,
    trustProxy: options.trustProxy ?? false,
    docs: options.docs ?? false,
    drainTimeoutMs: options.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS,
    metricsRegistry: options.metrics?.registry ?? null,
    injected: (options as { [INJECT]?: Injected })[INJECT] ?? {}
  })
}
