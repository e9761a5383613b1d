// The stream the AI SDK's mock model answers with in the bench (bench/lib/ai-sdk-agent.js for ours,
// bench/peers/model.js for the peers): no imports of its own, so that each loads it beside its own `ai`.

const tick = () => new Promise((resolve) => setImmediate(resolve))

export const finishReason = { unified: 'stop', raw: 'stop' }

export const usage = (output) => ({ inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: output, text: output } })

/** Like the bench's ticker agent: `deltas` text deltas of 'token ', one per event-loop tick. */
export function tickingStream (deltas) {
  let sent = -1
  return new ReadableStream({
    async pull (controller) {
      if (sent === -1) controller.enqueue({ type: 'text-start', id: 't' })
      else if (sent < deltas) {
        await tick()
        controller.enqueue({ type: 'text-delta', id: 't', delta: 'token ' })
      } else {
        controller.enqueue({ type: 'text-end', id: 't' })
        controller.enqueue({ type: 'finish', finishReason, usage: usage(deltas) })
        controller.close()
      }
      sent++
    }
  })
}
