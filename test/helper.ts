import type { Test } from 'tap'
import { createAgentService } from '../app/service.js'
import type { AgentService } from '../app/service.js'
import type { Agent, AgentServiceOptions } from '../lib/core/types.js'

export const echo: Agent = {
  description: 'echo',
  async run (input) {
    return { output: input, usage: { inputTokens: 1, outputTokens: 2 } }
  }
}

/** One service per test, closed in teardown (drain deadline 0: nothing a test left running survives). */
export function build (t: Test, options: Partial<AgentServiceOptions> = {}): AgentService {
  const service = createAgentService({ logger: false, agents: { echo }, ...options })
  t.teardown(() => service.close(0))
  return service
}

/** A service listening on 127.0.0.1 with a random port, for tests about sockets. */
export async function listen (t: Test, options: Partial<AgentServiceOptions> = {}): Promise<{ service: AgentService, url: string, port: number }> {
  const service = build(t, options)
  const { port, url } = await service.listen({ port: 0, host: '127.0.0.1' })
  return { service, url, port }
}

export interface ParsedEvent { id: number, event: string, data: any }

/** Parses a Server-Sent Events body into its events (comments dropped). */
export function parseSse (body: string): ParsedEvent[] {
  const events: ParsedEvent[] = []
  for (const block of body.split('\n\n')) {
    const lines = block.split('\n').filter((l) => l !== '' && !l.startsWith(':'))
    if (lines.length === 0) continue
    const field = (name: string): string => lines.find((l) => l.startsWith(name + ': '))!.slice(name.length + 2)
    events.push({ id: Number(field('id')), event: field('event'), data: JSON.parse(field('data')) })
  }
  return events
}

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Polls until `predicate` holds (for state another process or socket changes), failing after `ms`. */
export async function waitFor (predicate: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`)
    await sleep(5)
  }
}
