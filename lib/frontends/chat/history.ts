// A chat's history for a page that reloads (GET /agents/:name/chat/:id/messages, docs/front-ends.md): each run of the
// chat's session, oldest first, as the user's message and the assistant message the chat stream showed for it.
import type { AgentServiceCore } from '../../service/service.js'
import { assistantMessage, keptAssistantMessage, userMessage } from './ui-messages.js'
import { ownedSession } from '../../runs/sessions.js'
import type { RunRecord } from '../../stores/types.js'
import type { UiMessage } from '../../../schemas/chat.js'
import { storedEvents } from '../follow.js'

const RUNS_PAGE = 100

/** The user message of a run: the message of its own (the run's id), told apart from the answer's. */
function userMessageId (runId: string): string {
  return `${runId}-user`
}

/**
 * The chat's messages: `[]` for a chat that has none yet. A run still in progress gives only its user message: the
 * resumed stream (`useChat({ resume: true })`) brings its answer, whole, from its first event.
 */
export async function chatHistory (service: AgentServiceCore, sessionId: string, principal: string): Promise<UiMessage[]> {
  const { sessionStore, runStore } = service.settings
  const session = await ownedSession(sessionStore, sessionId, principal)
  if (session === null) return []
  const runs: RunRecord[] = []
  let cursor: string | undefined
  do {
    const page = await runStore.listBySession(sessionId, cursor === undefined ? { limit: RUNS_PAGE } : { limit: RUNS_PAGE, cursor })
    runs.push(...page.runs)
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  runs.reverse()
  const logged = new Set(runs.map((run) => run.runId))
  const messages: UiMessage[] = []
  const inputs = new Map<string, unknown>()
  // the turns whose logs are gone (past runRetentionMs) came before those still kept: a chat's runs follow each other
  for (const turn of session.messages) {
    if (turn.role === 'user') inputs.set(turn.runId, turn.content)
    if (logged.has(turn.runId)) continue
    messages.push(turn.role === 'user' ? userMessage(userMessageId(turn.runId), turn.content) : keptAssistantMessage(turn.runId, turn.content))
  }
  for (const run of runs) {
    const input = inputs.has(run.runId) ? inputs.get(run.runId) : (await runStore.spec(run.runId))?.input
    messages.push(userMessage(userMessageId(run.runId), input ?? ''))
    if (run.status === 'queued' || run.status === 'running') continue
    messages.push(assistantMessage(run.runId, await storedEvents(runStore, run.runId)))
  }
  return messages
}
