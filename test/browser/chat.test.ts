// A real browser chats with an agent through the service: a page using @ai-sdk/react's useChat (test/browser/
// chat-app.tsx, bundled by esbuild here, offline) in Chromium driven by playwright-core. It shows a tool call,
// approves an approval from the page, reloads mid-stream to resume the run (keeping the user's messages and the
// earlier turns, from GET …/chat/:id/messages), and approves an AI SDK agent's tool
// call on the call's own part. The DOM is checked; screenshots (after the approval, after the resume) are kept in
// test-artifacts/ (gitignored).
import t from 'tap'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import { build as bundle } from 'esbuild'
import { chromium } from 'playwright-core'
import { simulateReadableStream, stepCountIs, streamText, tool } from 'ai'
import { MockLanguageModelV4 } from 'ai/test'
import type { LanguageModelV4StreamPart } from '@ai-sdk/provider'
import { z } from 'zod'
import fastifyAgents from '../../index.js'
import { aiSdkAgent, modelMessages } from '../../adapters/ai-sdk.js'
import { scripted } from '../helpers/frontends.js'
import { requireService } from '../helpers/services.js'
import { projectRoot } from '../helpers/files.js'

const CHROMIUM = '/usr/bin/chromium'
const KEY = 'browser-key-0123456789'

const root = projectRoot()

/**
 * An AI SDK agent whose model deletes a file with a tool that needs approval, then says what came of it. Its first
 * answer takes its time after the tool call, so that the page shows the call before its approval is asked.
 */
function files (deleted: string[]) {
  const finish = (unified: 'stop' | 'tool-calls'): LanguageModelV4StreamPart => ({
    type: 'finish', finishReason: { unified, raw: unified }, usage: { inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined }, outputTokens: { total: 1, text: 1, reasoning: undefined } }
  })
  const model = new MockLanguageModelV4({
    doStream: async ({ prompt }) => {
      const answered = prompt.at(-1)?.role === 'tool'
      const chunks: LanguageModelV4StreamPart[] = answered
        ? [{ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'Deleted.' }, { type: 'text-end', id: 't' }, finish('stop')]
        : [{ type: 'tool-call', toolCallId: 'del_1', toolName: 'deleteFile', input: JSON.stringify({ path: '/tmp/report.txt' }) }, finish('tool-calls')]
      return { stream: simulateReadableStream({ chunks, chunkDelayInMs: answered ? 0 : 300 }) }
    }
  })
  const deleteFile = tool({
    inputSchema: z.object({ path: z.string() }),
    needsApproval: true,
    execute: async ({ path }) => { deleted.push(path); return `deleted ${path}` }
  })
  return aiSdkAgent({ run: (input, ctx) => streamText({ model, tools: { deleteFile }, messages: modelMessages(ctx, input), abortSignal: ctx.signal, stopWhen: stepCountIs(3) }) })
}

const PAGE = '<!doctype html><html><head><meta charset="utf-8"><title>chat</title></head>' +
  '<body><div id="root"></div><script type="module" src="/app.js"></script></body></html>'

t.test('useChat in Chromium: a tool call, an approval from the page, a reload mid-stream that keeps the chat and resumes', async (t) => {
  if (!requireService(t, existsSync(CHROMIUM), `the browser test needs Chromium at ${CHROMIUM}: apt-get install -y chromium`)) return
  const began = performance.now()
  const built = await bundle({
    entryPoints: [join(root, 'test/browser/chat-app.tsx')],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    jsx: 'automatic',
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'silent'
  })
  const script = built.outputFiles[0]!.text

  // plugin mode: the page and its script are the host app's routes, the service is mounted beside them
  const helper = scripted()
  const deleted: string[] = []
  const app = Fastify()
  await app.register(fastifyAgents, { agents: { helper: helper.agent, files: files(deleted) }, auth: { strategy: 'api-key', keys: [KEY] } })
  app.get('/', async (_request, reply) => reply.type('text/html; charset=utf-8').send(PAGE))
  app.get('/app.js', async (_request, reply) => reply.type('text/javascript; charset=utf-8').send(script))
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const origin = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`

  const profile = await mkdtemp(join(tmpdir(), 'fastify-agents-chromium-'))
  t.teardown(() => rm(profile, { recursive: true, force: true }))
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic', '--no-first-run']
  })
  t.teardown(() => browser.close())
  // nothing leaves the machine: the page talks to the service only
  await browser.route('**/*', (route) => new URL(route.request().url()).origin === origin ? route.continue() : route.abort())
  const page = browser.pages()[0] ?? await browser.newPage()
  page.setDefaultTimeout(10_000)
  const failures: string[] = []
  page.on('pageerror', (error) => failures.push(error.message))

  await page.goto(`${origin}/?chat=browser-1&key=${KEY}`)
  await page.waitForSelector('main[data-status="ready"]')

  // a tool call, then an approval asked of the page
  await page.fill('input[name=message]', 'mail')
  await page.click('button[type=submit]')
  await page.waitForSelector('[data-tool="sendEmail"][data-state="approval-requested"] [data-approve]')
  t.equal(await page.getAttribute('[data-tool="draft"]', 'data-state'), 'input-available', 'the tool call is shown')
  t.equal(await page.textContent('section[data-role="assistant"] [data-part="text"]'), 'Sending.')
  await page.click('[data-approve]')
  await page.waitForSelector('[data-tool="sendEmail"][data-state="output-available"]')
  await page.waitForSelector('main[data-status="ready"]')
  t.same(await page.$$eval('section[data-role="assistant"] [data-part="text"]', (nodes) => nodes.map((node) => node.textContent)), ['Sending.', ' Sent.'])
  t.equal(await page.getAttribute('[data-tool="draft"]', 'data-state'), 'output-available', 'the tool\'s result came with the rest of the run')
  const mail = helper.seen[0]!
  t.equal(await page.getAttribute('section[data-role="assistant"]', 'data-id'), mail.runId, 'one message: the run\'s')
  t.equal((await app.inject({ url: '/v1/approvals?runId=' + mail.runId, headers: { 'x-api-key': KEY } })).json().approvals.length, 0)
  const artifacts = join(root, 'test-artifacts')
  await mkdir(artifacts, { recursive: true })
  await page.screenshot({ path: join(artifacts, 'browser-chat-approved.png'), fullPage: true })

  // a run that streams, then waits: the page reloads mid-stream and resumes it
  await page.fill('input[name=message]', 'wait')
  await page.click('button[type=submit]')
  await page.waitForSelector('section[data-role="assistant"]:last-of-type [data-part="text"]:text-is("tick")')
  const waiting = helper.seen[1]!
  await page.reload()
  const resumed = `section[data-role="assistant"][data-id="${waiting.runId}"]`
  await page.waitForSelector(`${resumed} [data-part="text"]:text-is("tick")`)
  t.equal(await page.getAttribute('main', 'data-status'), 'streaming', 'resumed: the run is still going')
  // the chat came back whole: the user's messages and the earlier turn, as they were shown
  const userTexts = (): Promise<string[]> => page.$$eval('section[data-role="user"] [data-part="text"]', (nodes) => nodes.map((node) => node.textContent ?? ''))
  t.same(await userTexts(), ['mail', 'wait'], 'the user\'s messages kept')
  const earlier = `section[data-role="assistant"][data-id="${mail.runId}"]`
  t.same(await page.$$eval(`${earlier} [data-part="text"]`, (nodes) => nodes.map((node) => node.textContent)), ['Sending.', ' Sent.'], 'the earlier answer kept')
  t.equal(await page.getAttribute(`${earlier} [data-tool="sendEmail"]`, 'data-state'), 'output-available', 'with its approved tool call')
  t.equal(await page.getAttribute(`${earlier} [data-tool="draft"]`, 'data-state'), 'output-available')
  helper.release()
  await page.waitForSelector(`${resumed} [data-part="text"]:text-is("tick tock")`)
  await page.waitForSelector('main[data-status="ready"]')
  t.equal(helper.seen.length, 2, 'the reload started no run')
  t.same(failures, [])
  // a reload once the chat is idle: every message back, nothing to resume
  await page.reload()
  await page.waitForSelector(`${resumed} [data-part="text"]:text-is("tick tock")`)
  t.same(await userTexts(), ['mail', 'wait'])
  t.equal(await page.locator('section[data-role="assistant"]').count(), 2)
  t.equal(await page.getAttribute('main', 'data-status'), 'ready')

  await page.screenshot({ path: join(artifacts, 'browser-chat-resumed.png'), fullPage: true })

  // an AI SDK agent's tool call that needs approval: one tool part, whose state the page shows as it changes
  await page.goto(`${origin}/?chat=browser-2&agent=files&key=${KEY}`)
  await page.waitForSelector('main[data-status="ready"]')
  // (a script of the page's own: this file is compiled without the DOM's types)
  await page.evaluate(`
    window.toolStates = []
    new MutationObserver(() => {
      const state = document.querySelector('[data-tool="deleteFile"]')?.getAttribute('data-state')
      if (state != null && window.toolStates.at(-1) !== state) window.toolStates.push(state)
    }).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] })
  `)
  await page.fill('input[name=message]', 'Delete the report')
  await page.click('button[type=submit]')
  await page.waitForSelector('[data-tool="deleteFile"][data-state="approval-requested"] [data-approve]')
  t.equal(await page.locator('section[data-role="assistant"] [data-part="tool"]').count(), 1, 'one tool part: the call\'s own')
  await page.click('[data-approve]')
  await page.waitForSelector('[data-tool="deleteFile"][data-state="output-available"]')
  await page.waitForSelector('section[data-role="assistant"] [data-part="text"]:text-is("Deleted.")')
  t.equal(await page.locator('section[data-role="assistant"] [data-part="tool"]').count(), 1)
  t.same(await page.evaluate('window.toolStates'),
    ['input-available', 'approval-requested', 'approval-responded', 'output-available'], 'the call, its approval, the answer, its output')
  t.same(deleted, ['/tmp/report.txt'])
  t.same(failures, [])
  t.comment(`browser test: ${Math.round(performance.now() - began)} ms (bundle, service, Chromium, three chats, a reload)`)
})
