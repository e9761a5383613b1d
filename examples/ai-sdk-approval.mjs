// An AI SDK agent whose tool needs a human's approval, served standalone. The model is the SDK's mock, scripted
// below, so this runs offline with no API key; swap in a real one (e.g. `openai('gpt-4.1')`) and nothing else changes.
//
//   npm run build && node examples/ai-sdk-approval.mjs        (PORT=3000 by default)
//
//   # 1. start a run and watch its events (it pauses at approval.requested)
//   curl -N localhost:3000/v1/agents/files/runs -H 'content-type: application/json' \
//        -d '{"input":"Please delete /tmp/report.txt","stream":true}'
//   # 2. in another terminal: the pending approvals (action "deleteFile", payload: the tool's input)
//   curl localhost:3000/v1/approvals
//   # 3. decide; the run resumes: the tool runs (or is denied) and the model answers
//   curl localhost:3000/v1/approvals/<id> -H 'content-type: application/json' -d '{"approved":true,"comment":"go ahead"}'
//   curl localhost:3000/v1/approvals/<id> -H 'content-type: application/json' -d '{"approved":false,"comment":"keep it"}'
import { simulateReadableStream, stepCountIs, streamText, tool } from 'ai'
import { MockLanguageModelV4 } from 'ai/test'
import { z } from 'zod'
import { createAgentService } from '../dist/index.js'
import { aiSdkAgent, modelMessages } from '../dist/adapters/ai-sdk.js'

const usage = (input, output) => ({
  inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: output, text: output, reasoning: undefined }
})
const say = (text) => [{ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: text }, { type: 'text-end', id: 't' }]

// Asks to delete the file named in the user's message; once shown the tool's result, says how it went.
const model = new MockLanguageModelV4({
  doStream: async ({ prompt }) => {
    const last = prompt.at(-1)
    const result = last.role === 'tool' ? last.content.findLast((part) => part.type === 'tool-result') : undefined
    let chunks
    if (result === undefined) {
      const text = last.content.map((part) => part.text ?? '').join(' ')
      const path = /\/\S+/.exec(text)?.[0] ?? '/tmp/report.txt'
      chunks = [
        ...say(`I will delete ${path} once someone approves. `),
        { type: 'tool-call', toolCallId: `call_${Date.now()}`, toolName: 'deleteFile', input: JSON.stringify({ path }) },
        { type: 'finish', finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage: usage(42, 18) }
      ]
    } else {
      const answer = result.output.type === 'execution-denied'
        ? `I left it alone: ${result.output.reason ?? 'not approved'}.`
        : `Done: ${result.output.value}.`
      chunks = [...say(answer), { type: 'finish', finishReason: { unified: 'stop', raw: 'stop' }, usage: usage(75, 9) }]
    }
    return { stream: simulateReadableStream({ chunks, chunkDelayInMs: 50 }) }
  }
})

const deleteFile = tool({
  description: 'Deletes a file',
  inputSchema: z.object({ path: z.string() }),
  needsApproval: true,
  // a demo: nothing is deleted
  execute: async ({ path }) => `deleted ${path}`
})

const files = aiSdkAgent({
  description: 'Deletes files, with a human approving each deletion',
  approvalTimeoutMs: 10 * 60_000,
  run: (input, ctx) => streamText({
    model,
    system: 'You manage files. When a tool call is not approved, do not retry it.',
    tools: { deleteFile },
    messages: modelMessages(ctx, input),
    abortSignal: ctx.signal,
    stopWhen: stepCountIs(5)
  })
})

const service = createAgentService({ agents: { files }, host: '127.0.0.1' })
const { url } = await service.listen({ port: Number(process.env.PORT ?? 3000) })
console.log(`files agent on ${url}`)
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => { service.close(5_000).then(() => process.exit(0)) })
