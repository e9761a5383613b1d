import pg from 'pg'
import t from 'tap'
import { pgArray, pgColumns } from '../../lib/stores/postgres-arrays.js'
import { pgUrl, requirePg } from '../helpers/services.js'

// The group statements' arrays in PostgreSQL's binary format: what the server reads back must be what a text array
// parameter gave, value for value (the stores' conformance suites cover them in use; these, every edge of the format).
if (await requirePg(t)) {
  const client = new pg.Client({ connectionString: pgUrl() })
  await client.connect()
  t.teardown(() => client.end())

  async function back (type: string, array: Buffer): Promise<unknown[]> {
    const { rows } = await client.query<{ v: unknown }>(`SELECT v FROM unnest($1::${type}[]) WITH ORDINALITY AS a (v, n) ORDER BY n`, [array])
    return rows.map((row) => row.v)
  }

  t.test('texts: quotes, backslashes, braces, commas, multi-byte, empty, long and NULL, as sent', async (t) => {
    const texts = ['a', null, 'é"\\{},x NULL', '', '🦊 漢字', 'x'.repeat(100_000), undefined]
    t.same(await back('text', pgArray('text', texts)), ['a', null, 'é"\\{},x NULL', '', '🦊 漢字', 'x'.repeat(100_000), null])
  })

  t.test('a lone surrogate arrives as U+FFFD, as pg writes a text parameter; a NUL is refused by the server', async (t) => {
    t.same(await back('text', pgArray('text', ['\ud800z'])), ['\ufffdz'])
    await t.rejects(back('text', pgArray('text', ['a\u0000b'])), /invalid byte sequence/)
  })

  t.test('integers, booleans and timestamps (before 1970 too), with NULLs', async (t) => {
    t.same(await back('integer', pgArray('int4', [0, -1, 2_147_483_647, -2_147_483_648, null])), [0, -1, 2_147_483_647, -2_147_483_648, null])
    t.same(await back('boolean', pgArray('bool', [true, false, null])), [true, false, null])
    const dates = await back('timestamptz', pgArray('timestamptz', [new Date('2026-11-27T10:00:00.123Z'), 0, -1, null]))
    t.same(dates.map((date) => date === null ? null : (date as Date).toISOString()),
      ['2026-11-27T10:00:00.123Z', '1970-01-01T00:00:00.000Z', '1969-12-31T23:59:59.999Z', null])
  })

  t.test('an empty array is one of no element', async (t) => {
    for (const type of ['text', 'int4', 'bool', 'timestamptz'] as const) {
      const { rows: [row] } = await client.query<{ n: number }>(`SELECT cardinality($1::${type === 'int4' ? 'integer' : type === 'bool' ? 'boolean' : type}[]) AS n`, [pgArray(type, [])])
      t.equal(row!.n, 0, type)
    }
  })

  t.test('pgColumns: each column of the rows, of its type', async (t) => {
    const [ids, counts] = pgColumns(['text', 'int4'], [['a', 1], ['b', 2]])
    t.same(await back('text', ids!), ['a', 'b'])
    t.same(await back('integer', counts!), [1, 2])
  })
}
