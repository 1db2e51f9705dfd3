// The plan as a DAG in SVG: steps in layers (a step sits one layer below its deepest
// dependency), ordered within a layer by their parents' positions, coloured by status.

const NS = "http://www.w3.org/2000/svg";
const W = 168, H = 48, GAP_X = 28, GAP_Y = 46, PAD = 16;
const REFERENCE = /\{\{\s*([A-Za-z0-9_-]+)\.output/g;

// A label cut to `chars` characters (with an ellipsis) so it stays inside its node; the
// node's title holds it whole.
function fit(text, chars) {
  return text.length <= chars ? text : `${text.slice(0, chars - 1)}…`;
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) if (value !== undefined) el.setAttribute(key, value);
  el.append(...children);
  return el;
}

// Each step's dependencies: dependsOn plus the steps its arguments reference.
export function dependencies(plan) {
  const ids = new Set(plan.steps.map((s) => s.id));
  // Maps keyed by step id have no prototype: a step may be called "constructor" or "__proto__".
  const deps = Object.create(null);
  for (const step of plan.steps) {
    const found = new Set((step.dependsOn || []).filter((d) => ids.has(d)));
    for (const match of JSON.stringify(step.args || {}).matchAll(REFERENCE)) {
      if (ids.has(match[1]) && match[1] !== step.id) found.add(match[1]);
    }
    deps[step.id] = [...found];
  }
  return deps;
}

export function layout(plan) {
  const deps = dependencies(plan);
  const layer = Object.create(null);
  const depth = (id, seen = new Set()) => {
    if (layer[id] !== undefined) return layer[id];
    if (seen.has(id)) return 0; // a cycle cannot be planned; draw it anyway
    seen.add(id);
    layer[id] = deps[id].length ? 1 + Math.max(...deps[id].map((d) => depth(d, seen))) : 0;
    return layer[id];
  };
  plan.steps.forEach((s) => depth(s.id));
  const layers = [];
  plan.steps.forEach((s) => (layers[layer[s.id]] ||= []).push(s.id));
  const x = Object.create(null);
  layers.forEach((ids, row) => {
    if (row > 0) {
      const centre = (id) => deps[id].reduce((sum, d) => sum + x[d], 0) / (deps[id].length || 1);
      ids.sort((a, b) => centre(a) - centre(b));
    }
    ids.forEach((id, column) => (x[id] = column));
  });
  const widest = Math.max(...layers.map((ids) => ids.length));
  const position = Object.create(null);
  layers.forEach((ids, row) => {
    const offset = ((widest - ids.length) * (W + GAP_X)) / 2;
    ids.forEach((id, column) => {
      position[id] = { x: PAD + offset + column * (W + GAP_X), y: PAD + row * (H + GAP_Y) };
    });
  });
  return {
    deps,
    position,
    width: PAD * 2 + widest * W + (widest - 1) * GAP_X,
    height: PAD * 2 + layers.length * H + (layers.length - 1) * GAP_Y,
  };
}

// statusOf(id) -> a step status; onSelect(id) when a step is clicked.
export function drawDag(plan, statusOf, selected, onSelect) {
  const { deps, position, width, height } = layout(plan);
  const root = svg("svg", {
    class: "dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": `plan with ${plan.steps.length} steps`,
  });
  root.append(svg("defs", {}, svg("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto",
  }, svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));
  for (const step of plan.steps) {
    for (const dep of deps[step.id]) {
      const a = position[dep], b = position[step.id];
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y;
      const bend = (y2 - y1) / 2;
      root.append(svg("path", {
        class: `edge ${statusOf(dep)}`, "marker-end": "url(#arrow)",
        d: `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2 - 2}`,
      }));
    }
  }
  for (const step of plan.steps) {
    const { x, y } = position[step.id];
    const status = statusOf(step.id);
    const title = svg("title", {});
    title.textContent = `${step.id} · ${step.tool || "reasoning"} · ${status}${step.description ? `\n${step.description}` : ""}`;
    const label = svg("text", { x: x + 10, y: y + 19, class: "node-id" });
    label.textContent = fit(step.id, 17);
    const tool = svg("text", { x: x + 10, y: y + 37, class: "node-tool" });
    tool.textContent = fit(`${step.tool || "reasoning"} · ${status.replace("_", " ")}`, 25);
    const node = svg("g", {
      class: `node ${status}${selected === step.id ? " selected" : ""}`,
      "data-step-id": step.id, "data-status": status, tabindex: "0", role: "button",
    }, title, svg("rect", { x, y, width: W, height: H, rx: 8 }), label, tool);
    node.addEventListener("click", () => onSelect(step.id));
    node.addEventListener("keydown", (e) => { if (e.key === "Enter") onSelect(step.id); });
    root.append(node);
  }
  return root;
}
