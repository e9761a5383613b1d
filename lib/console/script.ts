// The operator console's script, served as /console/app.js: plain browser JavaScript (an ES module), no library.
// It reads the Admin API with the admin token and acts (decide, cancel, follow) through the service's own routes
// with the service credential; both are typed in and kept in sessionStorage only. Written without backticks or
// template placeholders: it lives in a String.raw literal.
export const script = String.raw`
const root = document.documentElement
const ADMIN = root.dataset.admin
const API = root.dataset.api
const POLL_MS = Number(root.dataset.pollMs || 2000)
const HISTORY = 60
const $ = (selector) => document.querySelector(selector)

const credentials = {
  get admin () { return sessionStorage.getItem('fastify-agents.adminToken') || '' },
  get service () { return sessionStorage.getItem('fastify-agents.serviceToken') || '' }
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
    return new Error(res.status + ' ' + (body.code || '') + ': ' + (body.message || res.statusText))
  } catch {
    return new Error(res.status + ' ' + res.statusText)
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

const when = (iso) => iso ? new Date(iso).toLocaleString() : ''
const short = (id) => id ? String(id).slice(0, 8) : ''
const bytes = (n) => (n / 1048576).toFixed(1) + ' MiB'

// ---- health and live stats ----

const samples = []

function sparkline (label, series, unit) {
  const width = 300
  const height = 60
  const max = Math.max(1e-9, ...series.flatMap((s) => s.values))
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg')
  svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height)
  svg.setAttribute('role', 'img')
  const latest = series.map((s) => s.name + ' ' + (s.values.at(-1) ?? 0).toFixed(2) + ' ' + unit).join(', ')
  svg.setAttribute('aria-label', label + ': ' + latest)
  for (const s of series) {
    const points = s.values.map((v, i) => (i * width / (HISTORY - 1)).toFixed(1) + ',' + (height - 2 - (v / max) * (height - 4)).toFixed(1))
    const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline')
    line.setAttribute('points', points.join(' '))
    line.setAttribute('class', 'line ' + s.className)
    svg.append(line)
  }
  return h('figure', { class: 'chart' }, h('figcaption', {}, h('strong', { text: label }), ' ', h('span', { text: latest })), svg)
}

async function loadOverview () {
  const [health, stats] = await Promise.all([adminGet('/health').catch((err) => ({ status: 'unreachable', error: err })), adminGet('/stats')])
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

  const healthBox = $('#health-body')
  healthBox.replaceChildren(
    h('p', { class: 'badge ' + (health.status === 'ok' ? 'ok' : 'bad'), text: health.status }),
    health.process
      ? h('dl', {},
        h('dt', { text: 'Version' }), h('dd', { text: health.version }),
        h('dt', { text: 'Uptime' }), h('dd', { text: health.uptimeSeconds + ' s' }),
        h('dt', { text: 'Memory (RSS)' }), h('dd', { text: bytes(health.process.memory.rss) }),
        h('dt', { text: 'Event loop p99' }), h('dd', { text: health.process.eventLoopDelayMs.p99 + ' ms' }),
        ...Object.entries(health.checks || {}).flatMap(([name, check]) => [h('dt', { text: 'Check ' + name }), h('dd', { text: check.status })]))
      : h('p', { text: String(health.error ? health.error.message : '') })
  )
  $('#stats-figures').replaceChildren(
    h('dl', {},
      h('dt', { text: 'Runs started' }), h('dd', { id: 'runs-started', text: stats.runs.started }),
      h('dt', { text: 'In flight' }), h('dd', { text: stats.runs.inFlight }),
      h('dt', { text: 'Completed' }), h('dd', { text: stats.runs.completed }),
      h('dt', { text: 'Failed' }), h('dd', { text: stats.runs.failed }),
      h('dt', { text: 'Tokens' }), h('dd', { text: stats.tokens.total }),
      h('dt', { text: 'Requests' }), h('dd', { text: stats.requests.total }),
      h('dt', { text: 'Audit failures' }), h('dd', { text: stats.auditFailures }))
  )
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

async function loadAgents () {
  const { agents } = await adminGet('/agents')
  $('#agents-body').replaceChildren(table('Agents', ['Agent', 'Description', 'Runs', 'Failed', 'In flight', 'Tokens'],
    agents.map((a) => [h('span', { class: 'agent-name', text: a.name }), a.description, a.stats.runs, a.stats.failed, a.stats.inFlight, a.stats.tokens.total])))
}

// ---- runs in progress: follow live, cancel ----

let following = null

async function follow (runId) {
  following?.abort()
  const controller = new AbortController()
  following = controller
  const log = $('#follow-log')
  $('#follow-title').textContent = 'Following run ' + runId
  log.replaceChildren()
  try {
    const res = await fetch(API + '/runs/' + encodeURIComponent(runId) + '/events', { headers: { ...bearer(credentials.service), accept: 'text/event-stream' }, signal: controller.signal })
    if (!res.ok) throw await problemOf(res)
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
    let buffer = ''
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
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
        if (fields.event === undefined) continue
        log.append(h('li', { class: 'event' }, h('code', { text: (fields.id || '') + ' ' + fields.event }), ' ', h('span', { text: fields.data || '' })))
      }
    }
    $('#follow-title').textContent = 'Run ' + runId + ': stream ended'
  } catch (err) {
    if (!controller.signal.aborted) $('#follow-title').textContent = 'Run ' + runId + ': ' + (err.message || err)
  }
}

async function cancel (runId) {
  try {
    await serviceCall('POST', '/runs/' + encodeURIComponent(runId) + '/cancel')
    announce('Run ' + runId + ' cancelled')
  } catch (err) {
    announce('Could not cancel ' + runId + ': ' + err.message, true)
  }
  await guarded($('#runs'), loadRuns)
}

async function loadRuns () {
  const [running, queued] = await Promise.all([adminGet('/runs?status=running&limit=100'), adminGet('/runs?status=queued&limit=100')])
  const runs = [...running.runs, ...queued.runs]
  $('#runs-body').replaceChildren(table('Runs in progress', ['Run', 'Agent', 'Status', 'Principal', 'Started', 'Actions'],
    runs.map((r) => [h('code', { title: r.runId, text: r.runId }), r.agent, r.status, r.principal, when(r.startedAt || r.createdAt),
      h('span', { class: 'actions' },
        h('button', { type: 'button', 'aria-label': 'Follow run ' + r.runId + ' of ' + r.agent, onclick: () => follow(r.runId), text: 'Follow' }),
        h('button', { type: 'button', class: 'danger', 'aria-label': 'Cancel run ' + r.runId + ' of ' + r.agent, onclick: () => cancel(r.runId), text: 'Cancel' }))])))
}

// ---- approvals inbox ----

async function decide (approval, approved, comment) {
  try {
    await serviceCall('POST', '/approvals/' + encodeURIComponent(approval.id), comment === '' ? { approved } : { approved, comment })
    announce('Approval ' + approval.action + (approved ? ' approved' : ' rejected'))
  } catch (err) {
    announce('Could not decide ' + approval.id + ': ' + err.message, true)
  }
  await guarded($('#approvals'), loadApprovals)
}

async function loadApprovals () {
  const { approvals } = await adminGet('/approvals')
  const list = $('#approvals-body')
  // a comment being typed survives the refresh
  const typed = new Map([...list.querySelectorAll('textarea')].map((t) => [t.dataset.id, t.value]))
  list.replaceChildren(...(approvals.length === 0 ? [h('p', { class: 'empty', text: 'No approval is waiting' })] : approvals.map((a) => {
    const id = 'comment-' + a.id
    const comment = h('textarea', { id, rows: 2, 'data-id': a.id })
    comment.value = typed.get(a.id) || ''
    return h('article', { class: 'approval', 'aria-label': 'Approval ' + a.action },
      h('h3', { text: a.action }),
      h('p', {}, 'Agent ', h('strong', { text: a.agent }), ', run ', h('code', { text: short(a.runId) }), ', requested ' + when(a.requestedAt) + ', expires ' + when(a.expiresAt)),
      a.reason ? h('p', { text: a.reason }) : null,
      a.payload !== null ? h('pre', { text: JSON.stringify(a.payload, null, 2) }) : null,
      h('label', { for: id, text: 'Comment (optional)' }), comment,
      h('div', { class: 'actions' },
        h('button', { type: 'button', 'aria-label': 'Approve ' + a.action, onclick: () => decide(a, true, comment.value), text: 'Approve' }),
        h('button', { type: 'button', class: 'danger', 'aria-label': 'Reject ' + a.action, onclick: () => decide(a, false, comment.value), text: 'Reject' })))
  })))
}

// ---- paged lists: audit (with filters), sessions, checkpoints, webhook deliveries ----

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

async function loadCheckpoints () {
  const { checkpoints } = await adminGet('/checkpoints')
  $('#checkpoints-body').replaceChildren(table('Checkpoints', ['Run', 'Agent', 'Session', 'Step', 'Saved'],
    checkpoints.map((c) => [h('code', { text: c.runId }), c.agent, short(c.sessionId), c.step, when(c.updatedAt)])))
}

// ---- the page ----

async function refreshLive () {
  await Promise.all([
    guarded($('#overview'), loadOverview),
    guarded($('#agents'), loadAgents),
    guarded($('#runs'), loadRuns),
    guarded($('#approvals'), loadApprovals)
  ])
}

let timer = null

async function start () {
  $('#login').hidden = true
  $('#main').hidden = false
  $('#signed-in').hidden = false
  await Promise.all([refreshLive(), audit.reload(), sessions.reload(), webhooks.reload(), guarded($('#checkpoints'), loadCheckpoints)])
  clearInterval(timer)
  timer = setInterval(() => { if (!document.hidden) refreshLive() }, POLL_MS)
}

$('#login').addEventListener('submit', (event) => {
  event.preventDefault()
  const form = event.currentTarget
  sessionStorage.setItem('fastify-agents.adminToken', form.adminToken.value.trim())
  sessionStorage.setItem('fastify-agents.serviceToken', form.serviceToken.value.trim())
  form.reset()
  start()
})
$('#sign-out').addEventListener('click', () => {
  sessionStorage.removeItem('fastify-agents.adminToken')
  sessionStorage.removeItem('fastify-agents.serviceToken')
  clearInterval(timer)
  following?.abort()
  location.reload()
})
$('#audit-filters').addEventListener('submit', (event) => { event.preventDefault(); audit.reload() })
$('#refresh-sessions').addEventListener('click', () => sessions.reload())
$('#refresh-webhooks').addEventListener('click', () => webhooks.reload())
$('#refresh-checkpoints').addEventListener('click', () => guarded($('#checkpoints'), loadCheckpoints))
$('#stop-follow').addEventListener('click', () => { following?.abort(); $('#follow-title').textContent = 'Not following a run' })

if (sessionStorage.getItem('fastify-agents.adminToken') !== null) start()
`
