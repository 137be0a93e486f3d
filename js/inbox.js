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
