// The front-end protocols' packages are never loaded by importing fastify-agents: the projections of the AI SDK
// stream and AG-UI name their packages' types only, and @a2a-js/sdk (an optional peer) is imported by
// lib/frontends/a2a/protocol.ts alone, which only lib/frontends/a2a/run-port.ts loads, on the first A2A request.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { projectRoot, sources } from '../../../helpers/files.js'

const root = projectRoot()

const files = ['index.ts', ...['adapters', 'app', 'bin', 'lib', 'plugins', 'routes', 'schemas'].flatMap(sources)]
const text = (file: string): string => readFileSync(join(root, file), 'utf8')

/** Static imports (and re-exports) of a module, as [file, typeOnly]. */
function importers (module: RegExp): Array<[string, boolean]> {
  const pattern = new RegExp(`(?:^|\\n)\\s*(?:import|export)(\\s+type)?[^'";]*?from\\s+['"]${module.source}['"]`, 'g')
  return files.flatMap((file) => [...text(file).matchAll(pattern)].map((match): [string, boolean] => [file, match[1] !== undefined]))
}

t.test('@a2a-js/sdk: imported by lib/frontends/a2a/protocol.ts alone, which is loaded dynamically, by lib/frontends/a2a/run-port.ts alone', async (t) => {
  t.same([...new Set(importers(/@a2a-js\/sdk[^'"]*/).map(([file]) => file))], ['lib/frontends/a2a/protocol.ts'])
  t.same(importers(/[./]+(?:a2a\/)?protocol\.js/).filter(([, typeOnly]) => !typeOnly), [], 'only types of it are imported statically')
  const dynamic = files.filter((file) => /import\(\s*['"][./]+(?:a2a\/)?protocol\.js['"]\s*\)/.test(text(file)))
  t.same(dynamic, ['lib/frontends/a2a/run-port.ts'])
  const pkg = JSON.parse(text('package.json'))
  t.ok(pkg.peerDependencies['@a2a-js/sdk'])
  t.same(pkg.peerDependenciesMeta['@a2a-js/sdk'], { optional: true })
  t.notOk(pkg.dependencies['@a2a-js/sdk'])
})

t.test('ai and @ag-ui/*: outside the adapters, the projections name their types only', async (t) => {
  const found = [...importers(/ai/), ...importers(/@ag-ui\/[^'"]+/)].filter(([file]) => !file.startsWith('adapters/'))
  t.same([...new Set(found.map(([file]) => file))].sort(), ['lib/frontends/ag-ui/events.ts', 'lib/frontends/chat/ui-message-stream.ts', 'lib/frontends/chat/ui-messages.ts'])
  t.ok(found.every(([, typeOnly]) => typeOnly))
})
