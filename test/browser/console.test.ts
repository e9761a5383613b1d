// The operator console (docs/operations.md) in Chromium driven by playwright-core: it loads with no request leaving the
// service's origin, shows agents and stats, approves a waiting approval (the run completes), follows a run live and
// cancels another. Screenshots (laptop and phone) are kept in test-artifacts/ (gitignored).
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { Agent } from '../../lib/core/types.js'
import { eventually, listen } from '../helper.js'
import { requireService } from '../helpers/services.js'
import { projectRoot } from '../helpers/files.js'

const CHROMIUM = '/usr/bin/chromium'
const KEY = 'console-key-0123456789'
const ADMIN_TOKEN = 'console-admin-token'


t.test('the console in Chromium: agents and stats, an approval decided, a run followed live, a run cancelled', async (t) => {
  if (!requireService(t, existsSync(CHROMIUM), `the browser test needs Chromium at ${CHROMIUM}: apt-get install -y chromium`)) return
  let release = (): void => {}
  const ticker: Agent = {
    description: 'ticks, then waits to be released (or cancelled)',
    async * run (_input, ctx) {
      yield 'tick'
      await new Promise<void>((resolve, reject) => {
        release = resolve
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))
      })
      yield ' tock'
    }
  }
  const approver: Agent = {
    description: 'asks before it ships',
    async run (_input, ctx) {
      const decision = await ctx.requestApproval({ action: 'ship-release', payload: { version: '1.2.3' }, reason: 'a release goes out' })
      return { output: { approved: decision.approved, comment: decision.comment ?? null }, usage: { inputTokens: 10, outputTokens: 20 } }
    }
  }
  const { url: origin } = await listen(t, {
    agents: { echo: { description: 'says it back', async run (input) { return { output: input, usage: { inputTokens: 1, outputTokens: 2 } } } }, ticker, approver },
    auth: { strategy: 'api-key', keys: [KEY] },
    adminApi: { enabled: true, bearerToken: ADMIN_TOKEN }
  })
  const run = (agent: string, input: unknown): Promise<Response> => fetch(`${origin}/v1/agents/${agent}/runs`, {
    method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: JSON.stringify({ input })
  })
  for (let i = 0; i < 3; i++) await (await run('echo', i)).json()
  /** The id of the one ticker run in progress, once it runs. */
  const runningTicker = (): Promise<string> => eventually(async () => {
    const res = await fetch(`${origin}/admin/runs?status=running&agent=ticker`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
    return ((await res.json()) as { runs: Array<{ runId: string }> }).runs[0]?.runId
  })

  const profile = await mkdtemp(join(tmpdir(), 'fastify-agents-console-'))
  t.teardown(() => rm(profile, { recursive: true, force: true }))
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic', '--no-first-run']
  })
  t.teardown(() => browser.close())
  const elsewhere: string[] = []
  await browser.route('**/*', (route) => {
    if (new URL(route.request().url()).origin === origin) return route.continue()
    elsewhere.push(route.request().url())
    return route.abort()
  })
  const page = browser.pages()[0] ?? await browser.newPage()
  page.setDefaultTimeout(10_000)
  const failures: string[] = []
  page.on('pageerror', (error) => failures.push(error.message))
  page.on('console', (message) => { if (message.type() === 'error') failures.push(message.text()) })

  // the page and its assets load without the admin token; the data needs it
  await page.goto(`${origin}/admin/console`)
  await page.getByLabel('Admin API token').fill(ADMIN_TOKEN)
  await page.getByLabel('Service credential').fill(KEY)
  await page.getByRole('button', { name: 'Open the console' }).click()
  await page.waitForSelector('#agents-body .agent-name:text-is("approver")')
  t.same(await page.$$eval('#agents-body .agent-name', (nodes) => nodes.map((n) => n.textContent)), ['echo', 'ticker', 'approver'])
  t.equal(await page.textContent('#runs-started'), '3')
  await page.waitForSelector('#stats-charts svg[role="img"]')
  t.equal(await page.$$eval('#stats-charts svg', (nodes) => nodes.length), 3, 'runs/s, latency percentiles, tokens')
  t.equal(await page.evaluate('sessionStorage.getItem("fastify-agents.adminToken")'), ADMIN_TOKEN)
  t.equal(await page.evaluate('localStorage.length'), 0, 'nothing in localStorage')
  await page.waitForSelector('#audit-body tbody tr td:text-is("POST")')
  const artifacts = join(projectRoot(), 'test-artifacts')
  await mkdir(artifacts, { recursive: true })
  await page.screenshot({ path: join(artifacts, 'console-overview.png'), fullPage: true })

  // an approval waits: approved from the inbox with a comment, the run completes
  const approving = run('approver', 'go')
  await page.waitForSelector('article.approval h3:text-is("ship-release")')
  await page.screenshot({ path: join(artifacts, 'console-approval.png'), fullPage: true })
  await page.getByLabel('Comment (optional)').fill('ship it')
  await page.getByRole('button', { name: 'Approve ship-release', exact: true }).click()
  t.same(((await (await approving).json()) as { output: unknown }).output, { approved: true, comment: 'ship it' })
  await page.waitForSelector('#approvals-body .empty')
  t.match(await page.textContent('#status'), /ship-release approved/)

  // a run followed live: its first event shows while it waits, then its end
  const followed = run('ticker', 'a')
  await page.getByRole('button', { name: `Follow run ${await runningTicker()} of ticker` }).click()
  await page.waitForSelector('#follow-log li:has-text("message.delta")').catch(async (err: Error) => {
    throw new Error(`${err.message}; the page says: ${await page.textContent('#follow-title')} / ${await page.textContent('#follow-log')}`)
  })
  release()
  await page.waitForSelector('#follow-log li:has-text("run.completed")')
  t.equal(((await (await followed).json()) as { output: unknown }).output, 'tick tock')
  await page.screenshot({ path: join(artifacts, 'console-follow.png'), fullPage: true })

  // a run cancelled from the page
  const cancelled = run('ticker', 'b')
  await page.getByRole('button', { name: `Cancel run ${await runningTicker()} of ticker` }).click()
  const failed = await (await cancelled).json() as { code: string }
  t.equal(failed.code, 'CANCELLED')
  await page.waitForSelector('#runs-body .empty')

  // readable on a phone: nothing wider than the screen
  await page.setViewportSize({ width: 390, height: 844 })
  await page.waitForTimeout(100)
  t.ok(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth + 1'), 'no sideways scrolling on a phone')
  await page.screenshot({ path: join(artifacts, 'console-phone.png'), fullPage: true })

  t.same(elsewhere, [], 'no request left the origin')
  t.same(failures, [])
})
