// The store frozen (SIGSTOP on a PostgreSQL of the test's own) for longer than a lease, under instances in processes
// of their own: their renewals go unanswered, they fence themselves off, and when it thaws no run is executed
// by two instances at once (test/fixtures/recovery-instance.ts records what each executes).
import pg from 'pg'
import t from 'tap'
import { eventually, sleep } from '../helper.js'
import { cluster, overlapping, postBackground } from '../helpers/instances.js'
import { privatePostgres } from '../helpers/private-servers.js'

// instances take seconds to start on a busy machine
t.setTimeout(180_000)

t.test('the store frozen longer than a lease: when it thaws, no run is executed by two instances at once', async (t) => {
  const server = await privatePostgres(t)
  if (server === null) return
  const pool = new pg.Pool({ connectionString: server.url, max: 2 })
  pool.on('error', () => {})
  t.teardown(() => pool.end())
  const { executions, start, count } = cluster(t, pool, server.url, { dropSchema: false })
  // The default storeTimeoutMs (5 s) outlasts the freeze: the renewals hang rather than fail, and each instance
  // fences itself off by its own clock, two thirds of a lease after its last answered renewal.
  const lease = 1_000
  const [a, b] = await Promise.all([start('a', lease, 100), start('b', lease, 100)])
  for (let i = 0; i < 10; i++) {
    // the first calls make the tables, and may take longer than the deadline on a busy machine
    await eventually(() => postBackground(i % 2 === 0 ? a : b, 'resumable', { steps: 6, stepMs: 300 }).catch(() => false), 10_000)
  }
  // runs under way when the store goes away (a fixed wait of 400 ms could be too short on a busy machine: nothing
  // running yet, nothing to stop)
  await eventually(() => {
    const rows = executions()
    const over = new Set(rows.filter((row) => row.kind === 'end' || row.kind === 'stop').map((row) => row.run_id))
    return rows.some((row) => row.kind === 'start' && !over.has(row.run_id))
  }, 20_000, 'a run executing')
  await server.freeze()
  await sleep(lease * 3)
  await server.thaw()
  await eventually(async () => await count(['completed', 'failed']) === 10, 20_000)
  const rows = executions()
  const twice = overlapping(rows)
  t.same(twice, [], 'no run executed by two instances at once')
  // what each did, in order, to tell how it happened
  if (twice.length > 0) t.comment(JSON.stringify(rows.filter((row) => twice.includes(row.run_id))))
  // (an agent whose checkpoint fails with the store away fails its run: these do not retry it)
  t.ok(rows.some((row) => row.kind === 'stop'), 'the agents stopped while the store was away')
  const { rows: runs } = await pool.query('SELECT status, attempt, error, count(*)::int AS n FROM recovery.fa_runs GROUP BY 1, 2, 3')
  t.comment(`after the thaw: ${JSON.stringify(runs)}`)
})

