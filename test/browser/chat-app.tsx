// The page of the browser test: what a user of fastify-agents writes with @ai-sdk/react, and nothing more. Bundled
// by esbuild when the test runs (not compiled by tsc: it is a browser entry). The chat id, the agent and the API key
// come from the page's URL; the DOM carries data-* attributes for the test to read. A reload gets the chat back
// whole: its messages from GET …/chat/:id/messages, then the run in progress (resume: true).
import { useState } from 'react'
import { createRoot } from 'react-dom/client'
import { useChat } from '@ai-sdk/react'
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai'
import type { UIMessage } from 'ai'

const params = new URLSearchParams(location.search)
const chatId = params.get('chat') ?? 'browser-chat'
const agent = params.get('agent') ?? 'helper'
const apiKey = params.get('key') ?? ''

type Part = UIMessage['parts'][number]

function PartView ({ part, onApprove }: { part: Part, onApprove: (id: string, approved: boolean) => void }) {
  if (part.type === 'text') return <p data-part='text'>{part.text}</p>
  if (part.type === 'reasoning') return <p data-part='reasoning'>{part.text}</p>
  if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) {
    const tool = part as Part & { toolCallId: string, state: string, input?: unknown, output?: unknown, approval?: { id: string }, toolName?: string }
    const name = tool.toolName ?? part.type.slice('tool-'.length)
    return (
      <div data-part='tool' data-tool={name} data-state={tool.state}>
        <code>{name}({JSON.stringify(tool.input)})</code>
        {tool.state === 'output-available' && <span data-output>{JSON.stringify(tool.output)}</span>}
        {tool.state === 'approval-requested' && tool.approval !== undefined && (
          <span>
            <button data-approve onClick={() => onApprove(tool.approval!.id, true)}>Approve</button>
            <button data-deny onClick={() => onApprove(tool.approval!.id, false)}>Deny</button>
          </span>
        )}
      </div>
    )
  }
  return null
}

const headers = { 'x-api-key': apiKey }
const history = await fetch(`/v1/agents/${agent}/chat/${encodeURIComponent(chatId)}/messages`, { headers })
const initial = await history.json() as UIMessage[]

function App () {
  const [input, setInput] = useState('')
  const { messages, sendMessage, status, error, addToolApprovalResponse } = useChat({
    id: chatId,
    messages: initial,
    transport: new DefaultChatTransport({ api: `/v1/agents/${agent}/chat`, headers }),
    // after a reload: the run in progress (if any) is streamed again from its start
    resume: true,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses
  })
  return (
    <main data-status={status}>
      {messages.map((message) => (
        <section key={message.id} data-role={message.role} data-id={message.id}>
          {message.parts.map((part, i) => (
            <PartView key={i} part={part} onApprove={(id, approved) => { void addToolApprovalResponse({ id, approved }) }} />
          ))}
        </section>
      ))}
      {error !== undefined && <p data-error>{error.message}</p>}
      <form onSubmit={(event) => {
        event.preventDefault()
        void sendMessage({ text: input })
        setInput('')
      }}>
        <input name='message' value={input} onChange={(event) => setInput(event.target.value)} />
        <button type='submit'>Send</button>
      </form>
    </main>
  )
}

createRoot(document.getElementById('root')!).render(<App />)
