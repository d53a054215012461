// The traceinspect tab: a list of the logdir's traces (each with its step time, top finding and trace
// quality once the backend has analysed it, or a broken mark with its error), the HTML report of the one
// selected, and a diff of any two. Plain JS, no build step, no network beyond this plugin's own routes. Every name that comes from
// the logdir or a trace is set with textContent, never as markup; the report itself is shown in a sandboxed
// iframe (no scripts) and carries its own Content-Security-Policy.

const POLL_MS = 400;
const LIST_POLL_MS = 1000;  // the list is polled while any trace in it is queued or running

const STYLE = `
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;margin:0}
#ti-app{display:flex;height:100vh}
#ti-side{width:360px;min-width:260px;border-right:1px solid #dfe3ea;overflow:auto;padding:10px}
#ti-main{flex:1;display:flex;flex-direction:column;min-width:0}
#ti-side h2{font-size:14px;margin:4px 0 8px}
#ti-side h3{font-size:12px;color:#5b6475;margin:12px 0 4px;word-break:break-all}
table.ti{border-collapse:collapse;width:100%}
table.ti td{padding:3px 4px;border-bottom:1px solid #eef0f4;vertical-align:top}
table.ti tr{cursor:pointer}table.ti tr:hover{background:#f5f7fa}table.ti tr.sel{background:#e8eefb}
td.name{word-break:break-all}td.n{text-align:right;white-space:nowrap}
.top,.quality{color:#5b6475;font-size:11px;word-break:normal;overflow-wrap:anywhere}
.quality.q-limited{color:#8a5a00}.quality.q-poor{color:#b3261e}
.err{color:#b3261e}
td.n.broken span{color:#fff;background:#b3261e;border-radius:3px;padding:1px 5px;font-weight:600}
#ti-bar{display:flex;gap:8px;align-items:center;padding:8px 10px;border-bottom:1px solid #dfe3ea;flex-wrap:wrap}
#ti-bar select{max-width:260px}
#ti-status{padding:6px 10px;min-height:20px}
#ti-status .err{background:#fdecea;border:1px solid #f3c1bd;padding:6px 10px;border-radius:4px;display:block}
progress{width:220px;vertical-align:middle;margin-left:8px}
#ti-view{flex:1;border:0;width:100%}
`;

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'text') e.textContent = v;
    else if (k === 'cls') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.appendChild(c);
  return e;
}

function ms(us) {
  return typeof us === 'number' && isFinite(us) ? (us / 1000).toFixed(1) + ' ms' : '';
}

async function getJSON(url) {
  const r = await fetch(url, {credentials: 'same-origin'});
  let body = {};
  try { body = await r.json(); } catch (e) { body = {error: `HTTP ${r.status}`}; }
  return {status: r.status, body};
}

const state = {traces: new Map(), selected: null, token: 0, listTimer: null, listGen: 0};
const PENDING = new Set(['queued', 'running']);

function showStatus(node) {
  const s = document.getElementById('ti-status');
  s.replaceChildren(node || document.createTextNode(''));
}

function progressNode(label, st) {
  const span = el('span', {text: label});
  if (st && st.phase === 'reading') {
    const p = el('progress', {max: '1'});
    p.value = st.progress || 0;
    span.appendChild(p);
    span.appendChild(document.createTextNode(` ${Math.round(100 * (st.progress || 0))}%`));
  } else if (st && st.phase) {
    span.appendChild(document.createTextNode(` (${st.phase})`));
  }
  return span;
}

function errorNode(msg) {
  return el('span', {cls: 'err', id: 'ti-error', text: msg});
}

// Poll /analyze until the trace is done or failed; resolves to its last status.
async function waitFor(id, label, token) {
  for (;;) {
    const {status, body} = await getJSON(`./analyze?trace=${encodeURIComponent(id)}`);
    if (token !== state.token) return null;          // the user picked something else meanwhile
    if (status !== 200) return {state: 'broken', error: body.error || `HTTP ${status}`};
    updateRow(body);
    if (body.state === 'done' || body.state === 'broken') return body;
    showStatus(progressNode(`Analysing ${label}…`, body));
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function openReport(id) {
  const t = state.traces.get(id);
  const token = ++state.token;
  state.selected = id;
  markSelected();
  const view = document.getElementById('ti-view');
  view.removeAttribute('src');
  const st = await waitFor(id, t ? t.rel : id, token);
  if (!st) return;
  if (st.state === 'broken') { showStatus(errorNode(st.error)); return; }
  showStatus(el('span', {text: t ? t.rel : ''}));
  view.src = `./report?trace=${encodeURIComponent(id)}`;
}

async function openDiff() {
  const a = document.getElementById('ti-a').value, b = document.getElementById('ti-b').value;
  if (!a || !b) return;
  const token = ++state.token;
  const view = document.getElementById('ti-view');
  view.removeAttribute('src');
  for (const id of [a, b]) {
    const st = await waitFor(id, state.traces.get(id).rel, token);
    if (!st) return;
    if (st.state === 'broken') { showStatus(errorNode(st.error)); return; }
  }
  showStatus(el('span', {text: `${state.traces.get(a).rel} → ${state.traces.get(b).rel}`}));
  view.src = `./diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
}

function markSelected() {
  document.querySelectorAll('table.ti tr').forEach((r) => r.classList.toggle('sel', r.dataset.id === state.selected));
}

// One row from a status (of /traces or /analyze): every string in it is untrusted and set as text.
function updateRow(st) {
  const row = document.querySelector(`tr[data-id="${CSS.escape(st.id)}"]`);
  if (!row) return;
  const t = state.traces.get(st.id);
  if (t) Object.assign(t, st);
  const n = row.querySelector('td.n');
  n.className = st.state === 'broken' ? 'n broken' : 'n';
  if (st.state === 'broken') n.replaceChildren(el('span', {text: 'broken'}));  // the mark: red, beside the error
  else n.textContent = st.state === 'done' ? ms(st.median_step_us) : st.state === 'queued' ? 'queued' :
      st.state === 'running' ? (st.phase === 'reading' ? `${Math.round(100 * (st.progress || 0))}%` : '…') : '';
  n.title = st.state === 'done' ? 'median step time' : '';
  const top = row.querySelector('.top');
  top.className = st.state === 'broken' ? 'top err' : 'top';
  top.textContent = st.state === 'broken' ? st.error :
      st.state === 'done' ? (st.top ? `top: ${st.top}${st.top_title ? ' — ' + st.top_title : ''}` :
          (st.headline || 'no findings')) :
      st.state === 'new' ? 'not analysed yet: open it' : '';
  const q = row.querySelector('.quality');
  q.className = st.state === 'done' && st.quality ? `quality q-${st.quality}` : 'quality';
  q.textContent = st.state === 'done' ? (st.quality_line || '') : '';
}

function renderList(data) {
  const side = document.getElementById('ti-list');
  side.replaceChildren();
  state.traces.clear();
  if (!data.runs || !data.runs.length) {
    side.appendChild(el('p', {text: 'No *.pt.trace.json[.gz] files under the logdir yet.'}));
  }
  for (const run of data.runs || []) {
    side.appendChild(el('h3', {cls: 'run', text: run.run}));
    const table = el('table', {cls: 'ti'});
    for (const t of run.traces) {
      state.traces.set(t.id, t);
      const row = el('tr', {'data-id': t.id},
          el('td', {cls: 'name'}, el('div', {text: t.name}), el('div', {cls: 'top'}), el('div', {cls: 'quality'})),
          el('td', {cls: 'n'}));
      row.addEventListener('click', () => openReport(t.id));
      table.appendChild(row);
      updateRow(t);
    }
    side.appendChild(table);
  }
  markSelected();
  if (data.truncated) side.appendChild(el('p', {cls: 'err', text: `${data.truncated} more traces not listed.`}));
  for (const sel of [document.getElementById('ti-a'), document.getElementById('ti-b')]) {
    const keep = sel.value;
    sel.replaceChildren(el('option', {value: '', text: sel.id === 'ti-a' ? 'before…' : 'after…'}));
    for (const t of state.traces.values()) sel.appendChild(el('option', {value: t.id, text: t.rel}));
    sel.value = state.traces.has(keep) ? keep : '';
  }
}

function listed(data) {
  return (data.runs || []).flatMap((r) => r.traces);
}

// Load the list; while any trace in it is queued or running, load it again every LIST_POLL_MS (rows are
// updated in place unless the set of traces changed), and stop once every one is done, broken or new.
async function refresh() {
  clearTimeout(state.listTimer);
  state.listTimer = null;
  const gen = ++state.listGen;
  const {status, body} = await getJSON('./traces');
  if (gen !== state.listGen) return;  // a newer load (Reload list) took over
  if (status !== 200) { showStatus(errorNode(body.error || `HTTP ${status}`)); return; }
  const traces = listed(body);
  const same = traces.length === state.traces.size && traces.every((t) => state.traces.has(t.id));
  if (same && document.querySelector('#ti-list tr[data-id]')) traces.forEach(updateRow);
  else renderList(body);
  if (traces.some((t) => PENDING.has(t.state))) state.listTimer = setTimeout(refresh, LIST_POLL_MS);
}

export async function render() {
  document.head.appendChild(el("style", {text: STYLE}));
  const refreshBtn = el('button', {id: 'ti-refresh', text: 'Reload list'});
  const compare = el('button', {id: 'ti-compare', text: 'Compare'});
  const app = el('div', {id: 'ti-app'},
      el('div', {id: 'ti-side'}, el('h2', {text: 'Traces in this logdir'}), el('div', {id: 'ti-list'})),
      el('div', {id: 'ti-main'},
          el('div', {id: 'ti-bar'}, el('span', {text: 'Diff:'}), el('select', {id: 'ti-a'}),
              el('span', {text: '→'}), el('select', {id: 'ti-b'}), compare, refreshBtn),
          el('div', {id: 'ti-status'}, el('span', {text: 'Pick a trace to see its report.'})),
          // sandbox without allow-scripts: the report runs no code, whatever a trace holds
          el('iframe', {id: 'ti-view', sandbox: '', title: 'traceinspect report'})));
  document.body.appendChild(app);
  refreshBtn.addEventListener('click', refresh);
  compare.addEventListener('click', openDiff);
  await refresh();
}
