// The run inspector: threads and runs, the plan as a live DAG, step details, approvals,
// display outputs and the streamed answer. State comes from the REST resources; a thread's
// event stream keeps it live (and replays the thread's stored events when it connects).

import { api, ApiError, follow, setKey } from "./api.js";
import { drawDag } from "./dag.js";
import { clock, duration, h, json, markdown, rendered, since } from "./render.js";

const state = {
  threads: [],
  threadId: null,
  runs: [], // the thread's run resources, oldest first
  runId: null,
  step: null, // the selected step id
  live: {}, // run id -> what its events said (statuses, tool calls, answer, usage)
  stream: null,
  connection: "",
  notice: null,
};
const $ = (selector) => document.querySelector(selector);
const FINAL = new Set(["completed", "failed", "skipped", "cancelled"]);
const approvals = new Map(); // suspension id -> its form (kept across renders: it has inputs)
const forkForms = new Map(); // "<run id>/<step id>" -> its fork form

// -- routing: #/t/<thread>/r/<run> -----------------------------------------------------------
function route() {
  const match = location.hash.match(/^#\/t\/([^/]+)(?:\/r\/([^/]+))?/);
  const threadId = match ? decodeURIComponent(match[1]) : null;
  const runId = match && match[2] ? decodeURIComponent(match[2]) : null;
  if (threadId !== state.threadId) openThread(threadId, runId);
  else if (runId !== state.runId) { state.runId = runId; state.step = null; render(); }
}

function go(threadId, runId = null) {
  location.hash = threadId ? `#/t/${encodeURIComponent(threadId)}${runId ? `/r/${encodeURIComponent(runId)}` : ""}` : "#/";
}

// -- loading ---------------------------------------------------------------------------------
// Runs `work`, showing its error; true when it succeeded. A failed action's error (asking,
// deciding) stays until the next action: background refreshes do not clear it.
async function guarded(work, { action = false } = {}) {
  let ok = true;
  try {
    await work();
    if (action || !state.noticeOfAction) Object.assign(state, { notice: null, noticeOfAction: false });
  } catch (error) {
    ok = false;
    if (error instanceof ApiError && error.status === 401) showKeyForm(error.message);
    else Object.assign(state, { notice: error.message || String(error), noticeOfAction: action });
  }
  render();
  return ok;
}

// The thread list: the newest 100, of the status picked, narrowed by the search text
// (a thread id, a question, or key=value for the thread's metadata).
const loadThreads = () => guarded(async () => {
  const params = new URLSearchParams({ limit: "100" });
  const status = $("#search-status").value;
  if (status) params.set("status", status);
  const text = $("#search-text").value.trim();
  const pair = text.match(/^([^=\s]+)=(.*)$/);
  if (pair) params.set("metadata", JSON.stringify({ [pair[1]]: pair[2] }));
  const threads = (await api(`threads?${params}`)).threads;
  const needle = pair ? "" : text.toLowerCase();
  state.threads = threads.filter((t) => !needle || t.threadId.toLowerCase().includes(needle)
    || (t.lastQuery || "").toLowerCase().includes(needle));
});

async function loadRuns() {
  if (!state.threadId) return;
  const threadId = state.threadId;
  const runs = await api(`threads/${encodeURIComponent(threadId)}/runs`);
  if (threadId !== state.threadId) return;
  state.runs = runs;
  if (!state.runId && runs.length) state.runId = runs[runs.length - 1].runId;
}

// Run resources are fetched again after the events that change them; one fetch at a time
// per run, and one more after it when events came meanwhile, so the last state is read.
const refreshing = new Map(); // run id -> true when another fetch is wanted after this one
function refreshRun(runId) {
  if (refreshing.has(runId)) {
    refreshing.set(runId, true);
    return;
  }
  refreshing.set(runId, false);
  const threadId = state.threadId;
  setTimeout(() => guarded(async () => {
    try {
      const run = await api(`threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}`);
      if (threadId !== state.threadId) return; // the page moved to another thread meanwhile
      // The record is now at least as new as the statuses events told: drop those it has.
      const live = liveOf(runId);
      for (const [id, record] of Object.entries(run.steps || {})) {
        if (FINAL.has(record.status)) delete live.statuses[id];
      }
      const at = state.runs.findIndex((r) => r.runId === runId);
      if (at >= 0) state.runs[at] = run;
      else state.runs.push(run);
    } finally {
      const again = refreshing.get(runId);
      refreshing.delete(runId);
      if (again) refreshRun(runId);
    }
  }), 150);
}

function openThread(threadId, runId) {
  state.stream?.abort();
  Object.assign(state, { threadId, runId, runs: [], step: null, live: {}, stream: null, connection: "" });
  approvals.clear();
  buildMain();
  if (!threadId) return render();
  guarded(loadRuns);
  state.stream = new AbortController();
  follow(`threads/${encodeURIComponent(threadId)}/events`, onEvent, state.stream.signal, (status) => {
    state.connection = status instanceof ApiError ? `stream refused: ${status.message}` : status;
    if (status instanceof ApiError && status.status === 401) showKeyForm(status.message);
    render();
  });
}

// -- events ----------------------------------------------------------------------------------
function liveOf(runId) {
  return (state.live[runId] ||= {
    statuses: Object.create(null), tools: Object.create(null), answer: "", usage: null, cost: 0, status: null, tookMs: 0, startedAt: null,
  });
}

function onEvent(event) {
  const data = event.data || {};
  const live = liveOf(event.runId);
  switch (event.name) {
    case "session:start":
      live.status = "running";
      live.startedAt = Date.parse(event.timestamp);
      if (!state.runs.some((r) => r.runId === event.runId)) guarded(loadRuns);
      break;
    case "plan:created":
    case "plan:updated":
      live.statuses = Object.create(null);
      refreshRun(event.runId);
      break;
    case "step:status":
      live.statuses[data.step_id] = { status: data.status, attempt: data.attempt, reason: data.reason };
      if (data.status !== "in_progress") refreshRun(event.runId);
      break;
    case "tool:update": {
      const calls = (live.tools[data.step_id] ||= Object.create(null));
      const call = (calls[data.call_id] ||= { callId: data.call_id, tool: data.tool, stages: [] });
      if (data.args) call.args = data.args;
      call.stages.push({ stage: data.stage, at: event.timestamp, title: data.title, status: data.status,
        error: data.error, ms: data.duration_ms });
      break;
    }
    case "message:before":
      if (data.phase === "synthesis") live.answer = "";
      break;
    case "buffer:flush":
      if (data.phase === "synthesis") live.answer += (data.chunks || []).join("");
      break;
    case "message:after": {
      const u = data.usage || {};
      const sum = (live.usage ||= { promptTokens: 0, completionTokens: 0, totalTokens: 0 });
      sum.promptTokens += u.prompt_tokens || 0;
      sum.completionTokens += u.completion_tokens || 0;
      sum.totalTokens += u.total_tokens || 0;
      live.cost += data.cost || 0;
      break;
    }
    case "resumed":
      live.statuses[data.step_id] = { status: data.decision?.approved ? "completed" : "failed" };
      refreshRun(event.runId);
      break;
    case "suspended":
      refreshRun(event.runId);
      break;
    case "session:end":
      live.status = data.status;
      live.tookMs = data.duration_ms ?? live.tookMs; // the run's total, earlier parts included
      live.startedAt = null;
      refreshRun(event.runId);
      loadThreads();
      break;
  }
  render();
}

// -- actions ---------------------------------------------------------------------------------
async function ask(threadId, query) {
  return guarded(async () => {
    const run = await api(`threads/${encodeURIComponent(threadId)}/runs`, { method: "POST", body: { query } });
    if (threadId === state.threadId) {
      state.runs.push(run);
      state.runId = run.runId;
    }
    go(threadId, run.runId);
    loadThreads();
  }, { action: true });
}

async function decide(suspension, approved, form, answers = false) {
  const reason = form.querySelector("textarea[name=reason]").value.trim() || null;
  const text = form.querySelector("textarea[name=args]").value.trim();
  let modified = null;
  // An answer to a tool's question is sent as it stands; arguments only when changed.
  if (text && (answers || text !== JSON.stringify(suspension.args, null, 2))) {
    try {
      modified = JSON.parse(text);
    } catch {
      form.querySelector(".form-error").textContent = "The arguments are not valid JSON.";
      return;
    }
  }
  form.querySelectorAll("button").forEach((b) => (b.disabled = true));
  await guarded(async () => {
    const path = `threads/${encodeURIComponent(suspension.threadId)}/suspensions/${encodeURIComponent(suspension.suspensionId)}/decision`;
    await api(path, { method: "POST", body: { approved, reason, modifiedArgs: modified } });
    approvals.delete(suspension.suspensionId);
    refreshRun(suspension.runId);
  }, { action: true });
}

async function cancelRun(run) {
  await guarded(async () => {
    await api(`threads/${encodeURIComponent(run.threadId)}/runs/${encodeURIComponent(run.runId)}/cancel`,
      { method: "POST" });
    refreshRun(run.runId);
  }, { action: true });
}

async function deleteThread(threadId) {
  if (!window.confirm(`Delete thread ${threadId} with all its runs?`)) return;
  await guarded(async () => {
    await api(`threads/${encodeURIComponent(threadId)}`, { method: "DELETE" });
    go(null);
    loadThreads();
  }, { action: true });
}

async function previewPlan(threadId, query, box) {
  await guarded(async () => {
    const body = { query };
    if (threadId) body.threadId = threadId;
    const { plan } = await api("plans", { method: "POST", body });
    fill(box, h("h2", {}, "Plan preview (nothing ran)"), plan.title ? h("p", { class: "plan-title" }, plan.title) : null,
      drawDag(plan, () => "pending", null, () => {}),
      h("ol", { class: "preview-steps" }, plan.steps.map((s) => h("li", { "data-step-id": s.id },
        h("b", {}, `${s.id} · ${s.tool || "reasoning"} `), JSON.stringify(s.args || {})))));
    box.hidden = false;
  }, { action: true });
}

async function forkRun(run, stepId, form) {
  const text = form.querySelector("textarea[name=fork-args]").value.trim();
  let args;
  try {
    args = JSON.parse(text);
  } catch {
    form.querySelector(".form-error").textContent = "The arguments are not valid JSON.";
    return;
  }
  await guarded(async () => {
    const fork = await api(`threads/${encodeURIComponent(run.threadId)}/runs/${encodeURIComponent(run.runId)}/fork`,
      { method: "POST", body: { stepId, args } });
    state.runs.push(fork);
    state.step = null;
    go(run.threadId, fork.runId);
  }, { action: true });
}

function showKeyForm(message) {
  const form = $("#auth");
  form.hidden = false;
  form.querySelector(".auth-message").textContent = `${message}. Enter an API key of this server:`;
}

// -- the page --------------------------------------------------------------------------------
function askForm(threadId) {
  const query = h("textarea", { id: "query", rows: 2, placeholder: "Ask a question…", required: true });
  const thread = threadId ? null : h("input", { id: "thread-id", value: `web-${Math.random().toString(36).slice(2, 8)}`,
    "aria-label": "thread id", title: "thread id: letters, digits and ._:-" });
  const preview = h("section", { id: "preview", class: "card", hidden: true });
  const form = h("form", { class: "ask card", onsubmit: (e) => {
    e.preventDefault();
    if (query.value.trim()) ask(threadId || thread.value.trim(), query.value.trim()).then((ok) => {
      if (ok) query.value = ""; // kept when asking failed, to be sent again
    });
  } },
  h("label", { for: "query" }, threadId ? `Ask on ${threadId}` : "Ask a new question"),
  h("div", { class: "ask-row" }, thread, query,
    h("button", { id: "preview-plan", type: "button", class: "secondary", onclick: () => {
      if (query.value.trim()) previewPlan(threadId, query.value.trim(), preview);
    } }, "Preview plan"),
    h("button", { id: "ask", type: "submit" }, "Ask")));
  return [form, preview];
}

function buildMain() {
  const main = $("#main");
  main.replaceChildren();
  main.dataset.view = state.threadId ? "thread" : "home";
  if (!state.threadId) {
    main.append(...askForm(null), h("section", { class: "card intro" },
      h("h2", {}, "Runs, live"),
      h("p", {}, "Pick a thread on the left, or ask a new question. A run's plan is drawn as a DAG ",
        "whose steps change colour as they run; click a step for its arguments, output, timings, ",
        "attempts and tool stages. Steps waiting for a person are approved or rejected here.")));
    return;
  }
  main.append(
    h("header", { class: "thread-head" }, h("h1", {}, state.threadId), h("span", { id: "connection" }),
      h("button", { id: "delete-thread", type: "button", class: "danger",
        onclick: () => deleteThread(state.threadId) }, "Delete thread"),
      h("nav", { id: "runs", "aria-label": "runs" })),
    ...askForm(state.threadId),
    h("div", { id: "run" }),
  );
}

function render() {
  if (render.pending) return;
  render.pending = requestAnimationFrame(() => {
    render.pending = 0;
    renderThreads();
    $("#notice").textContent = state.notice || "";
    $("#notice").hidden = !state.notice;
    if (state.threadId) renderThread();
  });
}

function renderThreads() {
  $("#threads").replaceChildren(...state.threads.map((t) => h("li", {},
    h("a", { href: `#/t/${encodeURIComponent(t.threadId)}`, class: t.threadId === state.threadId ? "current" : "",
      "data-thread-id": t.threadId },
    h("span", { class: `badge ${t.lastStatus || ""}` }, t.lastStatus || "–"),
    h("strong", {}, t.threadId), h("small", {}, t.lastQuery || "")))));
}

function renderThread() {
  $("#connection").textContent = state.connection === "live" ? "● live" : state.connection;
  $("#runs").replaceChildren(...state.runs.map((run, i) => h("a", {
    href: `#/t/${encodeURIComponent(state.threadId)}/r/${encodeURIComponent(run.runId)}`,
    class: `run-tab ${run.runId === state.runId ? "current" : ""}`, title: run.query,
    "data-run-id": run.runId,
  }, h("span", { class: `badge ${statusOfRun(run)}` }, statusOfRun(run)), ` #${i + 1} ${run.query.slice(0, 40)}`,
  run.forkedFrom ? h("small", { class: "fork-of" },
    ` fork of #${state.runs.findIndex((r) => r.runId === run.forkedFrom.runId) + 1} at ${run.forkedFrom.stepId}`) : null)));
  const run = state.runs.find((r) => r.runId === state.runId);
  const box = $("#run");
  if (!run) {
    delete box.dataset.runId;
    box.replaceChildren(h("p", { class: "empty" }, state.runs.length ? "Pick a run." : "No runs yet."));
    return;
  }
  const live = liveOf(run.runId);
  if (!box.dataset.runId || box.dataset.runId !== run.runId) {
    box.dataset.runId = run.runId;
    box.replaceChildren(
      h("section", { id: "run-head", class: "card" }),
      h("div", { class: "run-grid" },
        h("section", { class: "card" }, h("h2", {}, "Plan"), h("div", { id: "dag" })),
        h("section", { id: "step", class: "card" })),
      h("section", { id: "approvals", class: "card attention" }),
      h("section", { id: "display", class: "card" }),
      h("section", { id: "answer", class: "card" }),
    );
  }
  box.dataset.runStatus = statusOfRun(run);
  renderRunHead(run, live);
  renderDag(run, live);
  renderStep(run, live);
  renderApprovals(run);
  renderDisplay(run);
  renderAnswer(run, live);
}

function statusOfRun(run) {
  const live = state.live[run.runId];
  if (live && live.status === "running") return "running";
  return run.status;
}

// A run's stored record of step `id`, never a property every object has ("toString").
function ownStep(run, id) {
  return run.steps && Object.hasOwn(run.steps, id) ? run.steps[id] : undefined;
}

function stepStatus(run, live, id) {
  return live.statuses[id]?.status || ownStep(run, id)?.status || "pending";
}

function renderRunHead(run, live) {
  const usage = run.usage && run.usage.totalTokens ? run.usage : live.usage || run.usage || {};
  const cost = run.llmCost ?? (live.cost || null);
  const status = statusOfRun(run);
  fill($("#run-head"), 
    h("div", { class: "run-title" }, h("span", { class: `badge big ${status}`, id: "run-status" }, status),
      h("h2", {}, run.query),
      status === "running" || status === "suspended"
        ? h("button", { id: "cancel-run", type: "button", class: "danger", onclick: () => cancelRun(run) }, "Cancel run")
        : null),
    h("dl", { class: "facts" },
      fact("LLM calls", run.llmCalls), fact("tool calls", run.toolCalls),
      fact("tokens", `${usage.totalTokens ?? 0} (${usage.promptTokens ?? 0} in, ${usage.completionTokens ?? 0} out)`),
      fact("cost", cost === null || cost === undefined ? "–" : `$${Number(cost).toFixed(6)}`, "cost"),
      fact("started", clock(run.createdAt)),
      fact("took", duration(live.tookMs + (live.startedAt ? Date.now() - live.startedAt : 0))),
      run.replans ? fact("replans", run.replans) : null),
    run.error ? h("p", { class: "error" }, `${run.error.code}: ${run.error.message}`) : null,
  );
}

function fill(element, ...children) {
  element.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function fact(label, value, id) {
  return h("div", { class: "fact", "data-fact": id || label }, h("dt", {}, label), h("dd", {}, value ?? "–"));
}

function renderDag(run, live) {
  const dag = $("#dag");
  if (!run.plan || !run.plan.steps?.length) {
    dag.replaceChildren(h("p", { class: "empty" }, run.plan ? "The plan has no steps." : "Planning…"));
    return;
  }
  dag.replaceChildren(drawDag(run.plan, (id) => stepStatus(run, live, id), state.step, (id) => {
    state.step = state.step === id ? null : id;
    render();
  }));
  if (run.plan.title) dag.prepend(h("p", { class: "plan-title" }, run.plan.title));
}

function renderStep(run, live) {
  const panel = $("#step");
  const id = state.step;
  const planned = run.plan?.steps?.find((s) => s.id === id);
  if (!planned) {
    panel.replaceChildren(h("h2", {}, "Step"), h("p", { class: "empty" }, "Click a step of the plan."));
    return;
  }
  const record = ownStep(run, id) || {};
  const status = stepStatus(run, live, id);
  const result = record.result || {};
  const calls = Object.values(live.tools[id] || {});
  fill(panel,
    h("h2", {}, `Step ${id}`, h("span", { class: `badge ${status}` }, status)),
    planned.description ? h("p", {}, planned.description) : null,
    h("dl", { class: "facts" }, fact("tool", planned.tool || "reasoning"), fact("attempts", record.attempts ?? 0),
      fact("started", clock(record.startedAt)), fact("ended", clock(record.endedAt)),
      fact("took", record.startedAt ? duration(since(record.startedAt, record.endedAt)) : "–")),
    record.reason ? h("p", { class: "error" }, record.reason) : null,
    h("h3", {}, "Arguments"), json(record.args || planned.args || {}),
    h("h3", {}, "Output"), result.error ? h("p", { class: "error" }, result.error) : null,
    record.result ? json(result.output) : h("p", { class: "empty" }, "No output yet."),
    ["running", "suspended"].includes(statusOfRun(run)) ? null : forkForm(run, id, record.args || planned.args || {}),
    h("h3", {}, "Tool calls by stage"),
    calls.length ? calls.map((call) => h("ol", { class: "stages", "data-call-id": call.callId },
      call.stages.map((s) => h("li", { class: `stage ${s.stage}` }, h("b", {}, s.stage), ` ${clock(s.at)}`,
        s.title ? ` · ${s.title}` : "", s.status ? ` · ${s.status}` : "", s.ms !== undefined ? ` · ${duration(s.ms)}` : "",
        s.error ? ` · ${s.error}` : "")))) : h("p", { class: "empty" }, "No tool calls seen."),
  );
}

// A step's fork form, kept across renders (it has an input).
function forkForm(run, stepId, args) {
  const key = `${run.runId}/${stepId}`;
  if (forkForms.has(key)) return forkForms.get(key);
  const form = h("form", { class: "fork", "data-step-id": stepId, onsubmit: (e) => { e.preventDefault(); forkRun(run, stepId, form); } },
    h("h3", {}, "Fork from this step"),
    h("p", {}, "Runs the plan again from here as a new run: the steps this one cannot change keep their outputs."),
    h("label", {}, "Arguments", h("textarea", { name: "fork-args", rows: 3, class: "code" }, JSON.stringify(args, null, 2))),
    h("p", { class: "form-error" }),
    h("button", { type: "submit", id: "fork" }, "Fork"));
  forkForms.set(key, form);
  return form;
}

function renderApprovals(run) {
  const section = $("#approvals");
  const pending = run.status === "suspended" ? run.suspensions || [] : [];
  for (const id of approvals.keys()) if (!pending.some((s) => s.suspensionId === id)) approvals.delete(id);
  section.hidden = !pending.length;
  if (!pending.length) return section.replaceChildren();
  const forms = pending.map((s) => {
    if (!approvals.has(s.suspensionId)) approvals.set(s.suspensionId, approvalForm(s));
    return approvals.get(s.suspensionId);
  });
  if (forms.some((form, i) => section.children[i + 1] !== form) || section.children.length !== forms.length + 1) {
    section.replaceChildren(h("h2", {}, "Waiting for approval"), ...forms);
  }
}

// The fields an MCP server's elicitation asks for, with the defaults its form gives.
function elicitationDefaults(elicitation) {
  const fields = Object.entries(elicitation.requestedSchema?.properties || {});
  return Object.fromEntries(fields.filter(([, f]) => f && "default" in f).map(([k, f]) => [k, f.default]));
}

function approvalForm(s) {
  const prompt = s.prompt && typeof s.prompt === "object" ? s.prompt : { question: s.prompt };
  // A tool that asked a question mid-call (an MCP elicitation): the box holds the answer.
  const asks = prompt.elicitation && typeof prompt.elicitation === "object" ? prompt.elicitation : null;
  const form = h("form", { class: "approval", "data-suspension-id": s.suspensionId, "data-step-id": s.stepId,
    onsubmit: (e) => e.preventDefault() },
  h("p", { class: "question" }, h("b", {}, `${s.stepId} · ${s.toolName}: `), String(prompt.question ?? "Approve this step?")),
  prompt.options ? h("p", {}, `Options: ${prompt.options.join(", ")}`) : null,
  asks?.url ? h("p", {}, "Open: ", h("a", { href: asks.url, target: "_blank", rel: "noopener" }, asks.url)) : null,
  h("label", {}, "Reason", h("textarea", { name: "reason", rows: 2, placeholder: "Why (given to the agent)" })),
  h("label", {}, asks ? "Answer (the form's fields, as JSON)" : "Arguments (edit to change them)",
    h("textarea", { name: "args", rows: 4, class: "code" },
      JSON.stringify(asks ? elicitationDefaults(asks) : s.args, null, 2))),
  h("p", { class: "form-error" }),
  h("div", { class: "buttons" },
    h("button", { type: "button", class: "approve", "data-action": "approve", onclick: () => decide(s, true, form, !!asks) }, "Approve"),
    h("button", { type: "button", class: "reject", "data-action": "reject", onclick: () => decide(s, false, form, !!asks) }, "Reject")));
  return form;
}

function renderDisplay(run) {
  const section = $("#display");
  const outputs = run.display || [];
  section.hidden = !outputs.length;
  section.replaceChildren(h("h2", {}, "Shown to the user"), ...outputs.map((d) => h("figure", {
    class: "display", "data-step-id": d.stepId,
  }, h("figcaption", {}, d.output?.title || `${d.toolName} (${d.stepId})`), rendered(d.output))));
}

function renderAnswer(run, live) {
  const section = $("#answer");
  const text = run.answer || live.answer;
  const status = statusOfRun(run);
  section.replaceChildren(h("h2", {}, "Answer"), text
    ? h("div", { id: "answer-text", "data-complete": run.answer ? "true" : "false" }, markdown(text))
    : h("p", { class: "empty" }, status === "running" ? "Not written yet…" : status === "suspended"
      ? "The run waits for a decision." : "No answer."));
}

// -- start -----------------------------------------------------------------------------------
$("#auth").addEventListener("submit", (e) => {
  e.preventDefault();
  setKey($("#api-key").value.trim());
  $("#auth").hidden = true;
  const threadId = state.threadId;
  state.threadId = undefined;
  loadThreads();
  openThread(threadId, state.runId);
});
window.addEventListener("hashchange", route);
$("#search").addEventListener("submit", (e) => e.preventDefault());
$("#search-text").addEventListener("input", () => loadThreads());
$("#search-status").addEventListener("change", () => loadThreads());
loadThreads();
setInterval(loadThreads, 5000);
state.threadId = undefined;
route();
