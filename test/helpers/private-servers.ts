// A Redis and a PostgreSQL of a test's own, on free ports, that the test may freeze (SIGSTOP), thaw (SIGCONT)
// or kill: outages without touching the shared servers other test files use. Both are stopped and removed in
// teardown. They need `redis-server`, and `initdb` + `pg_ctl` on the PATH (as root they run as the `postgres`
// user: PostgreSQL refuses to run as root).
import { execFile, spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { Test } from 'tap'
import { eventually } from '../helper.js'
import { requireService } from './services.js'
import type { ServiceTest } from './services.js'

const exec = promisify(execFile)

export async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

async function onPath (command: string): Promise<boolean> {
  return exec('sh', ['-c', `command -v ${command}`]).then(() => true, () => false)
}

/** Whether `pid` is stopped (SIGSTOP) rather than running or sleeping. */
async function stateOf (pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]!
}

export interface PrivateServer {
  url: string
  /** SIGSTOP: the server keeps its connections and answers nothing */
  freeze(): Promise<void>
  /** SIGCONT */
  thaw(): Promise<void>
}

export interface PrivateRedis extends PrivateServer {
  /** SIGKILL: connections are refused from now on */
  kill(): Promise<void>
  /** after kill(): a new server on the same port (empty, unless `durable`) */
  revive(): Promise<void>
}

/**
 * A redis-server of the test's own, stopped in teardown. No persistence (a revived server is empty), unless
 * `durable`: an append-only file fsynced on every write (`appendfsync always`), the setting with which a write Redis
 * acknowledged survives a crash (README, "Exactly once through a store's crash"); a revived server reloads it.
 */
export async function privateRedis (t: Test & ServiceTest, options: { durable?: boolean } = {}): Promise<PrivateRedis | null> {
  if (!requireService(t, await onPath('redis-server'), 'the outage tests need redis-server on the PATH (apt-get install redis-server)')) return null
  const port = await freePort()
  let persistence = ['--save', '', '--appendonly', 'no']
  if (options.durable === true) {
    const dir = await mkdtemp(join(tmpdir(), 'fa-redis-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    persistence = ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir]
  }
  let child: ChildProcess
  let exited: Promise<unknown>
  const start = async (): Promise<void> => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', ...persistence], { stdio: 'ignore' })
    exited = new Promise((resolve) => child.once('exit', resolve))
    await eventually(() => exec('redis-cli', ['-p', String(port), 'ping']).then(({ stdout }) => stdout.trim() === 'PONG', () => false), 10_000, 'redis-server answering')
  }
  t.teardown(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill('SIGCONT')
    child.kill('SIGKILL')
    await exited
  })
  await start()
  return {
    url: `redis://127.0.0.1:${port}`,
    async freeze () {
      child.kill('SIGSTOP')
      await eventually(async () => await stateOf(child.pid!) === 'T', 5_000, 'redis-server stopped')
    },
    async thaw () {
      child.kill('SIGCONT')
    },
    async kill () {
      child.kill('SIGKILL')
      await exited
    },
    revive: start
  }
}

/** The command line that runs `command` as the postgres user when we are root (PostgreSQL refuses root). */
function asPostgres (command: string, args: string[]): [string, string[]] {
  return userInfo().uid === 0 ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args]
}

export interface PrivatePostgres extends PrivateServer {
  /** pg_ctl stop -m immediate (a crash: no shutdown checkpoint); connections fail from now on */
  kill(): Promise<void>
  /** after kill(): the same cluster started again on the same port, its data recovered */
  revive(): Promise<void>
}

/**
 * A PostgreSQL cluster of the test's own (initdb into a temporary folder, trust auth), stopped and removed in
 * teardown. `fsync` and `full_page_writes` are off, for speed: they guard against the machine's crash, which no test
 * makes; a crash of PostgreSQL itself (`kill()`) loses nothing the OS was given. `synchronous_commit` stays on (the
 * default): off, a commit is acknowledged before its WAL is written, and a crash loses it by design — the
 * reservation of an idempotency key, or the table it is in (README, "Exactly once through a store's crash").
 */
export async function privatePostgres (t: Test & ServiceTest): Promise<PrivatePostgres | null> {
  const tools = await onPath('initdb') && await onPath('pg_ctl')
  if (!requireService(t, tools, 'the outage tests need initdb and pg_ctl on the PATH (apt-get install postgresql)')) return null
  const dir = await mkdtemp(join(tmpdir(), 'fa-pg-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  if (userInfo().uid === 0) {
    const { stdout } = await exec('id', ['-u', 'postgres'])
    const { stdout: gid } = await exec('id', ['-g', 'postgres'])
    await chown(dir, Number(stdout), Number(gid))
  }
  const data = join(dir, 'data')
  const port = await freePort()
  await exec(...asPostgres('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']))
  const start = async (): Promise<void> => {
    await exec(...asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`, 'start']))
    postmaster = Number((await readFile(join(data, 'postmaster.pid'), 'utf8')).split('\n')[0])
  }
  let postmaster = 0
  await start()
  // the postmaster and every backend it forked: freezing only the postmaster would leave open connections answering
  const cluster = async (): Promise<number[]> => {
    const { stdout } = await exec('ps', ['-o', 'pid=', '--ppid', String(postmaster)]).catch(() => ({ stdout: '' }))
    return [postmaster, ...stdout.split('\n').map((line) => Number(line.trim())).filter((pid) => pid > 0)]
  }
  const signal = async (name: NodeJS.Signals): Promise<void> => {
    for (const pid of await cluster()) {
      try {
        process.kill(pid, name)
      } catch {}
    }
  }
  t.teardown(async () => {
    await signal('SIGCONT')
    await exec(...asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'])).catch(() => {})
  })
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async freeze () {
      await signal('SIGSTOP')
      await eventually(async () => await stateOf(postmaster) === 'T', 5_000, 'postgres stopped')
    },
    thaw: () => signal('SIGCONT'),
    async kill () {
      await exec(...asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']))
    },
    revive: start
  }
}
