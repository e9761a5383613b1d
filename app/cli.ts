import { execFile } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import { Writable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { parseArgs, promisify } from 'node:util'
import closeWithGrace from 'close-with-grace'
import { demoAgents } from './demo-agents.js'
import { buildOpenApiDocument } from './openapi.js'
import { createAgentService } from './service.js'
import type { AgentService } from './service.js'
import { postgresStores } from '../lib/stores/postgres.js'
import { redisStores } from '../lib/stores/redis.js'
import { sqliteStores } from '../lib/stores/sqlite.js'
import type { StoreSet } from '../lib/stores/types.js'
import { DEFAULT_STORE_TIMEOUT_MS } from '../lib/service/settings.js'
import { MIN_RUN_LEASE_MS } from '../schemas/options.js'
import type { Agent, AgentServiceOptions } from '../lib/core/types.js'

export const usage = `Usage:
  fastify-agents serve [--agents ./agents.js] [--port 3000] [--host 0.0.0.0] [--db file:./data.db | postgres://…]
                       [--db-schema NAME] [--redis redis://…] [--redis-prefix PREFIX] [--admin-token T] [--api-key K]... [--jwt-secret S | --jwt-public-key FILE]
                       [--cors ORIGIN] [--docs] [--public-url URL] [--request-timeout MS] [--rate-limit N/MS]
                       [--store-timeout MS] [--drain-timeout MS] [--headers-timeout MS] [--body-timeout MS] [--websocket]
                       [--run-lease MS] [--run-concurrency N] [--max-run-attempts N] [--no-openai-compat] [--pretty]
  fastify-agents openapi [--agents ./agents.js] [--out openapi.json] [--public-url URL]
                         [--api-key K | --jwt-secret S | --auth api-key|jwt] [--admin-token T | --admin] [--websocket]

Environment (a flag wins over its variable): PORT, HOST, DATABASE_URL, DATABASE_SCHEMA, REDIS_URL, REDIS_PREFIX, ADMIN_TOKEN,
API_KEYS (comma-separated),
JWT_SECRET, JWT_PUBLIC_KEY_FILE, CORS_ORIGIN, DOCS=true, PUBLIC_URL, REQUEST_TIMEOUT_MS, RATE_LIMIT (N/MS),
STORE_TIMEOUT_MS, DRAIN_TIMEOUT_MS, HEADERS_TIMEOUT_MS, BODY_TIMEOUT_MS, WEBSOCKET=true, RUN_LEASE_MS, RUN_CONCURRENCY,
MAX_RUN_ATTEMPTS, OPENAI_COMPAT=false.
The host defaults to 127.0.0.1 for the demo agents (served without auth), 0.0.0.0 with --agents.`

/** The serve command's settings, from flags first and environment variables second. */
export interface ServeFlags {
  port?: string | undefined
  host?: string | undefined
  db?: string | undefined
  /** the PostgreSQL schema of the tables (default public) */
  dbSchema?: string | undefined
  redis?: string | undefined
  /** the prefix of every Redis key (default fa:) */
  redisPrefix?: string | undefined
  adminToken?: string | undefined
  apiKeys?: string[] | undefined
  jwtSecret?: string | undefined
  jwtPublicKey?: string | undefined
  cors?: string | undefined
  docs?: boolean | undefined
  publicUrl?: string | undefined
  requestTimeout?: string | undefined
  rateLimit?: string | undefined
  storeTimeout?: string | undefined
  drainTimeout?: string | undefined
  headersTimeout?: string | undefined
  bodyTimeout?: string | undefined
  websocket?: boolean | undefined
  runLease?: string | undefined
  runConcurrency?: string | undefined
  maxRunAttempts?: string | undefined
  /** false turns the OpenAI-shaped routes off */
  openaiCompat?: boolean | undefined
}

/** Where each setting came from, for the error messages: `--port` or `PORT` (default: the flag). */
export type FlagSources = Partial<Record<keyof ServeFlags, string>>

const flagNames: Record<keyof ServeFlags, string> = {
  port: '--port',
  host: '--host',
  db: '--db',
  dbSchema: '--db-schema',
  redis: '--redis',
  redisPrefix: '--redis-prefix',
  adminToken: '--admin-token',
  apiKeys: '--api-key',
  jwtSecret: '--jwt-secret',
  jwtPublicKey: '--jwt-public-key',
  cors: '--cors',
  docs: '--docs',
  publicUrl: '--public-url',
  requestTimeout: '--request-timeout',
  rateLimit: '--rate-limit',
  storeTimeout: '--store-timeout',
  drainTimeout: '--drain-timeout',
  headersTimeout: '--headers-timeout',
  bodyTimeout: '--body-timeout',
  websocket: '--websocket',
  runLease: '--run-lease',
  runConcurrency: '--run-concurrency',
  maxRunAttempts: '--max-run-attempts',
  openaiCompat: '--no-openai-compat'
}

const envNames: Record<keyof ServeFlags, string> = {
  port: 'PORT',
  host: 'HOST',
  db: 'DATABASE_URL',
  dbSchema: 'DATABASE_SCHEMA',
  redis: 'REDIS_URL',
  redisPrefix: 'REDIS_PREFIX',
  adminToken: 'ADMIN_TOKEN',
  apiKeys: 'API_KEYS',
  jwtSecret: 'JWT_SECRET',
  jwtPublicKey: 'JWT_PUBLIC_KEY_FILE',
  cors: 'CORS_ORIGIN',
  docs: 'DOCS',
  publicUrl: 'PUBLIC_URL',
  requestTimeout: 'REQUEST_TIMEOUT_MS',
  rateLimit: 'RATE_LIMIT',
  storeTimeout: 'STORE_TIMEOUT_MS',
  drainTimeout: 'DRAIN_TIMEOUT_MS',
  headersTimeout: 'HEADERS_TIMEOUT_MS',
  bodyTimeout: 'BODY_TIMEOUT_MS',
  websocket: 'WEBSOCKET',
  runLease: 'RUN_LEASE_MS',
  runConcurrency: 'RUN_CONCURRENCY',
  maxRunAttempts: 'MAX_RUN_ATTEMPTS',
  openaiCompat: 'OPENAI_COMPAT'
}

/** A store set opened from a flag, and the flag (or variable) that named it. */
export interface OpenedStores {
  source: string
  /** the URL without its password, for messages */
  url: string
  set: StoreSet
}

export interface ServePlan {
  options: AgentServiceOptions
  port: number
  host: string
  drainTimeoutMs: number
  /** what the port came from (`--port`, `PORT`), for the message when it cannot be bound */
  portSource: string
  /** stores opened from URLs: probed before listening, closed by the service after its drain */
  stores: OpenedStores[]
}

/** A connection string without its password. */
export function redact (url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@]*):[^@/]*@/i, '$1:***@')
}

function integer (name: string, value: string | undefined, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined || value === '') return fallback
  const parsed = Number(value)
  if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(parsed) || parsed < min || parsed > max) {
    throw new Error(`${name} must be an integer from ${min}${max === Number.MAX_SAFE_INTEGER ? ' up' : ` to ${max}`}, got "${value}"`)
  }
  return parsed
}

/** Whether a host only this machine can reach. */
export function isLoopback (host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host)
}

function given (value: string | undefined): value is string {
  return value !== undefined && value !== ''
}

/**
 * The bin serves no webhooks and no quotas: a factory's outbox and quota store are left out, unopened (probed, they
 * would hold the connection open past the service's close, which closes only the stores it uses).
 */
function withoutOutbox ({ webhookStore: _outbox, quotaStore: _quotas, ...set }: StoreSet): StoreSet {
  return set
}

/** The stores `open` makes; an option they refuse is an error naming the flag that gave it. */
function named (flag: string, open: () => StoreSet): StoreSet {
  try {
    return open()
  } catch (error) {
    throw new Error(`${flag}: ${(error as Error).message}`)
  }
}

/** Turns flags into service options; every store named by a URL is opened here (lazily: probe them before serving). */
export function buildServeOptions (flags: ServeFlags, agents: Record<string, Agent>, sources: FlagSources = {}): ServePlan {
  const name = (key: keyof ServeFlags): string => sources[key] ?? flagNames[key]
  const port = integer(name('port'), flags.port, 3000, 0, 65535)
  const drainTimeoutMs = integer(name('drainTimeout'), flags.drainTimeout, 30_000, 0)
  const options: AgentServiceOptions = { agents }
  const stores: OpenedStores[] = []

  const db = flags.db
  if (given(flags.dbSchema) && !(given(db) && /^postgres(ql)?:\/\//.test(db))) {
    throw new Error(`${name('dbSchema')} names a PostgreSQL schema: it needs ${name('db')} postgres://…`)
  }
  if (given(flags.redisPrefix) && !given(flags.redis)) throw new Error(`${name('redisPrefix')} needs ${name('redis')} redis://…`)
  if (given(db)) {
    let set: StoreSet
    const schema = flags.dbSchema
    if (db.startsWith('file:')) set = withoutOutbox(sqliteStores(db))
    else if (!/^postgres(ql)?:\/\//.test(db)) throw new Error(`${name('db')} must be file:<path> or postgres://…, got "${redact(db)}"`)
    else set = withoutOutbox(given(schema) ? named(name('dbSchema'), () => postgresStores(db, { schema })) : postgresStores(db))
    stores.push({ source: name('db'), url: redact(db), set })
    Object.assign(options, set)
    // checks.db: the database behind every store, probed through the stores themselves (one SELECT 1)
    const probe = set.auditStore as unknown as { probe (): Promise<void> }
    options.db = { health: async () => { await probe.probe(); return true } }
  }
  if (given(flags.redis)) {
    if (!/^rediss?:\/\//.test(flags.redis)) throw new Error(`${name('redis')} must be redis://… or rediss://…, got "${redact(flags.redis)}"`)
    const set = withoutOutbox(redisStores(flags.redis, given(flags.redisPrefix) ? { prefix: flags.redisPrefix } : {}))
    stores.push({ source: name('redis'), url: redact(flags.redis), set })
    Object.assign(options, set)
  }
  // Retried requests must not run an agent twice: the standalone server always honours Idempotency-Key.
  options.idempotency ??= {}

  const jwt = given(flags.jwtSecret) || given(flags.jwtPublicKey)
  if (flags.apiKeys !== undefined && flags.apiKeys.length > 0) {
    if (jwt) throw new Error(`${name('apiKeys')} and ${given(flags.jwtSecret) ? name('jwtSecret') : name('jwtPublicKey')} are two auth strategies: choose one`)
    options.auth = { strategy: 'api-key', keys: flags.apiKeys }
  }
  if (given(flags.jwtSecret) && given(flags.jwtPublicKey)) throw new Error(`${name('jwtSecret')} and ${name('jwtPublicKey')}: choose one`)
  if (given(flags.jwtSecret)) options.auth = { strategy: 'jwt', secret: flags.jwtSecret }
  if (given(flags.jwtPublicKey)) {
    let publicKey: string
    try {
      publicKey = readFileSync(flags.jwtPublicKey, 'utf8')
    } catch (error) {
      throw new Error(`${name('jwtPublicKey')} ${flags.jwtPublicKey}: ${(error as Error).message}`)
    }
    options.auth = { strategy: 'jwt', publicKey }
  }
  if (given(flags.adminToken)) options.adminApi = { enabled: true, bearerToken: flags.adminToken }
  if (given(flags.cors)) options.cors = flags.cors
  if (flags.docs === true) options.docs = true
  if (given(flags.publicUrl)) options.publicUrl = flags.publicUrl
  if (given(flags.requestTimeout)) options.requestTimeoutMs = integer(name('requestTimeout'), flags.requestTimeout, 0, 1)
  if (given(flags.storeTimeout)) options.storeTimeoutMs = integer(name('storeTimeout'), flags.storeTimeout, 0, 1)
  if (given(flags.headersTimeout)) options.headersTimeoutMs = integer(name('headersTimeout'), flags.headersTimeout, 0, 1)
  if (given(flags.bodyTimeout)) options.bodyTimeoutMs = integer(name('bodyTimeout'), flags.bodyTimeout, 0, 1)
  if (given(flags.rateLimit)) {
    const match = /^(\d+)\/(\d+)$/.exec(flags.rateLimit.trim())
    if (match === null || Number(match[1]) < 1 || Number(match[2]) < 1) {
      throw new Error(`${name('rateLimit')} must be <requests>/<milliseconds>, e.g. 100/60000, got "${flags.rateLimit}"`)
    }
    options.rateLimit = { maxRequests: Number(match[1]), intervalMs: Number(match[2]) }
  }
  if (flags.websocket === true) options.websocket = true
  if (given(flags.runLease)) options.runLeaseMs = integer(name('runLease'), flags.runLease, 0, MIN_RUN_LEASE_MS)
  if (given(flags.runConcurrency)) options.runConcurrency = integer(name('runConcurrency'), flags.runConcurrency, 0, 1)
  if (given(flags.maxRunAttempts)) options.maxRunAttempts = integer(name('maxRunAttempts'), flags.maxRunAttempts, 0, 1)
  if (flags.openaiCompat === false) options.openaiCompat = false
  return { options, port, host: flags.host ?? '0.0.0.0', drainTimeoutMs, portSource: name('port'), stores }
}

/**
 * Probes every store opened from a flag, each within `timeoutMs`: a database that is unreachable, refuses us, or a
 * file that cannot be opened is an error naming the flag, before anything listens.
 */
export async function probeStores (stores: OpenedStores[], timeoutMs: number): Promise<void> {
  for (const { source, url, set } of stores) {
    const distinct = new Set(Object.values(set).map((store) => 'store' in store ? store.store : store) as Array<{ probe (): Promise<void> }>)
    for (const store of distinct) {
      let timer: NodeJS.Timeout | undefined
      const deadline = new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs)
      })
      try {
        await Promise.race([store.probe(), deadline])
      } catch (error) {
        throw new Error(`${source} ${url} cannot be used: ${(error as Error).message}`)
      } finally {
        clearTimeout(timer)
      }
    }
  }
}

const levels: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' }

/** `--pretty`: pino's JSON lines as `HH:MM:SS LEVEL message key=value…` for people. */
export function prettyLogStream (out: NodeJS.WritableStream): Writable {
  return new Writable({
    write (chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString().split('\n')) {
        if (line === '') continue
        let record: Record<string, unknown>
        try {
          record = JSON.parse(line) as Record<string, unknown>
        } catch {
          out.write(line + '\n')
          continue
        }
        const { time, level, msg, pid: _pid, hostname: _hostname, ...rest } = record
        const extras = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ')
        const clock = new Date(time as number).toISOString().slice(11, 19)
        out.write(`${clock} ${levels[level as number] ?? String(level)} ${String(msg ?? '')}${extras === '' ? '' : ' ' + extras}\n`)
      }
      callback()
    }
  })
}

/** `file:line` of a syntax error, from `node --check` (an ES module's SyntaxError does not say where it is). */
async function syntaxErrorLine (file: string): Promise<string | null> {
  // null when the file parses: a SyntaxError thrown while it runs (JSON.parse, say) has no line of the file to show
  const check = await promisify(execFile)(process.execPath, ['--check', file]).then(() => '', (error: { stderr: string }) => error.stderr)
  const match = /^(.*):(\d+)\s*$/m.exec(check)
  return match === null ? null : match[2]!
}

/** The agents of an `--agents` module; every error names the file (and the line of a syntax error). */
export async function loadAgents (path: string | undefined): Promise<Record<string, Agent>> {
  if (path === undefined) return demoAgents
  const file = resolve(path)
  if (!existsSync(file)) throw new Error(`--agents ${path}: no such file (${file})`)
  let module: { default?: unknown, agents?: unknown }
  try {
    module = await import(pathToFileURL(file).href) as typeof module
  } catch (error) {
    const line = (error as Error).name === 'SyntaxError' ? await syntaxErrorLine(file) : null
    throw new Error(`--agents ${path}${line === null ? '' : `:${line}`}: ${(error as Error).name}: ${(error as Error).message}`)
  }
  const agents = module.agents ?? module.default
  if (typeof agents !== 'object' || agents === null) throw new Error(`--agents ${path} must export its agents as \`agents\` or as the default export`)
  return agents as Record<string, Agent>
}

export interface RunningServer {
  service: AgentService
  url: string
  /** drains (the service closes the stores it opened afterwards) and removes the signal handlers */
  stop(): Promise<void>
}

/** One setting from its flag, else its environment variable; `sources` records which was used. */
function fromFlagOrEnv<K extends keyof ServeFlags> (key: K, flag: ServeFlags[K], sources: FlagSources, read: (text: string) => ServeFlags[K] = (text) => text as ServeFlags[K]): ServeFlags[K] {
  if (flag !== undefined) return flag
  const text = process.env[envNames[key]]
  if (text === undefined) return undefined
  sources[key] = envNames[key]
  return read(text)
}

const envBoolean = (text: string): boolean => text === 'true' || text === '1'

/** The `fastify-agents` command. `serve` resolves once listening; SIGINT/SIGTERM drain and exit 0. */
export async function run (argv: string[], out: NodeJS.WritableStream = process.stdout): Promise<RunningServer | null> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      agents: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      db: { type: 'string' },
      'db-schema': { type: 'string' },
      redis: { type: 'string' },
      'redis-prefix': { type: 'string' },
      'admin-token': { type: 'string' },
      admin: { type: 'boolean' },
      'api-key': { type: 'string', multiple: true },
      'jwt-secret': { type: 'string' },
      'jwt-public-key': { type: 'string' },
      auth: { type: 'string' },
      cors: { type: 'string' },
      docs: { type: 'boolean' },
      'public-url': { type: 'string' },
      'request-timeout': { type: 'string' },
      'rate-limit': { type: 'string' },
      'store-timeout': { type: 'string' },
      'drain-timeout': { type: 'string' },
      'headers-timeout': { type: 'string' },
      'body-timeout': { type: 'string' },
      websocket: { type: 'boolean' },
      'run-lease': { type: 'string' },
      'run-concurrency': { type: 'string' },
      'max-run-attempts': { type: 'string' },
      'no-openai-compat': { type: 'boolean' },
      pretty: { type: 'boolean' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' }
    }
  })
  const command = positionals[0] ?? 'serve'
  if (values.help === true) {
    out.write(usage + '\n')
    return null
  }
  if (command !== 'serve' && command !== 'openapi') throw new Error(`unknown command "${command}"\n${usage}`)
  const agents = await loadAgents(values.agents)

  if (command === 'openapi') {
    const file = values.out ?? 'openapi.json'
    await writeFile(file, JSON.stringify(await buildOpenApiDocument(openApiOptions(values, agents)), null, 2) + '\n')
    out.write(`wrote ${file}\n`)
    return null
  }

  const sources: FlagSources = {}
  const plan = buildServeOptions({
    port: fromFlagOrEnv('port', values.port, sources),
    // the demo agents answer anyone: without --agents they stay on this machine unless a host is asked for
    host: fromFlagOrEnv('host', values.host, sources) ?? (values.agents === undefined ? '127.0.0.1' : undefined),
    db: fromFlagOrEnv('db', values.db, sources),
    dbSchema: fromFlagOrEnv('dbSchema', values['db-schema'], sources),
    redis: fromFlagOrEnv('redis', values.redis, sources),
    redisPrefix: fromFlagOrEnv('redisPrefix', values['redis-prefix'], sources),
    adminToken: fromFlagOrEnv('adminToken', values['admin-token'], sources),
    apiKeys: fromFlagOrEnv('apiKeys', values['api-key'], sources, (text) => text.split(',').map((k) => k.trim()).filter((k) => k !== '')),
    jwtSecret: fromFlagOrEnv('jwtSecret', values['jwt-secret'], sources),
    jwtPublicKey: fromFlagOrEnv('jwtPublicKey', values['jwt-public-key'], sources),
    cors: fromFlagOrEnv('cors', values.cors, sources),
    docs: fromFlagOrEnv('docs', values.docs, sources, envBoolean),
    publicUrl: fromFlagOrEnv('publicUrl', values['public-url'], sources),
    requestTimeout: fromFlagOrEnv('requestTimeout', values['request-timeout'], sources),
    rateLimit: fromFlagOrEnv('rateLimit', values['rate-limit'], sources),
    storeTimeout: fromFlagOrEnv('storeTimeout', values['store-timeout'], sources),
    drainTimeout: fromFlagOrEnv('drainTimeout', values['drain-timeout'], sources),
    headersTimeout: fromFlagOrEnv('headersTimeout', values['headers-timeout'], sources),
    bodyTimeout: fromFlagOrEnv('bodyTimeout', values['body-timeout'], sources),
    websocket: fromFlagOrEnv('websocket', values.websocket, sources, envBoolean),
    runLease: fromFlagOrEnv('runLease', values['run-lease'], sources),
    runConcurrency: fromFlagOrEnv('runConcurrency', values['run-concurrency'], sources),
    maxRunAttempts: fromFlagOrEnv('maxRunAttempts', values['max-run-attempts'], sources),
    openaiCompat: fromFlagOrEnv('openaiCompat', values['no-openai-compat'] === true ? false : undefined, sources, (text) => !(text === 'false' || text === '0'))
  }, agents, sources)
  const service = createAgentService({
    ...plan.options,
    logger: values.pretty === true ? { level: 'info', stream: prettyLogStream(out) } : { level: 'info', stream: out }
  })
  let url: string
  try {
    await probeStores(plan.stores, plan.options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS)
    try {
      url = (await service.listen({ port: plan.port, host: plan.host })).url
    } catch (error) {
      throw new Error(`${plan.portSource} ${plan.port}: cannot listen on ${plan.host}:${plan.port}: ${(error as Error).message}`)
    }
  } catch (error) {
    // nothing is served: close what was opened, so that the process can exit with the error
    await service.close(0)
    throw error
  }
  if (plan.options.auth === undefined && !isLoopback(plan.host)) {
    service.app.log.warn({ host: plan.host }, `serving ${plan.host} without auth: anyone who can reach ${url} can run the agents; set --api-key or --jwt-secret, or --host 127.0.0.1`)
  }
  // Installed once listening: close-with-grace also drains on `beforeExit`, which a failed start would reach.
  const grace = closeWithGrace({ delay: plan.drainTimeoutMs + 5_000, logger: service.app.log }, async ({ signal, err }) => {
    service.app.log.info({ signal, err, drainTimeoutMs: plan.drainTimeoutMs }, 'draining')
    await service.close(plan.drainTimeoutMs)
  })
  return {
    service,
    url,
    async stop () {
      grace.uninstall()
      await service.close(plan.drainTimeoutMs)
    }
  }
}

/** The options the `openapi` command documents: auth and the Admin API only when asked. */
function openApiOptions (values: Record<string, string | boolean | string[] | undefined>, agents: Record<string, Agent>): AgentServiceOptions {
  const options: AgentServiceOptions = { agents }
  const strategy = values.auth ?? (values['api-key'] !== undefined ? 'api-key' : values['jwt-secret'] !== undefined ? 'jwt' : undefined)
  if (strategy === 'api-key') options.auth = { strategy: 'api-key', keys: (values['api-key'] as string[] | undefined) ?? ['documented'] }
  else if (strategy === 'jwt') options.auth = { strategy: 'jwt', secret: (values['jwt-secret'] as string | undefined) ?? 'documented' }
  else if (strategy !== undefined) throw new Error(`--auth must be api-key or jwt, got "${String(strategy)}"`)
  if (values.admin === true || values['admin-token'] !== undefined) options.adminApi = { enabled: true, bearerToken: (values['admin-token'] as string | undefined) ?? 'documented' }
  if (values.websocket === true) options.websocket = true
  if (typeof values['public-url'] === 'string') options.publicUrl = values['public-url']
  return options
}
