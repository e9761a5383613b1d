import { writeFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import { Writable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import closeWithGrace from 'close-with-grace'
import { demoAgents } from './demo-agents.js'
import { buildOpenApiDocument } from './openapi.js'
import { createAgentService } from './service.js'
import type { AgentService } from './service.js'
import { postgresStores } from '../lib/stores/postgres.js'
import { redisStores } from '../lib/stores/redis.js'
import { sqliteStores } from '../lib/stores/sqlite.js'
import type { StoreSet } from '../lib/stores/types.js'
import type { Agent, AgentServiceOptions } from '../lib/core/types.js'

export const usage = `Usage:
  fastify-agents serve [--agents ./agents.js] [--port 3000] [--host 0.0.0.0] [--db file:./data.db | postgres://…]
                       [--redis redis://…] [--admin-token T] [--api-key K]... [--websocket] [--drain-timeout 30000] [--pretty]
  fastify-agents openapi [--agents ./agents.js] [--out openapi.json]

Environment: PORT, HOST, DATABASE_URL, REDIS_URL, ADMIN_TOKEN, API_KEYS (comma-separated), WEBSOCKET=true, DRAIN_TIMEOUT_MS.`

/** The serve command's settings, from flags first and environment variables second. */
export interface ServeFlags {
  port?: string | undefined
  host?: string | undefined
  db?: string | undefined
  redis?: string | undefined
  adminToken?: string | undefined
  apiKeys?: string[] | undefined
  drainTimeout?: string | undefined
  websocket?: boolean | undefined
}

export interface ServePlan {
  options: AgentServiceOptions
  port: number
  host: string
  drainTimeoutMs: number
  /** stores opened from URLs: the server owns them and closes them after draining */
  stores: StoreSet[]
}

function integer (name: string, value: string | undefined, fallback: number, min: number): number {
  if (value === undefined || value === '') return fallback
  const parsed = Number(value)
  if (!Number.isInteger(parsed) || parsed < min) throw new Error(`${name} must be an integer >= ${min}, got "${value}"`)
  return parsed
}

/** Turns flags into service options; every store named by a URL is opened here. */
export function buildServeOptions (flags: ServeFlags, agents: Record<string, Agent>): ServePlan {
  const port = integer('--port', flags.port, 3000, 0)
  const drainTimeoutMs = integer('--drain-timeout', flags.drainTimeout, 30_000, 0)
  const options: AgentServiceOptions = { agents }
  const stores: StoreSet[] = []

  const db = flags.db
  if (db !== undefined && db !== '') {
    let set: StoreSet
    if (db.startsWith('file:')) set = sqliteStores(db)
    else if (/^postgres(ql)?:\/\//.test(db)) set = postgresStores(db)
    else throw new Error(`--db must be file:<path> or postgres://…, got "${db}"`)
    stores.push(set)
    Object.assign(options, set)
    // The probe goes through the store itself: what it reports is what runs will meet.
    const audit = set.auditStore!
    options.db = { health: async () => { await audit.count(); return true } }
  }
  if (flags.redis !== undefined && flags.redis !== '') {
    const set = redisStores(flags.redis)
    stores.push(set)
    Object.assign(options, set)
  }
  // Retried requests must not run an agent twice: the standalone server always honours Idempotency-Key.
  options.idempotency ??= {}
  if (flags.apiKeys !== undefined && flags.apiKeys.length > 0) options.auth = { strategy: 'api-key', keys: flags.apiKeys }
  if (flags.adminToken !== undefined && flags.adminToken !== '') options.adminApi = { enabled: true, bearerToken: flags.adminToken }
  if (flags.websocket === true) options.websocket = true
  return { options, port, host: flags.host ?? '0.0.0.0', drainTimeoutMs, stores }
}

/** Closes each distinct store once (a store set may hand the same object out twice). */
export async function closeStores (sets: StoreSet[]): Promise<void> {
  const seen = new Set<object>()
  for (const set of sets) {
    for (const store of [set.auditStore, set.sessionStore, set.approvalStore, set.checkpointStore, set.idempotency?.store, set.runStore]) {
      if (store === undefined || seen.has(store)) continue
      seen.add(store)
      await store.close?.()
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

async function loadAgents (path: string | undefined): Promise<Record<string, Agent>> {
  if (path === undefined) return demoAgents
  const module = await import(pathToFileURL(resolve(path)).href) as { default?: unknown, agents?: unknown }
  const agents = module.agents ?? module.default
  if (typeof agents !== 'object' || agents === null) throw new Error(`${path} must export its agents as \`agents\` or as the default export`)
  return agents as Record<string, Agent>
}

export interface RunningServer {
  service: AgentService
  url: string
  /** drains, closes the stores it opened and removes the signal handlers */
  stop(): Promise<void>
}

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
      redis: { type: 'string' },
      'admin-token': { type: 'string' },
      'api-key': { type: 'string', multiple: true },
      'drain-timeout': { type: 'string' },
      websocket: { type: 'boolean' },
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
    await writeFile(file, JSON.stringify(await buildOpenApiDocument({ agents }), null, 2) + '\n')
    out.write(`wrote ${file}\n`)
    return null
  }

  const env = process.env
  const plan = buildServeOptions({
    port: values.port ?? env.PORT,
    host: values.host ?? env.HOST,
    db: values.db ?? env.DATABASE_URL,
    redis: values.redis ?? env.REDIS_URL,
    adminToken: values['admin-token'] ?? env.ADMIN_TOKEN,
    apiKeys: values['api-key'] ?? env.API_KEYS?.split(',').map((k) => k.trim()).filter((k) => k !== ''),
    drainTimeout: values['drain-timeout'] ?? env.DRAIN_TIMEOUT_MS,
    websocket: values.websocket ?? env.WEBSOCKET === 'true'
  }, agents)
  const service = createAgentService({
    ...plan.options,
    logger: values.pretty === true ? { level: 'info', stream: prettyLogStream(out) } : { level: 'info', stream: out }
  })
  const shutdown = async (): Promise<void> => {
    await service.close(plan.drainTimeoutMs)
    await closeStores(plan.stores)
  }
  const grace = closeWithGrace({ delay: plan.drainTimeoutMs + 5_000, logger: service.app.log }, async ({ signal, err }) => {
    service.app.log.info({ signal, err, drainTimeoutMs: plan.drainTimeoutMs }, 'draining')
    await shutdown()
  })
  const { url } = await service.listen({ port: plan.port, host: plan.host })
  return {
    service,
    url,
    async stop () {
      grace.uninstall()
      await shutdown()
    }
  }
}
