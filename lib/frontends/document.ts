import type { SwaggerTransform } from '@fastify/swagger'

export interface DocumentedAnswer {
  /** the 200's description */
  description: string
  /** the JSON answer's schema, when the route answers JSON too */
  json?: unknown
  /** what the event stream carries */
  stream: string
  /** the request body as the document shows it (a route that reads its body itself) */
  body?: unknown
  /** other answers, beside the route's own */
  responses?: Record<string, unknown>
}

/**
 * The 200 of a route that answers through a hijacked reply (never serialized, so never validated against a
 * schema), shown in the document as it is sent: JSON and (or only) an event stream.
 */
export function documentAnswer ({ description, json, stream, body, responses }: DocumentedAnswer): SwaggerTransform {
  return ({ schema, url }) => {
    // made for each document (its builder may rewrite what it is given)
    const content: Record<string, unknown> = {}
    if (json !== undefined) content['application/json'] = { schema: json }
    content['text/event-stream'] = { schema: { type: 'string', description: stream } }
    return {
      url,
      schema: {
        ...schema,
        ...(body === undefined ? {} : { body }),
        response: { ...(schema.response as Record<string, unknown>), 200: { description, content }, ...responses }
      }
    }
  }
}
