// The README and the docs/ pages against the code they describe: the options table lists every option, the error
// table every code the service answers with, every link and every source path named resolves, every docs page is
// linked from the README, and every TypeScript example type-checks against the package's declarations.
import t from 'tap'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import ts from 'typescript'
import * as errors from '../../lib/core/errors.js'
import { AgentServiceOptions } from '../../schemas/options.js'
import { projectRoot } from '../helpers/files.js'

// a type check of every example against the package's declarations (LangGraph's and the AI SDK's among them): 14 s
// alone, over 60 s beside the suite's other files on a busy machine
t.setTimeout(180_000)

// the sources, wherever the compiled test runs from: the folder of the nearest package.json
const root = projectRoot()
const pages = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)]
const text = new Map(pages.map((page) => [page, readFileSync(join(root, page), 'utf8')]))
const readme = text.get('README.md')!

interface Block { page: string, line: number, lang: string, code: string, unchecked: string | null }

/** The fenced code blocks of a page (indented ones in list items too), each with the line its fence opens on. */
function blocksOf (page: string): Block[] {
  const lines = text.get(page)!.split('\n')
  const blocks: Block[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\w*)\s*$/.exec(lines[i]!)
    if (open === null) continue
    const indent = open[1]!.length
    const body: string[] = []
    let j = i + 1
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(indent))
    const note = /<!-- example not checked: (.+) -->/.exec(lines[i - 1] ?? '')
    blocks.push({ page, line: i + 1, lang: open[2]!, code: body.join('\n'), unchecked: note?.[1] ?? null })
    i = j
  }
  return blocks
}

/** The prose of a page: code blocks and inline code left out. */
function proseOf (page: string): string {
  return text.get(page)!.replace(/^(\s*)```[\s\S]*?^\s*```\s*$/gm, '').replace(/`[^`\n]*`/g, '')
}

/** The rows of the first table under a heading, as arrays of cells. */
function tableUnder (page: string, heading: string): string[][] {
  const lines = text.get(page)!.split('\n')
  let i = lines.indexOf(heading)
  if (i === -1) throw new Error(`${page} has no heading ${heading}`)
  while (i < lines.length && !lines[i]!.startsWith('|')) i++
  const rows: string[][] = []
  for (i += 2; i < lines.length && lines[i]!.startsWith('|'); i++) rows.push(lines[i]!.split(' | ').map((cell) => cell.replace(/^\| |\|$/g, '').trim()))
  return rows
}

const codesOf = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)

t.test('the options table lists every option of the options schema, and nothing else', async (t) => {
  const listed = tableUnder('README.md', '## Options').flatMap((row) => codesOf(row[0]!))
  t.same([...new Set(listed)].sort(), Object.keys(AgentServiceOptions.properties).sort())
})

// Fastify's own errors that reach our error handler with their status (the body parser, the router's, validation):
// answered with their code like ours.
const fastifyCodes = [
  'FST_ERR_VALIDATION', 'FST_ERR_CTP_INVALID_JSON_BODY', 'FST_ERR_CTP_EMPTY_JSON_BODY', 'FST_ERR_CTP_INVALID_CONTENT_LENGTH',
  'FST_ERR_CTP_BODY_TOO_LARGE', 'FST_ERR_CTP_INVALID_MEDIA_TYPE', 'FST_ERR_BAD_URL', 'FST_ERR_MAX_PARAM_LENGTH'
]

t.test('the error table lists every code of lib/core/errors.ts and the Fastify codes we answer with, and nothing else', async (t) => {
  const thrown = (Object.values(errors) as unknown[])
    .filter((value): value is new () => { code: string } => typeof value === 'function' && value.prototype instanceof Error)
    .map((ErrorClass) => new ErrorClass().code)
  t.ok(thrown.length > 40, 'the codes are read from the module')
  const listed = tableUnder('README.md', '## Error codes').flatMap((row) => codesOf(row[0]!))
  t.same([...new Set(listed)].sort(), [...new Set([...thrown, ...fastifyCodes])].sort())
})

/** GitHub's anchors for a page's headings. */
function anchorsOf (page: string): Set<string> {
  const anchors = new Set<string>()
  for (const [, heading] of text.get(page)!.replace(/^(\s*)```[\s\S]*?^\s*```\s*$/gm, '').matchAll(/^#{1,6} (.+)$/gm)) {
    const slug = heading!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/ /g, '-')
    let unique = slug
    for (let n = 1; anchors.has(unique); n++) unique = `${slug}-${n}`
    anchors.add(unique)
  }
  return anchors
}

t.test('every link between the pages resolves, to a file and to a heading in it', async (t) => {
  for (const page of pages) {
    for (const [, target] of proseOf(page).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue
      const [file, anchor] = target!.split('#') as [string, string | undefined]
      const path = file === '' ? page : relative(root, join(root, dirname(page), file))
      if (!existsSync(join(root, path))) {
        t.fail(`${page}: ${target} names no file`)
        continue
      }
      if (anchor !== undefined) t.ok(text.has(path) && anchorsOf(path).has(anchor), `${page}: ${target} names a heading of ${path}`)
    }
  }
})

t.test('the README links every docs page', async (t) => {
  const linked = new Set([...readme.matchAll(/\]\((docs\/[^)#\s]+)/g)].map((m) => m[1]))
  for (const page of pages.slice(1)) t.ok(linked.has(page), `README links ${page}`)
})

t.test('every source path the pages name exists', async (t) => {
  for (const page of pages) {
    for (const [, path] of text.get(page)!.matchAll(/`((?:lib|app|plugins|routes|schemas|adapters|bin|client|test|bench|examples|docs)\/[\w./-]+\.(?:ts|js|mjs|md)|index\.ts)`/g)) {
      t.ok(existsSync(join(root, path!)), `${page}: ${path}`)
    }
  }
})

t.test('every npm script the pages run is in package.json', async (t) => {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts
  for (const block of pages.flatMap(blocksOf).filter((b) => b.lang === 'sh')) {
    for (const [, script] of block.code.matchAll(/npm (?:run ([\w:-]+)|(start|test)\b)/g)) {
      if (script !== undefined) t.ok(script in scripts, `${block.page}:${block.line}: npm run ${script}`)
    }
  }
})

// What the examples take as the reader's own (an agent map, a model call, a database URL), declared with the types
// they would have; and the package's exports, for the examples that are a few lines of a larger file.
const prelude = `
import type * as fa from 'fastify-agents'
import type { Pool } from 'pg'
import type { MessagesAnnotation } from '@langchain/langgraph'
declare global {
  const createAgentService: typeof fa.createAgentService
  const defineAgent: typeof fa.defineAgent
  const memoryStores: typeof fa.memoryStores
  const postgresStores: typeof fa.postgresStores
  const redisStores: typeof fa.redisStores
  const sqliteStores: typeof fa.sqliteStores
  const agents: Record<string, fa.Agent>
  const echo: fa.Agent
  const keys: string[]
  const key: string
  const url: string
  const redisUrl: string
  const pool: Pool
  const runId: string
  const lastId: number
  function getForecast (city: string, options: { signal: AbortSignal }): Promise<{ celsius: number }>
  function importBatch (batch: number, signal: AbortSignal): Promise<void>
  function remove (path: string): Promise<void>
  function callModel (state: typeof MessagesAnnotation.State): Promise<Partial<typeof MessagesAnnotation.State>>
  function render (text: string): void
  function seen (webhookId: unknown): Promise<boolean>
  function handle (event: unknown): Promise<void>
  function writeDraft (input: { to: string }): Promise<string>
  const mail: { send (draft: string, options: { idempotencyKey: string }): Promise<void> }
  const payments: { charge (cents: number, options: { idempotencyKey: string }): Promise<{ id: string }> }
}
export {}
`

t.test('every TypeScript example type-checks against the package\'s declarations', async (t) => {
  const blocks = pages.flatMap(blocksOf)
  const dir = join(root, '.build', 'docs-examples')
  const files = new Map<string, string>([[join(dir, 'prelude.d.ts'), prelude]])
  const origin = new Map<string, Block>()
  for (const block of blocks) {
    if (block.unchecked !== null) {
      t.comment(`${block.page}:${block.line} is not checked: ${block.unchecked}`)
      continue
    }
    if (block.lang === 'js') {
      // plain JavaScript: its syntax
      const { diagnostics } = ts.transpileModule(block.code, { reportDiagnostics: true, compilerOptions: { module: ts.ModuleKind.ESNext } })
      t.same(diagnostics?.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')), [], `${block.page}:${block.line} parses`)
      continue
    }
    if (block.lang !== 'ts' && block.lang !== 'tsx') continue
    const file = join(dir, `${block.page.replace(/\W/g, '-')}-${block.line}.${block.lang}`)
    // a module of its own: names do not collide across examples, and top-level await is allowed
    files.set(file, `${block.code}\nexport {}\n`)
    origin.set(file, block)
  }
  t.ok(origin.size > 20, 'the examples are found')

  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2023.d.ts', 'lib.dom.d.ts'],
    types: ['node'],
    jsx: ts.JsxEmit.ReactJSX,
    strict: true,
    skipLibCheck: true,
    noEmit: true,
    // the package as a user imports it: the declarations `npm test` emitted next to this test
    paths: {
      'fastify-agents': [join(root, '.build/index.d.ts')],
      'fastify-agents/ai-sdk': [join(root, '.build/adapters/ai-sdk.d.ts')],
      'fastify-agents/langchain': [join(root, '.build/adapters/langchain.d.ts')],
      'fastify-agents/client': [join(root, '.build/client/index.d.ts')],
      'fastify-agents/testing': [join(root, '.build/lib/testing/index.d.ts')],
      // a model provider the AI SDK example names, not installed here: any model will do
      '@ai-sdk/openai': [join(dir, 'ai-sdk-openai.d.ts')]
    }
  }
  // a provider's model is an object (durableModel takes no model id string)
  files.set(join(dir, 'ai-sdk-openai.d.ts'), 'import type { LanguageModel } from \'ai\'\nexport declare function openai (model: string): Exclude<LanguageModel, string>\n')
  const host = ts.createCompilerHost(options)
  const { fileExists, readFile, getSourceFile } = host
  host.fileExists = (name) => files.has(name) || fileExists.call(host, name)
  host.readFile = (name) => files.get(name) ?? readFile.call(host, name)
  host.getSourceFile = (name, language, ...rest) => files.has(name)
    ? ts.createSourceFile(name, files.get(name)!, language, true, name.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS)
    : getSourceFile.call(host, name, language, ...rest)
  const program = ts.createProgram([...files.keys()], options, host)
  const problems = new Map<string, string[]>()
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const block = diagnostic.file === undefined ? undefined : origin.get(diagnostic.file.fileName)
    const where = block === undefined
      ? diagnostic.file?.fileName ?? 'the program'
      : `${block.page}:${block.line + 1 + diagnostic.file!.getLineAndCharacterOfPosition(diagnostic.start!).line}`
    problems.set(where, [...problems.get(where) ?? [], ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')])
  }
  t.same(Object.fromEntries(problems), {}, 'no type errors (page:line of each)')
})
