// Built from js/run.js by scripts/build_js.py: edit the source, then rebuild.
// Shared by the widgets (scripts/build_js.py puts this file at the top of each module).
// Every piece of agent- or person-written text goes through textContent: never HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function s(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

// Ids unique on the page: two widgets never share an SVG marker or a label target.
let SEQUENCE = 0;
function uid(prefix) {
  SEQUENCE += 1;
  return `${prefix}-${Math.random().toString(36).slice(2, 8)}-${SEQUENCE}`;
}

function show(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

function seconds(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "";
  if (value < 60) return value < 10 ? `${value.toFixed(2)} s` : `${value.toFixed(1)} s`;
  const total = Math.round(value);
  const minutes = Math.floor(total / 60), secs = total % 60;
  if (minutes < 60) return `${minutes} min ${String(secs).padStart(2, "0")} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

function exact(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? iso : at.toLocaleString();
}

function ago(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  const secs = Math.max(0, (Date.now() - at.getTime()) / 1000);
  if (secs < 45) return "just now";
  if (secs < 90) return "1 min ago";
  if (secs < 3600) return `${Math.round(secs / 60)} min ago`;
  if (secs < 5400) return "1 h ago";
  if (secs < 86400) return `${Math.round(secs / 3600)} h ago`;
  if (secs < 172800) return "yesterday";
  return at.toLocaleDateString();
}

// A time as people say it ("2 min ago"), the exact time on hover.
function when(iso) {
  return h("time", { datetime: iso || "", title: exact(iso), class: "ago" }, ago(iso));
}

function refreshTimes(root) {
  for (const node of root.querySelectorAll("time.ago")) {
    node.textContent = ago(node.getAttribute("datetime"));
  }
  for (const node of root.querySelectorAll("time.left")) {
    node.textContent = left(node.getAttribute("datetime"));
  }
}

// The time left before an expiry, as people say it ("expires in 4 min").
function left(iso) {
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return "";
  const secs = (at.getTime() - Date.now()) / 1000;
  if (secs <= 0) return "expiring now";
  if (secs < 60) return `expires in ${Math.ceil(secs)} s`;
  if (secs < 3600) return `expires in ${Math.round(secs / 60)} min`;
  if (secs < 172800) return `expires in ${Math.round(secs / 3600)} h`;
  return `expires in ${Math.round(secs / 86400)} days`;
}

// Statuses in which something executes the run, or keeps it parked and resumes it on an answer;
// and those after which no agent will read an answer.
const LIVE_STATUSES = ["running", "paused_waiting_human"];
const OVER_STATUSES = ["finished", "failed"];
const STATUS_WORDS = {
  paused_waiting_human: "waiting for an answer", failed_resumable: "failed (resumable)",
  interrupted: "interrupted (nothing executes it)",
};

function statusWords(status) {
  return STATUS_WORDS[status] || status;
}

// Whether nothing executes the question's run now (interrupted, failed_resumable, cancelled, over).
function runStopped(q) {
  return !!q.run_status && !LIVE_STATUSES.includes(q.run_status);
}

// A question's key for redrawing: an amended question is drawn again (its text or options
// changed), and so is one whose run stopped or went on again (what its card says changes).
function questionKey(q) {
  return `${q.id}#${q.revision || 0}#${runStopped(q) ? q.run_status : "live"}#${q.run_cluster ? "c" : ""}`;
}

// How a question that left the pending list ended, in words.
function endText(q) {
  if (q.ended === "retracted") return `withdrawn by its agent${q.end_reason ? `: ${q.end_reason}` : ""}`;
  if (q.ended === "expired") return "expired unanswered";
  return null;
}

function answerText(q) {
  const labels = Object.fromEntries((q.options || []).map((o) => [o.id, o.label || o.id]));
  if (typeof q.answers === "string" && labels[q.answers]) return labels[q.answers];
  return show(q.answers);
}

// What answering did, in words (the kernel sends the sentence; this is the fallback).
function outcomeText(result) {
  if (result.text) return result.text;
  const status = result.run_status || "";
  const run = result.run_id ? `run ${result.run_id}` : "the run";
  if (result.resumed) return "Answered — the run goes on";
  if (OVER_STATUSES.includes(status)) return `Saved — but ${run} has ended (${status}): no agent will read it`;
  if (status && !LIVE_STATUSES.includes(status)) {
    return `Saved — ${run} is ${statusWords(status)}, so the agent gets your answer when the run is resumed`
      + ` (%iterion resume ${result.run_id || "RUN"})`;
  }
  if (result.queued) return "Sent — the agent reads it at its next turn";
  return "Answered";
}

// What a question of a run nothing executes says under it: the answer is kept for the resume
// (as the JupyterLab sidebar says it).
function runStateNote(q) {
  if (!runStopped(q)) return null;
  if (OVER_STATUSES.includes(q.run_status)) {
    return h("div", { class: "run-state" }, `Run ${q.run_id} has ended (${q.run_status}): no agent will read an answer.`);
  }
  if (q.run_cluster && q.run_status === "interrupted") {  // its cluster's workers take it up again
    return h("div", { class: "run-state" }, `Run ${q.run_id} is interrupted; the first worker of its cluster free`
      + " to take it up resumes it (with no worker up: ", h("code", {}, `%iterion resume ${q.run_id}`),
      "). An answer given now is saved; the agent gets it then.");
  }
  return h("div", { class: "run-state" }, `Run ${q.run_id} is ${statusWords(q.run_status)}. An answer given now is saved; `,
    "the agent gets it when the run is resumed: ", h("code", {}, `%iterion resume ${q.run_id}`), ".");
}

// Who the person at this page is, as the Jupyter server knows them (JupyterLab's identity,
// GET /api/me): the name its questions sidebar records too. null where the page is no
// Jupyter server's (VS Code, say): the kernel then names who answered.
let IDENTITY = null;
function identity() {
  if (IDENTITY === null) IDENTITY = fetchIdentity();
  return IDENTITY;
}

async function fetchIdentity() {
  try {
    const config = document.getElementById("jupyter-config-data");
    if (!config) return null;
    const page = JSON.parse(config.textContent || "{}");
    const base = String(page.baseUrl || "/").replace(/\/?$/, "/");
    const headers = page.token ? { Authorization: `token ${page.token}` } : {};
    const reply = await fetch(`${base}api/me`, { credentials: "same-origin", headers });
    if (!reply.ok) return null;
    const me = (await reply.json()).identity || {};
    return me.display_name || me.name || me.username || null;
  } catch (err) {
    return null;
  }
}

// Send an answer to the kernel, naming who gives it (waiting for the identity 3 s at most).
async function sendAnswer(model, q, answer) {
  const late = new Promise((resolve) => setTimeout(() => resolve(null), 3000));
  const who = await Promise.race([identity(), late]);
  model.send({ type: "answer", run_id: q.run_id, interaction_id: q.id, answer, answered_by: who });
}

// Follows the widget's kernel connection; calls onLost(time last heard from) once it is gone:
// the last check (each second) that found it there, or the last change it sent, whichever is
// later (a run waiting quietly at a gate sends nothing, and its clock must not fall back).
// JupyterLab's widget manager marks every model of a restarting kernel (restarted by a person,
// or by the server after the kernel died) not live: "comm_live_update", called with the view
// as `this`, whose model then says comm_live false. A notebook whose kernel was shut down or
// changed names another kernel, or none. Returns a function that stops following.
function watchKernel(model, el, onLost) {
  const manager = model.widget_manager;
  const kernelOf = () => (manager && "kernel" in manager ? manager.kernel : undefined);
  const born = kernelOf();
  let heard = new Date(), lost = false, commGone = false;
  const gone = () => {
    if (commGone) return true;
    if (!born) return false;  // a front-end that does not say which kernel (not JupyterLab)
    return kernelOf() !== born || born.isDisposed || born.status === "dead";
  };
  const check = () => {
    if (lost) return;
    if (!gone()) {
      heard = new Date();
      return;
    }
    lost = true;
    onLost(heard);
  };
  const changed = () => { if (!lost) heard = new Date(); };
  function commLive() {
    const real = this && this.model;
    commGone = real && "comm_live" in real ? !real.comm_live : true;
    check();
  }
  model.on("change", changed);
  model.on("comm_live_update", commLive);
  const timer = setInterval(check, 1000);
  check();
  return () => {
    clearInterval(timer);
    model.off("change", changed);
    model.off("comm_live_update", commLive);
  };
}

// The hour and minute of a time, as the page's locale writes them.
function clock(at) {
  return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// What a widget says once its kernel is gone; its controls are switched off.
function disconnected(root, heard, more) {
  root.classList.add("disconnected");
  for (const control of root.querySelectorAll(".card.pending button, .card.pending input")) control.disabled = true;
  return h("div", { class: "stale", role: "status" }, h("b", {}, `Kernel disconnected — state as of ${clock(heard)}.`),
    " This view no longer updates and cannot answer. ", ...more);
}

// A live question's card, kept (what is typed in it stays): who waits may have changed.
function updateWaits(card, q) {
  const waits = card.querySelector(".meta .waits");
  if (waits && !runStopped(q)) waits.textContent = waitsText(q);
}

// Who goes on while a question waits: the run stops for a blocking one, or for an async one
// its sync point (await_answers) waits on; an async one's agent works on, or has finished.
function waitsText(q) {
  if (q.kind !== "async" || q.waited_on) return "the run waits for this answer";
  return q.asker_finished ? "its agent has finished; a later step may read the answer"
    : "the agent keeps working meanwhile";
}

// One pending question as a form: its text, options as buttons, a text box when free text is allowed.
function questionCard(q, send, context) {
  const card = h("div", { class: "card pending", "data-interaction": q.id });
  for (const text of q.questions) card.append(h("div", { class: "question" }, text));
  const waits = runStopped(q) ? (OVER_STATUSES.includes(q.run_status) ? "the run has ended" : "nothing executes the run now")
    : waitsText(q);
  const expiry = q.expires_at ? [" · ", h("time", { datetime: q.expires_at, title: exact(q.expires_at), class: "left" }, left(q.expires_at))] : [];
  const reworded = q.revision ? [" · ", h("span", { class: "reworded" }, "reworded by its agent")] : [];
  card.append(h("div", { class: "meta" }, `${context} · asked `, when(q.requested_at), " · ",
    h("span", { class: "waits" }, waits), ...expiry, ...reworded));
  const note = runStateNote(q);
  if (note) card.append(note);
  const controls = h("div", { class: "controls" });
  for (const option of q.options || []) {
    controls.append(h("button", {
      type: "button", class: "option", "data-option": option.id, title: option.label ? option.id : null,
      onclick: () => send(q, option.id),
    }, option.label || option.id));
  }
  if (q.allow_free_text || !(q.options || []).length) {
    const input = h("input", { type: "text", class: "free-text", placeholder: "Your answer", "aria-label": "Your answer" });
    const submit = () => { if (input.value.trim()) send(q, input.value); };
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") submit(); });
    controls.append(input, h("button", { type: "button", class: "submit primary", onclick: submit }, "Answer"));
  }
  card.append(controls);
  return card;
}

// Only what changed is drawn again: a question being typed into keeps its text box.
function syncCards(list, items, key, make, update = null) {
  const existing = new Map([...list.children].filter((c) => c.dataset.key).map((c) => [c.dataset.key, c]));
  const wanted = items.map((item) => {
    const k = key(item);
    let card = existing.get(k);
    if (!card) { card = make(item); card.dataset.key = k; } else if (update) update(card, item);
    return card;
  });
  // Remove and insert only what changed: a card that stays is never taken out of the page,
  // so the text box someone is typing into keeps its text and its focus.
  const keep = new Set(wanted);
  for (const child of [...list.children]) if (!keep.has(child)) child.remove();
  wanted.forEach((card, i) => {
    const here = list.children[i] || null;
    if (here !== card) list.insertBefore(card, here);
  });
}

// JupyterLab's variables only (light, dark, high contrast); fallbacks for other front-ends.
const BASE_STYLE = `
.iterion { font-family: var(--jp-ui-font-family, system-ui, sans-serif); font-size: var(--jp-ui-font-size1, 13px);
  color: var(--jp-ui-font-color0, #000); line-height: 1.4; }
.iterion .meta { color: var(--jp-ui-font-color1, #222); font-size: var(--jp-ui-font-size0, 11px); }
.iterion code { font-family: var(--jp-code-font-family, monospace); font-size: 0.95em; }
.iterion .card { border: 1px solid var(--jp-border-color1, #bbb); border-radius: 6px; padding: 8px 10px; margin: 6px 0;
  background: var(--jp-layout-color1, #fff); }
.iterion .card.answered { background: var(--jp-layout-color0, #fff); border-style: dashed; }
.iterion .card.ended .answer { font-style: italic; }
.iterion .reworded { font-style: italic; }
.iterion .question { white-space: pre-wrap; font-weight: 600; margin: 0 0 2px; }
.iterion .answer { white-space: pre-wrap; margin: 2px 0; }
.iterion .controls { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 6px; align-items: center; }
.iterion button { font: inherit; color: var(--jp-ui-font-color0, #000); background: var(--jp-layout-color2, #eee);
  border: 1px solid var(--jp-border-color1, #bbb); border-radius: 4px; padding: 3px 12px; cursor: pointer; }
.iterion button:hover { background: var(--jp-layout-color3, #ddd); }
.iterion button:focus-visible, .iterion input:focus-visible { outline: 2px solid var(--jp-brand-color1, #1976d2); outline-offset: 1px; }
.iterion button.primary { background: var(--jp-brand-color1, #1976d2); border-color: var(--jp-brand-color1, #1976d2);
  color: var(--jp-ui-inverse-font-color0, #fff); }
.iterion button:disabled { opacity: 0.6; cursor: default; }
.iterion input.free-text { font: inherit; min-width: 16em; flex: 1 1 16em; color: var(--jp-ui-font-color0, #000);
  background: var(--jp-input-background, var(--jp-layout-color1, #fff));
  border: 1px solid var(--jp-input-border-color, var(--jp-border-color1, #bbb)); border-radius: 4px; padding: 3px 6px; }
.iterion .result { margin: 6px 0; padding: 4px 8px; border-radius: 4px; border-left: 4px solid var(--jp-success-color1, #388e3c);
  background: color-mix(in srgb, var(--jp-success-color1, #388e3c) 12%, var(--jp-layout-color1, #fff)); }
.iterion .result.error, .iterion .error { border-left-color: var(--jp-error-color1, #d32f2f);
  background: color-mix(in srgb, var(--jp-error-color1, #d32f2f) 12%, var(--jp-layout-color1, #fff)); }
.iterion .error { white-space: pre-wrap; padding: 4px 8px; border-left: 4px solid var(--jp-error-color1, #d32f2f); }
.iterion details > summary { cursor: pointer; margin: 6px 0 2px; }
.iterion table { border-collapse: collapse; font-size: var(--jp-ui-font-size0, 12px); }
.iterion td, .iterion th { padding: 2px 8px; vertical-align: top; text-align: left; border-bottom: 1px solid var(--jp-border-color2, #ddd); }
.iterion pre { white-space: pre-wrap; word-break: break-word; margin: 2px 0; padding: 4px 6px; max-height: 16em; overflow: auto;
  background: var(--jp-layout-color2, #f5f5f5); color: var(--jp-ui-font-color0, #000); border-radius: 4px;
  font-family: var(--jp-code-font-family, monospace); font-size: var(--jp-code-font-size, 12px); }
.iterion .run-state, .iterion .stale { margin: 4px 0; padding: 4px 8px; border-left: 4px dashed var(--jp-warn-color0, #e65100);
  background: color-mix(in srgb, var(--jp-warn-color1, #f57c00) 12%, var(--jp-layout-color1, #fff)); }
.iterion.disconnected svg g.node { cursor: default; }
/* the saved snapshot of a widget is for when the live view is gone: hide it beside a live one */
.jp-OutputArea:has(.iterion-live) > .jp-OutputArea-child:has(.iterion-snapshot) { display: none; }
`;

// The run widget: the workflow graph with each node's state, the run's usage against its
// budget, the selected node's details, and the run's pending questions as forms.

const STATE_COLOR = {
  pending: "var(--jp-layout-color4, #757575)",
  running: "var(--jp-brand-color1, #1976d2)",
  waiting: "var(--jp-warn-color1, #f57c00)",
  finished: "var(--jp-success-color1, #388e3c)",
  failed: "var(--jp-error-color1, #d32f2f)",
  skipped: "var(--jp-border-color1, #bdbdbd)",
};
const STATUS_COLOR = {
  running: STATE_COLOR.running, paused_waiting_human: STATE_COLOR.waiting, finished: STATE_COLOR.finished,
  failed: STATE_COLOR.failed, failed_resumable: STATE_COLOR.failed, cancelled: STATE_COLOR.pending,
  interrupted: "var(--jp-warn-color0, #e65100)",
};
const STATUS_TEXT = {
  paused_waiting_human: "paused: waiting for an answer", failed_resumable: "failed (resumable)",
  interrupted: "interrupted", starting: "starting",
};

function tint(color, percent) {
  return `color-mix(in srgb, ${color} ${percent}%, var(--jp-layout-color1, #fff))`;
}

const STYLE = BASE_STYLE + `
.iterion-run .header { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: baseline; margin-bottom: 4px; }
.iterion-run .title { font-weight: 600; }
.iterion-run .status { font-weight: 600; padding: 1px 8px; border-radius: 10px; border: 1px solid; }
${Object.entries(STATUS_COLOR).map(([k, c]) => `.iterion-run .status[data-status=${k}] { border-color: ${c}; background: ${tint(c, 18)}; }`).join("\n")}
.iterion-run .status[data-status=interrupted] { border-style: dashed; border-width: 2px; }
.iterion-run .meter { white-space: nowrap; }
.iterion-run .meter.over { color: var(--jp-ui-font-color0, #000); font-weight: 600; border-bottom: 2px solid var(--jp-error-color1, #d32f2f); }
.iterion-run .note { margin: 4px 0; padding: 4px 8px; border-left: 4px dashed var(--jp-warn-color0, #e65100);
  background: ${tint("var(--jp-warn-color1, #f57c00)", 12)}; }
.iterion-run .toolbar { display: flex; gap: 4px; align-items: center; margin: 4px 0; }
.iterion-run .toolbar button { padding: 0 8px; min-width: 2em; }
.iterion-run .viewport { max-height: 560px; overflow: auto; width: fit-content; max-width: 100%; border: 1px solid var(--jp-border-color2, #ddd); border-radius: 6px;
  background: var(--jp-layout-color1, #fff); }
.iterion-run svg { display: block; }
.iterion-run svg text { fill: var(--jp-ui-font-color0, #000); font-family: var(--jp-ui-font-family, sans-serif); }
.iterion-run svg .edge { fill: none; stroke: var(--jp-layout-color4, #757575); stroke-width: 1.3; }
.iterion-run svg .edge.back { stroke-dasharray: 5 4; }
.iterion-run svg .arrowhead { fill: var(--jp-layout-color4, #757575); }
.iterion-run svg .edge-label { font-size: 10px; fill: var(--jp-ui-font-color1, #222); paint-order: stroke;
  stroke: var(--jp-layout-color1, #fff); stroke-width: 3px; }
.iterion-run svg g.node { cursor: pointer; outline: none; }
.iterion-run svg g.node:focus-visible rect { stroke-width: 3.5; stroke-dasharray: none; }
.iterion-run svg g.node rect { stroke-width: 1.5; }
${Object.entries(STATE_COLOR).map(([k, c]) => `.iterion-run svg g.node[data-state=${k}] rect { stroke: ${c}; fill: ${tint(c, k === "skipped" || k === "pending" ? 6 : 20)}; }`).join("\n")}
.iterion-run svg g.node[data-state=skipped] rect { stroke-dasharray: 4 3; }
.iterion-run svg g.node[data-state=running] rect { stroke-width: 2.5; }
.iterion-run svg g.node.selected rect { stroke-width: 3.5; }
.iterion-run svg g.node .name { font-weight: 600; font-size: 12px; }
.iterion-run svg g.node .kind { font-size: 11px; fill: var(--jp-ui-font-color1, #222); }
.iterion-run svg g.node .state { font-size: 11px; font-weight: 600; }
.iterion-run svg .terminal circle { fill: var(--jp-layout-color2, #eee); stroke: var(--jp-layout-color4, #757575); }
.iterion-run svg .terminal text { font-size: 11px; }
.iterion-run .panel { border: 1px solid var(--jp-border-color1, #bbb); border-radius: 6px; padding: 6px 10px; margin: 6px 0;
  background: var(--jp-layout-color1, #fff); }
.iterion-run .panel h4 { margin: 8px 0 2px; font-size: var(--jp-ui-font-size1, 13px); }
.iterion-run .panel .close { float: right; }
.iterion-run .forms h4 { margin: 8px 0 2px; }
`;

function graphView(model, onSelect) {
  const g = model.get("graph") || {};
  const marker = uid("iterion-arrow");
  const svg = s("svg", { class: "graph", viewBox: `0 0 ${g.width || 10} ${g.height || 10}`, role: "img", "aria-label": "workflow graph" });
  const defs = s("defs");
  const head = s("marker", { id: marker, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  head.append(s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
  defs.append(head);
  svg.append(defs);
  for (const e of g.edges || []) {
    svg.append(s("path", { d: edgePath(e.points, e.back), class: e.back ? "edge back" : "edge", "marker-end": `url(#${marker})`, "data-src": e.src, "data-dst": e.dst }));
    if (e.label) {
      const [x, y] = labelAt(e.points, e.back);
      svg.append(s("text", { x, y, class: "edge-label" }, e.label));
    }
  }
  const groups = {};
  for (const n of g.nodes || []) {
    if (n.terminal) {
      const r = n.w / 2;
      const t = s("g", { class: "terminal", "data-node": n.id });
      t.append(s("circle", { cx: n.x + r, cy: n.y + r, r }), s("text", { x: n.x + r, y: n.y + r + 4, "text-anchor": "middle" }, n.id));
      svg.append(t);
      continue;
    }
    const group = s("g", { class: "node", "data-node": n.id, tabindex: 0, role: "button" });
    const title = s("title");
    group.append(title, s("rect", { x: n.x, y: n.y, width: n.w, height: n.h, rx: 7 }));
    group.append(s("text", { x: n.x + 8, y: n.y + 17, class: "name" }, clip(n.id, n.w, 7.4)));
    group.append(s("text", { x: n.x + 8, y: n.y + 32, class: "kind" }, clip(n.kind, n.w, 6.4)));
    const state = s("text", { x: n.x + 8, y: n.y + 47, class: "state" }, "");
    group.append(state);
    group.addEventListener("click", () => onSelect(n.id));
    group.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); onSelect(n.id); } });
    groups[n.id] = { group, state, title, node: n };
    svg.append(group);
  }
  const paint = () => {
    const states = model.get("states") || {}, notes = model.get("notes") || {}, selected = model.get("selected");
    for (const [id, { group, state, title, node }] of Object.entries(groups)) {
      const value = states[id] || "pending";
      const text = notes[id] || value;
      group.setAttribute("data-state", value);
      group.classList.toggle("selected", id === selected);
      state.textContent = clip(text, node.w, 6.4);
      title.textContent = `${id} (${node.kind}): ${text}`;
    }
  };
  paint();
  return { svg, paint, width: g.width || 10, height: g.height || 10 };
}

function clip(text, width, char) {
  const room = Math.max(1, Math.floor((width - 16) / char));
  return text.length <= room ? text : text.slice(0, room - 1) + "…";
}

function edgePath(points, back) {
  const [x0, y0] = points[0];
  if (back && points.length === 4) {
    const lane = points[1][0], [x3, y3] = points[3];
    if (y0 === y3) return `M${x0},${y0 - 8} C${lane + 24},${y0 - 30} ${lane + 24},${y3 + 30} ${x3},${y3 + 8}`;
    const r = Math.min(10, Math.abs(y0 - y3) / 2, Math.max(lane - x0, 1)), up = y3 < y0 ? -1 : 1;
    return `M${x0},${y0} L${lane - r},${y0} Q${lane},${y0} ${lane},${y0 + up * r} L${lane},${y3 - up * r} Q${lane},${y3} ${lane - r},${y3} L${x3},${y3}`;
  }
  let d = `M${x0},${y0}`;
  for (let i = 1; i < points.length; i++) {
    const [ax, ay] = points[i - 1], [bx, by] = points[i], mid = (ay + by) / 2;
    d += ` C${ax},${mid} ${bx},${mid} ${bx},${by}`;
  }
  return d;
}

function labelAt(points, back) {
  if (back) return [points[1][0] + 4, (points[1][1] + points[2][1]) / 2];
  return [(points[0][0] + points[1][0]) / 2 + 4, (points[0][1] + points[1][1]) / 2];
}

function money(value) { return `$${Number(value || 0).toFixed(4)}`; }

// The time the run executed (its stretches from a start or resume to the pause or stop that
// follows; not while it was paused, interrupted or cancelled), ticking while it runs, up to
// `until` (the last word from a kernel that is gone).
function meters(usage, status, until = null) {
  const running = status === "running" && usage.since;
  const now = until ? until.getTime() : Date.now();
  const secs = (usage.seconds || 0) + (running ? Math.max(0, (now - Date.parse(usage.since)) / 1000) : 0);
  const parts = [];
  const meter = (label, used, limit, fmt) => {
    const over = limit !== null && limit !== undefined && used >= limit;
    const text = limit !== null && limit !== undefined ? `${label} ${fmt(used)} / ${fmt(limit)}` : `${label} ${fmt(used)}`;
    const tip = label === "time" ? "time executed: not counting pauses, interruptions or cancellations" : null;
    parts.push(h("span", { class: over ? "meter over" : "meter", "data-meter": label, title: tip }, text));
  };
  meter("time", secs, usage.max_seconds, seconds);
  meter("tokens", usage.tokens || 0, usage.max_tokens, (n) => Number(n).toLocaleString());
  meter("cost", usage.cost_usd || 0, usage.max_cost_usd, money);
  return parts;
}

function detailsPanel(d, close) {
  const panel = h("div", { class: "panel details", "data-node": d.node });
  panel.append(h("button", { type: "button", class: "close", title: "Close", onclick: close }, "×"),
    h("div", {}, h("b", {}, d.node), ` (${d.kind}) — `, h("span", { class: "detail-state" }, d.text)));
  const section = (title, ...body) => panel.append(h("h4", {}, title), ...body);
  if (d.visits.length) {
    const rows = d.visits.map((v, i) => h("tr", {}, h("td", {}, `#${i + 1}`), h("td", {}, when(v.started)),
      h("td", {}, v.seconds === null ? "…" : seconds(v.seconds)), h("td", {}, v.state), h("td", {}, v.error || "")));
    section("Timing", h("table", { class: "visits" }, h("tr", {}, ...["visit", "started", "took", "state", ""].map((t) => h("th", {}, t))), ...rows));
  } else {
    panel.append(h("div", { class: "meta" }, "Not started yet."));
  }
  if (d.input !== null && d.input !== undefined) section("Input", h("pre", { class: "input" }, show(d.input)));
  if (d.output !== null && d.output !== undefined) section("Output", h("pre", { class: "output" }, show(d.output)));
  if (d.turns.length) {
    section(`Model turns (${d.turns.length})`, ...d.turns.map((t, i) => h("div", { class: "turn" },
      h("div", { class: "meta" }, `turn ${i + 1} · `, when(t.at)),
      t.request ? h("pre", { class: "request" }, `request: ${show(t.request)}`) : null,
      t.reply ? h("pre", { class: "reply" }, `reply: ${show(t.reply)}`) : h("div", { class: "meta" }, "waiting for the reply…"))));
  }
  if (d.tools.length) {
    section(`Tool calls (${d.tools.length})`, ...d.tools.map((c) => h("div", { class: "tool" },
      h("div", {}, h("b", {}, String(c.tool ?? "")), " ", h("span", { class: "meta" }, when(c.at))),
      c.input !== null ? h("pre", {}, `input: ${show(c.input)}`) : null,
      c.error ? h("pre", { class: "tool-error" }, `error: ${show(c.error)}`)
        : c.result !== null ? h("pre", {}, `result: ${show(c.result)}`) : null)));
  }
  if (d.questions.length) {
    section(`Questions (${d.questions.length})`, ...d.questions.map((q) => h("div", { class: "asked" },
      h("div", { class: "question" }, q.questions.join("\n")),
      h("div", { class: "meta" }, q.answered_at
        ? [`answered ${JSON.stringify(answerText(q))} by ${q.answered_by || "?"} `, when(q.answered_at)]
        : endText(q) ? [`${endText(q)} · `, when(q.ended_at)]
          : ["pending · asked ", when(q.requested_at)]))));
  }
  return panel;
}

function render({ model, el }) {
  const root = h("div", { class: "iterion iterion-run iterion-live" });
  void identity();  // asked once per page, ahead of the first click
  el.append(h("style", {}, STYLE), root);
  const header = h("div", { class: "header" });
  const note = h("div", { class: "note-slot" });
  const zoomOut = h("button", { type: "button", title: "Zoom out", "aria-label": "Zoom out" }, "−");
  const zoomIn = h("button", { type: "button", title: "Zoom in", "aria-label": "Zoom in" }, "+");
  const zoomFit = h("button", { type: "button", title: "Fit the width" }, "Fit");
  const zoomLabel = h("span", { class: "meta zoom" }, "");
  const toolbar = h("div", { class: "toolbar" }, zoomOut, zoomIn, zoomFit, zoomLabel,
    h("span", { class: "meta" }, " · click a node for its details"));
  const viewport = h("div", { class: "viewport" });
  const details = h("div", { class: "details-slot" });
  const result = h("div", { class: "result-slot" });
  const forms = h("div", { class: "forms" });
  const formList = h("div", { class: "form-list" });
  const error = h("div", { class: "error-slot" });
  const extra = h("div", { class: "extra" });
  root.append(header, note, toolbar, viewport, details, forms, error, extra);
  let view = null, scale = 1, fitted = false;

  let lost = null;
  const select = (id) => {
    if (lost) return;  // the kernel that sends a node's details is gone
    model.set("selected", model.get("selected") === id ? "" : id);
    model.save_changes();
  };
  const zoom = (value) => {
    scale = Math.min(3, Math.max(0.2, value));
    if (view) {
      view.svg.setAttribute("width", view.width * scale);
      view.svg.setAttribute("height", view.height * scale);
    }
    zoomLabel.textContent = `${Math.round(scale * 100)}%`;
  };
  const fit = () => {
    const room = root.clientWidth - 4;
    if (view && room > 0) zoom(Math.min(1, room / view.width));
  };
  zoomOut.addEventListener("click", () => zoom(scale / 1.25));
  zoomIn.addEventListener("click", () => zoom(scale * 1.25));
  zoomFit.addEventListener("click", fit);
  viewport.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey) return;
    ev.preventDefault();
    zoom(scale * (ev.deltaY < 0 ? 1.1 : 1 / 1.1));
  }, { passive: false });

  const drawGraph = () => {
    view = graphView(model, select);
    viewport.replaceChildren(view.svg);
    zoom(scale);
    if (!fitted && root.clientWidth > 0) { fitted = true; fit(); }
  };
  const drawHeader = () => {
    const status = model.get("status") || "starting";
    const p = model.get("progress") || {};
    const usage = model.get("usage") || {};
    header.replaceChildren(
      h("span", { class: "title" }, "Run ", h("code", {}, model.get("run_id")), ` · ${model.get("workflow") || ""}`),
      h("span", { class: "status", "data-status": status }, (STATUS_TEXT[status] || status) + (lost ? ` (as of ${clock(lost)})` : "")),
      ...meters(usage, status, lost),
      h("span", { class: "meta counts" }, `${p.done ?? 0}/${p.total ?? 0} nodes finished · ${p.events ?? 0} events`));
    const run = model.get("run_id");
    if (lost) {
      note.replaceChildren(disconnected(root, lost, ["The run may have gone on or stopped since: ",
        h("code", {}, `%iterion show ${run}`), " in a running kernel shows it live (",
        h("code", {}, `%iterion resume ${run}`), " if it reads interrupted)."]));
      return;
    }
    const cluster = model.get("cluster");  // a cluster's workers take its runs up again
    note.replaceChildren(status !== "interrupted" ? ""
      : cluster ? h("div", { class: "note" }, "Its worker was lost: the first worker of its cluster free to take it",
        " up resumes it where it stopped (with no worker up: ", h("code", {}, `%iterion resume ${run}`), ").")
      : h("div", { class: "note" }, "Nothing runs this run now: the kernel or process that ran it stopped. ",
        "It resumes where it stopped with ", h("code", {}, `%iterion resume ${run}`), "."));
  };
  const drawDetails = () => {
    const d = model.get("details") || {};
    details.replaceChildren(d.node ? detailsPanel(d, () => select(d.node)) : "");
  };
  const drawForms = () => {
    const pending = (model.get("questions") || []).filter((q) => !q.answered_at && !q.ended);
    if (!pending.length) { forms.replaceChildren(result); formList.replaceChildren(); return; }
    const send = (q, answer) => { if (!lost) void sendAnswer(model, { run_id: model.get("run_id"), ...q }, answer); };
    if (model.get("answerable")) {
      syncCards(formList, pending, questionKey, (q) => questionCard(q, send, `asked by ${q.node_id}`), updateWaits);
    } else {
      syncCards(formList, pending, questionKey, (q) => h("div", { class: "card pending", "data-interaction": q.id },
        h("div", { class: "question" }, q.questions.join("\n")), h("div", { class: "meta" }, `asked by ${q.node_id} · answer it in the inbox (%iterion inbox)`)));
    }
    forms.replaceChildren(h("h4", {}, `Waiting for you (${pending.length})`), result, formList);
    if (lost) drawHeader();  // switches off the controls drawn since
  };
  const drawResult = () => {
    const r = model.get("last_result") || {};
    result.replaceChildren(r.interaction_id
      ? h("div", { class: r.error ? "result error" : "result ok", role: "status" }, r.error ? `Not answered: ${r.error}` : outcomeText(r))
      : "");
  };
  const drawError = () => {
    const message = model.get("error");
    error.replaceChildren(message ? h("div", { class: "error" }, message) : "");
  };
  const drawExtra = () => {
    const questions = model.get("questions") || [];
    const events = model.get("events") || [];
    const parts = [];
    if (questions.length) {
      const table = h("table", { class: "questions" });
      for (const q of questions) {
        table.append(h("tr", {}, h("td", { class: "meta" }, `${q.kind} · ${q.node_id}`), h("td", {}, q.questions.join(" / ")),
          h("td", {}, q.answered_at ? [`→ ${answerText(q)} (${q.answered_by || "?"}, `, when(q.answered_at), ")"]
            : endText(q) ? [`${endText(q)} (`, when(q.ended_at), ")"] : "pending")));
      }
      parts.push(h("details", { class: "all-questions" }, h("summary", {}, `Questions (${questions.length})`), table));
    }
    const rows = events.map((e) => h("tr", {}, h("td", { class: "meta" }, String(e.seq)), h("td", {}, e.type),
      h("td", {}, e.node_id ?? ""), h("td", { class: "meta" }, e.summary)));
    parts.push(h("details", { class: "recent-events" }, h("summary", {}, "Recent events"), h("table", { class: "events" }, ...rows)));
    const open = [...extra.querySelectorAll("details")].map((d) => d.open);
    extra.replaceChildren(...parts);
    extra.querySelectorAll("details").forEach((d, i) => { if (open[i]) d.open = true; });
  };

  const on = {
    graph: drawGraph,
    states: () => view && view.paint(), notes: () => view && view.paint(),
    selected: () => { if (view) view.paint(); },
    status: () => { drawHeader(); }, progress: drawHeader, workflow: drawHeader, cluster: drawHeader,
    usage: drawHeader,
    details: drawDetails, questions: () => { drawForms(); drawExtra(); }, answerable: drawForms,
    last_result: drawResult, error: drawError, events: drawExtra,
  };
  drawGraph(); drawHeader(); drawDetails(); drawResult(); drawForms(); drawError(); drawExtra();
  const handlers = Object.entries(on).map(([name, fn]) => { const f = () => fn(); model.on(`change:${name}`, f); return [name, f]; });
  const unwatch = watchKernel(model, el, (heard) => { lost = heard; drawHeader(); });
  const timer = setInterval(() => {
    if ((model.get("status") || "") === "running" && !lost) drawHeader();
    refreshTimes(root);
    if (!fitted && root.clientWidth > 0) { fitted = true; fit(); }
  }, 1000);
  return () => {
    clearInterval(timer);
    unwatch();
    for (const [name, f] of handlers) model.off(`change:${name}`, f);
  };
}

export default { render };
