// Going back (docs/durable-agents.md, "Rewind"): a session forked before or after one of its runs, and an ended run
// replayed from its checkpoint in a fork of its session taken before it, its completed steps given back by the
// journal. The source is never changed: both make new things (a session, a run).
import { ForkPointNotFoundError, InputValidationError, NoCheckpointError, RunInProgressError, RunRecordNotFoundError, SessionNotFoundError } from '../core/errors.js'
import { randomId } from '../core/ids.js'
import { MAX_RUN_LIST_LIMIT } from '../stores/run-policy.js'
import type { Message, RunReplay, RunStore, SessionStore, SessionWithMessages } from '../stores/types.js'
import type { RunHost } from './host.js'
import type { ForkedFrom, ForkedSession } from '../../schemas/sessions.js'
import { ownedSession } from './sessions.js'

export interface ForkPoint {
  beforeRunId?: string | undefined
  afterRunId?: string | undefined
}


interface ForkStores {
  readonly sessionStore: SessionStore
  readonly runStore: RunStore
  readonly sessionTtlMs: number
}

/** The source's messages up to the fork point; a run that is not one of the session's is a 400 naming the field. */
async function messagesUpTo (stores: ForkStores, source: SessionWithMessages, point: ForkPoint): Promise<Message[]> {
  const field = point.beforeRunId !== undefined ? 'beforeRunId' : 'afterRunId'
  const runId = point.beforeRunId ?? point.afterRunId
  const { messages } = source
  if (runId === undefined) return messages
  const first = messages.findIndex((message) => message.runId === runId)
  if (first >= 0) return messages.slice(0, field === 'beforeRunId' ? first : messages.findLastIndex((message) => message.runId === runId) + 1)
  // A run that left no turn (it failed, was cancelled, or goes on): the turns that completed before it began, which are
  // those of the session's runs created before it (one run of a session at a time). Told by the runs' order, not by
  // their times: a turn and the next run's creation can fall in one millisecond.
  const record = await stores.runStore.get(runId)
  if (record === null || record.sessionId !== source.id) throw new ForkPointNotFoundError(field, runId, source.id)
  const later = new Set<string>()
  let cursor: string | undefined
  for (;;) {
    // most recent first: the runs listed before it came after it
    const page = await stores.runStore.listBySession(source.id, { limit: MAX_RUN_LIST_LIMIT, cursor })
    const at = page.runs.findIndex((run) => run.runId === runId)
    for (const run of at < 0 ? page.runs : page.runs.slice(0, at)) later.add(run.runId)
    if (at >= 0) return messages.filter((message) => !later.has(message.runId))
    /* c8 ignore next: the run was purged between the two reads */
    if (page.nextCursor === null) throw new ForkPointNotFoundError(field, runId, source.id)
    cursor = page.nextCursor
  }
}

/**
 * A new session of the same principal and agent whose messages are the source's up to the fork point, copied turn by
 * turn; where it came from is in `forkedFrom`, kept in its metadata.
 */
export async function forkSession (stores: ForkStores, source: SessionWithMessages, point: ForkPoint, metadata: Record<string, unknown> = {}): Promise<ForkedSession> {
  if (point.beforeRunId !== undefined && point.afterRunId !== undefined) throw new InputValidationError('body must have at most one of beforeRunId and afterRunId')
  const messages = await messagesUpTo(stores, source, point)
  const runId = point.beforeRunId ?? point.afterRunId
  const forkedFrom: ForkedFrom = runId === undefined ? { sessionId: source.id } : { sessionId: source.id, runId }
  const { sessionStore, sessionTtlMs } = stores
  const session = await sessionStore.create({ id: randomId(), agent: source.agent, principal: source.principal, metadata: { ...metadata, forkedFrom } }, sessionTtlMs)
  // a turn at a time, as the runs appended them: the fork counts the same turns
  let turns = 0
  for (let from = 0; from < messages.length;) {
    let to = from + 1
    while (to < messages.length && messages[to]!.runId === messages[from]!.runId) to++
    await sessionStore.appendTurn(session.id, messages.slice(from, to), sessionTtlMs)
    turns++
    from = to
  }
  return { ...session, turns, messages, forkedFrom }
}

/** A replay's new run, resolved: its session (a fork taken before the replayed run), its input and where it starts. */
export interface ResolvedReplay {
  agent: string
  sessionId: string
  input: unknown
  replay: RunReplay
}

/**
 * Checks a replay of `runId` for `principal` and forks its session: ownership first (404 RUN_NOT_FOUND), then the
 * state (409 RUN_IN_PROGRESS for a run not ended, NO_CHECKPOINT for one that kept none: a completed run, or one that
 * never saved one). `state` replaces the checkpoint's state; `input` the run's own.
 */
export async function resolveReplay (service: RunHost, runId: string, principal: string, given: { input?: unknown, state?: unknown }): Promise<ResolvedReplay> {
  const { settings } = service
  const record = await settings.runStore.get(runId)
  if (record === null || record.principal !== principal) throw new RunRecordNotFoundError(runId)
  if (record.status === 'queued' || record.status === 'running' || service.runs.has(runId)) throw new RunInProgressError(runId)
  const checkpoint = record.status === 'completed' ? null : await settings.checkpointStore.load(runId)
  if (checkpoint === null) throw new NoCheckpointError(runId)
  const source = await ownedSession(settings.sessionStore, checkpoint.sessionId, principal)
  if (source === null) throw new SessionNotFoundError(checkpoint.sessionId)
  /* c8 ignore next: a run's spec goes only with the run itself (purge), which was read just above */
  const input = 'input' in given ? given.input : (await settings.runStore.spec(runId))?.input ?? null
  // checked before the fork is made: a bad input leaves nothing behind but its 400
  await settings.agentSchemas.get(record.agent)?.validate?.(input, 'body/input')
  const fork = await forkSession(settings, source, { beforeRunId: runId })
  const state = 'state' in given ? given.state : checkpoint.state
  return { agent: record.agent, sessionId: fork.id, input, replay: { runId, lastSeq: record.lastSeq, step: checkpoint.step, state } }
}
