// Drives `art serve`'s /ag-ui with the AG-UI protocol's own client (@ag-ui/client's
// HttpAgent): a question, then the answer to its interrupt. Prints what the client saw
// and kept as one JSON object on stdout. Any event the client rejects fails the run.
//
//   node agui_client.cjs NODE_DIR URL THREAD_ID QUESTION
"use strict";
const { createRequire } = require("node:module");
const path = require("node:path");

const [nodeDir, url, threadId, question] = process.argv.slice(2);
const { HttpAgent, buildResumeArray } = createRequire(path.join(nodeDir, "package.json"))(
  "@ag-ui/client",
);

function recorder(events) {
  return {
    onEvent({ event }) {
      events.push(event);
    },
  };
}

async function main() {
  const agent = new HttpAgent({ url: `${url}/ag-ui`, threadId });
  agent.addMessage({ id: "question", role: "user", content: question });

  const first = [];
  await agent.runAgent({ runId: "agui-first" }, recorder(first));
  const interrupts = structuredClone(agent.pendingInterrupts);
  const stateAtInterrupt = structuredClone(agent.state);
  const responses = Object.fromEntries(
    interrupts.map((interrupt) => [
      interrupt.id,
      { status: "resolved", payload: { approved: true, reason: "fine", modifiedArgs: { note: "ok" } } },
    ]),
  );

  const second = [];
  const { result } = await agent.runAgent(
    { runId: "agui-second", resume: buildResumeArray(interrupts, responses) },
    recorder(second),
  );
  process.stdout.write(
    JSON.stringify({
      first,
      second,
      interrupts,
      stateAtInterrupt,
      state: agent.state,
      messages: agent.messages,
      pendingInterrupts: agent.pendingInterrupts,
      result,
    }),
  );
}

main().catch((error) => {
  process.stderr.write(`${(error && error.stack) || error}\n`);
  process.exit(1);
});
