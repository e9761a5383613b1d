// Rows and targets of a scenario, the printed table and bench/results.json.
import { summary } from './harness.js'

/**
 * A row per contender for one metric. `baseline` names the contender the ratios are against; the
 * ratio is of the medians, `ratioRange` the lowest and highest per-round ratio (round i vs round i).
 */
export function metricRows (results, metric, { unit, baseline, pick = (r) => r[metric] } = {}) {
  const rows = []
  const base = baseline === undefined ? null : results[baseline].map(pick)
  for (const [contender, rounds] of Object.entries(results)) {
    const values = rounds.map(pick)
    const row = { contender, metric, unit, ...summary(values) }
    if (base !== null && contender !== baseline) {
      row.baseline = baseline
      row.ratio = row.median / summary(base).median
      const perRound = values.map((v, i) => v / base[i])
      row.ratioRange = [Math.min(...perRound), Math.max(...perRound)]
    }
    rows.push(row)
  }
  return rows
}

/**
 * A contender's ratio to the baseline of its metricRows() row, with its spread over the rounds (the lowest and
 * highest per-round ratio): `{ ratio, min, max, text }`, text as `rounds 1.21-1.35`.
 */
export function ratioSpread (rows, contender, metric) {
  const row = rows.find((r) => r.contender === contender && r.metric === metric)
  const [min, max] = row.ratioRange
  return { ratio: row.ratio, min, max, text: `rounds ${min.toFixed(2)}-${max.toFixed(2)}` }
}

/** A target: `value op limit`, or pending (with why) when the feature it measures is not there yet. */
export function target (id, description, value, op, limit, pending) {
  if (pending) return { id, description, value: null, op, limit, met: 'pending', pending }
  const met = op === '>=' ? value >= limit : value <= limit
  return { id, description, value, op, limit, met }
}

function fmt (n, unit) {
  if (n === null || n === undefined || Number.isNaN(n)) return '-'
  if (unit === 'ms') return n.toFixed(2)
  if (unit === 'KB') return n.toFixed(2)
  if (Math.abs(n) >= 100) return Math.round(n).toLocaleString('en-US')
  return n.toFixed(2)
}

export function printScenario (name, result) {
  const lines = []
  lines.push(`\n## ${name}: ${result.title}`)
  if (result.rows.length > 0) {
    const header = ['contender', 'metric', 'median', 'min-max', 'ratio', 'ratio range (per round)']
    const table = [header]
    for (const r of result.rows) {
      table.push([
        r.contender,
        `${r.metric}${r.unit ? ` (${r.unit})` : ''}`,
        fmt(r.median, r.unit),
        `${fmt(r.min, r.unit)}-${fmt(r.max, r.unit)}`,
        r.ratio === undefined ? '' : `${r.ratio.toFixed(2)} vs ${r.baseline}`,
        r.ratioRange === undefined ? '' : `${r.ratioRange[0].toFixed(2)}-${r.ratioRange[1].toFixed(2)}`
      ])
    }
    const widths = header.map((_, i) => Math.max(...table.map((row) => String(row[i]).length)))
    for (const row of table) lines.push(row.map((cell, i) => String(cell).padEnd(widths[i])).join('  ').trimEnd())
  }
  for (const t of result.targets) {
    const verdict = t.met === 'pending' ? `PENDING (${t.pending})` : t.met ? 'met' : 'NOT MET'
    const value = t.value === null ? '' : ` ${fmt(t.value)} ${t.op} ${t.limit}:`
    lines.push(`target ${t.id} ${t.description}:${value} ${verdict}`)
  }
  for (const note of result.notes ?? []) lines.push(`note: ${note}`)
  if (result.noise?.noisy > 0) {
    lines.push(`warning: in ${result.noise.noisy} of ${result.noise.rounds} rounds other processes used more than 10% of the machine (up to ${(100 * result.noise.max).toFixed(0)}%): the ratios are less reliable; BENCH_QUIET=<s> waits for a quiet machine`)
  }
  console.log(lines.join('\n'))
}

/** Failed requests (socket errors, non-2xx, timeouts) over every round of every contender. */
export function errorsOf (results) {
  let errors = 0
  for (const rounds of Object.values(results)) for (const r of rounds) errors += (r.errors ?? 0) + (r.non2xx ?? 0) + (r.timeouts ?? 0)
  return errors
}

/**
 * The throughput ratio implied by CPU time per request (baseline CPU / contender CPU): a cross-check that
 * holds up when other processes compete for the cores and throughput alone would mislead.
 */
export function cpuRatio (rows, contender, baseline) {
  const c = medianOf(rows, contender, 'cpuUsPerRequest')
  const b = medianOf(rows, baseline, 'cpuUsPerRequest')
  return typeof c === 'number' && typeof b === 'number' && c > 0 ? b / c : null
}

/** A contender's median of a metric, from the rows of metricRows(); undefined when it has none. */
export function medianOf (rows, contender, metric) {
  return rows.find((r) => r.contender === contender && r.metric === metric)?.median
}

/** How much of the machine other processes used during the measured rounds: { rounds, noisy, max }. */
export function noiseOf (results) {
  const shares = Object.values(results).flat().map((r) => r.foreignCpu).filter((v) => typeof v === 'number')
  return { rounds: shares.length, noisy: shares.filter((v) => v > 0.1).length, max: shares.length > 0 ? Math.max(...shares) : null }
}
