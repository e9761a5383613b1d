import { createRequire } from 'node:module'
import type { Ajv } from 'ajv'
import type { Ajv2020 } from 'ajv/dist/2020.js'
import type { FastifySchema, FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify'
import { InputValidationError } from './errors.js'

// Fastify's default Ajv coerces body types and silently strips unknown properties. Our routes answer
// both with a 400 instead: bodies are validated as sent; only querystrings and params (always strings
// on the wire) are coerced.
// Made on first use, once per process: importing the package loads no Ajv (bench/import.js), hence require().
const require = createRequire(import.meta.url)
const strictOptions = { coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false } as const
let compilers: { strict: FastifySchemaCompiler<FastifySchema>, coercing: FastifySchemaCompiler<FastifySchema>, agents: FastifySchemaCompiler<FastifySchema> } | null = null
function ajvCompilers (): NonNullable<typeof compilers> {
  if (compilers !== null) return compilers
  const AjvCompiler = require('@fastify/ajv-compiler') as typeof import('@fastify/ajv-compiler')
  const buildCompiler = AjvCompiler()
  compilers = {
    // our routes' schemas are ours (and tested): not checked against the meta-schema, whose compile costs more than
    // theirs; an agent's schema is the user's, checked (a draft-04 `$schema` is refused, docs/agents.md)
    strict: buildCompiler({}, { customOptions: { ...strictOptions, validateSchema: false } }),
    coercing: buildCompiler({}, { customOptions: { coerceTypes: 'array', removeAdditional: false, useDefaults: true, allErrors: false, validateSchema: false } }),
    agents: buildCompiler({}, { customOptions: strictOptions })
  }
  return compilers
}

type Validator = ReturnType<FastifySchemaCompiler<FastifySchema>> & { schemaEnv?: unknown }

/**
 * Each route's validator is compiled at its first request, not at registration: a service has some 365 routes and
 * statuses, and a process that starts several services (a test, a worker) would otherwise compile them all
 * (bench/README.md, "The test suite's time"). Compiled once per schema object and process (Ajv's own cache).
 */
export const strictValidatorCompiler: FastifySchemaCompiler<FastifySchema> = (route) => {
  let compiled: Validator | undefined
  const validate: Validator = (data: unknown, context?: unknown) => {
    compiled ??= route.httpPart === 'body' ? ajvCompilers().strict(route) : ajvCompilers().coercing(route)
    const valid = (compiled as (data: unknown, context?: unknown) => ReturnType<Validator>)(data, context)
    validate.errors = compiled.errors
    return valid
  }
  // Fastify hands an Ajv validator (one with `schemaEnv`) the request as the value's parent, so that a default or a
  // coerced root value lands on the request
  validate.schemaEnv = true
  return validate
}

/** `body/foo is not allowed` rather than Ajv's `must NOT have additional properties`, which names nothing. */
export function formatSchemaErrors (errors: FastifySchemaValidationError[], dataVar: string): Error {
  const first = errors[0]!
  const path = `${dataVar}${first.instancePath}`
  const message = first.keyword === 'additionalProperties'
    ? `${path}/${String(first.params.additionalProperty)} is not allowed`
    : `${path} ${first.message}`
  return new Error(message)
}

/**
 * Checks a run's input against its agent's schema: what the agent's `run` gets (a Standard Schema's output, else the
 * input itself), or a 400 FST_ERR_VALIDATION naming `<name>/…`, thrown or (a Standard Schema's async check) rejected.
 */
export type InputValidator = (input: unknown, name: string) => unknown

// @fastify/ajv-compiler makes draft-07 instances only: a schema that says it is 2020-12 (what z.toJSONSchema()
// emits) gets an Ajv2020 with the same options and formats (see docs/agents.md, "Typed inputs").
let strict2020: Ajv2020 | undefined
function ajv2020 (): Ajv2020 {
  if (strict2020 === undefined) {
    const { Ajv2020: Ajv2020Class } = require('ajv/dist/2020.js') as typeof import('ajv/dist/2020.js')
    strict2020 = new Ajv2020Class({ ...strictOptions, addUsedSchema: false })
    ;(require('ajv-formats') as { default: (ajv: Ajv2020) => unknown }).default(strict2020)
  }
  return strict2020
}

/** A schema's `$schema` names draft 2020-12; anything else is left to the draft-07 Ajv (which refuses what it does not know). */
function is2020 (schema: unknown): boolean {
  const uri = (schema as { $schema?: unknown } | null)?.$schema
  return typeof uri === 'string' && /^https?:\/\/json-schema\.org\/draft\/2020-12\/schema#?$/.test(uri)
}

let meta07: Ajv | undefined

/**
 * What is wrong with `schema` as a JSON Schema of its draft (07, or 2020-12 by its `$schema`), by the meta-schema
 * alone (a schema that is only documented is never compiled): Ajv's message, or null.
 */
export function jsonSchemaProblem (schema: unknown): string | null {
  const ajv = is2020(schema) ? ajv2020() : (meta07 ??= new (require('ajv') as typeof import('ajv')).Ajv({ allErrors: true, strict: false }))
  return ajv.validateSchema(schema as object) === true ? null : ajv.errorsText(ajv.errors)
}

/**
 * Compiles an agent's JSON Schema (TypeBox's, or draft-07 or 2020-12 by its `$schema`) once, with the same strict
 * Ajv options as our bodies (no coercion, no stripping). Throws Ajv's error for a schema that is not one.
 */
export function compileInputValidator (schema: unknown): InputValidator {
  const validate = (is2020(schema)
    ? ajv2020().compile(schema as object)
    : ajvCompilers().agents({ schema: schema as FastifySchema, method: 'POST', url: '/v1/agents/:name/runs', httpPart: 'body' })) as ((data: unknown) => boolean) & { errors?: FastifySchemaValidationError[] | null }
  return (input, name) => {
    if (!validate(input)) throw new InputValidationError(formatSchemaErrors(validate.errors!, name).message)
    return input
  }
}

function escaped (text: string, quote: number): boolean {
  let k = quote - 1
  while (text.charCodeAt(k) === 0x5c) k--
  return (quote - k) % 2 === 0
}

/**
 * Whether JSON text nests arrays and objects deeper than `max`, read before it is parsed: a document a
 * thousand levels deep parses, then breaks whatever walks it recursively (a store's serializer, a log line).
 * Text that is not JSON is left to the parser to refuse.
 */
export function jsonDeeperThan (text: string, max: number): boolean {
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) {
      // a string: on to its closing quote, one not escaped by an odd run of backslashes
      do {
        i = text.indexOf('"', i + 1)
        if (i === -1) return false
      } while (escaped(text, i))
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true
    } else if (c === 0x7d || c === 0x5d) {
      depth--
    }
  }
  return false
}

const isWellFormed = (String.prototype as unknown as { isWellFormed: (this: string) => boolean }).isWellFormed

function fault (text: string): string | null {
  if (!isWellFormed.call(text)) return 'a lone surrogate'
  return text.includes('\u0000') ? 'a NUL character' : null
}

/**
 * The first string of `value` (a key or a value, at any depth) that not every store keeps as it is: one holding
 * NUL (PostgreSQL text refuses it) or a lone surrogate (UTF-8 drivers turn it into U+FFFD). Its path and fault.
 */
export function unstorableText (value: unknown, path: string): { path: string, holds: string } | null {
  if (typeof value === 'string') {
    const holds = fault(value)
    return holds === null ? null : { path, holds }
  }
  if (typeof value !== 'object' || value === null) return null
  for (const [key, item] of Object.entries(value)) {
    const holds = fault(key)
    if (holds !== null) return { path: `${path}/${key}`, holds }
    const found = unstorableText(item, `${path}/${key}`)
    if (found !== null) return found
  }
  return null
}
