// Drives agentrt's AG-UI endpoint with the real @ag-ui/client HttpAgent (driven by
// tests/integration/test_interop_clients.py):
//   node agui_client.mjs URL API_KEY THREAD_ID
// Three runs on one thread: a tool call ("add"), an approval interrupt ("danger prod"), and the
// resume that approves it. Every event, both as it arrived on the wire and as the client's
// subscribers saw it, is validated with @ag-ui/core's zod schemas. Prints one JSON report.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";

const [url, key, threadId] = process.argv.slice(2);
const invalid = [];
let wire = [];
let reading = Promise.resolve();

function validate(where, event) {
  const parsed = EventSchemas.safeParse(event);
  if (!parsed.success) {
    invalid.push({ where, type: event?.type, issues: parsed.error.issues.slice(0, 5) });
  }
}

async function readSse(stream) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of stream) {
    buffer += decoder.decode(chunk, { stream: true });
    const frames = buffer.split("\n\n");
    buffer = frames.pop();
    for (const frame of frames) {
      const data = frame
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data) wire.push(JSON.parse(data));
    }
  }
}

// A fetch that tees the response: the client parses one branch, we keep the raw events of the other.
async function teeFetch(input, init) {
  const response = await fetch(input, init);
  if (!response.body) return response;
  const [forClient, forUs] = response.body.tee();
  reading = readSse(forUs);
  return new Response(forClient, { status: response.status, headers: response.headers });
}

const agent = new HttpAgent({
  url,
  headers: { Authorization: `Bearer ${key}` },
  threadId,
  fetch: teeFetch,
});

async function run(label, parameters) {
  wire = [];
  const seen = [];
  let outcome = null;
  const subscriber = {
    onEvent({ event }) {
      seen.push(event);
      validate(`${label}/client`, event);
    },
    onRunFinishedEvent(params) {
      outcome = params.outcome;
    },
  };
  let error = null;
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (exc) {
    error = String(exc);
  }
  await reading;
  for (const event of wire) validate(`${label}/wire`, event);
  return { label, wire, seen, outcome, error, pendingInterrupts: agent.pendingInterrupts };
}

const runs = [];
agent.addMessage({ id: "u1", role: "user", content: "add" });
runs.push(await run("tool", { runId: "r1" }));
agent.addMessage({ id: "u2", role: "user", content: "danger prod" });
runs.push(await run("interrupt", { runId: "r2" }));
const answers = Object.fromEntries(
  agent.pendingInterrupts.map((i) => [i.id, { status: "resolved", payload: { confirmed: true } }]),
);
runs.push(await run("resume", { runId: "r3", resume: buildResumeArray(agent.pendingInterrupts, answers) }));

process.stdout.write(JSON.stringify({ runs, messages: agent.messages, invalid }));
