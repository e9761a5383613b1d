// The operator console's script, served as /console/app.js: plain browser JavaScript (an ES module), no library.
// It reads the Admin API with the admin token (one live feed, and what the operator asks for) and acts (decide,
// cancel, follow, run in the playground) through the service's own routes with the service credential; both are
// typed in and kept in sessionStorage only. Written without backticks or template placeholders: it lives in a
// String.raw literal. Text goes in as text (textContent, text nodes), never as markup.
export const script = String.raw`
const root = document.documentElement
const ADMIN = root.dataset.admin
const API = root.dataset.api
// how long a failed live feed waits before the next try, doubled up to a minute
const RETRY_MS = 2000
const HISTORY = 60
const $ = (selector) => document.querySelector(selector)

const KEYS = { admin: 'fastify-agents.adminToken', service: 'fastify-agents.serviceToken', operator: 'fastify-agents.operator' }
const credentials = {
  get admin () { return sessionStorage.getItem(KEYS.admin) || '' },
  get service () { return sessionStorage.getItem(KEYS.service) || '' },
  get operator () { return sessionStorage.getItem(KEYS.operator) || '' }
}

/** An element with attributes (on* are listeners, text is its text) and children (strings become text). */
function h (tag, attributes, ...children) {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value)
    else if (name === 'text') node.textContent = String(value)
    else node.setAttribute(name, value === true ? '' : String(value))
  }
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child))
  return node
}

function bearer (token) {
  return token === '' ? {} : { authorization: 'Bearer ' + token }
}

async function problemOf (res) {
  try {
    const body = await res.json()
    return Object.assign(new Error(res.status + ' ' + (body.code || '') + ': ' + (body.message || res.statusText)), { status: res.status })
  } catch {
    return Object.assign(new Error(res.status + ' ' + res.statusText), { status: res.status })
  }
}

async function adminGet (path) {
  const res = await fetch(ADMIN + path, { headers: bearer(credentials.admin) })
  if (!res.ok) throw await problemOf(res)
  return res.json()
}

async function serviceCall (method, path, body) {
  const headers = bearer(credentials.service)
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(API + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  if (!res.ok) throw await problemOf(res)
  return res.json()
}

/** Reads a Server-Sent Events response to its end, calling onEvent(type, data text) for each event. */
async function readEvents (res, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffer += value
    let end
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const fields = {}
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue
        const colon = line.indexOf(': ')
        if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 2)
      }
      if (fields.event !== undefined) onEvent(fields.event, fields.data || '', fields.id)
    }
  }
}

function parsed (text) {
  try { return JSON.parse(text) } catch { return text }
}

function announce (message, isError) {
  const status = $('#status')
  status.textContent = message
  status.className = isError ? 'error' : ''
}

/** Runs a section's loader, showing its failure in the section rather than throwing. */
async function guarded (section, load) {
  const error = section.querySelector('.section-error')
  try {
    await load()
    error.textContent = ''
  } catch (err) {
    error.textContent = String(err.message || err)
  }
}

function table (caption, columns, rows) {
  return h('table', {},
    h('caption', { class: 'visually-hidden', text: caption }),
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', text: c })))),
    h('tbody', {}, rows.length === 0
      ? h('tr', {}, h('td', { colspan: columns.length, class: 'empty', text: 'Nothing here' }))
      : rows.map((cells) => h('tr', {}, cells.map((cell) => h('td', {}, cell))))))
}

function figures (pairs) {
  return h('dl', {}, pairs.flatMap(([label, value, id]) => [h('dt', { text: label }), h('dd', { id, text: value })]))
}

const when = (iso) => iso ? new Date(iso).toLocaleString() : ''
const short = (id) => id ? String(id).slice(0, 8) : ''
const bytes = (n) => (n / 1048576).toFixed(1) + ' MiB'
const json = (value) => JSON.stringify(value)
/** A run's id in a table: its start, the whole of it on hover (and in its events' view). */
const runCode = (runId) => h('code', { title: runId, 'data-run': runId, text: short(runId) })

/** What an event says, in a line: text for text, the name and arguments of a tool, who decided an approval. */
function describe (type, data) {
  try {
    switch (type) {
      case 'run.started': return data.agent + ', attempt ' + data.attempt + (data.sessionId ? ', session ' + short(data.sessionId) : '') + ', trace ' + data.traceId
      case 'message.delta': case 'reasoning.delta': return data.text
      case 'tool.call': return data.name + ' ' + json(data.input)
      case 'tool.result': return data.name + (data.isError ? ' failed: ' : ' → ') + json(data.output)
      case 'approval.requested': return data.approval.action + ' ' + json(data.approval.payload)
      case 'approval.decided': {
        const { action, status, decision } = data.approval
        return action + ': ' + status + (decision && decision.decidedBy ? ' by ' + decision.decidedBy : '') + (decision && decision.comment ? ' (' + decision.comment + ')' : '')
      }
      case 'run.failed': return data.error.code + ': ' + data.error.message
      case 'run.completed': return json(data.output)
    }
  } catch {}
  return json(data)
}

function eventItem (type, data, seq) {
  const kind = type === 'run.completed' ? 'completed' : type === 'run.failed' ? 'failed' : ''
  return h('li', { class: 'event ' + kind }, seq === undefined ? null : h('span', { class: 'note', text: seq + ' ' }),
    h('code', { class: 'type', text: type }), h('span', { text: describe(type, data) }))
}

// ---- the live feed: health, figures, agents, runs in progress, approvals ----

const samples = []

function sparkline (label, series, unit) {
  const width = 300
  const height = 60
  const max = Math.max(1e-9, ...series.flatMap((s) => s.values))
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg')
  svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height)
  svg.setAttribute('preserveAspectRatio', 'none')
  svg.setAttribute('role', 'img')
  const latest = series.map((s) => s.name + ' ' + (s.values.at(-1) ?? 0).toFixed(2) + ' ' + unit).join(', ')
  svg.setAttribute('aria-label', label + ': ' + latest)
  for (const s of series) {
    // the samples so far fill the width (then the last HISTORY of them)
    const points = s.values.map((v, i) => (i * width / Math.max(1, s.values.length - 1)).toFixed(1) + ',' + (height - 2 - (v / max) * (height - 4)).toFixed(1))
    const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline')
    line.setAttribute('points', points.join(' '))
    line.setAttribute('class', 'line ' + s.className)
    svg.append(line)
  }
  return h('figure', { class: 'chart' }, h('figcaption', {}, h('strong', { text: label }), ' ', h('span', { text: latest })), svg)
}

/** Whether a part of the snapshot changed since it was last drawn: what did not is left as it is (and keeps focus). */
const drawn = new Map()
function changed (key, value) {
  const text = json(value)
  if (drawn.get(key) === text) return false
  drawn.set(key, text)
  return true
}

function drawOverview ({ health, stats, cluster }) {
  const now = performance.now()
  const previous = samples.at(-1)
  const sample = { at: now, stats, rate: 0, tokens: 0 }
  if (previous !== undefined) {
    const seconds = Math.max(0.001, (now - previous.at) / 1000)
    sample.rate = Math.max(0, stats.runs.started - previous.stats.runs.started) / seconds
    sample.tokens = Math.max(0, stats.tokens.total - previous.stats.tokens.total) / seconds
  }
  samples.push(sample)
  if (samples.length > HISTORY) samples.shift()

  $('#health-body').replaceChildren(
    h('p', { class: 'badge ' + (health.status === 'ok' ? 'ok' : 'bad'), text: health.status }),
    figures([['Version', health.version], ['Uptime', health.uptimeSeconds + ' s'], ['Memory (RSS)', bytes(health.process.memory.rss)],
      ['Event loop p99', health.process.eventLoopDelayMs.p99 + ' ms'],
      ...Object.entries(health.checks || {}).map(([name, check]) => ['Check ' + name, check.status])]))
  const atLeast = cluster.capped ? '+' : ''
  $('#cluster-figures').replaceChildren(figures([
    ['Running', cluster.running + atLeast, 'cluster-running'], ['Queued', cluster.queued + atLeast, 'cluster-queued'],
    ['Approvals waiting', cluster.approvalsPending, 'cluster-approvals']]))
  $('#stats-figures').replaceChildren(figures([
    ['Runs started', stats.runs.started, 'runs-started'], ['In flight', stats.runs.inFlight], ['Completed', stats.runs.completed],
    ['Failed', stats.runs.failed], ['Tokens', stats.tokens.total], ['Requests', stats.requests.total], ['Audit failures', stats.auditFailures]]))
  $('#stats-charts').replaceChildren(
    sparkline('Runs per second', [{ name: 'runs/s', className: 'a', values: samples.map((s) => s.rate) }], ''),
    sparkline('Request latency', [
      { name: 'p50', className: 'a', values: samples.map((s) => s.stats.latencyMs.p50) },
      { name: 'p95', className: 'b', values: samples.map((s) => s.stats.latencyMs.p95) },
      { name: 'p99', className: 'c', values: samples.map((s) => s.stats.latencyMs.p99) }
    ], 'ms'),
    sparkline('Tokens per second', [{ name: 'tokens/s', className: 'b', values: samples.map((s) => s.tokens) }], '')
  )
}

function drawAgents (agents) {
  if (!changed('agents', agents)) return
  $('#agents-body').replaceChildren(table('Agents', ['Agent', 'Description', 'Runs', 'Failed', 'In flight', 'Tokens'],
    agents.map((a) => [h('span', { class: 'agent-name', text: a.name }), a.description, a.stats.runs, a.stats.failed, a.stats.inFlight, a.stats.tokens.total])))
  // the playground's choice is redrawn only when the agents themselves change (an open list stays open)
  if (changed('play-agents', agents.map((a) => [a.name, a.description, a.input]))) playAgents(agents)
}

function drawRuns (runs) {
  if (!changed('runs', runs.map((r) => [r.runId, r.status, r.startedAt]))) return
  $('#runs-body').replaceChildren(table('Runs in progress', ['Run', 'Agent', 'Status', 'Principal', 'Started', 'Actions'],
    runs.map((r) => [runCode(r.runId), r.agent, r.status, r.principal, when(r.startedAt || r.createdAt),
      h('span', { class: 'actions' },
        h('button', { type: 'button', 'aria-label': 'Follow run ' + r.runId + ' of ' + r.agent, onclick: () => follow(r.runId), text: 'Follow' }),
        h('button', { type: 'button', class: 'danger', 'aria-label': 'Cancel run ' + r.runId + ' of ' + r.agent, onclick: () => cancel(r), text: 'Cancel' }))])))
}

function drawApprovals (approvals) {
  if (!changed('approvals', approvals.map((a) => a.id))) return
  const list = $('#approvals-body')
  // what is being typed (a comment, an edit, an answer) survives the refresh
  const typed = new Map([...list.querySelectorAll('textarea')].map((t) => [t.id, t.value]))
  const field = (id, rows, value) => {
    const area = h('textarea', { id, rows })
    area.value = typed.has(id) ? typed.get(id) : value
    return area
  }
  list.replaceChildren(...(approvals.length === 0 ? [h('p', { class: 'empty', text: 'No approval is waiting' })] : approvals.map((a) => {
    const comment = field('comment-' + a.id, 2, '')
    // the payload as JSON, to edit what is approved (checked against the approval's schema by the service)
    const original = JSON.stringify(a.payload, null, 2)
    const payload = field('payload-' + a.id, Math.min(12, original.split('\n').length + 1), original)
    const response = field('response-' + a.id, 2, '')
    const fields = () => ({ comment: comment.value, payload: payload.value, original, response: response.value })
    return h('article', { class: 'approval', 'aria-label': 'Approval ' + a.action },
      h('h3', { text: a.action }),
      h('p', {}, 'Agent ', h('strong', { text: a.agent }), ', run ', h('code', { text: short(a.runId) }), ', started by ', h('strong', { text: a.principal }),
        ', requested ' + when(a.requestedAt) + ', expires ' + when(a.expiresAt)),
      a.reason ? h('p', { text: a.reason }) : null,
      h('label', { for: payload.id, text: 'Payload (JSON: edit it to approve something else)' }), payload,
      h('label', { for: comment.id, text: 'Comment (optional)' }), comment,
      h('label', { for: response.id, text: 'Answer to the agent (optional)' }), response,
      h('div', { class: 'actions' },
        h('button', { type: 'button', 'aria-label': 'Approve ' + a.action, onclick: () => decide(a, true, fields()), text: 'Approve' }),
        h('button', { type: 'button', class: 'danger', 'aria-label': 'Reject ' + a.action, onclick: () => decide(a, false, fields()), text: 'Reject' })))
  })))
}

function draw (snapshot) {
  drawOverview(snapshot)
  drawAgents(snapshot.agents)
  drawRuns(snapshot.runs)
  drawApprovals(snapshot.approvals)
  $('#live-note').textContent = 'Live: updated ' + new Date(snapshot.at).toLocaleTimeString()
}

let live = null

/**
 * One feed at a time: the server ends each after a minute (one audit entry each) and the next opens at once; a
 * failure waits, longer each time; a refused token stops it.
 */
async function watchLive () {
  live?.abort()
  const controller = new AbortController()
  live = controller
  let wait = RETRY_MS
  while (!controller.signal.aborted) {
    try {
      const res = await fetch(ADMIN + '/live', { headers: { ...bearer(credentials.admin), accept: 'text/event-stream' }, signal: controller.signal })
      if (!res.ok) throw await problemOf(res)
      await readEvents(res, (type, data) => {
        const section = $('#overview').querySelector('.section-error')
        if (type === 'snapshot') {
          draw(JSON.parse(data))
          section.textContent = ''
          wait = RETRY_MS
        } else {
          section.textContent = 'Live feed: ' + describe('run.failed', { error: parsed(data) })
        }
      })
    } catch (err) {
      if (controller.signal.aborted) return
      $('#overview').querySelector('.section-error').textContent = 'Live feed: ' + (err.message || err)
      if (err.status === 401) {
        $('#live-note').textContent = 'Live: stopped (sign in again)'
        return
      }
      $('#live-note').textContent = 'Live: trying again in ' + Math.round(wait / 1000) + ' s'
      await new Promise((resolve) => setTimeout(resolve, wait))
      wait = Math.min(wait * 2, 60000)
    }
  }
}

// ---- runs in progress: follow live, cancel (after a confirmation) ----

let following = null

async function follow (runId) {
  following?.abort()
  const controller = new AbortController()
  following = controller
  const log = $('#follow-log')
  $('#follow-title').textContent = 'Following run ' + runId
  $('#stop-follow').hidden = false
  log.replaceChildren()
  try {
    const res = await fetch(API + '/runs/' + encodeURIComponent(runId) + '/events', { headers: { ...bearer(credentials.service), accept: 'text/event-stream' }, signal: controller.signal })
    if (!res.ok) throw await problemOf(res)
    await readEvents(res, (type, data, id) => log.append(eventItem(type, parsed(data), id)))
    $('#follow-title').textContent = 'Run ' + runId + ': stream ended'
  } catch (err) {
    if (!controller.signal.aborted) $('#follow-title').textContent = 'Run ' + runId + ': ' + (err.message || err)
  }
}

let confirming = null

/** Asks before a cancel: resolves true only for the button that says so (Escape and the other button keep the run). */
function confirmCancel (run) {
  const dialog = $('#confirm')
  $('#confirm-text').textContent = 'Run ' + run.runId + ' of ' + run.agent + ', started by ' + run.principal + ', stops and ends cancelled. This cannot be undone.'
  dialog.returnValue = ''
  return new Promise((resolve) => {
    confirming = resolve
    dialog.showModal()
  })
}

async function cancel (run) {
  if (!await confirmCancel(run)) {
    announce('Run ' + run.runId + ' left running')
    return
  }
  try {
    await serviceCall('POST', '/runs/' + encodeURIComponent(run.runId) + '/cancel')
    announce('Run ' + run.runId + ' cancelled')
  } catch (err) {
    announce('Could not cancel ' + run.runId + ': ' + err.message, true)
  }
}

// ---- approvals: decided with the operator's name ----

/** The decision's body; an edited payload (only approved) goes as JSON, and JSON that is not valid throws before anything is sent. */
function decision (approved, comment, edit) {
  const body = { approved }
  if (comment !== '') body.comment = comment
  if (credentials.operator !== '') body.decidedBy = credentials.operator
  if (edit !== undefined) {
    if (edit.response !== '') body.response = edit.response
    if (approved && edit.payload.trim() !== edit.original.trim()) {
      try {
        body.payload = JSON.parse(edit.payload)
      } catch {
        throw new Error('the payload is not valid JSON')
      }
    }
  }
  return body
}

async function decide (approval, approved, fields) {
  try {
    await serviceCall('POST', '/approvals/' + encodeURIComponent(approval.id), decision(approved, fields.comment, fields))
    announce('Approval ' + approval.action + (approved ? ' approved' : ' rejected'))
  } catch (err) {
    announce('Could not decide ' + approval.id + ': ' + err.message, true)
  }
}

// ---- paged lists: history (with search), audit (with filters), sessions, webhook deliveries ----

function pager (name, load) {
  const state = { cursors: [undefined] }
  const section = $('#' + name)
  const render = async () => {
    const page = await load(state.cursors.at(-1))
    section.querySelector('.prev').disabled = state.cursors.length === 1
    section.querySelector('.next').disabled = page == null
    state.next = page
  }
  section.querySelector('.prev').addEventListener('click', () => { state.cursors.pop(); guarded(section, render) })
  section.querySelector('.next').addEventListener('click', () => { state.cursors.push(state.next); guarded(section, render) })
  return { reload: () => { state.cursors = [undefined]; return guarded(section, render) } }
}

function query (params) {
  const search = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') search.set(k, v)
  const text = search.toString()
  return text === '' ? '' : '?' + text
}

const history = pager('history', async (cursor) => {
  const form = $('#history-filters')
  const page = await adminGet('/runs' + query({
    limit: 20, cursor, runId: form.runId.value.trim(), agent: form.agent.value.trim(), status: form.status.value, principal: form.principal.value.trim()
  }))
  $('#history-body').replaceChildren(table('Run history', ['Run', 'Agent', 'Status', 'Principal', 'Created', 'Ended', 'Error', 'Log'],
    page.runs.map((r) => [runCode(r.runId), r.agent, h('span', { class: 'state ' + r.status, text: r.status }), r.principal,
      when(r.createdAt), when(r.endedAt), r.error ? r.error.code + ': ' + r.error.message : '',
      h('button', { type: 'button', class: 'secondary', 'aria-label': 'Events of run ' + r.runId, onclick: () => showEvents(r.runId), text: 'Events' })])))
  return page.nextCursor
})

const shown = { runId: null, after: null }

async function showEvents (runId) {
  shown.runId = runId
  shown.after = null
  $('#run-events').hidden = false
  $('#run-events-title').textContent = 'Events of run ' + runId
  $('#run-events-log').replaceChildren()
  $('#run-events-summary').replaceChildren()
  await guarded($('#history'), moreEvents)
  $('#run-events-title').focus()
}

async function moreEvents () {
  const page = await adminGet('/runs/' + encodeURIComponent(shown.runId) + '/events' + query({ after: shown.after ?? undefined, limit: 100 }))
  const r = page.run
  $('#run-events-summary').replaceChildren(...figures([['Agent', r.agent], ['Status', r.status], ['Principal', r.principal], ['Attempt', r.attempt],
    ['Created', when(r.createdAt)], ['Ended', when(r.endedAt)], ['Error', r.error ? r.error.code + ': ' + r.error.message : '—'], ['Trace', r.traceId]]).childNodes)
  $('#run-events-log').append(...page.events.map((e) => eventItem(e.type, e.data, e.seq)))
  shown.after = page.nextAfter
  $('#run-events-more').hidden = page.nextAfter === null
}

const audit = pager('audit', async (cursor) => {
  const form = $('#audit-filters')
  const page = await adminGet('/audit' + query({ limit: 20, cursor, agent: form.agent.value.trim(), status: form.status.value.trim() }))
  $('#audit-body').replaceChildren(table('Audit log', ['When', 'Method', 'Route', 'Status', 'Principal', 'Agent', 'Run', 'ms'],
    page.entries.map((e) => [when(e.at), e.method, h('code', { text: e.url }), e.status, e.principal, e.agent || '', short(e.runId), e.durationMs])))
  return page.nextCursor
})

const sessions = pager('sessions', async (cursor) => {
  const page = await adminGet('/sessions' + query({ limit: 20, cursor }))
  $('#sessions-body').replaceChildren(table('Sessions', ['Session', 'Agent', 'Principal', 'Turns', 'Created', 'Last active'],
    page.sessions.map((s) => [h('code', { text: s.id }), s.agent || '', s.principal, s.turns, when(s.createdAt), when(s.lastActiveAt)])))
  return page.nextCursor
})

const webhooks = pager('webhooks', async (cursor) => {
  const page = await adminGet('/webhooks' + query({ limit: 20, cursor }))
  $('#webhooks-body').replaceChildren(table('Webhook deliveries', ['When', 'Event', 'Run', 'Attempt', 'Outcome', 'Status', 'ms'],
    page.attempts.map((a) => [when(a.at), a.event, h('code', { text: short(a.runId) }), a.attempt, a.outcome, a.status ?? (a.error || ''), Math.round(a.durationMs)])))
  return page.nextCursor
})

// A schedule is enabled or disabled through PATCH /v1/schedules/:id as its principal (the service credential's):
// another principal's answers 404, shown in the section.
const schedules = pager('schedules', async (cursor) => {
  const page = await adminGet('/schedules' + query({ limit: 20, cursor }))
  $('#schedules-body').replaceChildren(table('Schedules', ['Schedule', 'Agent', 'Principal', 'Trigger', 'Overlap', 'Next run', 'Last run', 'Enabled'],
    page.schedules.map((s) => [
      h('code', { text: short(s.id) }), s.agent, s.principal,
      s.cron !== null ? s.cron + ' (' + s.timezone + ')' : s.everyMs !== null ? 'every ' + s.everyMs + ' ms' : 'once at ' + when(s.at),
      s.overlap, s.nextRunAt === null ? '' : when(s.nextRunAt), s.lastRunAt === null ? '' : when(s.lastRunAt) + ' ' + short(s.lastRunId),
      h('button', {
        type: 'button',
        class: 'secondary',
        'aria-label': (s.enabled ? 'Disable' : 'Enable') + ' schedule ' + s.id,
        text: s.enabled ? 'Disable' : 'Enable',
        onclick: () => guarded($('#schedules'), async () => {
          await serviceCall('PATCH', '/schedules/' + encodeURIComponent(s.id), { enabled: !s.enabled })
          await schedules.reload()
        })
      })
    ])))
  return page.nextCursor
})

async function loadCheckpoints () {
  const { checkpoints } = await adminGet('/checkpoints')
  $('#checkpoints-body').replaceChildren(table('Checkpoints', ['Run', 'Agent', 'Session', 'Step', 'Saved'],
    checkpoints.map((c) => [h('code', { text: c.runId }), c.agent, short(c.sessionId), c.step, when(c.updatedAt)])))
}

// ---- the playground: run an agent through the service's routes, watch its events, decide its approvals ----

const inputs = new Map()
let sample = ''

/** An input the schema accepts, where it is simple: an object's properties with values of their types. */
function exampleOf (schema, depth) {
  if (schema === null || typeof schema !== 'object' || depth > 3) return 'hello'
  if (schema.default !== undefined) return schema.default
  if (Array.isArray(schema.examples) && schema.examples.length > 0) return schema.examples[0]
  if (schema.const !== undefined) return schema.const
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  switch (schema.type) {
    case 'object': {
      const out = {}
      for (const [name, property] of Object.entries(schema.properties || {})) out[name] = exampleOf(property, depth + 1)
      return out
    }
    case 'array': return []
    case 'string': return ''
    case 'number': case 'integer': return schema.minimum ?? 0
    case 'boolean': return false
    case 'null': return null
  }
  return 'hello'
}

function playAgents (agents) {
  const select = $('#play-agent')
  const chosen = select.value
  inputs.clear()
  for (const a of agents) inputs.set(a.name, a)
  select.replaceChildren(...agents.map((a) => h('option', { value: a.name, text: a.name })))
  if (inputs.has(chosen)) select.value = chosen
  else choose()
}

/** The agent changed: its description, and an input shaped by its schema (unless one was typed). */
function choose () {
  const agent = inputs.get($('#play-agent').value)
  if (agent === undefined) return
  $('#play-agent-description').textContent = agent.description
  const field = $('#play-input')
  if (field.value.trim() === '' || field.value === sample) {
    sample = JSON.stringify(exampleOf(agent.input, 0), null, 2)
    field.value = sample
  }
}

let playing = null

function playState (text, kind) {
  const state = $('#play-state')
  state.textContent = text
  state.className = 'state ' + (kind || '')
}

function inlineApproval (approval) {
  const id = 'play-comment-' + approval.id
  const comment = h('input', { id })
  const buttons = h('div', { class: 'actions' })
  const answer = async (approved) => {
    for (const b of buttons.querySelectorAll('button')) b.disabled = true
    try {
      const decided = await serviceCall('POST', '/approvals/' + encodeURIComponent(approval.id), decision(approved, comment.value))
      buttons.replaceChildren(h('span', { class: 'note', text: decided.status + (decided.decision.decidedBy ? ' by ' + decided.decision.decidedBy : '') }))
    } catch (err) {
      buttons.append(h('span', { class: 'section-error', text: err.message }))
      for (const b of buttons.querySelectorAll('button')) b.disabled = false
    }
  }
  buttons.append(
    h('button', { type: 'button', 'aria-label': 'Approve ' + approval.action + ' in the playground', onclick: () => answer(true), text: 'Approve' }),
    h('button', { type: 'button', class: 'danger', 'aria-label': 'Reject ' + approval.action + ' in the playground', onclick: () => answer(false), text: 'Reject' }))
  return h('li', { class: 'inline-approval' },
    h('code', { class: 'type', text: 'approval.requested' }), h('strong', { text: approval.action }),
    approval.reason ? h('p', { text: approval.reason }) : null,
    approval.payload !== null ? h('pre', { text: JSON.stringify(approval.payload, null, 2) }) : null,
    h('label', { for: id, text: 'Comment (optional)' }), comment, buttons)
}

async function play (event) {
  event.preventDefault()
  const name = $('#play-agent').value
  const error = $('#play-error')
  let input
  try {
    input = JSON.parse($('#play-input').value)
  } catch (err) {
    error.textContent = 'The input is not JSON: ' + err.message
    return
  }
  error.textContent = ''
  playing?.abort()
  const controller = new AbortController()
  playing = controller
  const text = $('#play-text')
  const log = $('#play-events')
  text.textContent = ''
  log.replaceChildren()
  playState('running…')
  $('#play-run').disabled = true
  $('#play-stop').disabled = false
  let ended = false
  try {
    const res = await fetch(API + '/agents/' + encodeURIComponent(name) + '/runs', {
      method: 'POST',
      headers: { ...bearer(credentials.service), 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ input, stream: true }),
      signal: controller.signal
    })
    if (!res.ok) throw await problemOf(res)
    await readEvents(res, (type, raw) => {
      const data = parsed(raw)
      if (type === 'message.delta') {
        text.append(data.text)
        return
      }
      log.append(type === 'approval.requested' ? inlineApproval(data.approval) : eventItem(type, data))
      log.scrollTop = log.scrollHeight
      if (type === 'run.completed') {
        ended = true
        // an agent that answers without text: its output shows as the answer
        if (text.textContent === '') text.textContent = typeof data.output === 'string' ? data.output : JSON.stringify(data.output, null, 2)
        playState('completed', 'completed')
      } else if (type === 'run.failed') {
        ended = true
        playState('failed: ' + describe(type, data), 'failed')
      }
    })
    if (!ended) playState('stream ended')
  } catch (err) {
    if (controller.signal.aborted) playState('stopped')
    else {
      playState('')
      error.textContent = err.message || String(err)
    }
  } finally {
    if (playing === controller) {
      playing = null
      $('#play-run').disabled = false
      $('#play-stop').disabled = true
    }
  }
}

// ---- the page ----

async function start () {
  $('#login').hidden = true
  $('#main').hidden = false
  $('#signed-in').hidden = false
  $('#operator-name').textContent = credentials.operator === '' ? '' : 'Signed in as ' + credentials.operator
  watchLive()
  await Promise.all([history.reload(), audit.reload(), sessions.reload(), webhooks.reload(), schedules.reload(), guarded($('#checkpoints'), loadCheckpoints)])
}

$('#login').addEventListener('submit', (event) => {
  event.preventDefault()
  const form = event.currentTarget
  sessionStorage.setItem(KEYS.admin, form.adminToken.value.trim())
  sessionStorage.setItem(KEYS.service, form.serviceToken.value.trim())
  sessionStorage.setItem(KEYS.operator, form.operator.value.trim())
  form.reset()
  start()
})
$('#sign-out').addEventListener('click', () => {
  for (const key of Object.values(KEYS)) sessionStorage.removeItem(key)
  live?.abort()
  following?.abort()
  playing?.abort()
  location.reload()
})
$('#confirm-yes').addEventListener('click', () => $('#confirm').close('yes'))
$('#confirm-no').addEventListener('click', () => $('#confirm').close('no'))
$('#confirm').addEventListener('close', () => {
  const resolve = confirming
  confirming = null
  resolve?.($('#confirm').returnValue === 'yes')
})
$('#history-filters').addEventListener('submit', (event) => { event.preventDefault(); history.reload() })
$('#run-events-more').addEventListener('click', () => guarded($('#history'), moreEvents))
$('#run-events-close').addEventListener('click', () => { $('#run-events').hidden = true })
$('#audit-filters').addEventListener('submit', (event) => { event.preventDefault(); audit.reload() })
$('#refresh-sessions').addEventListener('click', () => sessions.reload())
$('#refresh-webhooks').addEventListener('click', () => webhooks.reload())
$('#refresh-schedules').addEventListener('click', () => schedules.reload())
$('#refresh-checkpoints').addEventListener('click', () => guarded($('#checkpoints'), loadCheckpoints))
$('#stop-follow').addEventListener('click', () => {
  following?.abort()
  $('#follow-title').textContent = 'Not following a run'
  $('#stop-follow').hidden = true
})
$('#play-form').addEventListener('submit', play)
$('#play-agent').addEventListener('change', choose)
$('#play-stop').addEventListener('click', () => playing?.abort())

if (sessionStorage.getItem(KEYS.admin) !== null) start()
`
