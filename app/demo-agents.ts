import { setTimeout } from 'node:timers/promises'
import { defineAgent } from '../lib/runs/define-agent.js'
import type { Agent, RunContext } from '../lib/core/types.js'

function sleep (ms: number, signal: AbortSignal): Promise<void> {
  return setTimeout(ms, undefined, { signal })
}

function words (input: unknown): string {
  if (typeof input === 'string') return input
  if (typeof (input as { prompt?: unknown } | null)?.prompt === 'string') return (input as { prompt: string }).prompt
  return JSON.stringify(input)
}

/** Answers with its input. */
export const echo = defineAgent({
  description: 'Answers with its input',
  metadata: { demo: true },
  async run (input: unknown) {
    const text = words(input)
    return { output: input, usage: { inputTokens: text.length, outputTokens: text.length } }
  }
})

/** Streams a short story about its input, one word per delta. */
export const storyteller = defineAgent({
  description: 'Streams a short story, one word at a time',
  metadata: { demo: true, streams: true },
  async * run (input: unknown, ctx: RunContext) {
    const subject = words(input) || 'a quiet server'
    const story = `Once upon a time there was ${subject}. It answered every request, streamed every word, and drained gracefully at the end.`
    let count = 0
    for (const word of story.split(' ')) {
      await sleep(20, ctx.signal)
      count++
      yield (count === 1 ? '' : ' ') + word
    }
    return { output: story, usage: { inputTokens: subject.length, outputTokens: count } }
  }
})

/** Asks a human before acting: start it over SSE, approve it on /v1/approvals/:id. */
export const approver = defineAgent({
  description: 'Asks for approval before it acts',
  metadata: { demo: true, humanInTheLoop: true },
  async run (input: unknown, ctx: RunContext) {
    const action = typeof (input as { action?: unknown } | null)?.action === 'string' ? (input as { action: string }).action : 'deploy'
    ctx.emit('message.delta', { text: `Requesting approval to ${action}…` })
    const decision = await ctx.requestApproval({ action, payload: input, reason: 'The demo approver asks before it acts', timeoutMs: 10 * 60_000 })
    const output = decision.approved
      ? `Approved by ${decision.decidedBy ?? 'someone'}: did ${action}.`
      : `Not done (${decision.status}): ${action}.`
    return { output, finishReason: decision.approved ? 'stop' : 'rejected' }
  }
})

/** Sleeps (input.ms, default 5 s, at most 60 s) and honours its signal. */
export const slow = defineAgent({
  description: 'Sleeps for input.ms (default 5000), honouring its signal',
  metadata: { demo: true },
  async run (input: unknown, ctx: RunContext) {
    const requested = (input as { ms?: unknown } | null)?.ms
    const ms = typeof requested === 'number' && requested >= 0 ? Math.min(requested, 60_000) : 5_000
    await sleep(ms, ctx.signal)
    return { output: { sleptMs: ms } }
  }
})

export const demoAgents: Record<string, Agent> = { echo, storyteller, approver, slow }
