// npm run bench [-- <scenario> ...]: runs the scenarios (all by default), prints a table per scenario
// and writes bench/results.json. The load runs on core 1, every server on core 0 (bench/lib/harness.js).
import { execFileSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import os from 'node:os'
import { config, pinLoadGenerator } from './lib/harness.js'
import { printScenario } from './lib/report.js'

const SCENARIOS = ['http-default', 'http-full', 'audit-durable', 'sse-stream', 'sse-idle', 'websocket', 'adapter', 'run-log', 'frontends', 'tracing', 'metrics', 'openai', 'mcp', 'steps']

if (pinLoadGenerator()) await main()

async function main () {
  const wanted = process.argv.slice(2)
  const unknown = wanted.filter((name) => !SCENARIOS.includes(name))
  if (unknown.length > 0) {
    console.error(`unknown scenario ${unknown.join(', ')}; one of ${SCENARIOS.join(', ')}`)
    process.exitCode = 2
    return
  }
  const names = wanted.length > 0 ? wanted : SCENARIOS
  const started = Date.now()
  const report = {
    startedAt: new Date(started).toISOString(),
    commit: gitCommit(),
    node: process.version,
    cpus: os.cpus().map((c) => c.model).filter((m, i, all) => all.indexOf(m) === i),
    config,
    scenarios: {}
  }
  console.log(`fastify-agents bench: ${names.join(', ')} (${config.rounds} rounds, ${config.warmup} s warm-up, ${config.duration} s measured; servers on core 0, load on core 1)`)
  for (const name of names) {
    const scenario = await import(`./${name}.js`)
    console.log(`\n# ${name}: ${scenario.title}`)
    const t0 = Date.now()
    try {
      const result = await scenario.run({ log: (line) => console.log(line) })
      result.seconds = Math.round((Date.now() - t0) / 1000)
      report.scenarios[name] = result
      printScenario(name, result)
    } catch (err) {
      console.error(`scenario ${name} failed:`, err)
      report.scenarios[name] = { title: scenario.title, failed: String(err?.stack ?? err) }
      process.exitCode = 1
    }
  }
  report.seconds = Math.round((Date.now() - started) / 1000)
  const file = new URL('./results.json', import.meta.url)
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n')
  console.log(`\n${report.seconds} s; results in bench/results.json`)
}

function gitCommit () {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
  } catch {
    return null
  }
}
