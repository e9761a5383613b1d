import { AsyncLocalStorage } from 'node:async_hooks'
import { ROOT_CONTEXT, context, trace } from '@opentelemetry/api'
import type { Context, ContextManager } from '@opentelemetry/api'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import type { Sampler } from '@opentelemetry/sdk-trace-base'
import type { Test } from 'tap'

/** The context manager a host's SDK registers (what @opentelemetry/context-async-hooks does), in a few lines. */
class AsyncLocalContextManager implements ContextManager {
  readonly #storage = new AsyncLocalStorage<Context>()
  active (): Context { return this.#storage.getStore() ?? ROOT_CONTEXT }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>> (ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.#storage.run(ctx, () => fn.apply(thisArg, args))
  }

  bind<T> (_ctx: Context, target: T): T { return target }
  enable (): this { return this }
  disable (): this { this.#storage.disable(); return this }
}

/** Registers an SDK with an in-memory exporter for the test (unregistered in teardown), as a host app would. */
export function registerTracing (t: Test, sampler?: Sampler): InMemorySpanExporter {
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)], ...(sampler === undefined ? {} : { sampler }) })
  trace.setGlobalTracerProvider(provider)
  context.setGlobalContextManager(new AsyncLocalContextManager())
  t.teardown(async () => {
    trace.disable()
    context.disable()
    await provider.shutdown()
  })
  return exporter
}
