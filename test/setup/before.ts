// tap's `before` script (.taprc): what PostgreSQL's public schema and Redis' fa: hold before the suite (leftovers.ts). It runs
// leftovers.js in a process of its own, outside tap's coverage: tap reports the coverage of whatever its before and
// after scripts load (only the tests' own processes have test files excluded from it).
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const { status } = spawnSync(process.execPath, [fileURLToPath(new URL('./leftovers.js', import.meta.url)), 'snapshot'], {
  stdio: 'inherit',
  env: { ...process.env, _TAPJS_PROCESSINFO_COVERAGE_: '0' }
})
// no branch here: tap would count it, uncovered, in its report (a signal or a failed spawn is a status of null: 1)
process.exitCode = Number(status !== 0)
