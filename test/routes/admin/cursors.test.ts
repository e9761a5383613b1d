// Bad input on every backend, refused the same way before any store (or agent) sees it: hostile cursors on every
// paginated route (the Admin API's audit, sessions, runs and webhook attempts; a session's runs; the caller's
// sessions) are the same 400 naming the parameter, never a 500 (a timestamp PostgreSQL cannot hold) nor a 200 with an
// empty page; so are limits out of range and ids or text holding NUL or a lone surrogate. Cursors the listings hand
// out still page. The rules live in schemas/common.ts (ids, cursors, limits), lib/core/cursors.ts and
// lib/core/validation.ts (unstorable text).
import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import type { InjectOptions } from 'fastify'
import { memoryStores } from '../../../lib/stores/memory.js'
import { postgresStores } from '../../../lib/stores/postgres.js'
import { redisStores } from '../../../lib/stores/redis.js'
import { sqliteStores } from '../../../lib/stores/sqlite.js'
import type { StoreSet } from '../../../lib/stores/types.js'
import { build, closeStores, echo } from '../../helper.js'
import { pgReachable, pgUrl, redisReachable, redisUrl, requireService, withPgSchema, withRedisPrefix } from '../../helpers/services.js'
import { newSecret } from '../../helpers/webhook-receiver.js'

const base64 = (text: string): string => Buffer.from(text).toString('base64url')
const key = (...parts: unknown[]): string => base64(JSON.stringify(parts))

/** Cursors no listing hands out: out-of-range and malformed timestamps, seqs and ids, and text that only decodes loosely. */
const HOSTILE: Array<[string, string]> = [
  ['a timestamp past Number.MAX_SAFE_INTEGER\'s ms', key(9007199254740991, 'x')],
  ['a timestamp past the last Date', key(8640000000000001, 'x')],
  ['a timestamp before 1970', key(-1, 'x')],
  ['a timestamp before the first Date', key(-8640000000000001, 'x')],
  ['a fractional timestamp', key(1.5, 'x')],
  ['a timestamp as text', key('0', 'x')],
  ['an id holding NUL', key(0, 'x\u0000')],
  ['an id holding a lone surrogate', key(0, '\ud800')],
  ['an id that is not text', key(0, 5)],
  ['three parts', key(0, 'x', 1)],
  ['an object', base64('{"ms":0,"id":"x"}')],
  ['a negative seq', base64('-1')],
  ['a fractional seq', base64('1.5')],
  ['a seq past Number.MAX_SAFE_INTEGER', base64('9007199254740992')],
  ['a twenty-digit seq', base64('99999999999999999999')],
  ['a seq in exponent form', base64('1e3')],
  ['a seq with a leading zero', base64('01')],
  ['a seq with a space', base64(' 1')],
  ['base64 with padding', `${base64('1')}==`],
  ['base64 with characters it skips', `${base64('12')}!!`],
  ['not base64 at all', '!!!'],
  ['text that decodes to bytes that are not UTF-8', Buffer.from([0xff, 0xfe]).toString('base64url')]
]

interface Backend {
  name: string
  reachable: () => Promise<boolean>
  howTo: string
  stores: (t: Test) => StoreSet
}

const backends: Backend[] = [
  { name: 'memory', reachable: async () => true, howTo: '', stores: () => memoryStores() },
  { name: 'SQLite', reachable: async () => true, howTo: '', stores: (t) => sqliteStores(join(t.testdir(), 'data.db')) },
  {
    name: 'PostgreSQL',
    reachable: () => pgReachable(),
    howTo: 'start PostgreSQL or set PG_URL',
    stores: (t) => postgresStores({ connectionString: pgUrl(), schema: withPgSchema(t) })
  },
  {
    name: 'Redis (sessions, runs, webhook attempts; the audit log in memory)',
    reachable: () => redisReachable(),
    howTo: 'start Redis or set REDIS_URL',
    stores: (t) => redisStores(redisUrl(), { prefix: withRedisPrefix(t) })
  }
]

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    if (!requireService(t, await backend.reachable(), backend.howTo)) return
    const stores = backend.stores(t)
    t.teardown(() => closeStores([stores]))
    const { app } = build(t, {
      agents: { echo },
      ...stores,
      adminApi: { enabled: true },
      // an outbox to read: nothing is delivered (no run ends in this test)
      webhooks: { url: 'http://127.0.0.1:9/hooks', secret: newSecret() }
    })
    const sessionIds: string[] = []
    for (let i = 0; i < 3; i++) sessionIds.push((await app.inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json().id)
    const routes = ['/admin/audit', '/admin/sessions', '/admin/runs', '/admin/webhooks', `/v1/sessions/${sessionIds[0]!}/runs`, '/v1/sessions']

    t.test('every hostile cursor on every paginated route: 400 FA_INVALID_CURSOR naming the parameter', async (t) => {
      for (const route of routes) {
        for (const [what, cursor] of HOSTILE) {
          const response = await app.inject({ url: `${route}?cursor=${encodeURIComponent(cursor)}` })
          t.same({ status: response.statusCode, code: response.json().code, message: response.json().message },
            { status: 400, code: 'FA_INVALID_CURSOR', message: 'cursor must be the nextCursor of a previous page, as it came' },
            `${route.replace(sessionIds[0]!, ':id')}: ${what}`)
        }
      }
    })

    t.test('every limit out of range, fractional or not a number, on every paginated route: 400 naming it', async (t) => {
      const max: Record<string, number> = { '/v1/sessions': 100, [`/v1/sessions/${sessionIds[0]!}/runs`]: 100 }
      for (const route of routes) {
        for (const limit of ['0', '-1', String((max[route] ?? 500) + 1), '1.5', 'ten', '1e3']) {
          const response = await app.inject({ url: `${route}?limit=${limit}` })
          t.match({ status: response.statusCode, code: response.json().code, message: response.json().message },
            { status: 400, code: 'FST_ERR_VALIDATION', message: /^querystring\/limit / }, `${route.replace(sessionIds[0]!, ':id')}: limit=${limit}`)
        }
        t.equal((await app.inject({ url: `${route}?limit=${max[route] ?? 500}` })).statusCode, 200, `${route.replace(sessionIds[0]!, ':id')}: the largest limit pages`)
      }
    })

    t.test('ids and text no store keeps (NUL, a lone surrogate): 400 FA_UNSTORABLE_TEXT, nothing stored', async (t) => {
      const refused = async (what: string, request: InjectOptions, path: string): Promise<void> => {
        const response = await app.inject(request)
        t.same({ status: response.statusCode, code: response.json().code }, { status: 400, code: 'FA_UNSTORABLE_TEXT' }, what)
        t.match(response.json().message, new RegExp(`^${path.replace(/[/\\^$.*+?()[\]{}|]/g, '\\$&')} cannot be stored`), `${what}: names ${path}`)
      }
      await refused('a session id holding NUL', { url: '/v1/sessions/a%00b' }, 'params/id')
      await refused('a session id holding NUL, deleted', { method: 'DELETE', url: '/v1/sessions/a%00b' }, 'params/id')
      await refused('a run filter holding NUL', { url: '/admin/runs?sessionId=s%00' }, 'querystring/sessionId')
      await refused('a webhook filter holding NUL', { url: '/admin/webhooks?runId=r%00' }, 'querystring/runId')
      await refused('session metadata holding a lone surrogate', { method: 'POST', url: '/v1/sessions', headers: { 'content-type': 'application/json' }, body: '{"metadata":{"k":"\\ud800"}}' }, 'body/metadata/k')
      await refused('a run\'s session id holding a lone surrogate', { method: 'POST', url: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: '{"input":"hi","sessionId":"\\udc00x"}' }, 'body/sessionId')
      await refused('a run\'s input holding NUL', { method: 'POST', url: '/v1/agents/echo/runs', headers: { 'content-type': 'application/json' }, body: '{"input":"a\\u0000b"}' }, 'body/input')
      const sessions = (await app.inject({ url: '/admin/sessions?limit=500' })).json().sessions as Array<{ id: string }>
      t.same(sessions.map((s) => s.id).sort(), [...sessionIds].sort(), 'no session was made by a refused request')
      t.same((await app.inject({ url: '/admin/runs' })).json().runs, [], 'and no run')
    })

    t.test('the cursors the listings hand out still page', async (t) => {
      const first = (await app.inject({ url: '/admin/sessions?limit=2' })).json()
      t.equal(first.sessions.length, 2)
      const rest = await app.inject({ url: `/admin/sessions?limit=2&cursor=${first.nextCursor as string}` })
      t.equal(rest.statusCode, 200)
      t.same([...first.sessions, ...rest.json().sessions].map((s: { id: string }) => s.id).sort(), [...sessionIds].sort())
      const own = (await app.inject({ url: '/v1/sessions?limit=2' })).json()
      const ownRest = (await app.inject({ url: `/v1/sessions?limit=2&cursor=${own.nextCursor as string}` })).json()
      t.same([...own.sessions, ...ownRest.sessions].map((s: { id: string }) => s.id).sort(), [...sessionIds].sort())
      const audit = (await app.inject({ url: '/admin/audit?limit=1' })).json()
      t.equal((await app.inject({ url: `/admin/audit?limit=1&cursor=${audit.nextCursor as string}` })).statusCode, 200)
    })
  })
}
