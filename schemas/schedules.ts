import { Type } from '@sinclair/typebox'
import type { Static } from '@sinclair/typebox'
import { AgentName, Cursor, Id, Metadata, NextCursor } from './common.js'

const DateTime = Type.String({ format: 'date-time' })
const Nullable = <T extends ReturnType<typeof Type.String> | ReturnType<typeof Type.Integer>>(schema: T, description: string) =>
  Type.Union([schema, Type.Null()], { description })

export const ScheduleOverlap = Type.Union([Type.Literal('skip'), Type.Literal('enqueue'), Type.Literal('allow')], {
  description: 'a fire while the previous run is in progress: skip it (default, counted and recorded as lastSkippedAt), ' +
    'queue it until that run ends, or start it anyway'
})
export type ScheduleOverlap = Static<typeof ScheduleOverlap>

const Cron = Type.String({ minLength: 1, maxLength: 200, description: 'a cron expression of 5 fields (minute first) or 6 (second first)' })
const EveryMs = Type.Integer({ minimum: 1000, maximum: 366 * 24 * 60 * 60_000, description: 'fire every so many milliseconds (at least 1,000)' })
const At = Type.String({ format: 'date-time', description: 'one fire at this instant (in the future); the schedule disables itself after it' })
const Timezone = Type.String({ minLength: 1, maxLength: 64, description: 'an IANA time zone the cron expression is read in (default UTC)' })

/** A schedule (docs/schedules.md): runs of one agent for one principal, on a cron expression, an interval or once. */
export const Schedule = Type.Object({
  id: Type.String(),
  agent: Type.String(),
  principal: Type.String(),
  input: Type.Unknown({ description: 'the input of every run it starts' }),
  cron: Nullable(Type.String(), 'the cron expression; null for an interval or a one-shot schedule'),
  everyMs: Nullable(Type.Integer(), 'the interval; null otherwise'),
  at: Nullable(DateTime, 'the one-shot instant; null otherwise'),
  timezone: Type.String(),
  sessionId: Nullable(Type.String(), 'every fire continues this session; null: a new session per fire'),
  overlap: ScheduleOverlap,
  enabled: Type.Boolean(),
  nextRunAt: Nullable(DateTime, 'the next due time; null while disabled, or once a one-shot schedule fired'),
  lastRunAt: Nullable(DateTime, 'when its last run was started'),
  lastRunId: Nullable(Type.String(), 'its last run'),
  lastSkippedAt: Nullable(DateTime, 'the last due time skipped because the previous run was still in progress (overlap: skip)'),
  metadata: Metadata,
  createdAt: DateTime,
  updatedAt: DateTime
}, { title: 'Schedule' })
export type Schedule = Static<typeof Schedule>

export const CreateScheduleRequest = Type.Object({
  agent: AgentName,
  input: Type.Unknown({ description: 'checked against the agent\'s input schema now, and given to every run' }),
  cron: Type.Optional(Cron),
  everyMs: Type.Optional(EveryMs),
  at: Type.Optional(At),
  timezone: Type.Optional(Timezone),
  sessionId: Type.Optional(Id),
  overlap: Type.Optional(ScheduleOverlap),
  metadata: Type.Optional(Metadata),
  enabled: Type.Optional(Type.Boolean({ description: 'default true' }))
}, { title: 'CreateScheduleRequest', additionalProperties: false, required: ['agent', 'input'] })
export type CreateScheduleRequest = Static<typeof CreateScheduleRequest>

/** Any field but `agent`; a trigger given replaces the schedule's (the others become null), null clears sessionId. */
export const UpdateScheduleRequest = Type.Object({
  input: Type.Optional(Type.Unknown()),
  cron: Type.Optional(Cron),
  everyMs: Type.Optional(EveryMs),
  at: Type.Optional(At),
  timezone: Type.Optional(Timezone),
  sessionId: Type.Optional(Type.Union([Id, Type.Null()])),
  overlap: Type.Optional(ScheduleOverlap),
  metadata: Type.Optional(Metadata),
  enabled: Type.Optional(Type.Boolean())
}, { title: 'UpdateScheduleRequest', additionalProperties: false })
export type UpdateScheduleRequest = Static<typeof UpdateScheduleRequest>

export const ScheduleParams = Type.Object({ id: Id }, { additionalProperties: false })

export const ScheduleListQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(Cursor)
}, { additionalProperties: false })
export type ScheduleListQuery = Static<typeof ScheduleListQuery>

export const SchedulePage = Type.Object({
  schedules: Type.Array(Schedule, { description: 'most recently created first' }),
  nextCursor: NextCursor
}, { title: 'SchedulePage' })
export type SchedulePage = Static<typeof SchedulePage>

export const AdminScheduleListQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 50 })),
  cursor: Type.Optional(Cursor),
  principal: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'only this principal\'s' }))
}, { additionalProperties: false })

export const AdminSchedulePage = Type.Object({
  schedules: Type.Array(Schedule, { description: 'every principal\'s, most recently created first' }),
  nextCursor: NextCursor
}, { title: 'AdminSchedulePage' })

/** A due time being fired: claimed by `owner` until `until` (epoch ms), its run to be stored under `runId`. */
export const ScheduleFire = Type.Object({
  scheduledFor: DateTime,
  runId: Type.String(),
  owner: Type.String(),
  until: Type.Integer()
})
export type ScheduleFire = Static<typeof ScheduleFire>

/**
 * What a schedule store keeps of a schedule beside its columns, as JSON: the schedule, the fire under way, the fire
 * waiting for the previous run (overlap: enqueue) and its recent runs. Written by lib/schedules only.
 */
export const ScheduleState = Type.Object({
  schedule: Schedule,
  fire: Type.Union([ScheduleFire, Type.Null()]),
  waiting: Type.Union([Type.Object({ scheduledFor: DateTime, after: Type.String() }), Type.Null()]),
  runs: Type.Array(Type.String(), { description: 'its most recent runs\' ids, most recent first' })
})
export type ScheduleState = Static<typeof ScheduleState>
