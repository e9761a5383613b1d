// The in-process schedules (docs/schedules.md): one instance's only. Everything happens in one tick of the event
// loop, so a conditional write is atomic without a lock; the watchers are told on the next tick.
import { EventEmitter } from 'node:events'
import { checkLimit, decodeKeyCursor, encodeKeyCursor } from './common.js'
import type { ScheduleListQuery, ScheduleRow, ScheduleRowPage, ScheduleState, ScheduleStore, ScheduleWrite } from './types.js'

export const MAX_SCHEDULE_LIST_LIMIT = 500

/** Newest first, then by id: the order of every backend's listing. */
export function newerFirst (a: { createdAt: number, id: string }, b: { createdAt: number, id: string }): number {
  return b.createdAt - a.createdAt || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)
}

export class MemoryScheduleStore implements ScheduleStore {
  readonly #rows = new Map<string, ScheduleRow>()
  readonly #changes = new EventEmitter().setMaxListeners(0)

  async insert (row: Omit<ScheduleRow, 'revision'>): Promise<ScheduleRow> {
    if (this.#rows.has(row.id)) throw new Error(`schedule ${JSON.stringify(row.id)} exists already`)
    const stored: ScheduleRow = { ...structuredClone(row), revision: 1 }
    this.#rows.set(row.id, stored)
    this.#changed()
    return structuredClone(stored)
  }

  async get (id: string): Promise<ScheduleRow | null> {
    const row = this.#rows.get(id)
    return row === undefined ? null : structuredClone(row)
  }

  async write (id: string, revision: number, change: { wakeAt: number | null, state: ScheduleState }): Promise<ScheduleRow | null> {
    const [written] = await this.writeAll([{ id, revision, ...change }])
    return written!
  }

  async writeAll (writes: readonly ScheduleWrite[]): Promise<Array<ScheduleRow | null>> {
    const results = writes.map(({ id, revision, wakeAt, state }) => {
      const row = this.#rows.get(id)
      if (row === undefined || row.revision !== revision) return null
      const written: ScheduleRow = { ...row, wakeAt, state: structuredClone(state), revision: revision + 1 }
      this.#rows.set(id, written)
      return structuredClone(written)
    })
    if (results.some((result) => result !== null)) this.#changed()
    return results
  }

  async delete (id: string): Promise<boolean> {
    const deleted = this.#rows.delete(id)
    if (deleted) this.#changed()
    return deleted
  }

  async list (query: ScheduleListQuery): Promise<ScheduleRowPage> {
    const limit = checkLimit(query.limit, MAX_SCHEDULE_LIST_LIMIT)
    const after = query.cursor === undefined ? null : decodeKeyCursor(query.cursor)
    const rows = [...this.#rows.values()]
      .filter((row) => (query.principal === undefined || row.principal === query.principal) &&
        (after === null || newerFirst({ createdAt: after.ms, id: after.id }, row) < 0))
      .sort(newerFirst)
    const page = rows.slice(0, limit)
    const last = page.at(-1)
    return {
      rows: page.map((row) => structuredClone(row)),
      nextCursor: rows.length > limit && last !== undefined ? encodeKeyCursor(last.createdAt, last.id) : null
    }
  }

  async take (now: number, limit: number, until: number): Promise<ScheduleRow[]> {
    return [...this.#rows.values()]
      .filter((row) => row.wakeAt !== null && row.wakeAt <= now)
      .sort((a, b) => a.wakeAt! - b.wakeAt!)
      .slice(0, limit)
      .map((row) => {
        const taken: ScheduleRow = { ...row, wakeAt: until, revision: row.revision + 1 }
        this.#rows.set(row.id, taken)
        return structuredClone(taken)
      })
  }

  async nextWake (): Promise<number | null> {
    let next: number | null = null
    for (const { wakeAt } of this.#rows.values()) if (wakeAt !== null && (next === null || wakeAt < next)) next = wakeAt
    return next
  }

  watch (listener: () => void): () => void {
    this.#changes.on('change', listener)
    return () => { this.#changes.off('change', listener) }
  }

  #changed (): void {
    process.nextTick(() => this.#changes.emit('change'))
  }
}
