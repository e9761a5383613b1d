import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
// A self-reference: resolves to our package.json from the sources (tests) and from dist/ (users) alike.
export const packageVersion = (require('fastify-agents/package.json') as { version: string }).version
