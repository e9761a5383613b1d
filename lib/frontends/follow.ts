import type { RunStore, StoredEvent } from '../stores/types.js'
import { loggedEvent, wholeLog } from './run-events.js'
import type { LoggedEvent, RunEvent } from './run-events.js'
import { endsRun } from '../runs/events.js'
import { PAGE_BYTES, nextPageSize, readWhole } from '../runs/follow.js'

/** Events read from the store at a time, at most (the pages of `followRun` hold about PAGE_BYTES): for a task's whole log. */
const PAGE = 256
/** A follower's first page, before the run's events are known (the next ones hold about PAGE_BYTES). */
const FIRST_PAGE = 16

function parsed (stored: StoredEvent): RunEvent {
  return { seq: stored.seq, type: stored.type, data: JSON.parse(stored.data) }
}

/**
 * A run's stored events with seq greater than `after`, then live ones as the store is told of them (on this
 * instance or another sharing it), until the terminal event that ends the run (an attempt's end that more events
 * follow, in a run resumed under its id, comes marked `goesOn`); pull-based, so a slow reader never makes anyone hold
 * more than a page. It also ends when the run is gone (purged, ephemeral) and when `signal` aborts: a generator's
 * `return()` waits for a pending `next()`, so only the signal releases a follower waiting for the run's next event.
 * A page holds about PAGE_BYTES of events, whatever their size.
 */
export async function * followRun (store: RunStore, runId: string, after: number, signal?: AbortSignal): AsyncGenerator<LoggedEvent, void, undefined> {
  let news = false
  let wake: (() => void) | null = null
  const notify = (): void => {
    news = true
    wake?.()
  }
  // watched before the first read: an event stored in between is read by one or the other
  const unwatch = store.watch(runId, notify)
  signal?.addEventListener('abort', notify)
  let size = FIRST_PAGE
  try {
    for (;;) {
      news = false
      const asked = size
      const page = await store.events(runId, after, asked, PAGE_BYTES)
      if (page.length > 0) size = nextPageSize(page, PAGE_BYTES)
      const whole = readWhole(page, asked, PAGE_BYTES)
      for (const [i, stored] of page.entries()) {
        after = stored.seq
        // a terminal event that ends a full page: whether the log goes on after it is read before it is given
        const end = endsRun(page, i, whole) ?? (await store.events(runId, after, 1)).length === 0
        yield loggedEvent(parsed(stored), end)
        if (end) return
      }
      if (signal?.aborted === true) return
      if (!whole) continue
      if (page.length === 0 && await store.get(runId) === null) return
      if (!news) await new Promise<void>((resolve) => { wake = resolve })
      wake = null
    }
  } finally {
    unwatch()
    signal?.removeEventListener('abort', notify)
  }
}

/** Every event of the run stored so far (a task's state, an approval's place in the log), marked as followRun marks them. */
export async function storedEvents (store: RunStore, runId: string): Promise<LoggedEvent[]> {
  const events: RunEvent[] = []
  for (;;) {
    const page = await store.events(runId, events.length === 0 ? 0 : events.at(-1)!.seq, PAGE)
    for (const stored of page) events.push(parsed(stored))
    if (page.length < PAGE) return wholeLog(events)
  }
}
