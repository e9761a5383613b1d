// A scripted agent for the front-end protocol tests (chat, AG-UI, A2A, the browser): what it does is chosen by
// its input, and it records what it was given (input, history, session, principal) so that a test can check
// what the server, not the client, handed it.
import type { Agent, RunContext } from '../../lib/core/types.js'
import type { Message } from '../../lib/stores/types.js'

export interface Seen {
  input: unknown
  history: Message[]
  sessionId: string | null
  principal: string
  runId: string
}

export interface Scripted {
  agent: Agent
  seen: Seen[]
  /** Lets every run waiting in `wait` go on. */
  release: () => void
}

/** Resolves when released, rejects when the run is aborted. */
function waitFor (released: Promise<void>, ctx: RunContext): Promise<void> {
  return Promise.race([released, new Promise<void>((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }))])
}

/**
 * Inputs: `full` (reasoning, text, a custom event, a streamed tool call with its result, a failed tool call, a
 * checkpoint, more text), `mail` (asks approval to send a mail, then says what became of it; `mail-wait` then waits
 * until released; `mail-twice` asks twice, one after the other), `wait` (streams, then
 * waits until released), `fail` (streams, then throws), `checkpoint-fail` (streams, checkpoints, then throws: a run
 * to resume with `resumeRunId`; `checkpoint-wait-fail` waits until released before it throws), anything else is echoed.
 */
export function scripted (): Scripted {
  const seen: Seen[] = []
  let release!: () => void
  let released = new Promise<void>((resolve) => { release = resolve })
  const agent: Agent = {
    description: 'A scripted helper',
    async * run (input, ctx) {
      seen.push({ input, history: structuredClone(ctx.history), sessionId: ctx.sessionId, principal: ctx.principal, runId: ctx.runId })
      switch (input) {
        case 'full':
          yield { type: 'reasoning.delta', data: { text: 'Let me ' } }
          yield { type: 'reasoning.delta', data: { text: 'think.' } }
          yield 'Hello'
          yield ', world'
          yield { type: 'progress.step', data: { n: 1 } }
          yield { type: 'tool.call.delta', data: { toolCallId: 'call-1', name: 'lookup', delta: '{"q":' } }
          yield { type: 'tool.call.delta', data: { toolCallId: 'call-1', name: 'lookup', delta: '"x"}' } }
          yield { type: 'tool.call', data: { toolCallId: 'call-1', name: 'lookup', input: { q: 'x' } } }
          yield { type: 'tool.result', data: { toolCallId: 'call-1', name: 'lookup', output: { hits: 2 }, isError: false } }
          yield { type: 'tool.call', data: { toolCallId: 'call-2', name: 'fetchPage', input: { url: 'https://example.com' } } }
          yield { type: 'tool.result', data: { toolCallId: 'call-2', name: 'fetchPage', output: 'timeout', isError: true } }
          await ctx.checkpoint({ step: 'half' })
          yield 'Done.'
          return { output: 'Hello, world. Done.', usage: { inputTokens: 3, outputTokens: 5 } }
        case 'mail':
        case 'mail-wait': {
          yield { type: 'tool.call', data: { toolCallId: 'call-9', name: 'draft', input: { to: 'bob' } } }
          yield 'Sending.'
          const decision = await ctx.requestApproval({ action: 'sendEmail', payload: { to: 'bob@example.com' }, reason: 'Sends mail on your behalf' })
          yield { type: 'tool.result', data: { toolCallId: 'call-9', name: 'draft', output: 'drafted', isError: false } }
          yield decision.approved ? ' Sent.' : ' Not sent.'
          if (input === 'mail-wait') await waitFor(released, ctx)
          return { output: decision.approved ? 'sent' : 'not sent', usage: { inputTokens: 1, outputTokens: 1 } }
        }
        case 'mail-twice': {
          let sent = 0
          for (const to of ['bob@example.com', 'carol@example.com']) {
            const decision = await ctx.requestApproval({ action: 'sendEmail', payload: { to } })
            if (decision.approved) sent++
          }
          yield `${sent} sent`
          return { output: sent === 2 ? 'sent twice' : `sent ${sent}` }
        }
        case 'wait':
          yield 'tick'
          await waitFor(released, ctx)
          yield ' tock'
          return { output: 'tick tock' }
        case 'fail':
          yield 'Work'
          throw new Error('boom')
        case 'checkpoint-fail':
        case 'checkpoint-wait-fail':
          yield 'Work'
          await ctx.checkpoint({ step: 'worked' })
          if (input === 'checkpoint-wait-fail') await waitFor(released, ctx)
          throw new Error('boom')
        default:
          yield `echo: ${String(input)}`
          return { output: `echo: ${String(input)}` }
      }
    }
  }
  return {
    agent,
    seen,
    release: () => {
      release()
      released = new Promise<void>((resolve) => { release = resolve })
    }
  }
}
