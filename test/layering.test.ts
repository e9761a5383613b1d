// The layers of the source tree (README, "How it fits together"), checked on every import:
// schemas/ ← lib/ ← plugins/, routes/ ← app/ ← index.ts, bin/. A file may import its own layer and the ones
// below it; a plugin never imports another plugin, a route never another route (shared operations hang off
// the core decorator, lib/core/service.ts). client/ (fastify-agents/client, shipped to browsers) stands apart: it
// takes types from schemas/ and nothing else of the tree, so that it loads nothing of the server.
import t from 'tap'
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { fileURLToPath } from 'node:url'

// the sources, wherever the compiled test runs from: the folder of the nearest package.json
function projectRoot (): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir)
  return dir
}
const root = projectRoot()

export interface ImportEdge {
  from: string
  to: string
  typeOnly: boolean
}

/** The relative imports of a file's source (static, dynamic and re-exports), resolved to root-relative paths. */
export function importsOf (file: string, source: string): ImportEdge[] {
  const edges: ImportEdge[] = []
  const pattern = /(?:^|\n)\s*(import|export)(\s+type)?[^'";]*?from\s+['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g
  for (const match of source.matchAll(pattern)) {
    const specifier = match[3] ?? match[4]!
    const to = normalize(join(dirname(file), specifier)).replace(/\.js$/, '.ts')
    edges.push({ from: file, to, typeOnly: match[2] !== undefined })
  }
  return edges
}

function layerOf (path: string): string {
  if (path === 'index.ts') return 'index'
  return path.split('/')[0]!
}

/** Which layers each layer may import (its own included where listed). */
const allowed: Record<string, readonly string[]> = {
  schemas: ['schemas'],
  lib: ['lib', 'schemas'],
  plugins: ['lib', 'schemas'],
  routes: ['lib', 'schemas'],
  adapters: ['adapters', 'lib', 'schemas'],
  app: ['app', 'lib', 'plugins', 'routes', 'schemas'],
  bin: ['app'],
  client: ['client'],
  index: ['app', 'lib', 'plugins', 'routes', 'schemas', 'adapters']
}

/** Every import that breaks the layering, as "from -> to (why)". */
export function violations (edges: readonly ImportEdge[]): string[] {
  const found: string[] = []
  for (const { from, to, typeOnly } of edges) {
    const fromLayer = layerOf(from)
    const toLayer = layerOf(to)
    const rules = allowed[fromLayer]
    if (rules === undefined) continue
    // the options schema names the types of the objects it checks (agents, stores): types only, nothing loaded
    if (fromLayer === 'schemas' && toLayer === 'lib' && typeOnly) continue
    // the client's types are the schemas' (a value would load TypeBox into the browser)
    if (fromLayer === 'client' && toLayer === 'schemas' && typeOnly) continue
    if (rules.includes(toLayer)) continue
    if (toLayer === fromLayer) found.push(`${from} -> ${to} (a ${fromLayer === 'plugins' ? 'plugin' : 'route'} never imports a sibling)`)
    else if (fromLayer === 'client' && toLayer === 'schemas') found.push(`${from} -> ${to} (client/ imports types only from schemas/)`)
    else found.push(`${from} -> ${to} (${fromLayer}/ may not import ${toLayer}/)`)
  }
  return found
}

function sources (dir: string): string[] {
  const out: string[] = []
  for (const name of readdirSync(join(root, dir))) {
    const path = join(dir, name)
    if (statSync(join(root, path)).isDirectory()) out.push(...sources(path))
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(path)
  }
  return out
}

t.test('the source tree keeps its layers', async (t) => {
  const files = ['index.ts', ...['adapters', 'app', 'bin', 'client', 'lib', 'plugins', 'routes', 'schemas'].flatMap(sources)]
  const edges = files.flatMap((file) => importsOf(file, readFileSync(join(root, file), 'utf8')))
  t.ok(edges.length > 100, `the check sees the imports (${edges.length})`)
  t.same(violations(edges), [])
})

t.test('the check fails on a forbidden import', async (t) => {
  const edges = [
    ...importsOf('lib/core/x.ts', "import { corePlugin } from '../../plugins/core.js'"),
    ...importsOf('routes/a.ts', "import type { B } from './b.js'"),
    ...importsOf('plugins/a.ts', "export { b } from './b.js'"),
    ...importsOf('plugins/c.ts', "const m = await import('../routes/agents.js')"),
    ...importsOf('schemas/x.ts', "import { run } from '../lib/runs/run.js'"),
    ...importsOf('schemas/y.ts', "import type { Agent } from '../lib/core/types.js'"),
    ...importsOf('lib/runs/x.ts', "import { a } from '../core/a.js'\nimport type { S } from '../../schemas/s.js'"),
    ...importsOf('test/x.test.ts', "import { anything } from '../plugins/core.js'"),
    ...importsOf('client/index.ts', "import type { RunResult } from '../schemas/runs.js'\nimport { RunRequest } from '../schemas/runs.js'\nimport { x } from '../lib/core/x.js'"),
    ...importsOf('index.ts', "export * from './client/index.js'")
  ]
  t.same(violations(edges), [
    'lib/core/x.ts -> plugins/core.ts (lib/ may not import plugins/)',
    'routes/a.ts -> routes/b.ts (a route never imports a sibling)',
    'plugins/a.ts -> plugins/b.ts (a plugin never imports a sibling)',
    'plugins/c.ts -> routes/agents.ts (plugins/ may not import routes/)',
    'schemas/x.ts -> lib/runs/run.ts (schemas/ may not import lib/)',
    'client/index.ts -> schemas/runs.ts (client/ imports types only from schemas/)',
    'client/index.ts -> lib/core/x.ts (client/ may not import lib/)',
    'index.ts -> client/index.ts (index/ may not import client/)'
  ])
})
