// LangGraph's JS API server in its in-memory mode, as `langgraph dev` starts it (startServer of
// @langchain/langgraph-api: the in-memory runs/threads/assistants store, the in-memory checkpointer, its
// queue of workers), without the CLI's file watcher. argv[2] is the harness's JSON spec; `workers` is the
// number of runs executed at once (the CLI's --n-jobs-per-worker, 10 by default).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { answerHarness } from './ipc.js'

const spec = JSON.parse(process.argv[2] ?? '{}')
// info logs every request and run (ours and Mastra's log nothing per request); errors only
process.env.LOG_LEVEL ??= 'error'
const { startServer } = await import('@langchain/langgraph-api/server')

// the in-memory stores are flushed to files in cwd; a directory of its own, removed on stop
const cwd = mkdtempSync(join(tmpdir(), 'bench-langgraph-'))
const graphFile = fileURLToPath(new URL('./graph.js', import.meta.url))
const { host } = await startServer({
  port: 0,
  nWorkers: spec.workers ?? 10,
  host: '127.0.0.1',
  cwd,
  graphs: { echo: `${graphFile}:echo`, ticker: `${graphFile}:ticker`, idle: `${graphFile}:idle` }
})
answerHarness(Number(host.split(':').at(-1)), { onStop: () => rmSync(cwd, { recursive: true, force: true }) })
