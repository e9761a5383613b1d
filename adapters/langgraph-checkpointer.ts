/**
 * The LangGraph checkpointer of a `resumable` graph agent (docs/durable-agents.md): a saver kept in the run's own
 * checkpoint (`ctx.checkpoint`, the service's checkpoint store), so that any instance that takes the run over
 * (requeued, resumed, replayed) finds the graph's last checkpoint in `ctx.resume` and continues from it.
 *
 * It holds the run's last checkpoint of each namespace (and that checkpoint's pending writes) in a `MemorySaver`,
 * and saves them with `ctx.checkpoint` at each `put` and `putWrites`. It stands in front of the graph's own
 * checkpointer, if any, and writes through to it: the conversation of the session stays where the graph keeps it,
 * and what the run has not checkpointed yet (its first super-step) is read from there.
 */
import type { BaseCheckpointSaver, MemorySaver } from '@langchain/langgraph'
import type { RunContext } from '../lib/core/types.js'

type Storage = MemorySaver['storage']
type Writes = MemorySaver['writes']
type SaverPut = Parameters<BaseCheckpointSaver['put']>

/** What the run's checkpoint holds: the saver's storage, bytes as base64. */
interface SavedGraph {
  langgraph: { storage: unknown, writes: unknown }
}

export interface RunCheckpointer extends BaseCheckpointSaver {
  /** the saver began from the run's checkpoint: an earlier attempt had checkpointed the graph */
  readonly resumed: boolean
}

type RunCheckpointerClass = new (ctx: RunContext, inner: BaseCheckpointSaver | undefined) => RunCheckpointer

let made: Promise<RunCheckpointerClass> | undefined

/** The run's checkpointer, the graph's own (if it has one) behind it. */
export async function runCheckpointer (ctx: RunContext, inner: BaseCheckpointSaver | undefined): Promise<RunCheckpointer> {
  // Made on first use: only a graph needs @langchain/langgraph, a plain Runnable only @langchain/core.
  const Saver = await (made ??= import('@langchain/langgraph').then(({ BaseCheckpointSaver, MemorySaver }) => saverClass(BaseCheckpointSaver, MemorySaver)))
  return new Saver(ctx, inner)
}

function saverClass (Base: typeof BaseCheckpointSaver, Memory: typeof MemorySaver): RunCheckpointerClass {
  const baseDeltaHistory = Base.prototype.getDeltaChannelHistory

  return class RunCheckpointSaver extends Memory implements RunCheckpointer {
    readonly resumed: boolean
    readonly #ctx: RunContext
    readonly #inner: BaseCheckpointSaver | undefined

    constructor (ctx: RunContext, inner: BaseCheckpointSaver | undefined) {
      super()
      this.#ctx = ctx
      this.#inner = inner
      const saved = savedGraph(ctx.resume?.state)
      this.resumed = saved !== undefined
      if (saved !== undefined) {
        this.storage = decode(saved.langgraph.storage) as Storage
        this.writes = decode(saved.langgraph.writes) as Writes
      }
    }

    override async getTuple (config: Parameters<MemorySaver['getTuple']>[0]): ReturnType<MemorySaver['getTuple']> {
      return await super.getTuple(config) ?? await this.#inner?.getTuple(config)
    }

    // the thread's history is the graph's own checkpointer's; without one, the run's last checkpoints
    override list (config: Parameters<MemorySaver['list']>[0], options?: Parameters<MemorySaver['list']>[1]): ReturnType<MemorySaver['list']> {
      return this.#inner?.list(config, options) ?? super.list(config, options)
    }

    override async put (config: SaverPut[0], checkpoint: SaverPut[1], metadata: SaverPut[2], newVersions: SaverPut[3] = {}): ReturnType<MemorySaver['put']> {
      await this.#inner?.put(config, checkpoint, metadata, newVersions)
      const next = await super.put(config, checkpoint, metadata)
      // The run needs only its last checkpoint to go on: the older ones (and their writes) are not saved again.
      const namespace = this.storage[next.configurable!.thread_id as string]![next.configurable!.checkpoint_ns as string]!
      for (const id of Object.keys(namespace)) if (id !== checkpoint.id) delete namespace[id]
      for (const key of Object.keys(this.writes)) {
        const [thread, ns, id] = JSON.parse(key) as [string, string, string]
        if (this.storage[thread]?.[ns]?.[id] === undefined) delete this.writes[key]
      }
      await this.#save()
      return next
    }

    override async putWrites (...args: Parameters<MemorySaver['putWrites']>): Promise<void> {
      await this.#inner?.putWrites(...args)
      await super.putWrites(...args)
      await this.#save()
    }

    override async deleteThread (threadId: string): Promise<void> {
      await this.#inner?.deleteThread(threadId)
      await super.deleteThread(threadId)
    }

    // MemorySaver's walks its own storage, which keeps only the last checkpoints; the base walk reads the
    // ancestors through getTuple, from the graph's own checkpointer
    override getDeltaChannelHistory (options: Parameters<MemorySaver['getDeltaChannelHistory']>[0]): ReturnType<MemorySaver['getDeltaChannelHistory']> {
      return baseDeltaHistory.call(this, options)
    }

    async #save (): Promise<void> {
      const state: SavedGraph = { langgraph: { storage: encode(this.storage), writes: encode(this.writes) } }
      await this.#ctx.checkpoint(state)
    }
  }
}

function savedGraph (state: unknown): SavedGraph | undefined {
  const saved = (state as Partial<SavedGraph> | null | undefined)?.langgraph
  return typeof saved === 'object' && saved !== null ? state as SavedGraph : undefined
}

/** The storage as JSON: bytes as `{ base64 }`. */
function encode (value: unknown): unknown {
  if (value instanceof Uint8Array) return { base64: Buffer.from(value).toString('base64') }
  if (Array.isArray(value)) return value.map(encode)
  if (typeof value === 'object' && value !== null) {
    const encoded: Record<string, unknown> = {}
    for (const [key, entry] of Object.entries(value)) encoded[key] = encode(entry)
    return encoded
  }
  return value
}

/** Back from JSON: objects without a prototype, as MemorySaver makes them; a list's `null` (an absent parent id) `undefined`. */
function decode (value: unknown): unknown {
  if (Array.isArray(value)) return value.map((entry) => entry === null ? undefined : decode(entry))
  if (typeof value !== 'object' || value === null) return value
  const { base64 } = value as { base64?: unknown }
  if (typeof base64 === 'string') return new Uint8Array(Buffer.from(base64, 'base64'))
  const decoded: Record<string, unknown> = Object.create(null)
  for (const [key, entry] of Object.entries(value)) decoded[key] = decode(entry)
  return decoded
}
