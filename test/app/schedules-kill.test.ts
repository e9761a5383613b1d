// Schedules (docs/schedules.md): an instance killed with SIGKILL right after it claimed a due time, before it stored the
// run. Its claim lapses, and the next instance to wake for it stores the run under the id the claim named: the run
// still starts, once.
import { spawn } from 'node:child_process'
import t from 'tap'
import type { Agent } from '../../lib/core/types.js'
import { postgresStores } from '../../lib/stores/postgres.js'
import { build, eventually } from '../helper.js'
import { pgChildEnv, pgUrl, requirePg, withPgSchema } from '../helpers/services.js'

const FIXTURE = new URL('../fixtures/schedule-instance.js', import.meta.url)

if (await requirePg(t)) {
  t.test('kill -9 between a claim and its run: another instance starts the run, once', async (t) => {
    const schema = withPgSchema(t)
    const child = spawn(process.execPath, [FIXTURE.pathname], { env: { ...process.env, PG_URL: pgUrl(), SCHEMA: schema, ...pgChildEnv(schema) }, stdio: ['pipe', 'pipe', 'inherit'] })
    const exited = new Promise((resolve) => child.once('exit', resolve))
    t.teardown(async () => {
      child.kill('SIGKILL')
      await exited
    })
    const lines: Array<Record<string, unknown>> = []
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      let end: number
      while ((end = out.indexOf('\n')) !== -1) {
        lines.push(JSON.parse(out.slice(0, end)) as Record<string, unknown>)
        out = out.slice(end + 1)
      }
    })
    const { port } = await eventually(() => lines.find((line) => 'port' in line) as { port: number } | undefined, 60_000, 'the instance listening')

    const at = new Date(Date.now() + 1_500).toISOString()
    const created = await fetch(`http://127.0.0.1:${port}/v1/schedules`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'tick', input: { n: 1 }, at })
    })
    t.equal(created.status, 201)
    const { id } = await created.json() as { id: string }
    const { claimed } = await eventually(() => lines.find((line) => 'claimed' in line) as { claimed: { scheduleId: string, runId: string } } | undefined, 5_000, 'the claim')
    t.equal(claimed.scheduleId, id)
    child.kill('SIGKILL')
    await exited

    // killed between the claim and the run: no run stored yet
    const executions: string[] = []
    const tick: Agent = { async run (_input, ctx) { executions.push(`${ctx.runId} ${ctx.schedule!.scheduledFor}`); return { output: 'recovered' } } }
    const stores = postgresStores(pgUrl(), { schema })
    t.equal(await stores.runStore.get(claimed.runId), null, 'the claimed run was never stored')
    const service = build(t, { ...stores, agents: { tick }, runLeaseMs: 1_000 })
    await service.app.ready()
    const record = await eventually(async () => {
      const run = await service.app.agentService.settings.runStore.get(claimed.runId)
      return run?.status === 'completed' && run
    }, 10_000, 'the run started and ended on the instance that took the claim over')
    t.match(record, { runId: claimed.runId, agent: 'tick', status: 'completed' })
    t.same(executions, [`${claimed.runId} ${at}`], 'run once, for its due time')
    const schedule = (await service.app.inject({ url: `/v1/schedules/${id}` })).json()
    t.match(schedule, { lastRunId: claimed.runId, enabled: false, nextRunAt: null }, 'settled: the one-shot schedule disabled itself')
    t.same((await service.app.inject({ url: `/v1/schedules/${id}/runs` })).json().runs.map((run: { runId: string }) => run.runId), [claimed.runId])
  })
}
