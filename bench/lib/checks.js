// Correctness checks run once per contender before it is measured: a fast wrong answer is not a result.

export async function checkEcho (url, request, headers = {}) {
  const response = await fetch(url + request.path, { method: 'POST', headers: { ...request.headers, ...headers }, body: request.body })
  const text = await response.text()
  if (response.status !== 200) throw new Error(`echo check: ${response.status} ${text}`)
  const body = JSON.parse(text)
  const sent = JSON.parse(request.body).input
  if (JSON.stringify(body.output) !== JSON.stringify(sent) || body.status !== 'completed') {
    throw new Error(`echo check: unexpected body ${text.slice(0, 200)}`)
  }
  return response
}

/** Parses an SSE body into events (comments dropped). */
export function parseSse (text) {
  const events = []
  for (const block of text.split('\n\n')) {
    const lines = block.split('\n').filter((l) => l !== '' && !l.startsWith(':'))
    if (lines.length === 0) continue
    const field = (name) => lines.find((l) => l.startsWith(name + ': '))?.slice(name.length + 2)
    events.push({ id: Number(field('id')), event: field('event'), data: JSON.parse(field('data')) })
  }
  return events
}

export async function checkSseRun (url, request, deltas) {
  const response = await fetch(url + request.path, { method: 'POST', headers: request.headers, body: request.body })
  const events = parseSse(await response.text())
  const counts = {}
  for (const e of events) counts[e.event] = (counts[e.event] ?? 0) + 1
  const ok = response.status === 200 && events[0]?.event === 'run.started' && counts['message.delta'] === deltas &&
    events.at(-1)?.event === 'run.completed' && events.every((e, i) => e.id === i + 1)
  if (!ok) throw new Error(`SSE check: status ${response.status}, events ${JSON.stringify(counts)}`)
}

/**
 * A front end's stream, read whole: `deltas` occurrences of `delta` and its `end`, counted as text. An id
 * placeholder of the load (`[<id>]`) is filled for the check.
 */
export async function checkProjectedStream (url, request, deltas, delta, end) {
  const response = await fetch(url + request.path, { method: 'POST', headers: request.headers, body: request.body.replaceAll('[<id>]', 'check') })
  const text = await response.text()
  const got = text.split(delta).length - 1
  if (response.status !== 200 || got !== deltas || !text.includes(end)) {
    throw new Error(`${request.path} check: status ${response.status}, ${got} deltas, end ${text.includes(end)}: ${text.slice(-200)}`)
  }
}
