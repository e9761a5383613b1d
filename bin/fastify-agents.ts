#!/usr/bin/env node
import { run } from '../app/cli.js'

run(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`fastify-agents: ${(err as Error).message}\n`)
  process.exitCode = 1
})
