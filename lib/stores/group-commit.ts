// Group commit for the run stores' log writes (docs/stores.md, "Group commit"): calls gathered while one write is in
// flight go in the next one, together, so that runs streaming one event per tick cost one write per round trip of
// the store rather than one per event.

/** One call waiting for its group's write. */
interface Waiting<I, R> {
  item: I
  resolve: (value: R) => void
  reject: (error: unknown) => void
}

export interface GroupCommitOptions<I, R> {
  /**
   * Writes a group in one write; resolves with each item's result, in order (an Error there is that item's refusal,
   * rejected to its caller alone). A rejection is the whole group's: every item's caller gets it.
   */
  write: (items: readonly I[]) => Promise<ReadonlyArray<R | Error>> | ReadonlyArray<R | Error>
  /** the run an item writes to: a group holds at most one item per key (the next waits for the next group, in order) */
  key: (item: I) => string
  /** what an item weighs, against `maxWeight` per group (default 1 each) */
  weigh?: (item: I) => number
  /** the most a group weighs (default 256): the rest goes in the next */
  maxWeight?: number
  /**
   * `'tick'`: the first call waits for the end of the event loop's turn (setImmediate), for a store whose write is
   * synchronous and so never in flight; default `'microtask'`: it goes at once, and what comes meanwhile gathers.
   */
  start?: 'microtask' | 'tick'
  /**
   * How long a group gathers before it is written (default 0: only what came while the last one was in flight),
   * unless an urgent call (a run's end) is waiting: a store whose every write costs much whatever it holds (SQLite
   * writes its pages to its log at each commit) is written less often, with more in each write.
   */
  windowMs?: number
}

/**
 * One write at a time; the calls that come while it is in flight gather for the next one, which goes as soon as it
 * is done. Each call resolves (or rejects) with its own item's result.
 */
export class GroupCommit<I, R> {
  readonly #options: GroupCommitOptions<I, R>
  readonly #maxWeight: number
  #queue: Array<Waiting<I, R>> = []
  #busy = false
  /** an urgent call waits: the window ends now */
  #urgent = false
  /** ends the window's wait at once */
  #wake: (() => void) | null = null
  /** groups written: tests and the bench count writes by it */
  writes = 0

  constructor (options: GroupCommitOptions<I, R>) {
    this.#options = options
    this.#maxWeight = options.maxWeight ?? 256
  }

  /**
   * Queues an item; resolves with its result once its group is written. `urgent`: the window does not wait for more
   * (a group that starts at once still takes what the rest of this turn of the event loop adds).
   */
  add (item: I, urgent = false): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject })
      if (urgent) {
        this.#urgent = true
        this.#wake?.()
      }
      if (this.#busy) return
      this.#busy = true
      if (this.#options.start === 'tick') setImmediate(() => { void this.#drain() })
      else queueMicrotask(() => { void this.#drain() })
    })
  }

  /** Writes groups until nothing waits. */
  async #drain (): Promise<void> {
    while (this.#queue.length > 0) {
      const windowMs = this.#options.windowMs ?? 0
      if (windowMs > 0 && !this.#urgent) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, windowMs)
          this.#wake = () => {
            clearTimeout(timer)
            resolve()
          }
        })
        this.#wake = null
      }
      // Urgent, with no window: what the rest of this turn adds goes in too. The callers a group's answer wakes call
      // again within the turn (durable steps, docs/stores.md "Group commit"): one write for them all, and no timer.
      if (this.#urgent && this.#options.start !== 'tick') await new Promise<void>((resolve) => setImmediate(resolve))
      this.#urgent = false
      const group = this.#take()
      this.writes++
      try {
        const results = await this.#options.write(group.map((waiting) => waiting.item))
        for (let i = 0; i < group.length; i++) {
          const result = results[i] as R | Error
          if (result instanceof Error) group[i]!.reject(result)
          else group[i]!.resolve(result)
        }
      } catch (error) {
        for (const waiting of group) waiting.reject(error)
      }
    }
    this.#busy = false
  }

  /** The next group: in order, one item per key, up to the weight (one item at least). */
  #take (): Array<Waiting<I, R>> {
    const { key, weigh } = this.#options
    const group: Array<Waiting<I, R>> = []
    const rest: Array<Waiting<I, R>> = []
    const keys = new Set<string>()
    let weight = 0
    for (const waiting of this.#queue) {
      const k = key(waiting.item)
      const w = weigh === undefined ? 1 : weigh(waiting.item)
      if (keys.has(k) || (group.length > 0 && weight + w > this.#maxWeight)) {
        // later items of the same run stay behind it, in order
        keys.add(k)
        rest.push(waiting)
        continue
      }
      keys.add(k)
      weight += w
      group.push(waiting)
    }
    this.#queue = rest
    return group
  }
}
