// What every scenario shares: pinned server processes, autocannon with exact latencies, rounds that
// alternate the contenders, medians and ratios.
import { spawn, spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import os from 'node:os'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

const SERVER = fileURLToPath(new URL('./server.js', import.meta.url))

export const SERVER_CORE = '0'
export const LOAD_CORE = '1'

/** Rounds, warm-up and measure seconds: BENCH_ROUNDS, BENCH_WARMUP, BENCH_DURATION override them. */
export const config = {
  rounds: Number(process.env.BENCH_ROUNDS ?? 3),
  warmup: Number(process.env.BENCH_WARMUP ?? 2),
  duration: Number(process.env.BENCH_DURATION ?? 5),
  /** BENCH_QUIET=<s>: before each round, wait up to <s> seconds for other processes to leave the cores */
  quiet: Number(process.env.BENCH_QUIET ?? 0)
}

/**
 * The load generator (this process) runs on core 1, the servers on core 0. Re-executes the current
 * script under `taskset -c 1` unless already pinned; returns false when it did (the caller stops).
 */
export function pinLoadGenerator () {
  if (process.env.BENCH_PINNED === '1') return true
  const result = spawnSync('taskset', ['-c', LOAD_CORE, process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, BENCH_PINNED: '1' }
  })
  if (result.error) throw result.error
  process.exitCode = result.status ?? 1
  return false
}

/**
 * Starts a bench server (bench/lib/server.js) pinned to core 0; resolves once it listens on 127.0.0.1.
 * `spec`: { kind: 'service' | 'bare-fastify' | 'raw-http' | 'raw-sse' | 'raw-ws', preset? }.
 * `script`: another server speaking the same IPC protocol (the peers of bench/peers/).
 */
export function startServer (spec, { nodeArgs = [], timeoutMs = 30_000, script = SERVER } = {}) {
  const child = spawn('taskset', ['-c', SERVER_CORE, process.execPath, '--expose-gc', ...nodeArgs, script, JSON.stringify(spec)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc']
  })
  const pending = new Map()
  let nextId = 0
  let exited = false
  child.on('message', (message) => {
    const waiter = pending.get(message.id)
    if (waiter === undefined) return
    pending.delete(message.id)
    if (message.error !== undefined) waiter.reject(new Error(message.error))
    else waiter.resolve(message.result)
  })
  child.on('exit', () => {
    exited = true
    for (const waiter of pending.values()) waiter.reject(new Error('bench server exited'))
    pending.clear()
  })

  function call (type, timeout = 60_000, arg) {
    if (exited) return Promise.reject(new Error('bench server exited'))
    const id = ++nextId
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { pending.delete(id); reject(new Error(`bench server: ${type} timed out`)) }, timeout)
      pending.set(id, {
        resolve: (value) => { clearTimeout(timer); resolve(value) },
        reject: (err) => { clearTimeout(timer); reject(err) }
      })
      child.send({ id, type, arg })
    })
  }

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`bench server ${spec.kind} did not start`)) }, timeoutMs)
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`bench server ${spec.kind} exited with ${code} before listening`)) })
    child.on('message', (message) => {
      if (message.type !== 'ready') return
      clearTimeout(timer)
      child.removeAllListeners('exit')
      child.on('exit', () => { exited = true })
      const url = `http://127.0.0.1:${message.port}`
      resolve({
        port: message.port,
        url,
        pid: child.pid,
        call,
        /** Stops the server (a durable store reports what it holds); kills it if it hangs. */
        async stop () {
          if (exited) return {}
          const done = new Promise((resolve) => child.once('exit', resolve))
          let result = {}
          try {
            result = await call('stop', 30_000)
          } catch {
            child.kill('SIGKILL')
          }
          await done
          return result
        }
      })
    })
  })
}

/**
 * One autocannon run, for `duration` seconds or `amount` requests. Latencies are collected exactly
 * (autocannon's own histogram has 1 ms buckets), throughput counts 2xx responses only.
 */
export function load ({ url, path = '/', method = 'POST', headers = {}, body, connections = 50, duration, amount, requests, idReplacement = false, timeout = 10 }) {
  return new Promise((resolve, reject) => {
    const latencies = []
    const instance = autocannon({
      url: url + path,
      method,
      headers,
      body,
      connections,
      // autocannon takes an undefined duration for a wrong one
      ...(amount === undefined ? { duration } : { amount }),
      requests,
      pipelining: 1,
      timeout,
      // [<id>] in the body becomes a unique id per request (a chat id, a thread id)
      idReplacement
    }, (err, result) => {
      if (err) return reject(err)
      latencies.sort((a, b) => a - b)
      const ok = result['2xx']
      resolve({
        rps: ok / (result.duration || duration),
        ok,
        non2xx: result.non2xx,
        errors: result.errors,
        timeouts: result.timeouts,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        statusCodes: result.statusCodeStats
      })
    })
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime)
    })
  })
}

export function percentile (sorted, p) {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

export function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** { median, min, max, values } of one metric over the rounds. */
export function summary (values) {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), values }
}

/**
 * Runs `measure(server, contender, round)` for every contender, round by round (A B C A B C ...), each on
 * a fresh server process, and returns { [contender]: [result per round] }. A contender's `spec` may be a
 * function of the round (a fresh database file per round, say).
 */
export async function alternate (contenders, measure, { rounds = config.rounds, log = () => {} } = {}) {
  const results = Object.fromEntries(contenders.map((c) => [c.name, []]))
  for (let round = 1; round <= rounds; round++) {
    for (const contender of contenders) {
      if (config.quiet > 0) await waitForQuiet(config.quiet)
      const spec = typeof contender.spec === 'function' ? contender.spec(round) : contender.spec
      const server = await startServer(spec, contender.startOptions)
      let result
      try {
        result = await measure(server, contender, round)
      } finally {
        const stopped = await server.stop()
        if (result !== undefined) result.stopped = stopped
      }
      results[contender.name].push(result)
      log(`  round ${round} ${contender.name}: ${describe(result)}`)
    }
  }
  return results
}

function describe (result) {
  const parts = []
  if (typeof result.rps === 'number') parts.push(`${result.rps.toFixed(0)}/s`)
  if (typeof result.p99 === 'number') parts.push(`p99 ${result.p99.toFixed(2)} ms`)
  if (typeof result.cpuUsPerRequest === 'number') parts.push(`${result.cpuUsPerRequest.toFixed(0)} µs CPU/req`)
  if (typeof result.serverCpu === 'number' && result.serverCpu < 0.9) parts.push(`server busy ${(result.serverCpu * 100).toFixed(0)}% (not saturated)`)
  if (typeof result.foreignCpu === 'number' && result.foreignCpu > 0.05) parts.push(`other processes used ${(result.foreignCpu * 100).toFixed(0)}% of the machine`)
  if (result.errors || result.non2xx || result.timeouts) parts.push(`errors ${result.errors} non2xx ${result.non2xx} timeouts ${result.timeouts}`)
  return parts.join(', ')
}

/** Warm-up (`warmup` seconds, default BENCH_WARMUP's) then measure: the standard throughput round of the HTTP scenarios. */
export async function throughputRound (server, request, { warmup: seconds = config.warmup } = {}) {
  const warmup = await load({ ...request, url: server.url, duration: seconds })
  const cpu = cpuMeter([server.pid])
  const result = await load({ ...request, url: server.url, duration: config.duration })
  Object.assign(result, cpu.stop(result.ok))
  result.warmupOk = warmup.ok
  return result
}

/** Waits (up to `seconds`) until other processes use less than 10% of the machine over one second. */
export async function waitForQuiet (seconds) {
  const deadline = Date.now() + seconds * 1000
  for (;;) {
    const meter = cpuMeter([])
    await sleep(1000)
    const { foreignCpu } = meter.stop(0)
    if (foreignCpu === null || foreignCpu < 0.1 || Date.now() > deadline) return foreignCpu
  }
}

export function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

// CPU time used by processes other than the bench's own during a measurement: on a shared machine a
// round that competed with something else is flagged rather than silently averaged in.
function jiffies (file) {
  try {
    return readFileSync(file, 'utf8')
  } catch {
    return null
  }
}

function busyTotal () {
  const text = jiffies('/proc/stat')
  if (text === null) return null
  const [, user, nice, system, , , irq, softirq, steal] = text.split('\n')[0].trim().split(/\s+/).map(Number)
  return user + nice + system + irq + softirq + steal
}

export function processTime (pid) {
  const text = jiffies(`/proc/${pid}/stat`)
  if (text === null) return 0
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  return Number(fields[11]) + Number(fields[12])
}

/**
 * Starts counting CPU time. `stop(requests)` returns `foreignCpu`, the share of the machine (0-1) other
 * processes used, `serverCpu`, the share of one core the server (the first pid) used (below ~0.9 the load
 * generator, not the server, was the limit), and `cpuUsPerRequest`, the server's CPU time per request:
 * unlike throughput, it hardly moves when something else competes for the cores.
 */
export function cpuMeter (pids) {
  const own = () => pids.reduce((sum, pid) => sum + processTime(pid), processTime(process.pid))
  const busy0 = busyTotal()
  const own0 = own()
  const server0 = processTime(pids[0])
  const t0 = performance.now()
  return {
    stop (requests) {
      if (busy0 === null) return { foreignCpu: null, serverCpu: null, cpuUsPerRequest: null }
      const seconds = (performance.now() - t0) / 1000
      const ticks = seconds * 100 * os.cpus().length
      const serverTicks = processTime(pids[0]) - server0
      return {
        foreignCpu: Math.max(0, (busyTotal() - busy0 - (own() - own0)) / ticks),
        serverCpu: serverTicks / (seconds * 100),
        cpuUsPerRequest: requests > 0 ? (serverTicks * 10_000) / requests : null
      }
    }
  }
}
