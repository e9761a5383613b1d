// The operator console (docs/operations.md) in Chromium driven by playwright-core: it loads with no request leaving
// the service's origin, shows agents and stats, approves a waiting approval under the operator's name (the run
// completes), follows a run live and cancels another after a confirmation; an idle tab costs one audit entry per
// live feed; run history searches and shows a failed run's events; schedules are disabled and enabled through the
// service's routes; the playground streams a run and decides its approval inline. Screenshots (laptop and phone)
// are kept in test-artifacts/ (gitignored).
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import type { BrowserContext, Page } from 'playwright-core'
import { Type } from '@sinclair/typebox'
import type { Test } from 'tap'
import type { Agent } from '../../lib/core/types.js'
import { auditEntries, eventually, listen } from '../helper.js'
import { requireService } from '../helpers/services.js'
import { projectRoot } from '../helpers/files.js'

const CHROMIUM = '/usr/bin/chromium'
const KEY = 'console-key-0123456789'
const ADMIN_TOKEN = 'console-admin-token'
// two Chromium sessions and a dozen pages' worth of steps: more than tap's 60 s a file on a loaded machine
t.setTimeout(180_000)


/** Chromium on a fresh profile, every request that leaves the origin refused and listed, page errors collected. */
async function openBrowser (t: Test, origin: string): Promise<{ browser: BrowserContext, page: Page, failures: string[], elsewhere: string[] }> {
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
  return { browser, page, failures, elsewhere }
}

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
      return { output: { approved: decision.approved, comment: decision.comment ?? null, decidedBy: decision.decidedBy, payload: decision.payload, response: decision.response ?? null }, usage: { inputTokens: 10, outputTokens: 20 } }
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

  const { page, failures, elsewhere } = await openBrowser(t, origin)

  // the page and its assets load without the admin token; the data needs it
  await page.goto(`${origin}/admin/console`)
  await page.getByLabel('Admin API token').fill(ADMIN_TOKEN)
  await page.getByLabel('Service credential').fill(KEY)
  await page.getByLabel('Your name (recorded on your decisions)').fill('Olga Ops')
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
  // the payload edited as JSON: invalid JSON is refused in the page, nothing sent
  const payload = page.getByLabel('Payload (JSON: edit it to approve something else)')
  t.same(JSON.parse(await payload.inputValue()), { version: '1.2.3' })
  await payload.fill('{ "version": ')
  await page.getByRole('button', { name: 'Approve ship-release', exact: true }).click()
  await page.waitForSelector('#status:has-text("the payload is not valid JSON")')
  await payload.fill('{ "version": "1.2.4" }')
  await page.getByLabel('Comment (optional)').fill('ship it')
  await page.getByLabel('Answer to the agent (optional)').fill('1.2.3 has a known bug')
  await page.getByRole('button', { name: 'Approve ship-release', exact: true }).click()
  t.same(((await (await approving).json()) as { output: unknown }).output, { approved: true, comment: 'ship it', decidedBy: 'Olga Ops', payload: { version: '1.2.4' }, response: '1.2.3 has a known bug' })
  await page.waitForSelector('#approvals-body .empty')
  t.match(await page.textContent('#status'), /ship-release approved/)
  const decided = await (await fetch(`${origin}/admin/audit?limit=5`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json() as { entries: Array<{ method: string, url: string, principal: string }> }
  t.ok(decided.entries.some((e) => e.method === 'POST' && e.url.startsWith('/v1/approvals/') && e.principal !== 'anonymous'), 'the decision is audited under the credential\'s principal')

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
  await page.getByRole('button', { name: 'Stop following' }).click()
  t.equal(await page.textContent('#follow-title'), 'Not following a run')
  t.ok(await page.isHidden('#stop-follow'), 'nothing to stop any more')

  // a run cancelled from the page, after a confirmation: kept running when the operator says so, or presses Escape
  const cancelled = run('ticker', 'b')
  const tickerId = await runningTicker()
  const cancelButton = page.getByRole('button', { name: `Cancel run ${tickerId} of ticker` })
  await cancelButton.click()
  const dialog = page.getByRole('dialog', { name: 'Cancel this run?' })
  await dialog.waitFor()
  t.match(await dialog.textContent(), new RegExp(`Run ${tickerId} of ticker, started by \\S+, stops and ends cancelled`))
  await page.screenshot({ path: join(artifacts, 'console-confirm.png') })
  await page.getByRole('button', { name: 'Keep it running' }).click()
  await page.waitForSelector('#status:text-matches("left running")')
  await cancelButton.click()
  await dialog.waitFor()
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'hidden' })
  await page.waitForTimeout(200)
  t.equal(await runningTicker(), tickerId, 'still running after "Keep it running" and Escape')
  await cancelButton.click()
  await page.getByRole('button', { name: 'Cancel the run' }).click()
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

t.test('the console in Chromium: an idle tab\'s audit entries, run history and a failed run\'s events, the playground', async (t) => {
  if (!requireService(t, existsSync(CHROMIUM), `the browser test needs Chromium at ${CHROMIUM}: apt-get install -y chromium`)) return
  const OTHER_KEY = 'console-other-key-0123456789'
  const failing: Agent = {
    description: 'starts, then fails',
    async * run () {
      yield 'half an answer'
      throw new Error('the model went away')
    }
  }
  const planner: Agent = {
    description: 'plans a trip: a tool call, then asks before booking',
    input: Type.Object({ city: Type.String(), nights: Type.Integer({ minimum: 1 }) }),
    async * run (input, ctx) {
      const { city, nights } = input as { city: string, nights: number }
      yield `Looking at ${city}`
      yield { type: 'tool.call', data: { toolCallId: 'call-1', name: 'search_hotels', input: { city } } }
      yield { type: 'tool.result', data: { toolCallId: 'call-1', name: 'search_hotels', output: ['<b>Hotel</b> Bristol'], isError: false } }
      const decision = await ctx.requestApproval({ action: 'book-hotel', payload: { hotel: 'Hotel Bristol', nights }, reason: 'it costs money' })
      yield decision.approved ? ` — booked for ${nights} nights.` : ' — not booked.'
    }
  }
  const { service, url: origin } = await listen(t, {
    agents: { echo: { description: 'says it back', async run (input) { return { output: input } } }, failing, planner },
    auth: { strategy: 'api-key', keys: [KEY, OTHER_KEY] },
    adminApi: { enabled: true, bearerToken: ADMIN_TOKEN, liveIntervalMs: 100, liveFeedMs: 1000 }
  })
  const run = async (agent: string, input: unknown, key = KEY): Promise<{ runId: string, code?: string }> => {
    const res = await fetch(`${origin}/v1/agents/${agent}/runs`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ input }) })
    return await res.json() as { runId: string, code?: string }
  }
  const mine = await run('echo', 'one')
  const theirs = await run('echo', 'two', OTHER_KEY)
  await run('echo', 'three')
  // a failed run's id is in its record: the newest failed one
  await run('failing', 'x')
  const adminGet = async (path: string): Promise<any> => (await fetch(`${origin}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json()
  const failedId = (await adminGet('/runs?status=failed')).runs[0].runId as string
  const serviceGet = async (path: string, key = KEY): Promise<any> => (await fetch(`${origin}${path}`, { headers: { 'x-api-key': key } })).json()
  const schedule = async (body: unknown, key = KEY): Promise<{ id: string }> => {
    const res = await fetch(`${origin}/v1/schedules`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(body) })
    t.equal(res.status, 201)
    return await res.json() as { id: string }
  }
  const nightly = await schedule({ agent: 'echo', input: 'nightly', cron: '0 3 * * *', timezone: 'Europe/Berlin' })
  const others = await schedule({ agent: 'echo', input: 'theirs', everyMs: 60_000 }, OTHER_KEY)
  const otherPrincipal = (await adminGet(`/runs?runId=${theirs.runId}`)).runs[0].principal as string

  const { browser, page, failures, elsewhere } = await openBrowser(t, origin)
  await page.goto(`${origin}/admin/console`)
  await page.getByLabel('Admin API token').fill(ADMIN_TOKEN)
  await page.getByLabel('Service credential').fill(KEY)
  await page.getByLabel('Your name (recorded on your decisions)').fill('Pat Player')
  await page.getByRole('button', { name: 'Open the console' }).click()
  await page.waitForSelector('#agents-body .agent-name:text-is("planner")')
  await page.waitForSelector('#history-body tbody tr td code')

  // idle: the live feed is the only admin request, one a second here (liveFeedMs), however often it sends
  await page.waitForTimeout(300)
  const from = Date.now()
  await page.waitForTimeout(3200)
  const to = Date.now()
  const entries = (await auditEntries(service.app)).filter((e) => e.admin === true && Date.parse(e.at) >= from && Date.parse(e.at) < to)
  t.same([...new Set(entries.map((e) => e.url))], ['/admin/live'], 'nothing but the live feed')
  t.ok(entries.length >= 2 && entries.length <= 5, `one entry per feed, a feed a second: ${entries.length} in 3.2 s`)
  t.ok(entries.every((e) => e.principal === 'admin' && e.status === 200), 'each authenticated and attributed')
  t.ok(Number(await page.textContent('#cluster-running')) >= 0)
  t.equal(await page.textContent('#cluster-approvals'), '0')

  // run history: by principal, then by id; a failed run's events from its log
  const artifacts = join(projectRoot(), 'test-artifacts')
  await mkdir(artifacts, { recursive: true })
  await page.getByLabel('Principal').fill(otherPrincipal)
  await page.getByRole('button', { name: 'Search' }).click()
  // the unfiltered list holds that run too: wait for the filtered one
  // (counted through a locator: a string predicate is eval()ed in the page, which the console's CSP refuses)
  await eventually(async () => await page.locator('#history-body tbody code').count() === 1)
  await page.waitForSelector(`#history-body code[data-run="${theirs.runId}"]`)
  t.same(await page.$$eval('#history-body tbody code', (nodes) => nodes.map((n) => n.getAttribute('title'))), [theirs.runId], 'only that principal\'s run')
  await page.getByLabel('Principal').fill('')
  await page.getByLabel('Run id').fill(mine.runId)
  await page.getByRole('button', { name: 'Search' }).click()
  await page.waitForSelector(`#history-body code[data-run="${mine.runId}"]`)
  await eventually(async () => await page.locator('#history-body tbody tr').count() === 1)
  t.equal(await page.$$eval('#history-body tbody tr', (rows) => rows.length), 1)
  await page.getByLabel('Run id').fill('')
  await page.getByLabel('Status', { exact: true }).selectOption('failed')
  await page.getByRole('button', { name: 'Search' }).click()
  await page.waitForSelector(`#history-body code[data-run="${failedId}"]`)
  t.match(await page.textContent('#history-body tbody'), /AGENT_ERROR/)
  await page.getByRole('button', { name: `Events of run ${failedId}` }).click()
  await page.waitForSelector('#run-events-log li.failed')
  t.same(await page.$$eval('#run-events-log code.type', (nodes) => nodes.map((n) => n.textContent)), ['run.started', 'message.delta', 'run.failed'])
  t.match(await page.textContent('#run-events-title'), failedId, 'the whole id in its events\' view')
  t.match(await page.textContent('#run-events-log'), /half an answer/)
  t.match(await page.textContent('#run-events-summary'), /failed/)
  t.ok(await page.isHidden('#run-events-more'), 'the whole log on one page')
  await page.locator('#history').screenshot({ path: join(artifacts, 'console-history.png') })

  // schedules: listed with their trigger and next run; disabled and enabled again through the service's routes
  await page.getByRole('button', { name: 'Disable schedule ' + nightly.id }).click()
  await page.waitForSelector(`#schedules-body button[aria-label="Enable schedule ${nightly.id}"]`)
  t.equal((await serviceGet(`/v1/schedules/${nightly.id}`)).enabled, false, 'disabled through PATCH /v1/schedules/:id')
  t.match(await page.textContent('#schedules-body'), /0 3 \* \* \* \(Europe\/Berlin\)/, 'its trigger and time zone')
  t.match(await page.textContent('#schedules-body'), /every 60000 ms/, 'an interval schedule too')
  await page.getByRole('button', { name: 'Enable schedule ' + nightly.id }).click()
  await page.waitForSelector(`#schedules-body button[aria-label="Disable schedule ${nightly.id}"]`)
  const enabled = await serviceGet(`/v1/schedules/${nightly.id}`)
  t.equal(enabled.enabled, true, 'and enabled again')
  t.ok(enabled.nextRunAt !== null, 'with its next due time')
  // another principal's schedule is listed (the Admin API sees every principal's) but the service credential cannot
  // change it: the service's 404 is shown in the section
  await page.getByRole('button', { name: 'Disable schedule ' + others.id }).click()
  await page.waitForSelector('#schedules .section-error:text-matches("not found", "i")')
  t.equal((await serviceGet(`/v1/schedules/${others.id}`, OTHER_KEY)).enabled, true, 'another principal\'s schedule is left as it was')
  await page.locator('#schedules').screenshot({ path: join(artifacts, 'console-schedules.png') })

  // the playground: the input shaped by the schema, a run streamed, its approval decided inline
  await page.getByLabel('Agent', { exact: true }).and(page.locator('#play-agent')).selectOption('planner')
  t.same(JSON.parse(await page.inputValue('#play-input')), { city: '', nights: 1 }, 'an input shaped by the agent\'s schema')
  await page.fill('#play-input', '{ "city": "Lisbon", "nights": 2 }')
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.waitForSelector('#play-events li.inline-approval')
  t.match(await page.textContent('#play-text'), /^Looking at Lisbon$/)
  t.match(await page.textContent('#play-events'), /tool\.call\s*search_hotels \{"city":"Lisbon"\}/)
  t.match(await page.textContent('#play-events'), /<b>Hotel<\/b> Bristol/, 'tool output shown as text, not markup')
  t.equal(await page.$$eval('#play-events b', (nodes) => nodes.length), 0)
  await page.waitForSelector('#cluster-approvals:text-is("1")')
  await page.waitForSelector('#cluster-running:text-is("1")')
  t.pass('the cluster figures count the waiting run and its approval')
  await page.screenshot({ path: join(artifacts, 'console-playground.png'), fullPage: true })
  await page.getByRole('button', { name: 'Approve book-hotel in the playground' }).click()
  await page.waitForSelector('#play-state:text-is("completed")')
  t.equal(await page.textContent('#play-text'), 'Looking at Lisbon — booked for 2 nights.')
  t.match(await page.textContent('#play-events'), /approval\.decided\s*book-hotel: approved by Pat Player/)
  const [approval] = (await adminGet('/runs?agent=planner')).runs
  const events = await adminGet(`/runs/${approval.runId}/events`)
  const decidedEvent = events.events.find((e: { type: string }) => e.type === 'approval.decided')
  t.equal(decidedEvent.data.approval.decision.decidedBy, 'Pat Player', 'the operator\'s name on the stored decision')
  await page.locator('#playground').screenshot({ path: join(artifacts, 'console-playground-done.png') })

  // Stop closes the stream: the run is cancelled
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.waitForSelector('#play-events li.inline-approval')
  await page.getByRole('button', { name: 'Stop', exact: true }).click()
  await page.waitForSelector('#play-state:text-is("stopped")')
  t.ok(await page.isEnabled('#play-run'))
  await eventually(async () => (await adminGet('/runs?agent=planner&status=cancelled')).runs.length === 1 || undefined)
  await page.waitForSelector('#cluster-approvals:text-is("0")')
  t.pass('its approval went with it')

  // bad input is the service's 400, shown
  await page.fill('#play-input', '{ "city": 1 }')
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.waitForSelector('#play-error:text-matches("400 FST_ERR_VALIDATION")')
  await page.fill('#play-input', '{ not json')
  await page.getByRole('button', { name: 'Run', exact: true }).click()
  await page.waitForSelector('#play-error:text-matches("not JSON")')

  await page.screenshot({ path: join(artifacts, 'console-deep.png'), fullPage: true })
  await browser.close()
  t.same(elsewhere, [], 'no request left the origin')
  // the 400s of bad input and the 404 of another principal's schedule, which the page shows
  t.same(failures.filter((f) => !/status of 40[04]/.test(f)), [])
})
