// The adapters' public surface, and the promise that neither is loaded unless imported: `ai` and `@langchain/*`
// are optional peers, so nothing outside adapters/ may import them, and the AI SDK adapter imports only its types.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import * as aiSdk from '../../adapters/ai-sdk.js'
import * as langchain from '../../adapters/langchain.js'
import { projectRoot, sources } from '../helpers/files.js'

const root = projectRoot()

const peer = /(?:^|\n)\s*(import|export)(\s+type)?[^'";]*?from\s+['"](ai|ai\/[^'"]*|@langchain\/[^'"]+)['"]|import\(\s*['"](ai|@langchain\/[^'"]+)['"]\s*\)/g

t.test('each subpath exports its functions', async (t) => {
  t.same(Object.keys(aiSdk).sort(), ['aiSdkAgent', 'durableModel', 'durableTools', 'modelMessages'])
  t.same(Object.keys(langchain).sort(), ['langGraphAgent'])
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
  t.match(pkg.exports['./ai-sdk'], { import: './dist/adapters/ai-sdk.js' })
  t.match(pkg.exports['./langchain'], { import: './dist/adapters/langchain.js' })
  for (const name of ['ai', '@langchain/core', '@langchain/langgraph']) {
    t.ok(pkg.peerDependencies[name], `${name} is a peer dependency`)
    t.same(pkg.peerDependenciesMeta[name], { optional: true }, `${name} is optional`)
  }
})

t.test('only the adapters import the optional peers, and the AI SDK adapter only its types', async (t) => {
  // the front-end projections name the AI SDK's chunk types (erased at build, never loaded)
  const outside = ['index.ts', ...['app', 'bin', 'lib', 'plugins', 'routes', 'schemas'].flatMap(sources)]
    .filter((file) => [...readFileSync(join(root, file), 'utf8').matchAll(peer)]
      .some((match) => !(file.startsWith('lib/frontends/chat/') && match[2] !== undefined)))
  t.same(outside, [])
  const aiImports = [...readFileSync(join(root, 'adapters/ai-sdk.ts'), 'utf8').matchAll(peer)]
  t.ok(aiImports.length > 0, 'the check sees the imports')
  t.ok(aiImports.every((match) => match[2] !== undefined), 'import type only')
  const common = [...readFileSync(join(root, 'adapters/common.ts'), 'utf8').matchAll(peer)]
  t.same(common, [], 'what both adapters share needs neither')
})
