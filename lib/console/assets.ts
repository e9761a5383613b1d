import { script } from './script.js'

export interface ConsoleAsset {
  contentType: string
  body: string
}

const style = String.raw`
:root { color-scheme: light dark; --fg: #1b1f24; --bg: #f6f7f9; --card: #fff; --muted: #5b6470; --line: #d5d9df;
  --accent: #1f5fbf; --danger: #b3261e; --ok: #1e7a3c; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e8eb; --bg: #15181c; --card: #1e2227; --muted: #9aa3ad; --line: #363c44;
  --accent: #7fb0ff; --danger: #ff8a80; --ok: #7ddc95; } }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { margin: 0; background: var(--bg); color: var(--fg); }
header { display: flex; flex-wrap: wrap; align-items: center; gap: .5rem 1rem; padding: .75rem 1rem; background: var(--card); border-bottom: 1px solid var(--line); }
header h1 { font-size: 1.1rem; margin: 0; flex: 1; }
nav ul { display: flex; flex-wrap: wrap; gap: .25rem .75rem; list-style: none; margin: 0; padding: 0; }
a { color: var(--accent); }
main { display: grid; gap: 1rem; padding: 1rem; grid-template-columns: repeat(auto-fit, minmax(min(100%, 28rem), 1fr)); }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: .75rem 1rem; min-width: 0; }
section.wide { grid-column: 1 / -1; }
section h2 { font-size: 1rem; margin: 0 0 .5rem; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td code { word-break: break-all; }
td code[data-run] { word-break: normal; white-space: nowrap; }
.empty { color: var(--muted); }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: .1rem .6rem; border-radius: 999px; font-weight: 600; margin: 0 0 .5rem; }
.badge.ok { background: color-mix(in srgb, var(--ok) 20%, transparent); color: var(--ok); }
.badge.bad { background: color-mix(in srgb, var(--danger) 20%, transparent); color: var(--danger); }
.charts { display: grid; gap: .5rem; grid-template-columns: repeat(auto-fit, minmax(14rem, 1fr)); margin-top: .75rem; }
.chart { margin: 0; }
.chart figcaption { font-size: .85rem; color: var(--muted); }
.chart svg { width: 100%; height: 60px; background: var(--bg); border-radius: 4px; }
.line { fill: none; stroke-width: 2; vector-effect: non-scaling-stroke; }
.line.a { stroke: var(--accent); } .line.b { stroke: #d08700; } .line.c { stroke: var(--danger); }
button { font: inherit; padding: .3rem .8rem; border-radius: 6px; border: 1px solid var(--accent); background: var(--accent); color: var(--card); cursor: pointer; min-height: 2rem; }
button.danger { border-color: var(--danger); background: var(--danger); }
button.secondary { background: transparent; color: var(--accent); }
button:disabled { opacity: .45; cursor: default; }
button:focus-visible, input:focus-visible, textarea:focus-visible, a:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.actions { display: flex; flex-wrap: wrap; gap: .4rem; margin-top: .4rem; }
input, textarea { font: inherit; width: 100%; padding: .35rem .5rem; border: 1px solid var(--line); border-radius: 6px; background: var(--bg); color: var(--fg); }
label { display: block; font-size: .85rem; color: var(--muted); margin: .4rem 0 .15rem; }
form.filters { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin-bottom: .5rem; }
form.filters > div { flex: 1 1 8rem; }
.approval { border-top: 1px solid var(--line); padding: .5rem 0; }
.approval h3 { margin: 0; font-size: 1rem; }

.approval pre { background: var(--bg); padding: .5rem; border-radius: 4px; overflow-x: auto; font-size: .85rem; }
#login { max-width: 28rem; margin: 2rem auto; background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 1rem 1.25rem; }
#login p { color: var(--muted); font-size: .9rem; }
#status { min-height: 1.4em; margin: 0 1rem; }
#status.error, .section-error { color: var(--danger); }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
h2 small, h3 small { color: var(--muted); font-weight: 400; font-size: .8rem; }
h3 { font-size: .95rem; margin: .75rem 0 .35rem; }
.figures { display: grid; gap: .5rem 1.5rem; grid-template-columns: repeat(auto-fit, minmax(14rem, 1fr)); }
.figures h3 { margin-top: 0; }
.note { color: var(--muted); font-size: .85rem; margin: .35rem 0; }
.operator { color: var(--muted); font-size: .85rem; }
select { font: inherit; width: 100%; padding: .35rem .5rem; border: 1px solid var(--line); border-radius: 6px; background: var(--bg); color: var(--fg); min-height: 2.1rem; }
select:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.log { list-style: none; margin: .5rem 0 0; padding: .5rem; background: var(--bg); border-radius: 4px; max-height: 22rem; overflow-y: auto; font-size: .85rem; }
.log:empty { display: none; }
.log li { padding: .2rem 0; border-bottom: 1px solid var(--line); overflow-wrap: anywhere; }
.log li:last-child { border-bottom: 0; }
.log code.type { font-weight: 600; margin-right: .4rem; }
.log li.failed code.type, .state.failed { color: var(--danger); }
.log li.completed code.type, .state.completed { color: var(--ok); }
.log pre { margin: .25rem 0 0; white-space: pre-wrap; }
.detail { border-top: 1px solid var(--line); margin-top: .75rem; padding-top: .25rem; }
.play-inputs { display: grid; gap: .5rem 1rem; grid-template-columns: minmax(12rem, 18rem) 1fr; }
.play-inputs textarea { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .85rem; }
.play-output { display: grid; gap: .5rem 1rem; grid-template-columns: repeat(auto-fit, minmax(min(100%, 24rem), 1fr)); }
#play-text { min-height: 5rem; background: var(--bg); padding: .5rem; border-radius: 4px; white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; }
.state { font-size: .85rem; font-weight: 600; color: var(--muted); }
.inline-approval { border: 1px solid var(--accent); border-radius: 6px; padding: .4rem .6rem; margin: .2rem 0; background: var(--card); }
.inline-approval .actions { margin-top: .3rem; }
dialog { border: 1px solid var(--line); border-radius: 8px; background: var(--card); color: var(--fg); max-width: min(90vw, 30rem); padding: 1rem 1.25rem; }
dialog::backdrop { background: rgb(0 0 0 / .45); }
dialog h2 { font-size: 1.05rem; margin: 0 0 .5rem; }
@media (max-width: 40rem) { .play-inputs { grid-template-columns: 1fr; } }
`

function escapeAttribute (value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;')
}

function pagedSection (id: string, title: string, extra = '', after = ''): string {
  return `<section id="${id}" class="wide" aria-labelledby="${id}-title"><h2 id="${id}-title">${title}</h2>${extra}` +
    `<p class="section-error" role="alert"></p><div id="${id}-body" class="table-wrap"></div>` +
    `<div class="actions"><button type="button" class="secondary prev">Previous page</button><button type="button" class="secondary next">Next page</button></div>${after}</section>`
}

function page (adminPrefix: string, apiPrefix: string): string {
  return `<!doctype html>
<html lang="en" data-admin="${escapeAttribute(adminPrefix)}" data-api="${escapeAttribute(apiPrefix)}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fastify-agents console</title>
<link rel="stylesheet" href="${escapeAttribute(adminPrefix)}/console/app.css">
<script type="module" src="${escapeAttribute(adminPrefix)}/console/app.js"></script>
</head>
<body>
<header>
<h1>fastify-agents console</h1>
<nav aria-label="Sections" id="signed-in" hidden><ul>
<li><a href="#overview">Overview</a></li><li><a href="#approvals">Approvals</a></li><li><a href="#runs">Runs</a></li>
<li><a href="#history">History</a></li><li><a href="#playground">Playground</a></li>
<li><a href="#agents">Agents</a></li><li><a href="#audit">Audit</a></li><li><a href="#sessions">Sessions</a></li>
<li><a href="#checkpoints">Checkpoints</a></li><li><a href="#webhooks">Webhooks</a></li><li><a href="#schedules">Schedules</a></li>
<li><span id="operator-name" class="operator"></span></li>
<li><button type="button" id="sign-out" class="secondary">Sign out</button></li></ul></nav>
</header>
<p id="status" role="status" aria-live="polite"></p>
<form id="login" aria-labelledby="login-title">
<h2 id="login-title">Sign in</h2>
<p>Kept in this tab's sessionStorage only. The admin token reads the Admin API; the service credential (an API key or a JWT) approves, rejects, follows, cancels and runs agents through the service's own routes.</p>
<label for="admin-token">Admin API token</label><input id="admin-token" name="adminToken" type="password" autocomplete="off">
<label for="service-token">Service credential</label><input id="service-token" name="serviceToken" type="password" autocomplete="off">
<label for="operator">Your name (recorded on your decisions)</label><input id="operator" name="operator" maxlength="200" autocomplete="name">
<div class="actions"><button type="submit">Open the console</button></div>
</form>
<main id="main" hidden>
<section id="overview" class="wide" aria-labelledby="overview-title"><h2 id="overview-title">Health and live figures</h2>
<p class="section-error" role="alert"></p>
<div class="figures"><div id="health-body"></div>
<div><h3>Every instance <small>(from the stores)</small></h3><div id="cluster-figures"></div></div>
<div><h3>This instance <small>(since it started)</small></h3><div id="stats-figures"></div></div></div>
<div id="stats-charts" class="charts"></div>
<p class="note" id="live-note">Live: connecting…</p></section>
<section id="approvals" aria-labelledby="approvals-title"><h2 id="approvals-title">Approvals waiting</h2>
<p class="section-error" role="alert"></p><div id="approvals-body"></div></section>
<section id="runs" aria-labelledby="runs-title"><h2 id="runs-title">Runs in progress</h2>
<p class="section-error" role="alert"></p><div id="runs-body" class="table-wrap"></div>
<h3 id="follow-title" aria-live="polite">Not following a run</h3>
<div class="actions"><button type="button" id="stop-follow" class="secondary" hidden>Stop following</button></div>
<ol id="follow-log" class="log" aria-labelledby="follow-title"></ol></section>
${pagedSection('history', 'Run history', '<form id="history-filters" class="filters" aria-label="Run history filters">' +
  '<div><label for="history-run">Run id</label><input id="history-run" name="runId" maxlength="128"></div>' +
  '<div><label for="history-agent">Agent</label><input id="history-agent" name="agent" maxlength="64"></div>' +
  '<div><label for="history-status">Status</label><select id="history-status" name="status"><option value="">any</option>' +
  ['queued', 'running', 'completed', 'failed', 'cancelled'].map((s) => `<option>${s}</option>`).join('') + '</select></div>' +
  '<div><label for="history-principal">Principal</label><input id="history-principal" name="principal" maxlength="200"></div>' +
  '<button type="submit">Search</button></form>', '<div id="run-events" class="detail" hidden><h3 id="run-events-title" tabindex="-1"></h3><dl id="run-events-summary"></dl>' +
  '<ol id="run-events-log" class="log" aria-labelledby="run-events-title"></ol><div class="actions"><button type="button" id="run-events-more" class="secondary">More events</button>' +
  '<button type="button" id="run-events-close" class="secondary">Close</button></div></div>')}
<section id="playground" class="wide" aria-labelledby="playground-title"><h2 id="playground-title">Playground</h2>
<p class="note">Runs an agent through <code>POST /v1/agents/:name/runs</code> with your service credential, and shows its events as they come.</p>
<form id="play-form" aria-label="Run an agent">
<div class="play-inputs"><div><label for="play-agent">Agent</label><select id="play-agent" name="agent"></select>
<p id="play-agent-description" class="note"></p></div>
<div class="grow"><label for="play-input">Input (JSON)</label><textarea id="play-input" name="input" rows="5" spellcheck="false"></textarea></div></div>
<p class="section-error" role="alert" id="play-error"></p>
<div class="actions"><button type="submit" id="play-run">Run</button><button type="button" id="play-stop" class="secondary" disabled>Stop</button></div>
</form>
<div class="play-output"><div><h3>Output <span id="play-state" class="state"></span></h3><pre id="play-text" aria-live="polite"></pre></div>
<div><h3 id="play-events-title">Events</h3><ol id="play-events" class="log" aria-labelledby="play-events-title"></ol></div></div></section>
<section id="agents" class="wide" aria-labelledby="agents-title"><h2 id="agents-title">Agents <small>(figures: this instance)</small></h2>
<p class="section-error" role="alert"></p><div id="agents-body" class="table-wrap"></div></section>
${pagedSection('audit', 'Audit log', '<form id="audit-filters" class="filters" aria-label="Audit filters"><div><label for="audit-agent">Agent</label><input id="audit-agent" name="agent"></div>' +
  '<div><label for="audit-status">Status (404 or 4xx)</label><input id="audit-status" name="status" pattern="[1-5]([0-9]{2}|[xX]{2})"></div><button type="submit">Filter</button></form>')}
${pagedSection('sessions', 'Sessions', '<div class="actions"><button type="button" id="refresh-sessions" class="secondary">Refresh</button></div>')}
<section id="checkpoints" class="wide" aria-labelledby="checkpoints-title"><h2 id="checkpoints-title">Checkpoints</h2>
<div class="actions"><button type="button" id="refresh-checkpoints" class="secondary">Refresh</button></div>
<p class="section-error" role="alert"></p><div id="checkpoints-body" class="table-wrap"></div></section>
${pagedSection('webhooks', 'Webhook deliveries', '<div class="actions"><button type="button" id="refresh-webhooks" class="secondary">Refresh</button></div>')}
${pagedSection('schedules', 'Schedules', '<div class="actions"><button type="button" id="refresh-schedules" class="secondary">Refresh</button></div>' +
  '<p class="hint">Enabling or disabling a schedule goes through the service\'s routes with the service credential: only its principal may.</p>')}
</main>
<dialog id="confirm" aria-labelledby="confirm-title" aria-describedby="confirm-text">
<h2 id="confirm-title">Cancel this run?</h2><p id="confirm-text"></p>
<div class="actions"><button type="button" class="danger" id="confirm-yes">Cancel the run</button><button type="button" class="secondary" id="confirm-no" autofocus>Keep it running</button></div>
</dialog>
</body>
</html>
`
}

/** The console's page and assets by path (under the Admin API's prefix), built once at registration. */
export function consoleAssets (prefixes: { adminPrefix: string, apiPrefix: string }): Map<string, ConsoleAsset> {
  return new Map([
    ['/console', { contentType: 'text/html; charset=utf-8', body: page(prefixes.adminPrefix, prefixes.apiPrefix) }],
    ['/console/app.js', { contentType: 'text/javascript; charset=utf-8', body: script }],
    ['/console/app.css', { contentType: 'text/css; charset=utf-8', body: style }]
  ])
}
