// Mastra's own HTTP server for agents: @mastra/hono's MastraServer on a Hono app, served by
// @hono/node-server. Three agents on the AI SDK's mock model (./model.js), no memory (no thread kept),
// no storage, no auth, no observability: Mastra's defaults for `new Mastra({ agents })`.
import { createAdaptorServer } from '@hono/node-server'
import { Hono } from 'hono'
import { Agent } from '@mastra/core/agent'
import { Mastra } from '@mastra/core/mastra'
import { MastraServer } from '@mastra/hono'
import { mockModel } from './model.js'
import { serveForHarness } from './ipc.js'

const agent = (kind) => new Agent({ id: kind, name: kind, instructions: 'Answer with the text you are given.', model: mockModel(kind) })

const mastra = new Mastra({
  agents: { echo: agent('echo'), ticker: agent('ticker'), idle: agent('idle') },
  logger: false
})

const app = new Hono()
await new MastraServer({ app, mastra, prefix: '/api' }).init()

serveForHarness(createAdaptorServer({ fetch: app.fetch }))
