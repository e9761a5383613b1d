// Two instances of the service sharing one outbox (docs/webhooks.md: "never from more than one instance for the same
// event"): each has its own runs and memory stores; only the webhook store is shared. Run by the test files of the
// shared backends.
import type { Test } from 'tap'
import type { WebhookStore } from '../../lib/stores/types.js'
import { build, echo, eventually, injected, sleep } from '../helper.js'
import { receiver } from '../helpers/webhook-receiver.js'

const RUNS_EACH = 10

export async function deliveredOnceAcrossInstances (t: Test, stores: [WebhookStore, WebhookStore]): Promise<void> {
  // every delivery's first attempt is refused: its retry is claimed by whichever instance polls first
  const refused = new Set<string>()
  const hook = await receiver(t, (delivery) => {
    if (refused.has(delivery.id)) return 204
    refused.add(delivery.id)
    return 500
  })
  const instances = stores.map((webhookStore) => build(t, { agents: { echo }, webhooks: { url: hook.url, secret: hook.secret }, webhookStore, ...injected({ webhookTuning: { pollMs: 20, firstRetryMs: 100 } }) }))
  const runIds = (await Promise.all(instances.flatMap(({ app }) => Array.from({ length: RUNS_EACH }, async (_, i) => {
    const res = await app.inject({ method: 'POST', url: '/v1/agents/echo/runs', payload: { input: i } })
    return res.json().runId as string
  })))).sort()
  const total = runIds.length
  await eventually(() => hook.deliveries.filter((d) => refused.has(d.id)).length >= 2 * total, 20_000, 'every event delivered')
  // an attempt is recorded once its answer is in: every one of them, by whichever instance made it
  const counted = (): number => instances.reduce((sum, { app }) => sum + [...app.agentService.stats.webhookDeliveries().values()].reduce((a, b) => a + b, 0), 0)
  await eventually(async () => counted() >= 2 * total && (await stores[0].attempts({ limit: 500 })).attempts.length >= 2 * total, 20_000, 'every attempt recorded')
  // and nothing more comes
  await sleep(500)

  const counts = hook.counts()
  t.equal(counts.size, total, 'one webhook-id per event')
  t.same([...new Set(counts.values())], [2], 'each id: its refused first attempt, then one delivery; never two instances at once')
  t.ok(hook.deliveries.every((d) => d.verified))
  t.same([...new Set(hook.deliveries.map((d) => d.payload.data.runId))].sort(), runIds)
  const { attempts } = await stores[0].attempts({ limit: 500 })
  t.equal(attempts.length, 2 * total)
  const byId = new Map<string, number[]>()
  for (const attempt of attempts) byId.set(attempt.webhookId, [...byId.get(attempt.webhookId) ?? [], attempt.attempt])
  t.ok([...byId.values()].every((numbers) => numbers.join() === '2,1'), 'attempts 1 and 2 of each, listed on either instance')
  const figures = instances.map(({ app }) => app.agentService.stats.webhookDeliveries())
  t.equal(figures.reduce((sum, f) => sum + (f.get('delivered') ?? 0), 0), total)
  t.equal(figures.reduce((sum, f) => sum + (f.get('retried') ?? 0), 0), total)
  t.comment(`attempts made by each instance: ${figures.map((f) => (f.get('delivered') ?? 0) + (f.get('retried') ?? 0)).join(' and ')}`)
  t.ok(figures.every((f) => (f.get('delivered') ?? 0) + (f.get('retried') ?? 0) > 0), 'both instances delivered')
  for (const { close } of instances) await close(0)
}
