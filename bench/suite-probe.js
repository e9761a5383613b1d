// Loaded into every Node process of a test run (NODE_OPTIONS="--import $PWD/bench/suite-probe.js", SUITE_PROBE=<file>,
// both absolute: the tests start npm and node in folders of their own):
// at exit each appends one JSON line to <file>: its script, its tap child id (test files and what they spawn), its
// wall time and its CPU, its own and its waited-for children's (npm, tsc, initdb …), read from /proc/self/stat.
// `node bench/suite-report.js <tap output> <file>` turns them into a table per test file. See bench/README.md,
// "The test suite's time". A process killed by a signal (tap's timeout) writes nothing.
import { appendFileSync, readFileSync } from 'node:fs'

const out = process.env.SUITE_PROBE
if (out) {
  process.on('exit', () => {
    try {
      const stat = readFileSync('/proc/self/stat', 'utf8')
      // after the command's ')': state is field 3, utime, stime, cutime, cstime fields 14-17, in ticks (100 a second)
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      const [user, sys, childUser, childSys] = fields.slice(11, 15).map((ticks) => Number(ticks) / 100)
      appendFileSync(out, JSON.stringify({
        pid: process.pid,
        child: process.env.TAP_CHILD_ID,
        argv: process.argv.slice(1).join(' ').slice(0, 300),
        end: Date.now() / 1000,
        wall: process.uptime(),
        cpu: user + sys + childUser + childSys,
        own: user + sys
      }) + '\n')
    } catch {}
  })
}
