import { createRequire } from 'node:module'
import type { FastifyServerOptions } from 'fastify'

// Fastify compiles a serializer for each response schema of each route as an app starts: fast-json-stringify writes
// code and builds an Ajv of its own every time. A process that starts many services (a test suite, a host of several)
// would compile the same module-level schemas again for each one: here each schema object is compiled once per process.
// Loaded on first use, like the validators (lib/core/validation.ts): importing the package compiles nothing.
const require = createRequire(import.meta.url)

type BuildSerializer = NonNullable<NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildSerializer']>
type Serializer = ReturnType<ReturnType<BuildSerializer>>

const compiled = new WeakMap<object, Serializer>()
let fastifyDefault: BuildSerializer | undefined

/** Fastify's own serializer compiler (`schemaController.compilersFactory.buildSerializer`), its output shared by schema. */
export const buildSharedSerializer: BuildSerializer = (externalSchemas, serializerOpts) => {
  fastifyDefault ??= (require('@fastify/fast-json-stringify-compiler') as () => BuildSerializer)()
  const compile = fastifyDefault(externalSchemas, serializerOpts)
  // an app's shared schemas ($ref) or serializer options change what a schema compiles to: that app compiles its own
  if (Object.keys(externalSchemas ?? {}).length > 0 || Object.keys(serializerOpts ?? {}).length > 0) return compile
  return (route) => {
    let serializer = compiled.get(route.schema as object)
    if (serializer === undefined) {
      serializer = compile(route)
      compiled.set(route.schema as object, serializer)
    }
    return serializer
  }
}
