// fastify-agents/client ships to browsers: the built module (what dist/client/index.js is) bundled for a browser
// pulls in nothing of the server — no fastify, ajv, pino, TypeBox, no Node built-in — only itself and its SSE parser.
import { build } from 'esbuild'
import t from 'tap'
import { projectRoot } from '../helpers/files.js'

const root = projectRoot()

// (esbuild names inputs relative to the working directory: `node_modules/…`, or `../x/node_modules/…` through a link)
const PARSER = /(^|\/)node_modules\/eventsource-parser\//

/** The modules a browser bundle of `contents` is made of, and what it still imports. */
async function bundled (contents: string): Promise<{ inputs: string[], imports: unknown[] }> {
  const result = await build({
    stdin: { contents, resolveDir: root, loader: 'js' },
    bundle: true, platform: 'browser', format: 'esm', write: false, metafile: true, logLevel: 'silent'
  })
  return { inputs: Object.keys(result.metafile.inputs), imports: Object.values(result.metafile.outputs)[0]!.imports }
}

/** The modules of a bundle that are neither the client nor its parser. */
function foreign (inputs: string[]): string[] {
  return inputs.filter((path) => path !== '<stdin>' && !path.endsWith('.build/client/index.js') && !PARSER.test(path))
}

t.test('the built client bundles for a browser from itself and eventsource-parser alone', async (t) => {
  const { inputs, imports } = await bundled("export * from './.build/client/index.js'")
  t.same(foreign(inputs), [], 'no other module')
  for (const name of ['fastify', 'ajv', 'pino', '@sinclair/typebox', 'schemas/', 'lib/']) {
    t.notOk(inputs.some((path) => path.includes(name)), `nothing of ${name}`)
  }
  t.same(imports, [], 'and nothing left to import (no Node built-in)')
  t.ok(inputs.some((path) => PARSER.test(path)), 'the SSE parser is bundled with it')
})

t.test('the check sees a module of the server pulled in', async (t) => {
  const { inputs } = await bundled("import '@sinclair/typebox'\nimport './.build/schemas/runs.js'\nexport * from './.build/client/index.js'")
  t.ok(foreign(inputs).some((path) => path.includes('@sinclair/typebox')))
  t.ok(foreign(inputs).some((path) => path.endsWith('.build/schemas/runs.js')))
})
