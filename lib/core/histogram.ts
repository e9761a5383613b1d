// A latency histogram with fixed log-spaced buckets: constant memory however many samples, and
// percentiles within ~5% of the true value — enough for p50/p95/p99 on an admin page.
const GROWTH = 1.05
const MIN_MS = 0.05
const BUCKETS = Math.ceil(Math.log(3_600_000 / MIN_MS) / Math.log(GROWTH)) + 1

export class Histogram {
  #counts = new Uint32Array(BUCKETS)
  #total = 0

  record (ms: number): void {
    const index = ms <= MIN_MS ? 0 : Math.min(BUCKETS - 1, Math.ceil(Math.log(ms / MIN_MS) / Math.log(GROWTH)))
    this.#counts[index]!++
    this.#total++
  }

  get count (): number {
    return this.#total
  }

  /** The upper bound of the bucket holding the p-th percentile (0 when empty), in ms with 2 decimals. */
  percentile (p: number): number {
    if (this.#total === 0) return 0
    const rank = Math.ceil((p / 100) * this.#total)
    let seen = 0
    let index = 0
    for (; index < BUCKETS; index++) {
      seen += this.#counts[index]!
      if (seen >= rank) break
    }
    return Math.round(MIN_MS * GROWTH ** index * 100) / 100
  }

  summary (): { p50: number, p95: number, p99: number } {
    return { p50: this.percentile(50), p95: this.percentile(95), p99: this.percentile(99) }
  }
}
