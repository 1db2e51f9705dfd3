// Talking to `art serve`: JSON calls with the API key, and event streams read over fetch
// (EventSource cannot send an Authorization header), reconnecting with Last-Event-ID.

const base = new URL(".", document.baseURI);
const KEY = "art.apiKey";

export class ApiError extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || "request failed");
    this.problem = problem;
    this.status = problem.status;
  }
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

function headers(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers({ Accept: "application/json" }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(new URL(path, base), init);
  if (response.status === 204) return null;
  const data = await response.json().catch(() => ({ status: response.status, detail: response.statusText }));
  if (!response.ok) throw new ApiError(data);
  return data;
}

// Calls onEvent(event) for every event of the stream at `path`, reconnecting after a drop
// with Last-Event-ID, until `signal` aborts. onStatus("live" | "reconnecting" | error).
export async function follow(path, onEvent, signal, onStatus = () => {}) {
  let lastId = null;
  while (!signal.aborted) {
    try {
      const extra = { Accept: "text/event-stream" };
      if (lastId !== null) extra["Last-Event-ID"] = lastId;
      const response = await fetch(new URL(path, base), { headers: headers(extra), signal });
      if (!response.ok) {
        const problem = await response.json().catch(() => ({ status: response.status }));
        throw new ApiError(problem);
      }
      onStatus("live");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      let event = { id: null, data: [] };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        const lines = buffer.split(/\r\n|\n|\r(?!$)/);
        buffer = lines.pop();
        for (const line of lines) {
          if (line === "") {
            if (event.id !== null) lastId = event.id;
            if (event.data.length) onEvent(JSON.parse(event.data.join("\n")));
            event = { id: null, data: [] };
          } else if (line.startsWith("id:")) event.id = line.slice(3).trim();
          else if (line.startsWith("data:")) event.data.push(line.slice(5).replace(/^ /, ""));
        }
      }
      if (signal.aborted) return;
      onStatus("reconnecting"); // the server closed the stream (a restart): follow again
    } catch (error) {
      if (signal.aborted) return;
      onStatus(error instanceof ApiError ? error : "reconnecting");
      if (error instanceof ApiError && error.status < 500) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}
