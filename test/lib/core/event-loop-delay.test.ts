import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { EventLoopDelayMonitor } from '../../../lib/core/event-loop-delay.js'
import { sleep } from '../../helper.js'

/** Blocks the event loop for `ms`: a delay the monitor must see. */
function block (ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until) { /* busy */ }
}

t.test('nothing sampled yet: zeros', async (t) => {
  const monitor = new EventLoopDelayMonitor()
  t.same(monitor.read(), { p50: 0, p99: 0 })
  monitor.start()
  t.same(monitor.read(), { p50: 0, p99: 0 }, 'no sample yet right after start')
  monitor.stop()
})

t.test('percentiles in ms, and a stall shows in p99', async (t) => {
  const monitor = new EventLoopDelayMonitor({ resolutionMs: 10 })
  monitor.start()
  t.teardown(() => monitor.stop())
  for (let i = 0; i < 10; i++) {
    await sleep(15)
    if (i === 5) block(80)
  }
  const { p50, p99 } = monitor.read()
  t.ok(p50 > 0, `p50 ${p50}`)
  t.ok(p99 >= 60, `p99 ${p99} shows the 80 ms stall`)
  t.ok(p99 >= p50)
})

t.test('a window turns over when read after windowMs; the reading taken then is kept', async (t) => {
  const monitor = new EventLoopDelayMonitor({ resolutionMs: 10, windowMs: 100 })
  monitor.start()
  t.teardown(() => monitor.stop())
  await sleep(30)
  block(250)
  await sleep(80)
  const stalled = monitor.read() // older than the window: read, then reset
  t.ok(stalled.p99 >= 200, `p99 ${stalled.p99}`)
  t.same(monitor.read(), stalled, 'an empty new window still reports the last reading')
  await sleep(60)
  const calm = monitor.read()
  t.ok(calm.p99 < stalled.p99, `the stall has left the window (${calm.p99} < ${stalled.p99})`)
})

t.test('stop() stops sampling', async (t) => {
  const monitor = new EventLoopDelayMonitor({ resolutionMs: 10 })
  monitor.start()
  await sleep(40)
  monitor.stop()
  const stopped = monitor.read()
  block(60)
  await sleep(40)
  t.same(monitor.read(), stopped, 'nothing sampled after stop')
})

t.test('an unclosed service with the Admin API does not keep the process alive', async (t) => {
  const script = fileURLToPath(new URL('./fixtures/admin-idle.js', import.meta.url))
  const child = spawn(process.execPath, [...process.execArgv, script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  // a guard, not a measure: a child kept alive by a timer would never exit at all
  const guard = setTimeout(() => child.kill('SIGKILL'), 50_000)
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('exit', (c, s) => resolve([c, s])))
  clearTimeout(guard)
  t.equal(signal, null, 'exited by itself')
  t.equal(code, 0)
  t.equal(out, '200\n')
})
