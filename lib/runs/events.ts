// The run event vocabulary (README.md, "The event vocabulary"): which event types an agent may produce, and the shape of the
// built-in ones. Checked on every event an agent yields or emits; the service's own events (run.*, approval.*,
// checkpoint.*, step.*) go through AgentRun.emit directly and are not checked.

export const CUSTOM_EVENT_TYPE = /^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*$/
export const MAX_EVENT_TYPE_LENGTH = 64
export const RESERVED_EVENT_PREFIXES = ['run.', 'approval.', 'checkpoint.', 'step.'] as const

type Fields = Record<string, unknown>

function isObject (data: unknown): data is Fields {
  return typeof data === 'object' && data !== null
}

// Hand-written rather than compiled schemas: five fixed shapes, checked per event, with no allocation.
// A Map, not an object literal: an event named "constructor" must not find Object.prototype's.
const shapes = new Map<string, { check: (data: Fields) => boolean, description: string }>([
  ['message.delta', { check: (d) => typeof d.text === 'string', description: '{ text: string }' }],
  ['reasoning.delta', { check: (d) => typeof d.text === 'string', description: '{ text: string }' }],
  ['tool.call.delta', {
    check: (d) => typeof d.toolCallId === 'string' && typeof d.name === 'string' && typeof d.delta === 'string',
    description: '{ toolCallId: string, name: string, delta: string }'
  }],
  ['tool.call', {
    check: (d) => typeof d.toolCallId === 'string' && typeof d.name === 'string',
    description: '{ toolCallId: string, name: string, input }'
  }],
  ['tool.result', {
    check: (d) => typeof d.toolCallId === 'string' && typeof d.name === 'string' && typeof d.isError === 'boolean',
    description: '{ toolCallId: string, name: string, output, isError: boolean }'
  }]
])

/**
 * What is wrong with an event an agent produced, as the end of a sentence that names it (`"x" is reserved …`),
 * or null when it may go out.
 */
export function agentEventProblem (type: string, data: unknown): string | null {
  const shape = shapes.get(type)
  if (shape !== undefined) {
    return isObject(data) && shape.check(data) ? null : `"${type}" needs data ${shape.description}`
  }
  if (type.length > MAX_EVENT_TYPE_LENGTH || !CUSTOM_EVENT_TYPE.test(type)) {
    return `${JSON.stringify(type.length > MAX_EVENT_TYPE_LENGTH ? type.slice(0, MAX_EVENT_TYPE_LENGTH) + '…' : type)} is not a valid event type (${CUSTOM_EVENT_TYPE.source}, at most ${MAX_EVENT_TYPE_LENGTH} characters)`
  }
  for (const prefix of RESERVED_EVENT_PREFIXES) {
    if (type.startsWith(prefix)) return `"${type}" is reserved to the service (${RESERVED_EVENT_PREFIXES.join(', ')})`
  }
  return null
}

/** The two event types that end an attempt of a run: its end too, unless the run goes on (see endsRun). */
export function isTerminal (type: string): boolean {
  return type === 'run.completed' || type === 'run.failed'
}

/**
 * Where a run's log ends, for every reader of it (followers, replays, the front ends): at a terminal event that
 * nothing follows. A run resumed under its id (`resumeRunId`) goes on after an attempt's terminal event
 * (`run.requeued { reason: 'RESUMED' }`, then its next attempt), so that one is not the end. For `events[index]`, read
 * in order from the log: true when it ends the run, false when it does not (not a terminal event, or one that events
 * follow), undefined when that is not known yet — a terminal event last of `events` that may not hold all the log
 * had (`complete` false: a page read in full); the next read tells.
 */
export function endsRun (events: ReadonlyArray<{ type: string }>, index: number, complete: boolean): boolean | undefined {
  if (!isTerminal(events[index]!.type)) return false
  if (index < events.length - 1) return false
  return complete ? true : undefined
}
