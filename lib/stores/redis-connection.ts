// Internal to the Redis stores: the shared connection, the base class that takes a client from it, and scripts.
import { createHash } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Redis } from 'ioredis'
import { ConnectedStore, SharedConnection } from './common.js'
import { loadDriver } from './drivers.js'

export interface RedisStoreOptions {
  /** prepended to every key (default 'fa:') */
  prefix?: string
}

/**
 * The part of an ioredis client the public types name (structural: typing against it needs no ioredis).
 * An ioredis `Redis` fits it.
 */
export interface RedisClient {
  evalsha(sha: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
  hgetall(key: string): Promise<Record<string, string>>
  quit(): Promise<unknown>
}

function isRedis (value: unknown): value is RedisClient {
  return typeof value === 'object' && value !== null && typeof (value as Redis).evalsha === 'function' &&
    typeof (value as Redis).hgetall === 'function' && typeof (value as Redis).quit === 'function'
}

/**
 * A client we opened reports its connection errors (each reconnection attempt emits one) to the service's
 * logger once it has one, and its recovery; ioredis would otherwise print them to stderr itself.
 */
class ClientEvents {
  log: FastifyBaseLogger | null = null
  #down: string | null = null

  watch (client: Redis): Redis {
    client.on('error', (error: Error) => {
      // one line per outage (and per new reason), not one per reconnection attempt
      if (this.#down === error.message) return
      this.#down = error.message
      this.log?.warn({ err: error }, 'redis store: connection error')
    })
    client.on('ready', () => {
      if (this.#down === null) return
      this.#down = null
      this.log?.info('redis store: connection restored')
    })
    return client
  }
}

/** QUIT, which lets the replies on their way arrive; a server that does not answer it within a second is cut off. */
async function quit (client: RedisClient): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([client.quit().catch(() => {}), new Promise((resolve) => { timer = setTimeout(resolve, QUIT_GRACE_MS) })])
  clearTimeout(timer)
  ;(client as Redis).disconnect()
}

const QUIT_GRACE_MS = 1_000

/**
 * One ioredis client shared by several stores. A URL makes a client, connected on first use and quit when
 * the last store using it closes; a client you pass is never closed.
 */
export class RedisConnection extends SharedConnection<RedisClient> {
  readonly #events: ClientEvents

  constructor (source: string | RedisClient) {
    const events = new ClientEvents()
    if (typeof source === 'string') {
      if (!/^rediss?:\/\//.test(source)) throw new TypeError('expected a redis:// or rediss:// URL')
      const Driver = loadDriver<typeof import('ioredis')>('ioredis', 'redisStores()')
      super(() => events.watch(new Driver.Redis(source, { lazyConnect: true })), quit, true)
    } else if (isRedis(source)) {
      super(() => source, () => {}, false)
    } else {
      throw new TypeError('expected a redis:// URL or an ioredis client')
    }
    this.#events = events
  }

  /** Where the errors of a client opened from a URL go (the service passes its logger); a client you pass keeps your listeners. */
  useLogger (log: FastifyBaseLogger): void {
    this.#events.log = log
  }
}

export type RedisSource = string | RedisClient | RedisConnection

function ignore (): void {}

/** A store's pub/sub connection, as the store keeps it (typed without ioredis: the declarations ship without it). */
export interface Subscription { disconnect(): void }

/**
 * A connection of its own that listens on `channel` (a subscribed connection can do nothing else). It subscribes
 * again at each reconnection itself: ioredis' own resubscription leaves its promise unhandled, and a connection
 * closed before the reply (the store closed, the server gone) ended the process with an unhandled rejection.
 * `caughtUp` is called when the connection is ready and once it is subscribed: what was published before is not heard.
 */
export function subscription (client: RedisClient, channel: string, heard: (message: string) => void, caughtUp: () => void): Subscription {
  const subscriber = (client as Redis).duplicate({ autoResubscribe: false })
  // errors are the connection's: it reconnects by itself, and the store's poll or timer covers meanwhile
  subscriber.on('error', ignore)
  subscriber.on('message', (_channel: string, message: string) => heard(message))
  subscriber.on('ready', () => {
    caughtUp()
    subscriber.subscribe(channel).then(caughtUp, ignore)
  })
  // a client opened from a URL connects on first use (lazyConnect), and so does its duplicate
  if (subscriber.status === 'wait') subscriber.connect().catch(ignore)
  return subscriber
}

/** A Lua script run by its SHA, sent in full only when the server does not know it yet. */
export class RedisScript {
  readonly #source: string
  readonly #sha: string

  constructor (source: string) {
    this.#source = source
    this.#sha = createHash('sha1').update(source).digest('hex')
  }

  async run (client: RedisClient, args: Array<string | number>, keys: string[] = []): Promise<unknown> {
    try {
      return await client.evalsha(this.#sha, keys.length, ...keys, ...args)
    } catch (error) {
      if (!String((error as Error).message).startsWith('NOSCRIPT')) throw error
      return (client as Redis).eval(this.#source, keys.length, ...keys, ...args)
    }
  }
}

/** What every Redis store shares: its prefix, and the client taken from its connection (and given back on close). */
export abstract class RedisStore extends ConnectedStore<RedisClient> {
  readonly prefix: string

  constructor (source: RedisSource, options: RedisStoreOptions = {}) {
    const prefix = options.prefix ?? 'fa:'
    if (typeof prefix !== 'string') throw new TypeError('prefix must be a string')
    super(source instanceof RedisConnection ? source : new RedisConnection(source))
    this.prefix = prefix
  }

  protected client (): RedisClient {
    return this.connected()
  }

  /** For health checks: O(1), one PING shared by the stores of a client probing at once. */
  probe (): Promise<void> {
    return this.connection.probe(async () => { await (this.client() as Redis).ping() })
  }

  /** The service's logger, for the connection errors of a client opened from a URL. */
  useLogger (log: FastifyBaseLogger): void {
    (this.connection as RedisConnection).useLogger(log)
  }
}
