import AjvCompiler from '@fastify/ajv-compiler'
import type { FastifySchema, FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify'

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
