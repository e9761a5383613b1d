// The exported store suites (lib/testing, fastify-agents/testing) run under node:test as well as tap: a child
// `node --test` runs them against the memory stores (test/fixtures/node-test-stores.ts), and a suite with a failing
// store fails there too. The README's custom store (its Stores section) passes them the same way.
import { spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import ts from 'typescript'

const fixtures = fileURLToPath(new URL('../fixtures/', import.meta.url))

function nodeTest (file: string): { status: number | null, pass: number, fail: number, output: string } {
  // the child's coverage is not tap's to count: lib/testing is covered by the backends' tap runs
  const child = spawnSync(process.execPath, ['--test', '--test-reporter=tap', file], {
    encoding: 'utf8',
    env: { ...process.env, _TAPJS_PROCESSINFO_COVERAGE_: '0', NODE_OPTIONS: '' }
  })
  const count = (name: string): number => Number(new RegExp(`^# ${name} (\\d+)$`, 'm').exec(child.stdout)?.[1])
  return { status: child.status, pass: count('pass'), fail: count('fail'), output: child.stdout + child.stderr }
}

t.test('node --test runs every suite against the memory stores, and they pass', async (t) => {
  const run = nodeTest(join(fixtures, 'node-test-stores.js'))
  if (run.status !== 0) t.comment(run.output.slice(-3000))
  t.equal(run.status, 0, 'node --test passes')
  t.equal(run.fail, 0)
  t.ok(run.pass > 80, `the suites' tests ran (${run.pass})`)
})

t.test('node --test fails a store that breaks the rules', async (t) => {
  const file = join(t.testdir(), 'broken.mjs')
  // an audit store that forgets what it was given
  writeFileSync(file, `
import { test } from 'node:test'
import { auditStoreConformance } from ${JSON.stringify(new URL('../../lib/testing/index.js', import.meta.url).href)}
import { MemoryAuditStore } from ${JSON.stringify(new URL('../../index.js', import.meta.url).href)}
class Forgetful extends MemoryAuditStore { async append () {} }
auditStoreConformance(test, () => new Forgetful())
`)
  const run = nodeTest(file)
  t.equal(run.status, 1)
  t.ok(run.fail > 0, `failures reported (${run.fail})`)
  t.match(run.output, /AssertionError|Expected values/)
})

t.test('the README\'s store of your own passes the suite under node --test, as the README runs it', async (t) => {
  const readme = readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8')
  const example = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!).find((code) => code.includes('checkpointStoreConformance(test'))
  t.ok(example, 'the README shows a store of its own with its check')
  // the package's entry points, as this checkout built them
  const source = ts.transpileModule(example!, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText
    .replace("'fastify-agents/testing'", JSON.stringify(new URL('../../lib/testing/index.js', import.meta.url).href))
  const file = join(t.testdir(), 'readme-store.test.mjs')
  writeFileSync(file, source)
  const run = nodeTest(file)
  if (run.status !== 0) t.comment(run.output.slice(-3000))
  t.equal(run.status, 0, 'node --test passes')
  t.equal(run.fail, 0)
  t.ok(run.pass >= 4, `the checkpoint suite ran (${run.pass})`)
})
