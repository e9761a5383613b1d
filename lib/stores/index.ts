export type * from './types.js'
export {
  DEFAULT_AUDIT_CAPACITY, DEFAULT_MAX_SESSIONS, MemoryApprovalStore, MemoryAuditStore, MemoryCheckpointStore, MemoryIdempotencyStore,
  MemorySessionStore, memoryStores
} from './memory.js'
export { DEFAULT_MAX_RETAINED_RUNS, MemoryRunStore } from './memory-runs.js'
export { BackedRunStore } from './run-store.js'
export type { RunBackend, RunEnded, RunFilters, Taken } from './run-store.js'
export type { LeaseCondition, RunCondition, StoredRun, TextKind } from './run-policy.js'
export { RunSignals } from './run-watch.js'
export type { RunState, RunWatchHubOptions } from './run-watch.js'
export type { MemoryRunStoreOptions } from './memory-runs.js'
export type { MemoryAuditStoreOptions, MemorySessionStoreOptions, MemoryStoresOptions } from './memory.js'
export {
  SqliteApprovalStore, SqliteAuditStore, SqliteCheckpointStore, SqliteConnection, SqliteIdempotencyStore,
  SqliteSessionStore, sqliteStores
} from './sqlite.js'
export type { SqliteDatabase, SqliteSource, SqliteStoreOptions } from './sqlite.js'
export { SqliteRunStore } from './sqlite-runs.js'
export { SqliteWebhookStore } from './sqlite-webhooks.js'
export { SqliteQuotaStore } from './sqlite-quotas.js'
export type { SqliteRunStoreOptions } from './sqlite-runs.js'
export {
  PostgresApprovalStore, PostgresAuditStore, PostgresCheckpointStore, PostgresConnection, PostgresIdempotencyStore,
  PostgresSessionStore, postgresStores
} from './postgres.js'
export type { PgPool, PostgresPoolOptions, PostgresSource, PostgresStoreOptions, PostgresStoresOptions } from './postgres.js'
export { PostgresRunStore } from './postgres-runs.js'
export { PostgresWebhookStore } from './postgres-webhooks.js'
export { PostgresQuotaStore } from './postgres-quotas.js'
export type { PostgresRunStoreOptions } from './postgres-runs.js'
export { RedisConnection, RedisIdempotencyStore, RedisSessionStore, redisStores } from './redis.js'
export type { RedisClient, RedisSource, RedisStoreOptions } from './redis.js'
export { RedisRunStore } from './redis-runs.js'
export { RedisWebhookStore } from './redis-webhooks.js'
export { RedisQuotaStore } from './redis-quotas.js'
export type { RedisRunStoreOptions } from './redis-runs.js'
export { DEFAULT_MAX_RETAINED_DELIVERIES, MemoryWebhookStore } from './memory-webhooks.js'
export type { MemoryWebhookStoreOptions } from './memory-webhooks.js'
export { MemoryQuotaStore } from './memory-quotas.js'
