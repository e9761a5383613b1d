import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { FastifyBaseLogger } from 'fastify'
import { InvalidOptionsError } from '../core/errors.js'
import type { AgentServiceCore } from './service.js'
import type { StatsObserver } from './stats.js'

const PREFIX = 'fastify_agents_'
// seconds: from a quick tool-less answer to a long agent run
const RUN_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600]
// seconds: a person answering, from at once to a day
const WAIT_BUCKETS = [1, 5, 15, 30, 60, 300, 900, 1800, 3600, 14_400, 86_400]
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const
// the most queued runs one scrape counts (one page of the run store)
const QUEUED_PAGE = 500

/**
 * The Prometheus metrics (docs/operations.md) on a prom-client Registry (the host's, or one of our own with the
 * process metrics). Counters and gauges are read from the service's figures at scrape time, so a request pays
 * nothing for them; only the histograms are fed as runs end.
 */
export class ServiceMetrics {
  readonly registry: Registry

  constructor (service: AgentServiceCore, registry: Registry | null, log: FastifyBaseLogger) {
    const { stats, settings } = service
    this.registry = registry ?? new Registry()
    // a host registry may have the process metrics already: registered twice, prom-client throws
    if (this.registry.getSingleMetric('process_cpu_user_seconds_total') === undefined) collectDefaultMetrics({ register: this.registry })
    if (this.registry.getSingleMetric(`${PREFIX}runs_total`) !== undefined) {
      throw new InvalidOptionsError('/metrics/registry already has the fastify-agents metrics: give each service its own Registry')
    }
    const registers = [this.registry]

    new Counter({
      name: `${PREFIX}runs_total`,
      help: 'Runs ended on this instance, by agent and status (completed, failed, cancelled, timed_out)',
      labelNames: ['agent', 'status'],
      registers,
      collect () {
        this.reset()
        for (const agent of stats.agentNames()) {
          const figures = stats.agentRuns(agent)
          this.inc({ agent, status: 'completed' }, figures.completed)
          this.inc({ agent, status: 'failed' }, figures.failed - figures.timedOut - figures.cancelled)
          this.inc({ agent, status: 'cancelled' }, figures.cancelled)
          this.inc({ agent, status: 'timed_out' }, figures.timedOut)
        }
      }
    })
    new Gauge({
      name: `${PREFIX}runs_in_flight`,
      help: 'Runs in progress on this instance, by agent',
      labelNames: ['agent'],
      registers,
      collect () {
        for (const agent of stats.agentNames()) this.set({ agent }, stats.agentRuns(agent).inFlight)
      }
    })
    new Counter({
      name: `${PREFIX}tokens_total`,
      help: 'Tokens reported by completed runs, by agent and kind (input, output)',
      labelNames: ['agent', 'kind'],
      registers,
      collect () {
        this.reset()
        for (const agent of stats.agentNames()) {
          const { tokens } = stats.agentRuns(agent)
          this.inc({ agent, kind: 'input' }, tokens.input)
          this.inc({ agent, kind: 'output' }, tokens.output)
        }
      }
    })
    new Counter({
      name: `${PREFIX}requests_total`,
      help: 'Requests answered (the Admin API\'s apart), by route pattern and status class',
      labelNames: ['route', 'status_class'],
      registers,
      collect () {
        this.reset()
        for (const [route, counts] of stats.requestsByRoute()) {
          counts.forEach((count, i) => { if (count > 0) this.inc({ route, status_class: STATUS_CLASSES[i]! }, count) })
        }
      }
    })
    new Gauge({
      name: `${PREFIX}approvals_pending`,
      help: 'Approvals that runs on this instance wait for',
      registers,
      collect () { this.set(stats.approvalsPending) }
    })
    new Counter({
      name: `${PREFIX}audit_failures_total`,
      help: 'Audit entries that could not be written',
      registers,
      collect () { this.reset(); this.inc(stats.auditFailures) }
    })
    new Gauge({
      name: `${PREFIX}stream_followers`,
      help: 'Streams following a run\'s log (/v1/runs/:runId/events) open now',
      registers,
      collect () { this.set(stats.followers) }
    })
    new Counter({
      name: `${PREFIX}slow_consumers_total`,
      help: 'Connections cut for staying too far behind (maxStreamBufferBytes)',
      registers,
      collect () { this.reset(); this.inc(stats.slowConsumers) }
    })
    new Gauge({
      name: `${PREFIX}runs_queued`,
      help: `Runs waiting in the run store's queue, shared by every instance (counted up to ${QUEUED_PAGE})`,
      registers,
      async collect () {
        try {
          this.set((await settings.runStore.list({ limit: QUEUED_PAGE, status: 'queued' })).runs.length)
        } catch (err) {
          log.warn({ err }, 'metrics: could not count the queued runs')
        }
      }
    })
    new Counter({
      name: `${PREFIX}webhook_deliveries_total`,
      help: 'Webhook delivery attempts, by outcome (delivered, retried, failed, lost)',
      labelNames: ['outcome'],
      registers,
      collect () {
        this.reset()
        for (const [outcome, count] of stats.webhookDeliveries()) this.inc({ outcome }, count)
      }
    })

    new Counter({
      name: `${PREFIX}schedule_fires_total`,
      help: 'Due times of schedules decided on this instance, by agent and outcome (started, skipped, failed)',
      labelNames: ['agent', 'outcome'],
      registers,
      collect () {
        this.reset()
        for (const [agent, outcomes] of stats.scheduleFires()) for (const [outcome, count] of outcomes) this.inc({ agent, outcome }, count)
      }
    })

    const duration = new Histogram({
      name: `${PREFIX}run_duration_seconds`,
      help: 'How long runs took, from start to their terminal event, by agent',
      labelNames: ['agent'],
      buckets: RUN_BUCKETS,
      registers
    })
    const firstEvent = new Histogram({
      name: `${PREFIX}time_to_first_event_seconds`,
      help: 'From a run\'s start to its first event after run.started (its terminal one if none came before), by agent',
      labelNames: ['agent'],
      buckets: RUN_BUCKETS,
      registers
    })
    const approvalWait = new Histogram({
      name: `${PREFIX}approval_wait_seconds`,
      help: 'How long runs waited for an approval to be decided (or to expire)',
      buckets: WAIT_BUCKETS,
      registers
    })
    const queueWait = new Histogram({
      name: `${PREFIX}queue_wait_seconds`,
      help: 'How long runs claimed by this instance waited in the queue',
      buckets: RUN_BUCKETS,
      registers
    })
    const scheduleLag = new Histogram({
      name: `${PREFIX}schedule_lag_seconds`,
      help: 'From a schedule\'s due time to the start of its run, for the runs this instance started',
      buckets: RUN_BUCKETS,
      registers
    })
    // one child per agent, made now: observing then hashes no labels
    const byAgent = new Map<string, { duration: Histogram.Internal<string>, firstEvent: Histogram.Internal<string> }>()
    for (const agent of stats.agentNames()) byAgent.set(agent, { duration: duration.labels({ agent }), firstEvent: firstEvent.labels({ agent }) })
    const observer: StatsObserver = {
      runEnded (agent, durationMs, firstEventMs) {
        const histograms = byAgent.get(agent)!
        histograms.duration.observe(durationMs / 1000)
        histograms.firstEvent.observe(firstEventMs / 1000)
      },
      approvalWaited (seconds) { approvalWait.observe(seconds) },
      queueWaited (seconds) { queueWait.observe(seconds) },
      scheduleLagged (seconds) { scheduleLag.observe(seconds) }
    }
    stats.observe(observer)
  }

  /** The text exposition format, and its content type. */
  async scrape (): Promise<{ body: string, contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType }
  }
}
