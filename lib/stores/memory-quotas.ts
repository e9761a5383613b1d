// The in-process counts of the `quotas` option (docs/auth-and-traffic.md): one instance's runs only. Everything happens in one
// tick of the event loop, so an acquire is atomic without a lock.
import type { QuotaSlot, QuotaStore } from './types.js'

export class MemoryQuotaStore implements QuotaStore {
  /** principal → slot id → until (epoch ms) */
  readonly #slots = new Map<string, Map<string, number>>()
  /** principal → window start → { tokens, end } */
  readonly #windows = new Map<string, Map<number, { tokens: number, end: number }>>()

  async acquire (slot: QuotaSlot, max: number, now: number, until: number): Promise<boolean> {
    let held = this.#slots.get(slot.principal)
    if (held === undefined) this.#slots.set(slot.principal, held = new Map())
    for (const [id, expiry] of held) if (expiry <= now) held.delete(id)
    if (!held.has(slot.slotId) && held.size >= max) return false
    held.set(slot.slotId, until)
    return true
  }

  async renew (slots: readonly QuotaSlot[], until: number): Promise<string[]> {
    const renewed: string[] = []
    for (const { principal, slotId } of slots) {
      const held = this.#slots.get(principal)
      if (held?.has(slotId) !== true) continue
      held.set(slotId, until)
      renewed.push(slotId)
    }
    return renewed
  }

  async release ({ principal, slotId }: QuotaSlot): Promise<void> {
    const held = this.#slots.get(principal)
    if (held === undefined) return
    held.delete(slotId)
    if (held.size === 0) this.#slots.delete(principal)
  }

  async addTokens (principal: string, window: { start: number, end: number }, n: number): Promise<void> {
    let windows = this.#windows.get(principal)
    if (windows === undefined) this.#windows.set(principal, windows = new Map())
    const counted = windows.get(window.start)
    if (counted === undefined) windows.set(window.start, { tokens: n, end: window.end })
    else counted.tokens += n
  }

  async tokens (principal: string, windowStart: number): Promise<number> {
    return this.#windows.get(principal)?.get(windowStart)?.tokens ?? 0
  }

  async purge (now: number, batch: number): Promise<number> {
    let purged = 0
    for (const [principal, held] of this.#slots) {
      for (const [id, until] of held) {
        if (purged >= batch) return purged
        if (until > now) continue
        held.delete(id)
        purged++
      }
      if (held.size === 0) this.#slots.delete(principal)
    }
    for (const [principal, windows] of this.#windows) {
      for (const [start, { end }] of windows) {
        if (purged >= batch) return purged
        if (end > now) continue
        windows.delete(start)
        purged++
      }
      if (windows.size === 0) this.#windows.delete(principal)
    }
    return purged
  }
}
