// The layers of the source tree (docs/architecture.md has the picture), checked on every import. Bottom to top:
// schemas/ ← lib/core ← lib/stores ← lib/runs ← the features' logic (lib/audit, auth, quotas, webhooks,
// idempotency) ← lib/service (the composition) ← the features' plugins (lib/<feature>/index.ts) and the front ends
// (lib/frontends) ← plugins/, routes/ ← app/ ← index.ts, bin/. A file may import its own layer (where listed) and the
// ones below it; a feature never imports another feature, a front end never another front end, a plugin never
// another plugin, a route never another route (shared operations hang off the core decorator, lib/service/service.ts).
// client/ (fastify-agents/client, shipped to browsers) stands apart: it takes types from schemas/ and nothing else of
// the tree, so that it loads nothing of the server. lib/testing (fastify-agents/testing, the store suites) stands
// apart too: it reads lib/core and the stores' types, and nothing of the tree imports it (it is for tests only).
import t from 'tap'
import { readFileSync, readdirSync, statSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { projectRoot, sources } from './helpers/files.js'

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

/** The features whose folder holds their logic (below the service) and their plugin (`index.ts`, above it). */
const features = new Set(['audit', 'auth', 'idempotency', 'quotas', 'webhooks'])

/** Every layer, bottom first. */
export const layers = [
  'schemas', 'core', 'stores', 'runs', 'feature', 'service', 'feature plugin', 'frontends', 'frontend',
  'plugins', 'routes', 'adapters', 'app', 'bin', 'index', 'client', 'testing'
] as const
export type Layer = typeof layers[number]

/**
 * A file's layer and, where siblings may not import each other, its unit (the feature, the front end, the plugin
 * or route file). null: a file outside the layers (a test).
 */
export function layerOf (path: string): { layer: Layer, unit: string } | null {
  const parts = path.split('/')
  const [top, second] = parts
  if (path === 'index.ts') return { layer: 'index', unit: path }
  if (top === 'lib') {
    if (second === 'core' || second === 'console') return { layer: 'core', unit: second }
    if (second === 'testing') return { layer: 'testing', unit: second }
    if (second === 'stores' || second === 'runs' || second === 'service') return { layer: second, unit: second }
    if (features.has(second!)) return { layer: parts[2] === 'index.ts' ? 'feature plugin' : 'feature', unit: second! }
    if (second === 'frontends') return parts.length === 3 ? { layer: 'frontends', unit: 'frontends' } : { layer: 'frontend', unit: parts[2]! }
    throw new Error(`${path}: a folder of lib/ that test/layering.test.ts does not know; give it a layer there`)
  }
  if (top === 'schemas' || top === 'plugins' || top === 'routes' || top === 'adapters' || top === 'app' || top === 'bin' || top === 'client') return { layer: top, unit: path }
  return null
}

/** Which layers each layer may import; `self`: its own layer, within its own unit only when the layer is in `siblings`. */
const below = (layer: Layer): Layer[] => layers.slice(0, layers.indexOf(layer) + 1)
const allowed: Record<Layer, readonly Layer[]> = {
  schemas: ['schemas'],
  core: ['schemas', 'core'],
  stores: below('stores'),
  runs: below('runs'),
  feature: below('feature'),
  service: below('service'),
  'feature plugin': ['schemas', 'core', 'stores', 'runs', 'feature', 'service'],
  frontends: ['schemas', 'core', 'stores', 'runs', 'feature', 'service', 'frontends'],
  frontend: ['schemas', 'core', 'stores', 'runs', 'feature', 'service', 'frontends', 'frontend'],
  plugins: ['schemas', 'core', 'stores', 'runs', 'feature', 'service', 'plugins'],
  routes: ['schemas', 'core', 'stores', 'runs', 'feature', 'service', 'frontends', 'routes'],
  adapters: ['schemas', 'core', 'runs', 'adapters'],
  app: below('app').filter((layer) => layer !== 'adapters'),
  bin: ['app'],
  index: layers.filter((layer) => layer !== 'bin' && layer !== 'index' && layer !== 'client' && layer !== 'testing'),
  client: ['client'],
  testing: ['core', 'stores', 'testing']
}
/** Layers whose units never import each other: each names what it is. */
const siblings: Partial<Record<Layer, string>> = {
  feature: 'a feature never imports another feature',
  'feature plugin': 'a plugin never imports another plugin',
  frontend: 'a front end never imports another front end',
  plugins: 'a plugin never imports another plugin',
  routes: 'a route never imports another route'
}

/** Every import that breaks the layering, as "from -> to (why)". */
export function violations (edges: readonly ImportEdge[]): string[] {
  const found: string[] = []
  for (const { from, to, typeOnly } of edges) {
    const source = layerOf(from)
    const target = layerOf(to)
    if (source === null || target === null) continue
    // the options schema names the types of the objects it checks (agents, stores): types only, nothing loaded
    if (source.layer === 'schemas' && typeOnly) continue
    // the client's types are the schemas' (a value would load TypeBox into the browser)
    if (source.layer === 'client' && target.layer === 'schemas') {
      if (!typeOnly) found.push(`${from} -> ${to} (client/ imports types only from schemas/)`)
      continue
    }
    // the store suites check what a store does through its interface: the stores' types, no implementation
    if (source.layer === 'testing' && target.layer === 'stores') {
      if (!typeOnly) found.push(`${from} -> ${to} (lib/testing imports types only from lib/stores)`)
      continue
    }
    // a feature's plugin is its own feature's too: it may use the feature's logic
    const sameUnit = source.unit === target.unit
    if (source.layer === 'feature plugin' && target.layer === 'feature' && sameUnit) continue
    if (source.layer === target.layer && siblings[source.layer] !== undefined) {
      if (!sameUnit) found.push(`${from} -> ${to} (${siblings[source.layer]!})`)
      continue
    }
    if (target.layer === 'feature' && source.layer === 'feature plugin') {
      found.push(`${from} -> ${to} (a plugin uses its own feature's logic only)`)
      continue
    }
    if (!allowed[source.layer].includes(target.layer)) found.push(`${from} -> ${to} (${source.layer} may not import ${target.layer})`)
  }
  return found
}

t.test('the source tree keeps its layers', async (t) => {
  const files = ['index.ts', ...['adapters', 'app', 'bin', 'client', 'lib', 'plugins', 'routes', 'schemas'].flatMap(sources)]
  for (const file of files) t.not(layerOf(file), null, `${file} has a layer`)
  const edges = files.flatMap((file) => importsOf(file, readFileSync(join(root, file), 'utf8')))
  t.ok(edges.length > 100, `the check sees the imports (${edges.length})`)
  t.same(violations(edges), [])
})

t.test('every folder of lib/ has a layer', async (t) => {
  for (const name of readdirSync(join(root, 'lib'))) {
    if (statSync(join(root, 'lib', name)).isDirectory()) t.doesNotThrow(() => layerOf(`lib/${name}/x.ts`), `lib/${name}`)
  }
  t.throws(() => layerOf('lib/newfeature/x.ts'), /does not know/, 'a new folder is refused until it is given a layer')
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
    ...importsOf('index.ts', "export * from './client/index.js'"),
    ...importsOf('lib/testing/runs.ts', "import { MemoryRunStore } from '../stores/memory-runs.js'\nimport type { RunStore } from '../stores/types.js'\nimport { x } from '../runs/x.js'"),
    ...importsOf('lib/stores/memory.ts', "import { newRun } from '../testing/runs.js'"),
    ...importsOf('index.ts', "export * from './lib/testing/index.js'")
  ]
  t.same(violations(edges), [
    'lib/core/x.ts -> plugins/core.ts (core may not import plugins)',
    'routes/a.ts -> routes/b.ts (a route never imports another route)',
    'plugins/a.ts -> plugins/b.ts (a plugin never imports another plugin)',
    'plugins/c.ts -> routes/agents.ts (plugins may not import routes)',
    'schemas/x.ts -> lib/runs/run.ts (schemas may not import runs)',
    'client/index.ts -> schemas/runs.ts (client/ imports types only from schemas/)',
    'client/index.ts -> lib/core/x.ts (client may not import core)',
    'index.ts -> client/index.ts (index may not import client)',
    'lib/testing/runs.ts -> lib/stores/memory-runs.ts (lib/testing imports types only from lib/stores)',
    'lib/testing/runs.ts -> lib/runs/x.ts (testing may not import runs)',
    'lib/stores/memory.ts -> lib/testing/runs.ts (stores may not import testing)',
    'index.ts -> lib/testing/index.ts (index may not import testing)'
  ])
})

t.test('an upward import inside lib/ is caught, whichever layers it crosses', async (t) => {
  const planted = [
    // the leaves import nothing above them
    ...importsOf('lib/core/errors.ts', "import type { Settings } from '../service/settings.js'"),
    ...importsOf('lib/core/ids.ts', "import { x } from '../stores/common.js'"),
    // the stores know no run, the runs no service (they take what they use: lib/runs/host.ts)
    ...importsOf('lib/stores/memory.ts', "import type { AgentRun } from '../runs/run.js'"),
    ...importsOf('lib/runs/worker.ts', "import type { AgentServiceCore } from '../service/service.js'"),
    // a feature's logic is below the service and the plugins; features and front ends keep to themselves
    ...importsOf('lib/webhooks/dispatcher.ts', "import type { AgentServiceCore } from '../service/service.js'"),
    ...importsOf('lib/audit/log.ts', "import { Quotas } from '../quotas/quotas.js'"),
    ...importsOf('lib/auth/credentials.ts', "import { authPlugin } from './index.js'"),
    ...importsOf('lib/audit/index.ts', "import { readCredential } from '../auth/credentials.js'"),
    ...importsOf('lib/audit/index.ts', "import { authPlugin } from '../auth/index.js'"),
    ...importsOf('lib/service/service.ts', "import { chatPlugin } from '../frontends/chat/index.js'"),
    ...importsOf('lib/frontends/stream.ts', "import { AgUiProjection } from './ag-ui/events.js'"),
    ...importsOf('lib/frontends/chat/index.ts', "import { AgUiProjection } from '../ag-ui/events.js'"),
    // what is allowed, for contrast: a plugin uses its own feature, the service composes the features, a front end the shared files
    ...importsOf('lib/auth/index.ts', "import { readCredential } from './credentials.js'"),
    ...importsOf('lib/service/service.ts', "import { AuditLog } from '../audit/log.js'"),
    ...importsOf('lib/frontends/chat/index.ts', "import { ProjectedStream } from '../stream.js'"),
    ...importsOf('routes/admin.ts', "import { ServiceStats } from '../lib/service/stats.js'")
  ]
  t.same(violations(planted), [
    'lib/core/errors.ts -> lib/service/settings.ts (core may not import service)',
    'lib/core/ids.ts -> lib/stores/common.ts (core may not import stores)',
    'lib/stores/memory.ts -> lib/runs/run.ts (stores may not import runs)',
    'lib/runs/worker.ts -> lib/service/service.ts (runs may not import service)',
    'lib/webhooks/dispatcher.ts -> lib/service/service.ts (feature may not import service)',
    'lib/audit/log.ts -> lib/quotas/quotas.ts (a feature never imports another feature)',
    'lib/auth/credentials.ts -> lib/auth/index.ts (feature may not import feature plugin)',
    'lib/audit/index.ts -> lib/auth/credentials.ts (a plugin uses its own feature\'s logic only)',
    'lib/audit/index.ts -> lib/auth/index.ts (a plugin never imports another plugin)',
    'lib/service/service.ts -> lib/frontends/chat/index.ts (service may not import frontend)',
    'lib/frontends/stream.ts -> lib/frontends/ag-ui/events.ts (frontends may not import frontend)',
    'lib/frontends/chat/index.ts -> lib/frontends/ag-ui/events.ts (a front end never imports another front end)'
  ])
})
