import { AgentRun } from './run.js'
import type { RunAbortCode, RunOptions, RunOutcome } from './run.js'
import type { StatsRecorder } from './host.js'
import type { RunStore } from '../stores/types.js'

/** Every run in flight on this instance: counted, findable by id, abortable together on drain. */
export class RunRegistry {
  #active = new Map<string, AgentRun>()
  // what stops watching each run's record for a cancel made through another instance
  #unwatch = new Map<string, () => void>()
  #stats: StatsRecorder
  #store: RunStore
  #idle: Array<() => void> = []

  constructor (stats: StatsRecorder, store: RunStore) {
    this.#stats = stats
    this.#store = store
  }

  get size (): number {
    return this.#active.size
  }

  has (runId: string): boolean {
    return this.#active.has(runId)
  }

  get (runId: string): AgentRun | undefined {
    return this.#active.get(runId)
  }

  ids (): string[] {
    return [...this.#active.keys()]
  }

  list (): AgentRun[] {
    return [...this.#active.values()]
  }

  /** Runs in flight that any instance could run (background, `continue`): what `runConcurrency` bounds. */
  get detachedCount (): number {
    return this.#detached
  }

  #detached = 0

  /** Creates a run; the caller subscribes with `run.listen()` and then calls `run.start()`. */
  create (options: RunOptions): AgentRun {
    const run = new AgentRun(options, this.#ended)
    this.#active.set(run.runId, run)
    if (options.detachable) this.#detached++
    this.#unwatch.set(run.runId, this.#store.watch(run.runId, (change) => { if (change.kind === 'cancel') run.abort('CANCELLED') }))
    this.#stats.runStarted(run.agentName)
    return run
  }

  // Called by the run as it settles, rather than a reaction to its `done`: no promise and no closure per run.
  readonly #ended = (run: AgentRun, outcome: RunOutcome): void => {
    this.#active.delete(run.runId)
    if (run.options.detachable) this.#detached--
    this.#unwatch.get(run.runId)!()
    this.#unwatch.delete(run.runId)
    // a streamed run's failure reaches its client as an event (counted as an error), a JSON run's as a status
    this.#stats.runEnded(run.agentName, outcome, run.streamed, run.timeToFirstEventMs)
    // (checked first: splice(0) makes an array even when nobody waits, and this runs for every run)
    if (this.#active.size === 0 && this.#idle.length > 0) for (const resolve of this.#idle.splice(0)) resolve()
  }

  abortAll (code: RunAbortCode): void {
    for (const run of this.#active.values()) run.abort(code)
  }

  /** Resolves when no run is in flight. */
  idle (): Promise<void> {
    if (this.#active.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.#idle.push(resolve))
  }
}
