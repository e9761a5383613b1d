// node bench/import.js [dist …] [--rounds=N]: how long `import 'fastify-agents'` takes in a fresh process, against
// importing Fastify alone in the same run (the baseline: every server pays it). Each contender is a build's dist/
// folder (default: this checkout's, after `npm run build`); give two or more to compare builds, A/B, in one run
// (on the old commit: `mkdir /tmp/a && cp -r dist package.json /tmp/a && ln -s "$PWD/node_modules" /tmp/a`, then
// `node bench/import.js /tmp/a/dist dist`). Contenders alternate round by round; medians are reported.
// Issue 25's target: the package's import at most 0.5 s. See bench/README.md, "Import time".
import { execFileSync } from 'node:child_process'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

const args = process.argv.slice(2)
const rounds = Number(args.find((arg) => arg.startsWith('--rounds='))?.slice(9) ?? 15)
const builds = args.filter((arg) => !arg.startsWith('--'))
if (builds.length === 0) builds.push('dist')

// a process that imports one module and prints how long that took (from before the import to after it)
function timed (specifier) {
  const script = `const t = performance.now(); await import(${JSON.stringify(specifier)}); process.stdout.write(String(performance.now() - t))`
  try {
    return Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }))
  } catch (error) {
    throw new Error(`could not import ${specifier} (a build's folder needs package.json beside it and node_modules above): ${String(error.stderr).split('\n').find((line) => line.startsWith('Error')) ?? error.message}`)
  }
}

const contenders = [
  { name: 'fastify alone (baseline)', specifier: 'fastify' },
  ...builds.map((dir) => ({ name: `fastify-agents (${dir})`, specifier: pathToFileURL(resolve(dir, 'index.js')).href }))
]
const times = contenders.map(() => [])
for (let round = 0; round < rounds; round++) {
  contenders.forEach((contender, i) => times[i].push(timed(contender.specifier)))
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}
const baseline = median(times[0])
console.log(`import time, median of ${rounds} fresh processes each (alternated)`)
contenders.forEach((contender, i) => {
  const ms = median(times[i])
  const range = `${Math.min(...times[i]).toFixed(0)}–${Math.max(...times[i]).toFixed(0)}`
  console.log(`${contender.name.padEnd(44)} ${ms.toFixed(0).padStart(6)} ms (${range})  ${(ms / baseline).toFixed(2)}× the baseline`)
})
