// The README's install lines, exactly as written, on the Node this runs on (CI: 20): the package is packed, each line
// runs in order in a new project (with TypeScript 6, what `npm install -D typescript` gives today) with
// `fastify-agents` standing for the tarball, then an app that uses what each line installed is type-checked and run,
// and the OpenAPI types are generated with the line docs/operations.md gives. Skipped when the registry cannot be
// reached; the slowest test of the suite (a dozen installs).
import { readFileSync } from 'node:fs'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { emptyProject, pack, registryReachable, root, shell } from '../helpers/pack.js'

const offline = await registryReachable() ? false : 'the npm registry cannot be reached'
t.setTimeout(900_000)

const readme = readFileSync(join(root, 'README.md'), 'utf8')
const operations = readFileSync(join(root, 'docs/operations.md'), 'utf8')

/** The `npm install` lines of the README's install section, without their comments. */
function installLines (): string[] {
  const section = readme.slice(readme.indexOf('<!-- section: install -->'), readme.indexOf('From a clone of this repository'))
  return section.split('\n').filter((line) => line.startsWith('npm install ')).map((line) => line.replace(/\s+#.*$/, ''))
}

const nodeMajor = Number(process.versions.node.split('.')[0])

t.test('the README gives an install line for fastify-agents and for each adapter, typed inputs, the stores and useChat', async (t) => {
  t.same(installLines(), [
    'npm install fastify-agents fastify',
    'npm install @sinclair/typebox',
    'npm install ai @ai-sdk/openai',
    'npm install @langchain/core @langchain/langgraph',
    'npm install pg ioredis',
    'npm install ai @ai-sdk/react react'
  ])
})

// The app: what each line installed, used as the README and docs/agents.md show.
const app = `
import { createAgentService, defineAgent } from 'fastify-agents'
import { aiSdkAgent, modelMessages } from 'fastify-agents/ai-sdk'
import { langGraphAgent } from 'fastify-agents/langchain'
import { Type } from '@sinclair/typebox'
import { simulateReadableStream, streamText } from 'ai'
import { MockLanguageModelV3 } from 'ai/test'
import { createOpenAI } from '@ai-sdk/openai'
import { AIMessage } from '@langchain/core/messages'
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph'
import { useChat } from '@ai-sdk/react'
import type { paths } from './api.js'

const greeter = defineAgent({
  input: Type.Object({ name: Type.String() }),
  async run (input) { return { output: 'Hello, ' + input.name } }
})
const model = new MockLanguageModelV3({
  doStream: async () => ({
    stream: simulateReadableStream({
      chunks: [
        { type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'from the model' }, { type: 'text-end', id: 't' },
        { type: 'finish', finishReason: { unified: 'stop', raw: 'stop' }, usage: { inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined }, outputTokens: { total: 2, text: 2, reasoning: undefined } } }
      ]
    })
  })
})
const writer = aiSdkAgent({ run: (input, ctx) => streamText({ model, messages: modelMessages(ctx, input), abortSignal: ctx.signal }) })
const graph = new StateGraph(MessagesAnnotation)
  .addNode('answer', async () => ({ messages: [new AIMessage('from the graph')] }))
  .addEdge(START, 'answer').addEdge('answer', END)
  .compile({ checkpointer: new MemorySaver() })
const grapher = langGraphAgent(graph)

const path: keyof paths = '/v1/agents/echo/runs'
const service = createAgentService({ agents: { greeter, writer, grapher }, host: '127.0.0.1', logger: false })
const { url } = await service.listen({ port: 0 })
const outputs: Record<string, unknown> = {}
for (const [agent, input] of [['greeter', { name: 'Ada' }], ['writer', 'hi'], ['grapher', 'hi']] as const) {
  const res = await fetch(url + path.replace('echo', agent), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input }) })
  outputs[agent] = ((await res.json()) as { output: unknown }).output
}
const refused = await fetch(url + path.replace('echo', 'greeter'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: { name: 1 } }) })
await service.close(1000)
console.log(JSON.stringify({
  outputs,
  refused: refused.status,
  openai: createOpenAI({ apiKey: 'none' })('gpt-4o').specificationVersion,
  useChat: typeof useChat
}))
`

const tsconfig = {
  compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, skipLibCheck: true, outDir: 'out', lib: ['ES2022', 'DOM'], types: [] },
  files: ['index.ts']
}

t.test('each install line as written, in order, then an app using them type-checks and runs', { skip: offline }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fa-install-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const { tarball } = await pack(dir)
  const project = join(dir, 'consumer')
  await emptyProject(project)
  const typescript = await shell('npm install -D typescript', project)
  t.equal(typescript.code, 0, `npm install -D typescript: ${typescript.stderr}`)

  for (const line of installLines()) {
    const started = Date.now()
    const result = await shell(line.replace(/(?<=\s)fastify-agents(?=\s|$)/, tarball), project)
    t.equal(result.code, 0, `${line}: exit 0`)
    t.notMatch(result.stderr, /ERESOLVE/, `${line}: no ERESOLVE`)
    if (result.code !== 0) t.comment(result.stderr.slice(0, 3000))
    const engines = result.stderr.split('\n').filter((l) => l.includes('EBADENGINE') && l.includes('package:')).map((l) => l.replace(/^.*package: /, ''))
    t.comment(`${line}: ${Date.now() - started} ms${engines.length === 0 ? '' : `; EBADENGINE: ${engines.join(', ')}`}`)
  }
  const version = async (name: string): Promise<string> => (JSON.parse(await readFile(join(project, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version
  const ai = await version('ai')
  t.match(ai, nodeMajor >= 22 ? /^7\./ : /^6\./, `npm picked ai ${ai} on Node ${nodeMajor}`)
  t.match(await version('@ai-sdk/react'), nodeMajor >= 22 ? /^4\./ : /^3\./, 'and the @ai-sdk/react of that ai')

  // the OpenAPI types, as docs/operations.md says to generate them, in this project with TypeScript 6
  const openapiLine = /npx -p typescript@5 [^\n`]*openapi-typescript openapi\.json -o api\.d\.ts/.exec(operations)?.[0]
  t.ok(openapiLine, 'docs/operations.md gives the openapi-typescript line')
  const documented = await shell('npx fastify-agents openapi --out openapi.json', project)
  t.equal(documented.code, 0, `the bin writes openapi.json: ${documented.stderr}`)
  const generated = await shell(openapiLine!, project)
  t.equal(generated.code, 0, `${openapiLine!}: ${generated.stderr}`)

  await writeFile(join(project, 'tsconfig.json'), JSON.stringify(tsconfig))
  await writeFile(join(project, 'index.ts'), app)
  const compiled = await shell('npx tsc -p tsconfig.json', project)
  t.equal(compiled.stdout + compiled.stderr, '', 'the app type-checks (strict, NodeNext) with the installed TypeScript')
  t.equal(compiled.code, 0)
  const ran = await shell(`${JSON.stringify(process.execPath)} out/index.js`, project, 60_000)
  t.equal(ran.code, 0, `the app runs: ${ran.stderr}`)
  t.same(JSON.parse(ran.stdout), {
    outputs: { greeter: 'Hello, Ada', writer: 'from the model', grapher: 'from the graph' },
    refused: 400,
    openai: nodeMajor >= 22 ? 'v4' : 'v3', // the provider spec of that ai's providers
    useChat: 'function'
  }, 'every agent answers, a typed input is checked; the provider and useChat of that ai load')
  const drivers = await shell(`${JSON.stringify(process.execPath)} --input-type=module -e "import('pg').then(() => import('ioredis')).then(() => console.log('loaded'))"`, project)
  t.equal(drivers.stdout.trim(), 'loaded', 'the store drivers load')
})
