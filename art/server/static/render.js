// Small DOM helpers: elements, markdown, tables, values. Everything is built as DOM nodes
// (never from HTML strings), so text from a run cannot inject markup into the page.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// -- markdown: headings, paragraphs, lists, code, quotes, tables, bold/italic/code/links --
export function markdown(text) {
  const root = h("div", { class: "markdown" });
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    if (line.startsWith("```")) {
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      i++;
      root.append(h("pre", {}, h("code", {}, code.join("\n"))));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(h(`h${Math.min(heading[1].length + 2, 6)}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*\|.*\|\s*$/.test(line) && /^\s*\|?[\s:|-]+\|?\s*$/.test(lines[i + 1] ?? "")) {
      const cells = (row) => row.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
      const columns = cells(line);
      const rows = [];
      for (i += 2; i < lines.length && /^\s*\|.*\|\s*$/.test(lines[i]); i++) rows.push(cells(lines[i]));
      root.append(table(columns, rows, inline));
      continue;
    }
    const list = line.match(/^\s*([-*+]|\d+[.)])\s+/);
    if (list) {
      const ordered = /\d/.test(list[1]);
      const el = h(ordered ? "ol" : "ul");
      for (; i < lines.length; i++) {
        const item = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (!item) break;
        el.append(h("li", {}, inline(item[2])));
      }
      root.append(el);
      continue;
    }
    if (line.startsWith(">")) {
      const quote = [];
      for (; i < lines.length && lines[i].startsWith(">"); i++) quote.push(lines[i].replace(/^>\s?/, ""));
      root.append(h("blockquote", {}, inline(quote.join(" "))));
      continue;
    }
    const para = [];
    for (; i < lines.length && lines[i].trim() && !/^(#{1,6}\s|```|>|\s*([-*+]|\d+[.)])\s)/.test(lines[i]); i++) {
      para.push(lines[i].trim());
    }
    if (!para.length) { para.push(line); i++; }
    root.append(h("p", {}, inline(para.join(" "))));
  }
  return root;
}

const INLINE = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*|_[^_\s][^_]*_)|(\[[^\]]+\]\([^)\s]+\))/;

export function inline(text) {
  const out = [];
  let rest = String(text ?? "");
  for (let match = rest.match(INLINE); match; match = rest.match(INLINE)) {
    if (match.index) out.push(rest.slice(0, match.index));
    const token = match[0];
    if (match[1]) out.push(h("code", {}, token.slice(1, -1)));
    else if (match[2]) out.push(h("strong", {}, inline(token.slice(2, -2))));
    else if (match[3]) out.push(h("em", {}, inline(token.slice(1, -1))));
    else {
      const [, label, href] = token.match(/^\[([^\]]+)\]\(([^)\s]+)\)$/);
      const safe = /^(https?:|mailto:)/i.test(href) ? href : null;
      out.push(safe ? h("a", { href: safe, rel: "noopener noreferrer", target: "_blank" }, label) : label);
    }
    rest = rest.slice(match.index + token.length);
  }
  if (rest) out.push(rest);
  return out;
}

// -- tables and values ---------------------------------------------------------------------
export function table(columns, rows, cell = (value) => display(value)) {
  return h(
    "table",
    { class: "data" },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, String(c))))),
    h("tbody", {}, rows.map((row) => h("tr", {}, row.map((value) => h("td", {}, cell(value)))))),
  );
}

export function display(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// A display tool's output: a table ({columns, rows} or a list of records), markdown, or JSON.
export function rendered(output) {
  if (output && typeof output === "object" && !Array.isArray(output)) {
    if (output.kind === "table" && Array.isArray(output.columns) && Array.isArray(output.rows)) {
      return table(output.columns, output.rows);
    }
    if (output.kind === "markdown" || typeof output.markdown === "string") return markdown(output.markdown);
  }
  if (Array.isArray(output) && output.length && output.every((r) => r && typeof r === "object" && !Array.isArray(r))) {
    const columns = [...new Set(output.flatMap((r) => Object.keys(r)))];
    return table(columns, output.map((r) => columns.map((c) => r[c])));
  }
  if (typeof output === "string") return markdown(output);
  return json(output);
}

export function json(value, limit = 20000) {
  let text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  if (text === undefined) text = "";
  if (text.length > limit) text = `${text.slice(0, limit)}\n… (${text.length - limit} more characters)`;
  return h("pre", { class: "json" }, text);
}

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function since(start, end) {
  if (!start) return null;
  return (end ? Date.parse(end) : Date.now()) - Date.parse(start);
}

export function clock(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : "–";
}
