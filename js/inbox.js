// The inbox widget: pending questions as answer forms, and the answered ones.
// Every piece of agent-written text goes through textContent: never HTML.

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function show(value) {
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

const STYLE = `
.iterion-inbox { font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; }
.iterion-inbox .card { border: 1px solid #bbb; border-radius: 6px; padding: 8px; margin: 6px 0; }
.iterion-inbox .meta { color: #666; font-size: 11px; }
.iterion-inbox .question { white-space: pre-wrap; margin: 4px 0; }
.iterion-inbox button { margin: 2px 4px 2px 0; }
.iterion-inbox .async { color: #2a6; }
.iterion-inbox .history .card { border-style: dashed; opacity: 0.8; }
.iterion-inbox .result { margin: 4px 0; }
.iterion-inbox .error { color: #b00; }
`;

function questionCard(model, q) {
  const send = (answer) =>
    model.send({ type: "answer", run_id: q.run_id, interaction_id: q.id, answer });
  const card = h("div", { class: "card pending", "data-interaction": q.id });
  card.append(
    h("div", { class: "meta" },
      `${q.kind === "async" ? "async" : "blocking"} · run ${q.run_id} · node ${q.node_id} · ${q.id}`),
  );
  for (const text of q.questions) card.append(h("div", { class: "question" }, text));
  if (q.options.length) {
    const row = h("div", { class: "options" });
    for (const option of q.options) {
      row.append(h("button", { class: "option", "data-option": option.id, onclick: () => send(option.id) },
        option.label || option.id));
    }
    card.append(row);
  }
  if (q.allow_free_text || !q.options.length) {
    const input = h("input", { type: "text", class: "free-text", placeholder: "your answer" });
    const submit = () => { if (input.value.trim()) send(input.value); };
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") submit(); });
    card.append(h("div", { class: "free" }, input, h("button", { class: "submit", onclick: submit }, "Answer")));
  }
  return card;
}

function answeredCard(q) {
  return h("div", { class: "card answered", "data-interaction": q.id },
    h("div", { class: "meta" },
      `${q.kind === "async" ? "async" : "blocking"} · run ${q.run_id} · node ${q.node_id} · answered by ${q.answered_by ?? "?"} at ${q.answered_at ?? "?"}`),
    ...q.questions.map((text) => h("div", { class: "question" }, text)),
    h("div", { class: "answer" }, "→ ", show(q.answers)));
}

function render({ model, el }) {
  const root = h("div", { class: "iterion-inbox" });
  el.append(h("style", {}, STYLE), root);
  const draw = () => {
    const pending = model.get("pending");
    const history = model.get("history");
    const result = model.get("last_result");
    root.replaceChildren(
      h("div", { class: "title" }, h("b", {}, "Inbox"), ` — ${model.get("scope")} · ${pending.length} pending`),
    );
    if (result && result.interaction_id) {
      root.append(result.error
        ? h("div", { class: "result error" }, `${result.interaction_id}: ${result.error}`)
        : h("div", { class: "result ok" },
            `${result.interaction_id}: queued ${result.queued}, resumed ${result.resumed}`));
    }
    const list = h("div", { class: "pending-list" });
    if (!pending.length) list.append(h("div", { class: "empty meta" }, "No pending questions."));
    for (const q of pending) list.append(questionCard(model, q));
    root.append(list);
    if (history.length) {
      const past = h("details", { class: "history", open: "" }, h("summary", {}, `Answered (${history.length})`));
      for (const q of history) past.append(answeredCard(q));
      root.append(past);
    }
  };
  draw();
  for (const name of ["pending", "history", "last_result", "scope"]) model.on(`change:${name}`, draw);
  return () => { for (const name of ["pending", "history", "last_result", "scope"]) model.off(`change:${name}`, draw); };
}

export default { render };
