// The `quotas` option (docs/auth-and-traffic.md), counted in a QuotaStore that the instances share. A run in progress holds a
// slot, its id the run's, from its admission to its end; the slot is leased like the run (renewed on the worker's
// lease timer by every instance holding it), so that an instance's death frees it within a lease. Tokens are counted
// per fixed window, aligned to multiples of `intervalMs`, at each run's end.
import type { FastifyBaseLogger } from 'fastify'
import type { RunEvent, RunOutcome } from '../runs/run.js'
import type { QuotaStore } from '../stores/types.js'
import type { FlushableSink, RunQuotas } from '../runs/host.js'
import { QuotaExceededError } from '../core/errors.js'

/** The `retry-after` of a run refused for concurrency: when a run ends is not known; one second is a hint. */
export const CONCURRENCY_RETRY_AFTER_S = 1

export interface QuotaSettings {
  /** with the store deadline */
  readonly store: QuotaStore
  readonly maxConcurrentRuns: number | null
  readonly tokens: { readonly limit: number, readonly intervalMs: number } | null
}

export type { FlushableSink }

export function windowStart (now: number, intervalMs: number): number {
  return now - (now % intervalMs)
}

function refused (message: string, retryAfterS: number): Error {
  return Object.assign(new QuotaExceededError(`${message}: retry in ${retryAfterS} s`), { headers: { 'retry-after': String(retryAfterS) } })
}

export class Quotas implements RunQuotas {
  readonly #settings: QuotaSettings
  readonly #leaseMs: number
  readonly #log: FastifyBaseLogger
  /** slot id → principal: the slots this instance renews (runs it admitted or runs, until they end) */
  readonly #held = new Map<string, string>()
  #renewing = false

  constructor (settings: QuotaSettings, leaseMs: number, log: FastifyBaseLogger) {
    this.#settings = settings
    this.#leaseMs = leaseMs
    this.#log = log
  }

  /**
   * Admits a new run, before anything of it is stored, or throws QUOTA_EXCEEDED. Resolves true when the run took a
   * slot: should it not be stored after all, `release` gives the slot back.
   */
  async admit (principal: string, runId: string): Promise<boolean> {
    const { store, maxConcurrentRuns, tokens } = this.#settings
    const now = Date.now()
    if (tokens !== null) {
      const start = windowStart(now, tokens.intervalMs)
      if (await store.tokens(principal, start) >= tokens.limit) {
        throw refused(`Quota exceeded: ${tokens.limit} tokens per ${tokens.intervalMs} ms used`, Math.ceil((start + tokens.intervalMs - now) / 1000))
      }
    }
    if (maxConcurrentRuns === null) return false
    if (!await store.acquire({ principal, slotId: runId }, maxConcurrentRuns, now, now + this.#leaseMs)) {
      throw refused(`Quota exceeded: at most ${maxConcurrentRuns} runs in progress at once`, CONCURRENCY_RETRY_AFTER_S)
    }
    this.#held.set(runId, principal)
    return true
  }

  /** Gives a slot back: a run admitted but not stored after all, or a queued run cancelled before it ran. */
  async release (principal: string, runId: string): Promise<void> {
    if (this.#settings.maxConcurrentRuns === null) return
    this.#held.delete(runId)
    try {
      await this.#settings.store.release({ principal, slotId: runId })
    } catch (err) {
      // it expires within a lease, nobody renewing it
      this.#log.warn({ err, runId }, 'could not give a quota slot back')
    }
  }

  /**
   * A claimed run (queued in the background, or requeued from another instance) keeps the slot it was admitted with:
   * taken again whatever the count, should it have expired meanwhile, and renewed here while it runs.
   */
  async keep (principal: string, runId: string): Promise<void> {
    if (this.#settings.maxConcurrentRuns === null) return
    const now = Date.now()
    try {
      await this.#settings.store.acquire({ principal, slotId: runId }, Number.MAX_SAFE_INTEGER, now, now + this.#leaseMs)
      this.#held.set(runId, principal)
    } catch (err) {
      this.#log.warn({ err, runId }, 'could not take a claimed run\'s quota slot: the run is not counted')
    }
  }

  /** The run's sink, giving its slot back and counting its tokens as its end is stored (before its client hears of it). */
  sink (principal: string, runId: string, inner: FlushableSink): FlushableSink {
    return {
      event: (event: RunEvent) => inner.event(event),
      ending: () => inner.ending?.(),
      finish: async (event, outcome, lease, turn) => (await Promise.all([inner.finish(event, outcome, lease, turn), this.#ended(principal, runId, outcome)]))[0],
      flush: () => inner.flush(),
      durable: (seq, lease) => inner.durable(seq, lease)
    }
  }

  async #ended (principal: string, runId: string, outcome: Exclude<RunOutcome, { status: 'detached' }>): Promise<void> {
    const { store, tokens } = this.#settings
    const calls: Array<Promise<void>> = [this.release(principal, runId)]
    // a failed run's usage is not known: only a result's counts
    const usage = outcome.status === 'completed' ? outcome.result.usage : null
    const used = usage === null ? 0 : usage.inputTokens + usage.outputTokens
    if (tokens !== null && used > 0) {
      const start = windowStart(Date.now(), tokens.intervalMs)
      calls.push(store.addTokens(principal, { start, end: start + tokens.intervalMs }, used)
        .catch((err: unknown) => this.#log.warn({ err, runId }, 'could not count a run\'s tokens against its quota')))
    }
    await Promise.all(calls)
  }

  /** On the timer that renews the runs' leases: the slots held here; those no longer held anywhere are forgotten. */
  async renew (): Promise<void> {
    if (this.#renewing || this.#held.size === 0) return
    this.#renewing = true
    const slots = [...this.#held].map(([slotId, principal]) => ({ principal, slotId }))
    try {
      const renewed = new Set(await this.#settings.store.renew(slots, Date.now() + this.#leaseMs))
      // given back by the instance that ended the run (or cancelled while queued), or expired
      for (const { slotId } of slots) if (!renewed.has(slotId)) this.#held.delete(slotId)
    } catch (err) {
      this.#log.warn({ err }, 'could not renew this instance\'s quota slots')
    } finally {
      this.#renewing = false
    }
  }
}
