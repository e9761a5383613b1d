// An agent's `input` and `output` schemas, in the schema library its author already uses (docs/agents.md, "Typed
// inputs"): TypeBox, a JSON Schema (draft-07 or 2020-12), or a Standard Schema validator (Zod, Valibot, ArkType).
// The library validates its own schemas and converts them to JSON Schema for the documents: no converter of ours.
import type { Static, TSchema } from '@sinclair/typebox'
import type { StandardJSONSchemaV1, StandardSchemaV1 } from '@standard-schema/spec'
import { InputValidationError } from './errors.js'
import { compileInputValidator, jsonSchemaProblem } from './validation.js'
import type { InputValidator } from './validation.js'

/** A JSON Schema as a plain object: draft-07, or 2020-12 when its `$schema` says so (what `z.toJSONSchema()` returns). */
export type JsonSchema = { readonly [keyword: string]: unknown }

/** What an agent's `input` or `output` may be. */
export type AgentSchema = TSchema | StandardSchemaV1 | JsonSchema

/**
 * The value a schema checks, as `run` gets it: a Standard Schema's output type, a TypeBox schema's `Static`;
 * `unknown` for a plain JSON Schema (annotate `run`'s input yourself, or use TypeBox's `Type.Unsafe<T>(schema)`).
 */
export type InferSchema<S> = S extends StandardSchemaV1 ? StandardSchemaV1.InferOutput<S> : S extends TSchema ? Static<S> : unknown

/** An agent's schemas, made once at registration. */
export interface CompiledAgentSchemas {
  /** checks a run's input; absent without an `input` schema */
  validate?: InputValidator
  /** the schemas as JSON Schema, for the OpenAPI document */
  input?: JsonSchema
  output?: JsonSchema
}

// the documents are OpenAPI 3.1, whose schemas are JSON Schema 2020-12
const TARGET = 'draft-2020-12'

function isStandardSchema (schema: unknown): schema is StandardSchemaV1 {
  const props = (schema as { '~standard'?: { validate?: unknown } } | null)?.['~standard']
  return typeof props?.validate === 'function'
}

/** A JSON Pointer segment: `~` and `/` escaped, as Ajv names a path. */
function segment (key: PropertyKey | StandardSchemaV1.PathSegment): string {
  const name = typeof key === 'object' ? key.key : key
  return String(name).replace(/~/g, '~0').replace(/\//g, '~1')
}

function valueOf (result: StandardSchemaV1.Result<unknown>, name: string): unknown {
  if (!result.issues) return result.value
  // the first issue, as Ajv reports the first error: the library's message (its words), after the path it names
  const issue = result.issues[0]
  // (not path.map(): ArkType's path is an Array subclass whose map() makes a path of its own)
  let path = name
  for (const key of issue?.path ?? []) path += `/${segment(key)}`
  throw new InputValidationError(`${path} is invalid: ${issue?.message ?? 'the schema refused it'}`)
}

/** A Standard Schema's check: synchronous when the library's is, a promise when it is async (Zod's async refinements). */
function standardValidator (schema: StandardSchemaV1): InputValidator {
  const props = schema['~standard']
  return (input, name) => {
    const result = props.validate(input)
    return result instanceof Promise ? result.then((settled) => valueOf(settled, name)) : valueOf(result, name)
  }
}

/**
 * A Standard Schema's JSON Schema from its library's own converter (Standard JSON Schema's `~standard.jsonSchema`),
 * for the input or the output type; `$schema` dropped (the document's dialect). Throws, saying what to do, without one.
 */
function standardJsonSchema (schema: StandardSchemaV1, io: 'input' | 'output'): JsonSchema {
  const props = schema['~standard'] as StandardSchemaV1.Props & Partial<Pick<StandardJSONSchemaV1.Props, 'jsonSchema'>>
  if (typeof props.jsonSchema?.[io] !== 'function') {
    throw new Error(`a ${props.vendor} schema without a JSON Schema converter (~standard.jsonSchema): wrap it in its library's ` +
      '(Valibot: toStandardJsonSchema() from @valibot/to-json-schema), or use a version that has one (Zod 4.2, ArkType 2.1.28)')
  }
  const { $schema, ...json } = props.jsonSchema[io]({ target: TARGET })
  return json
}

/** A JSON Schema given as one (TypeBox's included), as plain JSON: TypeBox's symbols dropped. */
function plain (schema: unknown): JsonSchema {
  return JSON.parse(JSON.stringify(schema)) as JsonSchema
}

/**
 * Compiles and converts an agent's `input` and `output` once, at registration. Each problem names its option
 * (`<path>/input is not a valid schema: …`); `output` is documentation, never checked against a result.
 */
export function compileAgentSchemas (path: string, input: unknown, output: unknown): { schemas: CompiledAgentSchemas, problems: string[] } {
  const schemas: CompiledAgentSchemas = {}
  const problems: string[] = []
  if (input !== undefined) {
    try {
      if (isStandardSchema(input)) {
        schemas.input = standardJsonSchema(input, 'input')
        schemas.validate = standardValidator(input)
      } else {
        schemas.validate = compileInputValidator(input)
        schemas.input = plain(input)
      }
    } catch (error) {
      problems.push(`${path}/input is not a valid schema: ${(error as Error).message}`)
    }
  }
  if (output !== undefined) {
    try {
      if (isStandardSchema(output)) {
        schemas.output = standardJsonSchema(output, 'output')
      } else {
        const problem = jsonSchemaProblem(output)
        if (problem !== null) throw new Error(problem)
        schemas.output = plain(output)
      }
    } catch (error) {
      problems.push(`${path}/output is not a valid schema: ${(error as Error).message}`)
    }
  }
  return { schemas, problems }
}

/**
 * Any schema this module takes (TypeBox, JSON Schema, a Standard Schema with a converter) as the plain JSON Schema a
 * store can keep and any instance can compile: an approval's `schema` (docs/durable-agents.md). Throws, naming what
 * is wrong, for one that is not a schema.
 */
export function storableJsonSchema (schema: unknown): JsonSchema {
  if (isStandardSchema(schema)) return { $schema: 'https://json-schema.org/draft/2020-12/schema', ...standardJsonSchema(schema, 'input') }
  const problem = typeof schema === 'object' && schema !== null ? jsonSchemaProblem(schema) : 'a schema is an object'
  if (problem !== null) throw new TypeError(`not a valid schema: ${problem}`)
  return plain(schema)
}
