import { monitorEventLoopDelay } from 'node:perf_hooks'
import type { IntervalHistogram } from 'node:perf_hooks'

export const EVENT_LOOP_WINDOW_MS = 60_000

export interface EventLoopDelaySummary {
  p50: number
  p99: number
}

function toMs (ns: number): number {
  return Math.round(ns / 1e4) / 100
}

/**
 * Event-loop delay percentiles over a recent window rather than since start: a stall an hour ago should
 * not colour today's p99. The window turns over lazily, when read after `windowMs`: the reading taken then
 * is kept, so a read right after the turn-over (an empty window) still has something to say.
 *
 * Node's sampling timer is unref()ed, so an enabled monitor never keeps the process alive; `stop()` still
 * belongs in onClose so that a closed app stops sampling.
 */
export class EventLoopDelayMonitor {
  readonly #histogram: IntervalHistogram
  readonly #windowMs: number
  #windowStart = performance.now()
  #last: EventLoopDelaySummary = { p50: 0, p99: 0 }

  constructor (options: { resolutionMs?: number, windowMs?: number } = {}) {
    this.#histogram = monitorEventLoopDelay({ resolution: options.resolutionMs ?? 20 })
    this.#windowMs = options.windowMs ?? EVENT_LOOP_WINDOW_MS
  }

  start (): void {
    this.#windowStart = performance.now()
    this.#histogram.enable()
  }

  stop (): void {
    this.#histogram.disable()
  }

  read (): EventLoopDelaySummary {
    const h = this.#histogram
    if (h.count > 0) this.#last = { p50: toMs(h.percentile(50)), p99: toMs(h.percentile(99)) }
    const now = performance.now()
    if (now - this.#windowStart >= this.#windowMs) {
      h.reset()
      this.#windowStart = now
    }
    return { ...this.#last }
  }
}
