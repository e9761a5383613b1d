// Internal to the PostgreSQL stores, and kept out of postgres-connection.ts: the published declarations name no
// driver type.
import type { PoolClient } from 'pg'
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
