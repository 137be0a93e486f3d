// The run widget: the workflow graph with node states, progress, events, questions.
// Every piece of agent-written text goes through textContent: never HTML.

const SVG = "http://www.w3.org/2000/svg";

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function s(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

const COLORS = {
  pending: "#eee", running: "#9cf", done: "#9d9", failed: "#f99", parked: "#fd7",
};
const W = 130, H = 40;

const STYLE = `
.iterion-run { font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; }
.iterion-run .status { font-weight: bold; }
.iterion-run .error { color: #b00; white-space: pre-wrap; }
.iterion-run table { border-collapse: collapse; font-size: 12px; }
.iterion-run td { padding: 1px 6px; vertical-align: top; }
.iterion-run .meta { color: #666; }
`;

function graph(model) {
  const g = model.get("graph");
  const states = model.get("states");
  const svg = s("svg", { width: g.width || 10, height: g.height || 10, class: "graph" });
  const defs = s("defs");
  const marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" });
  marker.append(s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#777" }));
  defs.append(marker);
  svg.append(defs);
  const at = Object.fromEntries((g.nodes || []).map((n) => [n.id, n]));
  for (const e of g.edges || []) {
    const a = at[e.src], b = at[e.dst];
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const d = e.back
      ? `M${a.x + W / 2},${a.y + H} C${a.x + W / 2},${a.y + H + 30} ${b.x + W / 2},${b.y + H + 30} ${b.x + W / 2},${b.y + H}`
      : `M${x1},${y1} C${x1 + 20},${y1} ${x2 - 20},${y2} ${x2},${y2}`;
    svg.append(s("path", { d, fill: "none", stroke: "#777", "marker-end": "url(#arrow)" }));
    if (e.label) svg.append(s("text", { x: (x1 + x2) / 2 - 20, y: (y1 + y2) / 2 - 4, "font-size": 10, fill: "#555" }, e.label));
  }
  for (const n of g.nodes || []) {
    const state = states[n.id] || "pending";
    const group = s("g", { class: `node ${state}`, "data-node": n.id, "data-state": state });
    group.append(s("rect", { x: n.x, y: n.y, width: W, height: H, rx: 6, fill: COLORS[state], stroke: "#555" }));
    group.append(s("text", { x: n.x + 8, y: n.y + 16, "font-size": 12 }, n.id));
    group.append(s("text", { x: n.x + 8, y: n.y + 31, "font-size": 10, fill: "#555" }, `${n.kind} · ${state}`));
    svg.append(group);
  }
  return svg;
}

function render({ model, el }) {
  const root = h("div", { class: "iterion-run" });
  el.append(h("style", {}, STYLE), root);
  const draw = () => {
    const p = model.get("progress");
    const error = model.get("error");
    root.replaceChildren(
      h("div", {},
        h("span", {}, `Run ${model.get("run_id")} · ${model.get("workflow")} · `),
        h("span", { class: "status", "data-status": model.get("status") }, model.get("status") || "starting"),
        h("span", { class: "meta" }, ` · ${p.done ?? 0}/${p.total ?? 0} nodes done · ${p.events ?? 0} events`)),
      graph(model),
    );
    if (error) root.append(h("div", { class: "error" }, error));
    const questions = model.get("questions");
    if (questions.length) {
      const table = h("table", { class: "questions" });
      for (const q of questions) {
        const answer = q.answered_at ? `→ ${typeof q.answers === "string" ? q.answers : JSON.stringify(q.answers)} (${q.answered_by})` : "pending";
        table.append(h("tr", {}, h("td", { class: "meta" }, `${q.kind} · ${q.node_id}`), h("td", {}, q.questions.join(" / ")), h("td", {}, answer)));
      }
      root.append(h("div", {}, h("b", {}, "Questions")), table);
    }
    const events = h("table", { class: "events" });
    for (const e of model.get("events")) {
      events.append(h("tr", {}, h("td", { class: "meta" }, String(e.seq)), h("td", {}, e.type), h("td", {}, e.node_id ?? ""), h("td", { class: "meta" }, e.summary)));
    }
    root.append(h("details", {}, h("summary", {}, "Recent events"), events));
  };
  draw();
  const names = ["graph", "states", "status", "progress", "events", "questions", "error", "workflow"];
  for (const name of names) model.on(`change:${name}`, draw);
  return () => { for (const name of names) model.off(`change:${name}`, draw); };
}

export default { render };
