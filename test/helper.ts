import type { FastifyInstance } from 'fastify'
import type { Test } from 'tap'
import { requestContextOf } from '../lib/core/request-context.js'
import type { AuditEntry, AuditStore, IdempotencyRecord, IdempotencyStore, StoreSet } from '../lib/stores/types.js'
import { createAgentService } from '../app/service.js'
import type { AgentService } from '../app/service.js'
import type { Agent, AgentServiceOptions } from '../lib/core/types.js'
import { INJECT } from '../lib/service/settings.js'
import { memoryStores } from '../lib/stores/memory.js'
import type { Injected } from '../lib/service/settings.js'
import type { Registrar } from '../lib/testing/check.js'
import { eventually } from '../lib/testing/check.js'

export const echo: Agent = {
  description: 'echo',
  async run (input) {
    return { output: input, usage: { inputTokens: 1, outputTokens: 2 } }
  }
}

/** Options that give one service its own replacements (webhook timings, an A2A loader): never the process's. */
export function injected (replacements: Injected): Partial<AgentServiceOptions> {
  return { [INJECT]: replacements } as Partial<AgentServiceOptions>
}

/** One service per test, closed in teardown (drain deadline 0: nothing a test left running survives). */
export function build (t: Test, options: Partial<AgentServiceOptions> = {}): AgentService {
  const service = createAgentService({ logger: false, agents: { echo }, ...options })
  t.teardown(() => service.close(0))
  return service
}

/**
 * Two services on one set of memory stores, both ready: `a` runs what is posted to it, `b` claims nothing until the
 * test starts its worker (`b.app.agentService.worker.start(b.app.log)`), to take a run over after a drain or a death.
 * `handOver(runId, status)` drains `a` (its resumable runs handed off), starts `b`'s worker and resolves with the
 * run's record once `b` has it in `status`.
 */
export async function handOffPair (t: Test, options: Partial<AgentServiceOptions> = {}) {
  const stores = memoryStores()
  const a = build(t, { ...stores, ...options })
  const b = build(t, { ...stores, ...options })
  await a.app.ready()
  await b.app.ready()
  b.app.agentService.worker.stopClaiming()
  async function handOver (runId: string, status: string): Promise<any> {
    await a.close(50)
    b.app.agentService.worker.start(b.app.log)
    return await eventually(async () => {
      const run = (await b.app.inject({ url: `/v1/runs/${runId}` })).json()
      return run.status === status && run
    })
  }
  return { a, b, stores, handOver }
}

/** A service listening on 127.0.0.1 with a random port, for tests about sockets. */
export async function listen (t: Test, options: Partial<AgentServiceOptions> = {}): Promise<{ service: AgentService, url: string, port: number }> {
  const service = build(t, options)
  const { port, url } = await service.listen({ port: 0, host: '127.0.0.1' })
  return { service, url, port }
}

/** The exported store suites' registrar under tap (lib/testing): each test a subtest of t, given t's subtest. */
export function tapTest (t: Test): Registrar<Test> {
  return async (name, fn) => await t.test(name, fn)
}

export interface ParsedEvent { id: number, event: string, data: any }

/** Parses a Server-Sent Events body into its events (comments dropped). */
export function parseSse (body: string): ParsedEvent[] {
  const events: ParsedEvent[] = []
  for (const block of body.split('\n\n')) {
    const lines = block.split('\n').filter((l) => l !== '' && !l.startsWith(':'))
    if (lines.length === 0) continue
    const field = (name: string): string | undefined => lines.find((l) => l.startsWith(name + ': '))?.slice(name.length + 2)
    // an event without an id (the follower's `error`) leaves the client's Last-Event-ID where it was: NaN here
    const id = field('id')
    events.push({ id: id === undefined ? Number.NaN : Number(id), event: field('event')!, data: JSON.parse(field('data')!) })
  }
  return events
}

/** Keeps the test's process alive while it waits on something that holds no handle (a promise a run resolves). */
export function keepAlive (t: Test): void {
  const timer = setInterval(() => {}, 1_000)
  t.teardown(() => clearInterval(timer))
}

/** Everything an async iterable yields, once it ends. */
export async function collect<T> (iterable: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = []
  for await (const item of iterable) all.push(item)
  return all
}

/** The value below which a share `p` (0..1) of `values` falls. */
export function percentile (values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!
}

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Polls until the check gives a value other than undefined or false (the store suites' own, lib/testing). */
export { eventually }

/** Lets the responses just sent reach their onResponse hooks, then writes the audit entries queued so far. */
export async function settle (service: AgentService): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve))
  await service.app.agentService.audit.flush()
}

/** Every audit entry written so far, most recent first. */
export async function auditEntries (app: FastifyInstance): Promise<AuditEntry[]> {
  await app.agentService.audit.flush()
  return (await app.agentService.settings.auditStore.query({ limit: 500 })).entries
}

/** A stand-in for auth in tests about ownership: the `x-test-principal` header names the principal. */
export function principalFromHeader (app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    const principal = request.headers['x-test-principal']
    if (typeof principal === 'string') requestContextOf(request).principal = principal
    done()
  })
}

/** Closes each distinct store of the sets once (a set hands the same object out twice); for stores a test opened itself. */
export async function closeStores (sets: StoreSet[]): Promise<void> {
  const seen = new Set<object>()
  for (const set of sets) {
    for (const store of [set.auditStore, set.sessionStore, set.approvalStore, set.checkpointStore, set.idempotency?.store, set.runStore, set.webhookStore, set.quotaStore, set.scheduleStore]) {
      if (store === undefined || seen.has(store)) continue
      seen.add(store)
      await store.close?.()
    }
  }
}

/** How many entries one of our audit stores holds: a read of our backends', not of the interface. */
export function auditCount (store: AuditStore | undefined): Promise<number> {
  return (store as unknown as { count: () => Promise<number> }).count()
}

/** The record one of our idempotency stores holds for a key (null: none, or expired): our backends' read, not the interface's. */
export function idempotencyRecord (store: IdempotencyStore, key: string): Promise<IdempotencyRecord | null> {
  return (store as unknown as { get: (key: string) => Promise<IdempotencyRecord | null> }).get(key)
}

/** A promise the test resolves when it chooses: hold an agent at a point of its run. */
export function gate (): { promise: Promise<void>, release: () => void } {
  let release!: () => void
  const promise = new Promise<void>((resolve) => { release = resolve })
  return { promise, release }
}

/** Waits for `promise` unless the run is aborted first. */
export function orAbort (promise: Promise<unknown>, signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return Promise.race([promise, new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }))])
}
