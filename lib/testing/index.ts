// fastify-agents/testing: the behaviour every store must have, as suites a backend of your own can run (docs/stores.md).
// Each suite takes a test registrar (node:test's `test`, tap's `t.test`, any runner's) and a factory making a fresh,
// empty store per test; it asserts with node:assert, so it needs no test framework of ours. Not loaded by the main
// entry point: only a test imports it.
export type { Registrar, StoreFactory } from './check.js'
export {
  storeConformance, factoriesOf, auditStoreConformance, sessionStoreConformance, approvalStoreConformance,
  checkpointStoreConformance, idempotencyStoreConformance
} from './conformance.js'
export type { ConformanceFactories } from './conformance.js'
export { runStoreConformance } from './runs.js'
export type { RunStoreFactories } from './runs.js'
export { quotaStoreConformance } from './quotas.js'
export type { QuotaStoreFactories } from './quotas.js'
export { webhookStoreConformance } from './webhooks.js'
export type { WebhookStoreFactories } from './webhooks.js'
