// Two service instances whose quota counts are in one shared store (PostgreSQL, Redis): one principal's quota holds
// across both, another principal's is its own, an ended run frees its slot, tokens add up across instances.
import type { Test } from 'tap'
import type { Agent } from '../../lib/core/types.js'
import type { StoreSet } from '../../lib/stores/types.js'
import { build, eventually } from '../helper.js'

const KEYS = { alice: 'alice-key-0123456789', bob: 'bob-key-0123456789' }

export async function quotasAcrossInstances (t: Test, sets: [StoreSet, StoreSet]): Promise<void> {
  let release!: () => void
  let gate = new Promise<void>((resolve) => { release = resolve })
  let started = 0
  const held: Agent = {
    async run (input) {
      started++
      if (input !== 'quick') await gate
      return { output: input, usage: { inputTokens: 1, outputTokens: 1 } }
    }
  }
  const open = (): void => {
    release()
    gate = new Promise<void>((resolve) => { release = resolve })
  }
  const options = { agents: { held }, auth: { strategy: 'api-key' as const, keys: [KEYS.alice, KEYS.bob] }, quotas: { maxConcurrentRuns: 2, tokens: { limit: 7, intervalMs: 3_600_000 } } }
  const [a, b] = sets.map((set) => build(t, { ...set, ...options })) as [ReturnType<typeof build>, ReturnType<typeof build>]
  await Promise.all([a.app.ready(), b.app.ready()])
  const post = (app: typeof a.app, who: keyof typeof KEYS, payload: Record<string, unknown>) =>
    app.inject({ method: 'POST', url: '/v1/agents/held/runs', headers: { 'x-api-key': KEYS[who] }, payload })

  const first = await post(a.app, 'alice', { input: 1, background: true })
  t.equal(first.statusCode, 202)
  const second = post(b.app, 'alice', { input: 2 })
  await eventually(() => started === 2)
  const refused = await post(b.app, 'alice', { input: 3 })
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.match(refused.json(), { statusCode: 429, code: 'QUOTA_EXCEEDED', requestId: String, traceId: String })
  t.equal((await post(a.app, 'alice', { input: 3, background: true })).statusCode, 429, 'on either instance')
  t.equal((await post(a.app, 'bob', { input: 'quick' })).statusCode, 200, 'bob is not counted with alice')
  open()
  t.equal((await second).statusCode, 200)
  await eventually(async () => (await a.app.inject({ url: `/v1/runs/${first.json().runId as string}`, headers: { 'x-api-key': KEYS.alice } })).json().status === 'completed')
  // 4 of alice's 7 tokens used, on both instances
  t.equal((await post(b.app, 'alice', { input: 'quick' })).statusCode, 200, 'the ended runs gave their slots back')
  t.equal((await post(a.app, 'alice', { input: 'quick' })).statusCode, 200)
  const spent = await post(b.app, 'alice', { input: 'quick' })
  t.equal(spent.statusCode, 429, '8 tokens of 7: the window is spent, on both instances')
  t.ok(Number(spent.headers['retry-after']) > 1, 'retry-after: the end of the hour\'s window')
}
