// The harness side of a peer server: the same IPC protocol as bench/lib/server.js, so that
// bench/lib/harness.js starts, measures and stops a peer like one of ours.
//   -> { type: 'ready', port }   once listening on 127.0.0.1
//   <- { id, type: 'heap' }      -> process.memoryUsage() after two full GCs
//   <- { id, type: 'stop' }      -> {}, runs `onStop`, then exits

const tick = () => new Promise((resolve) => setImmediate(resolve))

/** Tells the harness that the server listens on `port`, and answers its calls. */
export function answerHarness (port, { onStop = () => {} } = {}) {
  process.on('message', async (message) => {
    const reply = (result) => process.send({ id: message.id, result })
    switch (message.type) {
      case 'heap':
        // two full collections, with a turn of the loop between them for finalizers and weak callbacks
        global.gc()
        await tick()
        global.gc()
        return reply(process.memoryUsage())
      case 'stop':
        await onStop()
        reply({})
        setImmediate(() => process.exit(0))
        return
      default:
        process.send({ id: message.id, error: `unknown message ${message.type}` })
    }
  })
  process.on('disconnect', () => process.exit(0))
  process.send({ type: 'ready', port })
}

/** Listens on an ephemeral port of 127.0.0.1, then answers the harness. */
export function serveForHarness (server) {
  server.listen(0, '127.0.0.1', () => answerHarness(server.address().port))
}
