// `npm test` runs this before tap. tap rebuilds its Test class when .taprc's plugin list is not the one it was built
// with, but the run that notices has already picked its test processes' loaders from the old build: on a fresh install
// every file of that run loaded the TypeScript and mock loaders .taprc turns off (0.5–1.2 s of CPU a file on
// earlier machines, within the noise on a later one: bench/README.md "The test suite's time"). Build first, only when needed (`tap build` alone takes ~10 s of CPU).
import { spawnSync } from 'node:child_process'
import { TapConfig } from '@tapjs/config'
import { signature } from '@tapjs/test'

const config = await TapConfig.load()
const { status } = config.pluginSignature === signature
  ? { status: 0 }
  : spawnSync('npx', ['tap', 'build'], { stdio: 'inherit' })
process.exitCode = Number(status !== 0)
