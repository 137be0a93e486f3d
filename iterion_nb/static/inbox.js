// Built from js/inbox.js by scripts/build_js.py: edit the source, then rebuild.
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

// The inbox widget: pending questions as answer forms, and the ones answered since.

const STYLE = BASE_STYLE + `
.iterion-inbox .title { margin-bottom: 4px; }
.iterion-inbox .empty { margin: 6px 0; }
`;

function context(q, scope) {
  const where = q.workflow ? `${q.node_id} in ${q.workflow}` : q.node_id;
  return scope === "all runs" ? `${where} (run ${q.run_id})` : where;
}

function answeredCard(q, scope) {
  const ended = endText(q);
  if (ended) {
    return h("div", { class: "card answered ended", "data-interaction": q.id, "data-ended": q.ended },
      ...q.questions.map((text) => h("div", { class: "question" }, text)),
      h("div", { class: "answer" }, "→ ", ended),
      h("div", { class: "meta" }, `${context(q, scope)} · `, when(q.ended_at)));
  }
  return h("div", { class: "card answered", "data-interaction": q.id },
    ...q.questions.map((text) => h("div", { class: "question" }, text)),
    h("div", { class: "answer" }, "→ ", answerText(q)),
    h("div", { class: "meta" }, `${context(q, scope)} · answered by ${q.answered_by || "someone"} `, when(q.answered_at)));
}

function render({ model, el }) {
  const root = h("div", { class: "iterion iterion-inbox iterion-live" });
  void identity();  // asked once per page, ahead of the first click
  el.append(h("style", {}, STYLE), root);
  const title = h("div", { class: "title" });
  const stale = h("div", { class: "stale-slot" });
  const result = h("div", { class: "result-slot" });
  const list = h("div", { class: "pending-list" });
  const past = h("div", { class: "history-slot" });
  root.append(title, stale, result, list, past);
  let historyOpen = true;
  let lost = null;

  const send = (q, answer) => { if (!lost) void sendAnswer(model, q, answer); };
  const drawTitle = () => {
    const pending = model.get("pending") || [];
    const scope = model.get("scope");
    title.replaceChildren(h("b", {}, "Inbox"), ` — ${scope === "all runs" ? "every run" : scope} · ${pending.length} waiting for an answer`);
  };
  const drawPending = () => {
    const pending = model.get("pending") || [];
    const scope = model.get("scope");
    if (!pending.length) { list.replaceChildren(h("div", { class: "empty meta" }, "Nothing is waiting for an answer.")); return; }
    if (list.firstChild && !list.firstChild.dataset.key) list.replaceChildren();
    syncCards(list, pending, questionKey, (q) => questionCard(q, send, context(q, scope)), updateWaits);
    if (lost) drawLost();
  };
  const drawLost = () => {
    stale.replaceChildren(disconnected(root, lost, ["The questions may have been answered since: ",
      h("code", {}, "%iterion inbox"), " in a running kernel shows them live."]));
  };
  const drawHistory = () => {
    const history = model.get("history") || [];
    const scope = model.get("scope");
    const box = past.firstChild;
    if (box) historyOpen = box.open;
    if (!history.length) { past.replaceChildren(); return; }
    const details = h("details", { class: "history", open: historyOpen }, h("summary", {}, `Answered or closed (${history.length})`));
    for (const q of history) details.append(answeredCard(q, scope));
    past.replaceChildren(details);
  };
  const drawResult = () => {
    const r = model.get("last_result") || {};
    if (!r.interaction_id) { result.replaceChildren(); return; }
    result.replaceChildren(r.error
      ? h("div", { class: "result error", role: "status" }, `Not answered: ${r.error}`)
      : h("div", { class: "result ok", role: "status" }, outcomeText(r)));
  };
  const on = { pending: () => { drawTitle(); drawPending(); }, history: drawHistory, last_result: drawResult, scope: () => { drawTitle(); drawPending(); drawHistory(); } };
  drawTitle(); drawPending(); drawHistory(); drawResult();
  const handlers = Object.entries(on).map(([name, fn]) => { const f = () => fn(); model.on(`change:${name}`, f); return [name, f]; });
  const timer = setInterval(() => refreshTimes(root), 20000);
  const unwatch = watchKernel(model, el, (heard) => { lost = heard; drawLost(); });
  return () => {
    clearInterval(timer);
    unwatch();
    for (const [name, f] of handlers) model.off(`change:${name}`, f);
  };
}

export default { render };
