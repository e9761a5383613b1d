// Durable steps (docs/durable-agents.md): `ctx.step(name, fn)` runs `fn` once per run, whatever the attempt. Each
// completed step is an event of the run's log (`step.completed { name, index, output }`), stored before `ctx.step`
// returns; a later attempt of the run (requeued, resumed, replayed) reads them back and returns the journaled output
// without calling `fn`. The log is the journal: no table of its own, readable from any instance sharing the run store.
import { CUSTOM_EVENT_TYPE, MAX_EVENT_TYPE_LENGTH } from './events.js'
import type { ApprovalRecord, StoredEvent } from '../stores/types.js'

export const STEP_COMPLETED = 'step.completed'

export interface JournaledStep {
  name: string
  index: number
  /** the output's JSON text, as the log holds it */
  json: string
  /** read from another run's log (the one a replay replays): written to this run's own when replayed */
  foreign?: boolean
}

/** Where a run's completed steps are read from: its own log before this attempt, or the log of the run it replays. */
export interface JournalSource {
  runId: string
  /** the last seq of that log to read (the events after it are this attempt's own) */
  lastSeq: number
  /** a replay's source is another run: the steps it takes from there are written to this run's own log too */
  foreign?: boolean
}

/** A page of the log, as the run store reads it. */
export type ReadEvents = (runId: string, afterSeq: number, limit: number) => Promise<StoredEvent[]>

const PAGE = 1_000

/**
 * The completed steps of the sources' logs, by index: a step journaled twice (two attempts racing, a replayed step
 * copied into its run's own log) keeps the first found, the first source first.
 */
export async function readJournal (read: ReadEvents, sources: readonly JournalSource[]): Promise<Map<number, JournaledStep>> {
  const steps = new Map<number, JournaledStep>()
  for (const source of sources) {
    await eachEvent(read, source.runId, source.lastSeq, (event) => {
      if (event.type !== STEP_COMPLETED) return
      const { name, index, output } = JSON.parse(event.data) as { name: string, index: number, output: unknown }
      if (steps.has(index)) return
      const step: JournaledStep = { name, index, json: JSON.stringify(output) }
      if (source.foreign === true) step.foreign = true
      steps.set(index, step)
    })
  }
  return steps
}

/** Each event of a run's log up to `lastSeq`, page by page; a log shorter than said (purged) ends the walk. */
async function eachEvent (read: ReadEvents, runId: string, lastSeq: number, visit: (event: StoredEvent) => void): Promise<void> {
  let after = 0
  while (after < lastSeq) {
    const page = await read(runId, after, Math.min(PAGE, lastSeq - after))
    if (page.length === 0) return
    for (const event of page) visit(event)
    after = page.at(-1)!.seq
  }
}

/** What is wrong with a step's name (the rules of a custom event type), or null. */
export function stepNameProblem (name: unknown): string | null {
  if (typeof name !== 'string') return 'the step name must be a string'
  if (name.length > MAX_EVENT_TYPE_LENGTH || !CUSTOM_EVENT_TYPE.test(name)) {
    return `${JSON.stringify(name.slice(0, MAX_EVENT_TYPE_LENGTH))} is not a valid step name (${CUSTOM_EVENT_TYPE.source}, at most ${MAX_EVENT_TYPE_LENGTH} characters)`
  }
  return null
}

/** An approval an earlier attempt of the run asked for, and its decision when the log holds it. */
export interface JournaledApproval {
  approval: ApprovalRecord
  decided?: ApprovalRecord
}

/**
 * The approvals the run's earlier attempts asked for (`approval.requested` in its own log up to `lastSeq`), in the
 * order first asked, each with its `approval.decided` if logged: a later attempt's n-th `ctx.requestApproval` is the
 * n-th of these (docs/durable-agents.md), not a new one to decide again.
 */
export async function readApprovals (read: ReadEvents, runId: string, lastSeq: number): Promise<JournaledApproval[]> {
  const byId = new Map<string, JournaledApproval>()
  await eachEvent(read, runId, lastSeq, (event) => {
    if (event.type !== 'approval.requested' && event.type !== 'approval.decided') return
    const { approval } = JSON.parse(event.data) as { approval: ApprovalRecord }
    if (event.type === 'approval.requested') {
      if (!byId.has(approval.id)) byId.set(approval.id, { approval })
    } else {
      const asked = byId.get(approval.id)
      if (asked !== undefined) asked.decided = approval
    }
  })
  return [...byId.values()]
}
