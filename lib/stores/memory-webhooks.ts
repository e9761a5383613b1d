// The in-process outbox: the default. Deliveries are lost on restart, and only this process delivers them.
import { checkCount, checkLimit, decodeSeqCursor, encodeSeqCursor } from './common.js'
import type {
  NewWebhookDelivery, RunLease, WebhookAttempt, WebhookAttemptPage, WebhookAttemptQuery, WebhookDelivery, WebhookStore
} from './types.js'

export const MAX_WEBHOOK_ATTEMPT_LIMIT = 500
export const DEFAULT_MAX_RETAINED_DELIVERIES = 10_000

export interface MemoryWebhookStoreOptions {
  /** how many ended (delivered or failed) deliveries are kept at most, the longest-ended dropped first (default 10,000) */
  maxRetainedDeliveries?: number
}

interface Delivery {
  readonly id: string
  readonly type: string
  readonly runId: string
  readonly payload: string
  readonly createdAt: number
  readonly giveUpAt: number
  status: 'pending' | 'delivered' | 'failed'
  attempt: number
  owner: string | null
  /** pending: when it is due (while claimed, when the lease runs out) */
  dueAt: number
  /** ended: when it goes */
  expiresAt: number
  /** bumped on every change of `dueAt`: a heap entry of an older version is stale */
  version: number
  /** attempts listed */
  listed: number
  gone: boolean
}

interface Listed { seq: number, attempt: WebhookAttempt, delivery: Delivery }
interface Due { at: number, delivery: Delivery, version: number }

/** A binary min-heap of due times; entries made stale by a later change are dropped as they surface. */
class DueHeap {
  readonly #items: Due[] = []

  push (delivery: Delivery): void {
    const items = this.#items
    items.push({ at: delivery.dueAt, delivery, version: delivery.version })
    let i = items.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (items[parent]!.at <= items[i]!.at) break
      ;[items[parent], items[i]] = [items[i]!, items[parent]!]
      i = parent
    }
  }

  /** The soonest entry due by `now` that is still current, removed; null when none is. */
  pop (now: number): Delivery | null {
    const items = this.#items
    while (items.length > 0 && items[0]!.at <= now) {
      const top = items[0]!
      const last = items.pop()!
      if (items.length > 0) {
        items[0] = last
        let i = 0
        for (;;) {
          const left = 2 * i + 1
          const right = left + 1
          let least = i
          if (left < items.length && items[left]!.at < items[least]!.at) least = left
          if (right < items.length && items[right]!.at < items[least]!.at) least = right
          if (least === i) break
          ;[items[least], items[i]] = [items[i]!, items[least]!]
          i = least
        }
      }
      if (top.version === top.delivery.version && top.delivery.status === 'pending' && !top.delivery.gone) return top.delivery
    }
    return null
  }
}

export class MemoryWebhookStore implements WebhookStore {
  readonly maxRetainedDeliveries: number
  readonly #deliveries = new Map<string, Delivery>()
  readonly #due = new DueHeap()
  /** ended deliveries, in the order they ended */
  readonly #ended = new Map<string, Delivery>()
  /** every attempt listed, in order of `seq`; those of deliveries gone are skipped, and compacted away in bulk */
  #attempts: Listed[] = []
  #seq = 0
  #goneAttempts = 0

  constructor (options: MemoryWebhookStoreOptions = {}) {
    this.maxRetainedDeliveries = checkCount('maxRetainedDeliveries', options.maxRetainedDeliveries ?? DEFAULT_MAX_RETAINED_DELIVERIES)
  }

  async enqueue (deliveries: readonly NewWebhookDelivery[]): Promise<void> {
    for (const given of deliveries) {
      if (this.#deliveries.has(given.id)) continue
      const delivery: Delivery = {
        id: given.id,
        type: given.type,
        runId: given.runId,
        payload: given.payload,
        createdAt: given.createdAt,
        giveUpAt: given.giveUpAt,
        status: 'pending',
        attempt: 0,
        owner: null,
        dueAt: given.dueAt,
        expiresAt: 0,
        version: 0,
        listed: 0,
        gone: false
      }
      this.#deliveries.set(delivery.id, delivery)
      this.#due.push(delivery)
    }
  }

  async claim (lease: RunLease, now: number, limit: number): Promise<WebhookDelivery[]> {
    const taken: Delivery[] = []
    while (taken.length < limit) {
      const delivery = this.#due.pop(now)
      if (delivery === null) break
      delivery.attempt++
      delivery.owner = lease.owner
      delivery.dueAt = lease.until
      delivery.version++
      taken.push(delivery)
    }
    // due again when the lease runs out (pushed after the loop: a lease already out is not claimed twice by one call)
    for (const delivery of taken) this.#due.push(delivery)
    return taken.map(({ id, type, runId, payload, createdAt, giveUpAt, attempt }) => ({ id, type, runId, payload, createdAt, giveUpAt, attempt }))
  }

  async record (attempt: WebhookAttempt, owner: string, next: { dueAt: number, retentionMs: number }): Promise<boolean> {
    const delivery = this.#deliveries.get(attempt.webhookId)
    if (delivery === undefined) return false
    this.#attempts.push({ seq: ++this.#seq, attempt: { ...attempt }, delivery })
    delivery.listed++
    if (delivery.status !== 'pending' || delivery.owner !== owner || delivery.attempt !== attempt.attempt) return false
    delivery.owner = null
    delivery.version++
    if (attempt.outcome === 'retried') {
      delivery.dueAt = next.dueAt
      this.#due.push(delivery)
      return true
    }
    delivery.status = attempt.outcome
    delivery.expiresAt = Date.now() + next.retentionMs
    this.#ended.set(delivery.id, delivery)
    if (this.#ended.size > this.maxRetainedDeliveries) this.#drop(this.#ended.values().next().value!)
    return true
  }

  async attempts (query: WebhookAttemptQuery): Promise<WebhookAttemptPage> {
    const limit = checkLimit(query.limit, MAX_WEBHOOK_ATTEMPT_LIMIT)
    const listed = this.#attempts
    // the first entry at or after the cursor's seq: the page starts just before it
    let end = listed.length
    if (query.cursor !== undefined) {
      const before = Number(decodeSeqCursor(query.cursor))
      let low = 0
      while (low < end) {
        const middle = (low + end) >> 1
        if (listed[middle]!.seq < before) low = middle + 1
        else end = middle
      }
    }
    const attempts: WebhookAttempt[] = []
    let last = 0
    for (let i = end - 1; i >= 0; i--) {
      const { seq, attempt, delivery } = listed[i]!
      if (delivery.gone) continue
      if (query.outcome !== undefined && attempt.outcome !== query.outcome) continue
      if (query.event !== undefined && attempt.event !== query.event) continue
      if (query.runId !== undefined && attempt.runId !== query.runId) continue
      if (attempts.length === limit) return { attempts, nextCursor: encodeSeqCursor(last) }
      attempts.push({ ...attempt })
      last = seq
    }
    return { attempts, nextCursor: null }
  }

  async purge (now: number, batch: number): Promise<number> {
    // a scan of at most maxRetainedDeliveries: retentions may differ, so the order of ending is not quite that of expiry
    let purged = 0
    for (const delivery of this.#ended.values()) {
      if (purged === batch) break
      if (delivery.expiresAt > now) continue
      this.#drop(delivery)
      purged++
    }
    return purged
  }

  #drop (delivery: Delivery): void {
    delivery.gone = true
    this.#deliveries.delete(delivery.id)
    this.#ended.delete(delivery.id)
    this.#goneAttempts += delivery.listed
    if (this.#goneAttempts > 1_000 && this.#goneAttempts * 2 > this.#attempts.length) {
      this.#attempts = this.#attempts.filter((listed) => !listed.delivery.gone)
      this.#goneAttempts = 0
    }
  }

  async close (): Promise<void> {}
}
