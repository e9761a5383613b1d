// The benches' PostgreSQL schemas, dropped once measured (every bench leaves the database as it found it).
import pg from 'pg'

/** Drops `schemas` (with what they hold) on the server at `url`, over one connection of its own. */
export async function dropSchemas (url, schemas) {
  if (schemas.length === 0) return
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`)
  } finally {
    await client.end()
  }
}
