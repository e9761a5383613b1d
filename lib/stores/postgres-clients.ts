// Internal to the PostgreSQL stores (transactions and listeners on pg's clients), and kept out of
// postgres-connection.ts: the published declarations name no driver type.
import type { PoolClient } from 'pg'
import { quote } from './postgres-connection.js'
import type { PgPool } from './postgres-connection.js'

/**
 * One transaction on one connection, opened by `begin`; a failure discards the connection, and the server rolls back
 * with it.
 */
export async function transaction<T> (pool: PgPool, begin: string, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect() as PoolClient
  try {
    await client.query(begin)
    const result = await fn(client)
    await client.query('COMMIT')
    client.release()
    return result
  } catch (error) {
    client.release(error as Error)
    throw error
  }
}

/**
 * One client checked out of the pool to LISTEN on a channel, for as long as the store lives or until its connection
 * drops (the next listen() then takes another).
 */
export class PgListener {
  readonly #pool: () => Promise<PgPool>
  readonly #channel: string
  readonly #heard: (payload: string) => void
  readonly #listened: () => void
  #listening: Promise<void> | null = null
  #client: PoolClient | null = null

  constructor (pool: () => Promise<PgPool>, channel: string, heard: (payload: string) => void, listened: () => void = () => {}) {
    this.#pool = pool
    this.#channel = channel
    this.#heard = heard
    this.#listened = listened
  }

  get listening (): boolean {
    return this.#listening !== null
  }

  listen (): Promise<void> {
    this.#listening ??= this.#start().catch((error: unknown) => {
      this.#drop(error as Error)
      throw error
    })
    return this.#listening
  }

  async #start (): Promise<void> {
    const pool = await this.#pool()
    const client = await pool.connect() as PoolClient
    this.#client = client
    client.on('notification', (message) => this.#heard(String(message.payload)))
    // The connection was lost: drop it (the pool discards it); the next poll listens again.
    client.on('error', (error) => { if (this.#client === client) this.#drop(error) })
    await client.query(`LISTEN ${quote(this.#channel)}`)
    this.#listened()
  }

  /** Waits for a listen under way, then lets the client go. */
  async stop (): Promise<void> {
    await this.#listening?.catch(() => {})
    this.#drop()
  }

  #drop (error?: Error): void {
    this.#listening = null
    const client = this.#client
    this.#client = null
    // release(truthy) destroys the connection rather than returning a LISTENing client to the pool
    client?.release(error ?? true)
  }
}
