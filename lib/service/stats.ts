import { Histogram } from '../core/histogram.js'
import type { RunOutcome } from '../runs/run.js'
import type { StatsCounter, StatsGauge, StatsRecorder } from '../runs/host.js'

interface TokenCount { input: number, output: number }

/** What the metrics' histograms are told as it happens (lib/service/metrics.ts installs one with the Admin API). */
export interface StatsObserver {
  runEnded(agent: string, durationMs: number, firstEventMs: number): void
  approvalWaited(seconds: number): void
  queueWaited(seconds: number): void
  scheduleLagged(seconds: number): void
}

class AgentFigures {
  runs = 0
  completed = 0
  failed = 0
  timedOut = 0
  cancelled = 0
  inFlight = 0
  tokens: TokenCount = { input: 0, output: 0 }
  latency = new Histogram()
}

/**
 * The service's own figures. Admin requests are counted apart so that watching the service does not
 * change what it reports.
 */
export class ServiceStats implements StatsRecorder {
  readonly #startedAt = Date.now()
  readonly since = new Date(this.#startedAt).toISOString()
  #requests = 0
  #byStatus = [0, 0, 0, 0]
  #serverErrors = 0
  #streamFailures = 0
  #adminRequests = 0
  #runs = { started: 0, completed: 0, failed: 0, timedOut: 0, inFlight: 0 }
  #tokens: TokenCount = { input: 0, output: 0 }
  #latency = new Histogram()
  #agents = new Map<string, AgentFigures>()
  readonly #counters: Record<StatsCounter, number> = { runLogFailures: 0, slowConsumers: 0, auditFailures: 0 }
  readonly #gauges: Record<StatsGauge, number> = { followers: 0, approvalsPending: 0 }
  /** how long claimed runs waited in the queue, in seconds (for the metrics) */
  readonly queueWaits = new Histogram()
  readonly #webhookDeliveries = new Map<string, number>()
  /** agent → outcome → fires (docs/schedules.md) */
  readonly #scheduleFires = new Map<string, Map<string, number>>()
  readonly scheduleLags = new Histogram()
  // by route pattern: requests answered 1xx..5xx
  readonly #routes = new Map<string, number[]>()
  #observer: StatsObserver | null = null

  /** audit entries the store did not take */
  get auditFailures (): number { return this.#counters.auditFailures }
  /** run-store writes that failed (the event log lags or has lost events) */
  get runLogFailures (): number { return this.#counters.runLogFailures }
  /** connections cut for staying too far behind (maxStreamBufferBytes) */
  get slowConsumers (): number { return this.#counters.slowConsumers }
  /** streams following a run's log (`/v1/runs/:runId/events`) open now */
  get followers (): number { return this.#gauges.followers }
  /** approvals that runs on this instance wait for now */
  get approvalsPending (): number { return this.#gauges.approvalsPending }

  count (counter: StatsCounter, by = 1): void {
    this.#counters[counter] += by
  }

  gauge (gauge: StatsGauge, delta: 1 | -1): void {
    this.#gauges[gauge] += delta
  }

  /** The metrics' histograms, told as it happens (with the Admin API). */
  observe (observer: StatsObserver): void {
    this.#observer = observer
  }

  /** A run here waited this long for a person's decision. */
  recordApprovalWait (seconds: number): void {
    this.#observer?.approvalWaited(seconds)
  }

  /** Requests (not the Admin API's) by route pattern, each with its counts of 1xx..5xx answers. */
  requestsByRoute (): ReadonlyMap<string, readonly number[]> {
    return this.#routes
  }

  /** An agent's run counts: what `fastify_agents_runs_total` reads. */
  agentRuns (name: string): Readonly<Pick<AgentFigures, 'completed' | 'failed' | 'timedOut' | 'cancelled' | 'inFlight' | 'tokens'>> {
    return this.#agents.get(name)!
  }

  agentNames (): IterableIterator<string> {
    return this.#agents.keys()
  }

  /** One webhook delivery attempt ended: `outcome` 'delivered', 'retried' or 'failed' (docs/webhooks.md); 'lost' for a delivery the outbox never took. */
  recordWebhookDelivery (outcome: string): void {
    this.#webhookDeliveries.set(outcome, (this.#webhookDeliveries.get(outcome) ?? 0) + 1)
  }

  webhookDeliveries (): ReadonlyMap<string, number> {
    return this.#webhookDeliveries
  }

  /** A schedule's due time was decided on this instance: 'started', 'skipped' or 'failed' (docs/schedules.md). */
  recordScheduleFire (agent: string, outcome: string): void {
    let outcomes = this.#scheduleFires.get(agent)
    if (outcomes === undefined) this.#scheduleFires.set(agent, outcomes = new Map())
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1)
  }

  scheduleFires (): ReadonlyMap<string, ReadonlyMap<string, number>> {
    return this.#scheduleFires
  }

  recordScheduleLag (seconds: number): void {
    this.scheduleLags.record(Math.max(0, seconds) * 1000)
    this.#observer?.scheduleLagged(Math.max(0, seconds))
  }

  recordQueueWait (seconds: number): void {
    this.queueWaits.record(Math.max(0, seconds) * 1000)
    this.#observer?.queueWaited(Math.max(0, seconds))
  }

  constructor (agentNames: Iterable<string>) {
    for (const name of agentNames) this.#agents.set(name, new AgentFigures())
  }

  recordRequest (status: number, durationMs: number, admin: boolean, route: string): void {
    if (admin) {
      this.#adminRequests++
      return
    }
    this.#requests++
    const statusClass = Math.floor(status / 100) - 2
    if (statusClass >= 0 && statusClass <= 3) this.#byStatus[statusClass]!++
    let counts = this.#routes.get(route)
    if (counts === undefined) this.#routes.set(route, counts = [0, 0, 0, 0, 0])
    counts[Math.min(4, Math.max(0, statusClass + 1))]!++
    if (status >= 500) this.#serverErrors++
    this.#latency.record(durationMs)
  }

  runStarted (agent: string): void {
    this.#runs.started++
    this.#runs.inFlight++
    let figures = this.#agents.get(agent)
    // a claimed run of an agent this instance does not serve (its options differ): it fails here, and counts
    if (figures === undefined) this.#agents.set(agent, figures = new AgentFigures())
    figures.runs++
    figures.inFlight++
  }

  /** `streamed`: the run's outcome reached the client as an event, not as an HTTP status. */
  runEnded (agent: string, outcome: RunOutcome, streamed: boolean, firstEventMs: number): void {
    const figures = this.#agents.get(agent)!
    this.#runs.inFlight--
    figures.inFlight--
    // a run that goes on elsewhere is neither completed nor failed here
    if (outcome.status === 'detached') return
    figures.latency.record(outcome.durationMs)
    this.#observer?.runEnded(agent, outcome.durationMs, firstEventMs)
    if (outcome.status === 'completed') {
      this.#runs.completed++
      figures.completed++
      const { inputTokens, outputTokens } = outcome.result.usage
      this.#tokens.input += inputTokens
      this.#tokens.output += outputTokens
      figures.tokens.input += inputTokens
      figures.tokens.output += outputTokens
      return
    }
    this.#runs.failed++
    figures.failed++
    if (outcome.code === 'AGENT_TIMEOUT') {
      this.#runs.timedOut++
      figures.timedOut++
    }
    if (outcome.code === 'CANCELLED') figures.cancelled++
    if (streamed) this.#streamFailures++
  }

  agent (name: string): { runs: number, completed: number, failed: number, inFlight: number, tokens: { input: number, output: number, total: number }, latencyMs: { p50: number, p95: number, p99: number } } {
    const f = this.#agents.get(name)!
    return {
      runs: f.runs,
      completed: f.completed,
      failed: f.failed,
      inFlight: f.inFlight,
      tokens: { input: f.tokens.input, output: f.tokens.output, total: f.tokens.input + f.tokens.output },
      latencyMs: f.latency.summary()
    }
  }

  snapshot (): StatsSnapshot {
    const agents: StatsSnapshot['agents'] = {}
    for (const name of this.#agents.keys()) agents[name] = this.agent(name)
    const [s2, s3, s4, s5] = this.#byStatus as [number, number, number, number]
    return {
      since: this.since,
      uptimeSeconds: Math.floor((Date.now() - this.#startedAt) / 1000),
      requests: { total: this.#requests, byStatus: { '2xx': s2, '3xx': s3, '4xx': s4, '5xx': s5 } },
      errors: this.#serverErrors + this.#streamFailures,
      runs: { ...this.#runs },
      tokens: { input: this.#tokens.input, output: this.#tokens.output, total: this.#tokens.input + this.#tokens.output },
      latencyMs: this.#latency.summary(),
      admin: { requests: this.#adminRequests },
      auditFailures: this.auditFailures,
      agents
    }
  }
}

export interface StatsSnapshot {
  since: string
  uptimeSeconds: number
  requests: { total: number, byStatus: { '2xx': number, '3xx': number, '4xx': number, '5xx': number } }
  errors: number
  runs: { started: number, completed: number, failed: number, timedOut: number, inFlight: number }
  tokens: { input: number, output: number, total: number }
  latencyMs: { p50: number, p95: number, p99: number }
  admin: { requests: number }
  auditFailures: number
  agents: Record<string, ReturnType<ServiceStats['agent']>>
}
