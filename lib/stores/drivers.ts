// The database drivers are optional peer dependencies: a user installs the ones whose stores they use. None is
// loaded by importing the package; each is required on first use by a factory or a connection that opens its
// own client, and a missing one is an error naming the package to install.
import { createRequire } from 'node:module'
import { MissingDriverError } from '../core/errors.js'

export type DriverName = 'pg' | 'ioredis' | 'better-sqlite3'
export type DriverLoader = (name: DriverName) => unknown

const require = createRequire(import.meta.url)
const requireDriver: DriverLoader = (name) => require(name)

// what to install: better-sqlite3 13 needs Node 22 and is not in the peer range yet, and npm picks it on Node 22
const installSpec: Record<DriverName, string> = { pg: 'pg', ioredis: 'ioredis', 'better-sqlite3': 'better-sqlite3@12' }

function isMissing (error: unknown, name: DriverName): boolean {
  const { code, message } = error as { code?: unknown, message?: unknown }
  // only the driver itself: a driver that is there but fails to load (a native build, a dependency of its own) says so
  return code === 'MODULE_NOT_FOUND' && typeof message === 'string' && message.startsWith(`Cannot find module '${name}'`)
}

/**
 * The driver's module; `user` names what needs it (`sqliteStores()`), for the error when it is not installed. `load`
 * is Node's require (tests give another, to see what a failed load answers).
 */
export function loadDriver<T> (name: DriverName, user: string, load: DriverLoader = requireDriver): T {
  try {
    return load(name) as T
  } catch (error) {
    if (isMissing(error, name)) throw new MissingDriverError(user, name, installSpec[name])
    throw error
  }
}
