import AjvCompiler from '@fastify/ajv-compiler'
import type { TSchema } from '@sinclair/typebox'
import type { FastifySchema, FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify'
import { InputValidationError } from './errors.js'

// Fastify's default Ajv coerces body types and silently strips unknown properties. Our routes answer
// both with a 400 instead: bodies are validated as sent; only querystrings and params (always strings
// on the wire) are coerced.
const buildCompiler = AjvCompiler()
const strict = buildCompiler({}, { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false } })
const coercing = buildCompiler({}, { customOptions: { coerceTypes: 'array', removeAdditional: false, useDefaults: true, allErrors: false } })

export const strictValidatorCompiler: FastifySchemaCompiler<FastifySchema> = (route) =>
  route.httpPart === 'body' ? strict(route) : coercing(route)

/** `body/foo is not allowed` rather than Ajv's `must NOT have additional properties`, which names nothing. */
export function formatSchemaErrors (errors: FastifySchemaValidationError[], dataVar: string): Error {
  const first = errors[0]!
  const path = `${dataVar}${first.instancePath}`
  const message = first.keyword === 'additionalProperties'
    ? `${path}/${String(first.params.additionalProperty)} is not allowed`
    : `${path} ${first.message}`
  return new Error(message)
}

/** Checks a run's input against its agent's schema; throws a 400 FST_ERR_VALIDATION naming `<name>/…`. */
export type InputValidator = (input: unknown, name: string) => void

/**
 * Compiles an agent's `input` schema once, with the same strict Ajv as our bodies (no coercion, no stripping).
 * Throws Ajv's error for a schema that is not one.
 */
export function compileInputValidator (schema: TSchema): InputValidator {
  const validate = strict({ schema, method: 'POST', url: '/v1/agents/:name/runs', httpPart: 'body' }) as ((data: unknown) => boolean) & { errors?: FastifySchemaValidationError[] | null }
  return (input, name) => {
    if (!validate(input)) throw new InputValidationError(formatSchemaErrors(validate.errors!, name).message)
  }
}
