// The AI SDK adapter against every major of `ai` the peer range accepts. ai 7 (and @ai-sdk/react 4) need Node 22,
// so on Node 20 npm installs ai 6 (and @ai-sdk/react 3): this project's tests run ai 7 (a dev dependency); here the
// same test file, test/adapters/ai-sdk.test.ts, runs against ai 6 installed from the registry into a project of its
// own, where every other package comes from this project's node_modules. Skipped when the registry cannot be reached.
import { readFileSync } from 'node:fs'
import { cp, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import t from 'tap'
import { emptyProject, registryReachable, root, shell } from '../helpers/pack.js'

// an install from the registry and a test file of ~20 tests
const offline = await registryReachable() ? false : 'the npm registry cannot be reached'
t.setTimeout(360_000)

const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string> }

t.test('the peer range of ai is the majors tested here and in test/adapters/ai-sdk.test.ts', async (t) => {
  t.equal(manifest.peerDependencies.ai, '^6 || ^7')
})

/** Links every package of this project's node_modules that `modules` does not have (scoped ones one by one). */
async function linkTheRest (modules: string): Promise<void> {
  const ours = join(root, 'node_modules')
  for (const entry of await readdir(ours)) {
    if (entry.startsWith('.')) continue
    const names = entry.startsWith('@') ? (await readdir(join(ours, entry))).map((name) => `${entry}/${name}`) : [entry]
    for (const name of names) {
      await mkdir(dirname(join(modules, name)), { recursive: true })
      // EEXIST: installed here (ai and what it brought)
      await symlink(join(ours, name), join(modules, name), 'dir').catch((error: NodeJS.ErrnoException) => { if (error.code !== 'EEXIST') throw error })
    }
  }
}

t.test('ai 6 (what Node 20 installs): test/adapters/ai-sdk.test.ts passes, but for what ai 7 added', { skip: offline }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fa-ai6-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await emptyProject(dir)
  const install = await shell('npm install ai@6 @ai-sdk/react@3 --no-package-lock', dir)
  t.equal(install.code, 0, `npm install ai@6 @ai-sdk/react@3: ${install.stderr}`)
  if (install.code !== 0) return
  const installed = JSON.parse(await readFile(join(dir, 'node_modules/ai/package.json'), 'utf8')) as { version: string }
  t.match(installed.version, /^6\./, 'ai 6 installed')
  await linkTheRest(join(dir, 'node_modules'))
  // the compiled sources and tests, and this package's manifest (lib/core/version.js reads it by the package's name)
  await cp(join(root, '.build'), join(dir, '.build'), { recursive: true })
  await writeFile(join(dir, 'package.json'), readFileSync(join(root, 'package.json')))

  const result = await shell(`${JSON.stringify(process.execPath)} .build/test/adapters/ai-sdk.test.js`, dir, 300_000)
  t.match(result.stdout, `# ai ${installed.version}`, 'the test file ran with ai 6')
  t.notMatch(result.stdout, /^\s*not ok /m, 'no test failed')
  t.equal(result.code, 0, 'and it exited 0')
  const skipped = result.stdout.split('\n').filter((line) => / # SKIP ai 7 only/.test(line)).length
  t.equal(skipped, 5, 'five tests of what ai 7 added are skipped (toolApproval; useChat approvals)')
  if (result.code !== 0) t.comment(result.stdout.split('\n').filter((line) => /not ok|Error/.test(line)).slice(0, 40).join('\n'))
})
