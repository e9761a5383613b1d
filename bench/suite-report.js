// node bench/suite-report.js <tap output> <probe lines> [<tap output> <probe lines>]: each test file's wall time (tap's
// `# time=`) and CPU (bench/suite-probe.js), slowest first; given two runs, before → after. Wall time minus CPU is
// what the file waited: for a core on a loaded machine, for a timer, a socket, a child process.
// `npx tap --reporter=tap > run.tap` with NODE_OPTIONS="--import $PWD/bench/suite-probe.js" SUITE_PROBE=$PWD/run.jsonl.
import { readFileSync } from 'node:fs'

function load (tapFile, probeFile) {
  const files = new Map()
  for (const [, result, file, ms] of readFileSync(tapFile, 'utf8').matchAll(/^(not ok|ok) \d+ - (\S+\.test\.js) # time=([\d.]+)ms/gm)) {
    files.set(file.replace(/^\.build\//, ''), { wall: Number(ms) / 1000, ok: result === 'ok' })
  }
  let tap
  for (const line of readFileSync(probeFile, 'utf8').split('\n').filter(Boolean)) {
    const p = JSON.parse(line)
    const file = /\.build\/(test\/\S+\.test\.js)$/.exec(p.argv)?.[1]
    if (file !== undefined && p.child !== undefined && files.has(file)) Object.assign(files.get(file), { cpu: p.cpu, own: p.own })
    if (/\/\.bin\/tap\b/.test(p.argv)) tap = p
  }
  return { files, tap }
}

const fixed = (n) => n === undefined ? '–' : n.toFixed(1)
const [a, b] = [load(process.argv[2], process.argv[3]), process.argv[4] ? load(process.argv[4], process.argv[5]) : null]
for (const [name, run] of [['run', a], ['after', b]]) {
  if (run?.tap) console.log(`${name}: tap ${run.tap.wall.toFixed(0)} s wall, ${run.tap.cpu.toFixed(0)} s CPU in all; ${run.files.size} files, ${[...run.files.values()].filter((f) => !f.ok).length} failed`)
}
const rows = [...a.files].map(([file, x]) => ({ file, x, y: b?.files.get(file) }))
rows.sort((r, s) => (s.x.cpu ?? 0) - (r.x.cpu ?? 0))
console.log(b ? '| file | wall s | CPU s |\n|---|---|---|' : '| file | wall s | CPU s | of it, the file\'s own process |\n|---|---|---|---|')
for (const { file, x, y } of rows) {
  const mark = (f) => f?.ok === false ? ' (failed)' : ''
  console.log(b
    ? `| \`${file}\` | ${fixed(x.wall)}${mark(x)} → ${fixed(y?.wall)}${mark(y)} | ${fixed(x.cpu)} → ${fixed(y?.cpu)} |`
    : `| \`${file}\` | ${fixed(x.wall)}${mark(x)} | ${fixed(x.cpu)} | ${fixed(x.own)} |`)
}
