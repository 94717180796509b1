// agentrt web UI: sessions, streaming chat, tool cards with approvals, state inspector.
//
// Everything that comes from the server, the model or a tool is put into the page as text
// (textContent / text nodes via dom.js), never parsed as HTML.

import { ApiError, Client, apiKey } from "./api.js";
import { h, setChildren } from "./dom.js";

const $ = (id) => document.getElementById(id);
const ui = {
  agentSelect: $("agent-select"),
  status: $("status"),
  forgetKey: $("forget-key"),
  newSession: $("new-session"),
  sessionList: $("session-list"),
  sessionsEmpty: $("sessions-empty"),
  currentSession: $("current-session"),
  log: $("log"),
  composer: $("composer"),
  input: $("message-input"),
  send: $("send"),
  interrupt: $("interrupt"),
  hint: $("composer-hint"),
  refreshState: $("refresh-state"),
  inspector: $("state-inspector"),
  keyDialog: $("key-dialog"),
  keyForm: $("key-form"),
  keyInput: $("api-key"),
  keyError: $("key-error"),
};

const client = new Client({ onUnauthorized: () => askForKey("The server rejected the API key. Enter it again.") });

const app = {
  connected: false,
  agents: [],
  agent: "",
  sessionId: "",
  sessions: [],
  /** The run being streamed: {controller, interrupting, finished, timer}. */
  run: null,
  /** Assistant turns by `${reply_id}|${source}`. */
  turns: new Map(),
  /** Every assistant turn on screen, in order. */
  turnList: [],
  /** Tool cards by tool call id. */
  cards: new Map(),
  /** Calls waiting for the user's approval, by id. */
  awaiting: new Map(),
  /** Answers given so far for the calls in `awaiting`, by id. */
  decisions: new Map(),
  /** The last state fetched from GET .../sessions/{id} (normalised), or null. */
  state: null,
  /** Approval answers waiting for the current run's stream to close. */
  queued: null,
  loadToken: 0,
  /** Session ids made here with "New session" and not stored yet (nothing to fetch). */
  fresh: new Set(),
  /** Loads in flight (connecting, a session's history, the refresh after a run). */
  loading: 0,
  /** How the last run of this session ended: "ready", "failed", "interrupted" or "" (none yet). */
  outcome: "",
  /** The last failed request outside a run, shown until the next run or session change. */
  problem: "",
  /** Numbers of the latest session-list and state requests: answers can arrive out of order. */
  latest: { sessions: 0, state: 0 },
};

let uidCounter = 0;
const uid = (prefix) => `${prefix}-${++uidCounter}`;

// ---------------------------------------------------------------------------------------------
// Small helpers

function pretty(value) {
  try {
    return JSON.stringify(value ?? {}, null, 2);
  } catch {
    return String(value);
  }
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function randomId() {
  const bytes = new Uint8Array(4);
  crypto.getRandomValues(bytes);
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  const d = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  return `s-${d.getFullYear()}${pad(d.getMonth() + 1)}${pad(d.getDate())}-${hex}`;
}

function formatTime(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds <= 0) return "";
  const date = new Date(seconds * 1000);
  const today = new Date();
  return date.toDateString() === today.toDateString() ? date.toLocaleTimeString() : date.toLocaleString();
}

function blockText(block) {
  if (!block || typeof block !== "object") return "";
  switch (block.type) {
    case "text":
      return block.text ?? "";
    case "thinking":
      return block.thinking ?? "";
    case "tool_use":
      return JSON.stringify(block.input ?? {});
    case "tool_result":
      return outputText(block.output);
    case "image":
    case "audio":
    case "video":
      return `[${block.type}]`;
    default:
      return "";
  }
}

function outputText(output) {
  if (typeof output === "string") return output;
  if (Array.isArray(output)) return output.map(blockText).join("\n");
  if (output === null || output === undefined) return "";
  return pretty(output);
}

function messageText(msg) {
  return (msg.content || [])
    .filter((b) => b && b.type === "text")
    .map((b) => b.text)
    .join("\n");
}

function describeRule(rule) {
  if (!rule || typeof rule !== "object") return String(rule);
  const decision = rule.decision && rule.decision !== "allow" ? `${rule.decision}: ` : "";
  const args = rule.args && typeof rule.args === "object" ? Object.entries(rule.args) : [];
  const when = args.length ? ` when ${args.map(([k, v]) => `${k} matches ${v}`).join(" and ")}` : " (any arguments)";
  return `${decision}${rule.tool}${when}`;
}

/**
 * The calls a session waits for, from its state's `pending`: {tool_calls: [...]} as the server reports it,
 * or the raw {calls: [...]} of AgentState (where subagent entries hold their own calls in `children`).
 */
function pendingLeaves(pending) {
  let calls = [];
  if (Array.isArray(pending)) calls = pending;
  else if (pending && typeof pending === "object") calls = pending.tool_calls || pending.calls || [];
  if (!Array.isArray(calls)) return [];
  const out = [];
  for (const entry of calls) {
    if (entry && entry.kind === "subagent") out.push(...pendingLeaves(entry.children || []));
    else if (entry) out.push(entry);
  }
  return out;
}

const OUTCOMES = {
  ready: ["Ready", ""],
  failed: ["Run failed", "error"],
  interrupted: ["Interrupted", ""],
};

/**
 * The status line, derived from the state only: handlers change `app` and call render(), so the
 * status never depends on which handler happened to run last.
 */
function currentStatus() {
  if (app.awaiting.size) {
    const left = [...app.awaiting.keys()].filter((id) => !app.decisions.has(id)).length;
    if (left < app.awaiting.size) return [`${plural(left, "more call")} to answer`, "attention"];
    return ["Waiting for your approval", "attention"];
  }
  if (app.run) return app.run.interrupting ? ["Interrupting…", "busy"] : ["Running…", "busy"];
  if (app.problem) return [app.problem, "error"];
  return OUTCOMES[app.outcome] || ["", ""];
}

/** What the UI is doing, for tests and assistive tech: disconnected, loading, running or idle. */
function currentPhase() {
  if (!app.connected) return "disconnected";
  if (app.run) return "running";
  return app.loading > 0 ? "loading" : "idle";
}

/** Record a failed request outside a run and show it. */
function reportProblem(text) {
  app.problem = text;
  render();
}

/** Count a load in flight while `promise` runs (the phase is "loading" meanwhile). */
async function loading(promise) {
  app.loading++;
  render();
  try {
    return await promise;
  } finally {
    app.loading--;
    render();
  }
}

function errorText(err) {
  if (err instanceof ApiError) return `${err.message} (HTTP ${err.status})`;
  if (err && err.name === "TypeError") return `Network error: ${err.message}`;
  return err && err.message ? err.message : String(err);
}

// Keep the log scrolled to the bottom while new content arrives, unless the user scrolled up.
function nearBottom() {
  const log = ui.log;
  return log.scrollHeight - log.scrollTop - log.clientHeight < 120;
}

function follow(fn) {
  const stick = nearBottom();
  const result = fn();
  if (stick) ui.log.scrollTop = ui.log.scrollHeight;
  return result;
}

function notice(text, kind = "info") {
  const el = h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : null }, text);
  follow(() => ui.log.append(el));
  return el;
}

// ---------------------------------------------------------------------------------------------
// Chat: user messages, assistant turns, tool cards

function userBubble(text) {
  const el = h(
    "article",
    { class: "msg user", "aria-label": "You said" },
    h("header", { class: "msg-head" }, h("span", { class: "who" }, "You")),
    h("div", { class: "msg-body text" }, text),
  );
  follow(() => ui.log.append(el));
  return el;
}

const STATE_LABELS = {
  calling: "calling",
  running: "running",
  awaiting: "needs approval",
  approved: "approved",
  denying: "denied by you",
  success: "success",
  error: "error",
  denied: "denied",
  interrupted: "interrupted",
  external: "waiting for external result",
};

class ToolCard {
  constructor(id, name) {
    this.id = id;
    this.name = name;
    this.argsRaw = "";
    this.input = null;
    this.pending = null;
    this.badge = h("span", { class: "badge" });
    this.argsPre = h("pre", { class: "tool-args" });
    this.resultPre = h("pre", { class: "tool-result" });
    this.resultSection = h(
      "div",
      { class: "tool-section result-section", hidden: true },
      h("h4", {}, "Result"),
      this.resultPre,
    );
    this.approval = h("div", { class: "approval", hidden: true });
    this.el = h(
      "section",
      { class: "tool-card", "aria-label": `Tool call ${name}`, dataset: { callId: id } },
      h(
        "header",
        { class: "tool-head" },
        h("span", { class: "tool-icon", "aria-hidden": "true" }, "⚙"),
        h("span", { class: "tool-name" }, name),
        this.badge,
        h("code", { class: "call-id", title: "tool call id" }, id),
      ),
      h("div", { class: "tool-section" }, h("h4", {}, "Arguments"), this.argsPre),
      this.resultSection,
      this.approval,
    );
    this.setState("calling");
  }

  get state() {
    return this.el.dataset.state;
  }

  setState(state) {
    this.el.dataset.state = state;
    this.badge.textContent = STATE_LABELS[state] || state;
  }

  appendArgs(delta) {
    this.argsRaw += delta;
    this.argsPre.textContent = this.argsRaw;
  }

  setInput(input) {
    this.input = input && typeof input === "object" ? input : {};
    this.argsPre.textContent = pretty(this.input);
  }

  setResult(block) {
    this.resultPre.textContent = outputText(block.output);
    this.resultSection.hidden = false;
    this.setState(block.state || "success");
    this.clearApproval();
  }

  clearApproval() {
    this.pending = null;
    this.approval.hidden = true;
    this.approval.replaceChildren();
  }

  /** Show approve / deny / edit controls for a pending call. */
  askApproval(call) {
    this.pending = call;
    this.setState("awaiting");
    const rules = Array.isArray(call.suggested_rules) ? call.suggested_rules : [];
    const group = uid("rule");
    const editId = uid("edit");
    const errorId = uid("edit-error");

    const ruleInputs = [];
    const rulesBox = rules.length
      ? h(
          "fieldset",
          { class: "rules" },
          h("legend", {}, "Always allow"),
          h(
            "label",
            {},
            (ruleInputs[0] = h("input", { type: "radio", name: group, value: "", checked: true })),
            " No, only this call",
          ),
          rules.map((rule, i) =>
            h(
              "label",
              {},
              (ruleInputs[i + 1] = h("input", { type: "radio", name: group, value: String(i) })),
              " ",
              describeRule(rule),
            ),
          ),
        )
      : null;

    const textarea = h("textarea", {
      id: editId,
      class: "edit-args",
      rows: Math.min(12, pretty(call.input).split("\n").length + 1),
      spellcheck: "false",
      "aria-describedby": errorId,
    });
    textarea.value = pretty(call.input);
    const error = h("p", { class: "error", id: errorId, role: "alert" });
    const editBox = h(
      "div",
      { class: "edit", hidden: true, id: uid("edit-box") },
      h("label", { for: editId }, "Arguments (JSON object)"),
      textarea,
      error,
    );
    const approve = h("button", { type: "button", class: "approve" }, "Approve");
    const deny = h("button", { type: "button", class: "deny danger" }, "Deny");
    const edit = h(
      "button",
      { type: "button", class: "edit-toggle secondary", "aria-expanded": "false", "aria-controls": editBox.id },
      "Edit arguments",
    );
    const decision = h("p", { class: "decision muted", role: "status" });

    const editing = () => !editBox.hidden;
    edit.addEventListener("click", () => {
      editBox.hidden = editing();
      edit.setAttribute("aria-expanded", String(editing()));
      edit.textContent = editing() ? "Cancel edit" : "Edit arguments";
      approve.textContent = editing() ? "Approve with edits" : "Approve";
      if (editing()) textarea.focus();
      else {
        textarea.value = pretty(call.input);
        error.textContent = "";
        textarea.removeAttribute("aria-invalid");
      }
    });
    textarea.addEventListener("input", () => {
      error.textContent = "";
      textarea.removeAttribute("aria-invalid");
    });

    approve.addEventListener("click", () => {
      const result = { tool_call_id: call.id, confirmed: true };
      if (editing()) {
        const parsed = parseArguments(textarea.value);
        if (parsed.error) {
          error.textContent = parsed.error;
          textarea.setAttribute("aria-invalid", "true");
          textarea.focus();
          return;
        }
        result.input = parsed.value;
        this.setInput(parsed.value);
      }
      const chosen = ruleInputs.find((r) => r.checked);
      if (chosen && chosen.value !== "") result.rules = [rules[Number(chosen.value)]];
      const label = result.rules ? `Approved; always allowing ${describeRule(result.rules[0])}.` : "Approved.";
      this.decide(result, label, [approve, deny, edit, textarea, ...ruleInputs], decision);
    });
    deny.addEventListener("click", () => {
      this.decide(
        { tool_call_id: call.id, confirmed: false },
        "Denied.",
        [approve, deny, edit, textarea, ...ruleInputs],
        decision,
      );
    });

    setChildren(
      this.approval,
      h("p", { class: "approval-reason" }, call.reason ? `Needs your approval: ${call.reason}` : "Needs your approval."),
      rulesBox,
      editBox,
      h("div", { class: "buttons" }, approve, deny, edit),
      decision,
    );
    this.approval.hidden = false;
    this.controls = [approve, deny, edit, textarea, ...ruleInputs];
  }

  decide(result, label, controls, decisionEl) {
    for (const c of controls) c.disabled = true;
    decisionEl.textContent = label;
    this.setState(result.confirmed ? "approved" : "denying");
    recordDecision(this, result);
  }

  /** Re-enable the controls after a failed submission. */
  reopen(message) {
    if (!this.pending) return;
    for (const c of this.controls || []) c.disabled = false;
    const decisionEl = this.approval.querySelector(".decision");
    if (decisionEl) decisionEl.textContent = message || "";
    this.setState("awaiting");
  }
}

function parseArguments(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { error: `Not valid JSON: ${err.message}` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { error: "The arguments must be a JSON object, like {\"path\": \"/tmp/x\"}." };
  }
  return { value };
}

class Turn {
  constructor(source) {
    this.source = source || app.agent || "assistant";
    this.blocks = new Map();
    this.stepEls = [];
    this.usage = { input: 0, output: 0 };
    this.body = h("div", { class: "msg-body" });
    this.footer = h("footer", { class: "msg-footer muted" });
    this.el = h(
      "article",
      { class: "msg assistant", "aria-label": `${this.source} replied` },
      h("header", { class: "msg-head" }, h("span", { class: "who" }, this.source)),
      this.body,
      this.footer,
    );
    follow(() => ui.log.append(this.el));
    app.turnList.push(this);
  }

  #add(el) {
    this.stepEls.push(el);
    follow(() => this.body.append(el));
    return el;
  }

  startStep() {
    this.stepEls = [];
    this.settleThinking();
  }

  /** The model stream restarted: drop what this step showed so far. */
  restartStep() {
    for (const el of this.stepEls) el.remove();
    for (const [key, block] of this.blocks) {
      if (this.stepEls.includes(block.el)) this.blocks.delete(key);
    }
    for (const [id, card] of app.cards) {
      if (this.stepEls.includes(card.el)) app.cards.delete(id);
    }
    this.stepEls = [];
  }

  text(blockId, delta) {
    let block = this.blocks.get(`t:${blockId}`);
    if (!block) {
      const node = document.createTextNode("");
      block = { el: this.#add(h("div", { class: "text" }, node)), node };
      this.blocks.set(`t:${blockId}`, block);
    }
    follow(() => block.node.appendData(delta));
  }

  thinking(blockId, delta, { streaming = true } = {}) {
    let block = this.blocks.get(`k:${blockId}`);
    if (!block) {
      const node = document.createTextNode("");
      const summary = h("summary", {}, streaming ? "Thinking…" : "Thinking");
      const el = this.#add(h("details", { class: "thinking" }, summary, h("div", { class: "thinking-text" }, node)));
      block = { el, node, summary, streaming };
      this.blocks.set(`k:${blockId}`, block);
    }
    follow(() => block.node.appendData(delta));
  }

  settleThinking() {
    for (const block of this.blocks.values()) {
      if (block.summary && block.streaming) {
        block.summary.textContent = "Thinking";
        block.streaming = false;
      }
    }
  }

  toolCall(id, name) {
    let card = app.cards.get(id);
    if (!card) {
      card = new ToolCard(id, name);
      app.cards.set(id, card);
      this.#add(card.el);
    }
    return card;
  }

  addUsage(usage) {
    if (!usage) return;
    this.usage.input += usage.input_tokens || 0;
    this.usage.output += usage.output_tokens || 0;
    this.renderFooter();
  }

  renderFooter(reason) {
    if (reason !== undefined) this.reason = reason;
    const parts = [];
    const label = REASON_LABELS[this.reason];
    if (label) parts.push(label);
    if (this.usage.input || this.usage.output) parts.push(`${this.usage.input} in · ${this.usage.output} out tokens`);
    this.footer.textContent = parts.join(" · ");
  }

  /** Render a stored block (history, or a reply that arrived without deltas). */
  addBlock(block) {
    switch (block.type) {
      case "text":
        if (block.text) this.text(uid("hist"), block.text);
        break;
      case "thinking":
        this.thinking(uid("hist"), block.thinking || "", { streaming: false });
        break;
      case "tool_use": {
        const card = this.toolCall(block.id, block.name);
        card.setInput(block.input);
        if (card.state === "calling") card.setState("running");
        break;
      }
      case "tool_result":
        cardFor(block.id, block.name).setResult(block);
        break;
      default:
        this.#add(h("p", { class: "muted" }, `[${block.type}]`));
    }
  }
}

const REASON_LABELS = {
  awaiting_confirmation: "Waiting for your approval",
  answered: "Answered",
  awaiting_external_execution: "Waiting for an external tool result",
  interrupted: "Interrupted",
  max_iters: "Stopped at the step limit",
};

function turnKey(ev) {
  return `${ev.reply_id || ""}|${ev.source || ""}`;
}

function turnFor(ev) {
  const key = turnKey(ev);
  let turn = app.turns.get(key);
  if (!turn) {
    turn = new Turn(ev.source);
    app.turns.set(key, turn);
  }
  return turn;
}

/** The card of a call, created in a turn of its own if the call was never shown (e.g. a resumed page). */
function cardFor(id, name, ev) {
  const card = app.cards.get(id);
  if (card) return card;
  const turn = ev ? turnFor(ev) : new Turn(app.agent);
  return turn.toolCall(id, name || "tool");
}

function clearLog() {
  app.turns.clear();
  app.turnList = [];
  app.cards.clear();
  app.awaiting.clear();
  app.decisions.clear();
  ui.log.replaceChildren();
}

// ---------------------------------------------------------------------------------------------
// Events of a streamed run

function onEvent(type, ev) {
  switch (type) {
    case "model_call_started": {
      const turn = app.turns.get(turnKey(ev));
      if (turn) turn.startStep();
      break;
    }
    case "model_restarted": {
      const turn = app.turns.get(turnKey(ev));
      if (turn) turn.restartStep();
      break;
    }
    case "text_delta":
      turnFor(ev).text(ev.block_id, ev.delta || "");
      break;
    case "thinking_delta":
      turnFor(ev).thinking(ev.block_id, ev.delta || "");
      break;
    case "tool_call_started":
      turnFor(ev).toolCall(ev.tool_call_id, ev.name);
      break;
    case "tool_call_delta": {
      const card = app.cards.get(ev.tool_call_id);
      if (card) card.appendArgs(ev.delta || "");
      break;
    }
    case "model_call_finished": {
      const turn = app.turns.get(turnKey(ev));
      if (turn) turn.settleThinking();
      for (const block of (ev.msg && ev.msg.content) || []) {
        if (block.type !== "tool_use") continue;
        const card = app.cards.get(block.id);
        if (!card) continue;
        card.setInput(block.input);
        if (card.state === "calling") card.setState("running");
      }
      break;
    }
    case "tool_result":
      if (ev.result) follow(() => cardFor(ev.result.id, ev.result.name, ev).setResult(ev.result));
      break;
    case "require_user_confirm":
      for (const call of ev.tool_calls || []) {
        const card = cardFor(call.id, call.name, ev);
        card.setInput(call.input);
        follow(() => card.askApproval(call));
        app.awaiting.set(call.id, card);
      }
      render();
      break;
    case "require_external_execution":
      for (const call of ev.tool_calls || []) {
        const card = cardFor(call.id, call.name, ev);
        card.setInput(call.input);
        card.setState("external");
      }
      break;
    case "external_execution_result":
      for (const result of ev.results || []) cardFor(result.id, result.name, ev).setResult(result);
      break;
    case "usage": {
      const turn = app.turns.get(turnKey(ev));
      if (turn) turn.addUsage(ev.usage);
      break;
    }
    case "context_compressed":
      notice(`Context compressed: ${ev.before_tokens} → ${ev.after_tokens} tokens (tier ${ev.tier}).`);
      break;
    case "interrupted":
      notice(ev.message ? `Interrupted: ${ev.message}` : "Interrupted.", "warning");
      break;
    case "run_error":
      notice(`Run failed: ${ev.error_type ? `${ev.error_type}: ` : ""}${ev.error || "unknown error"}`, "error");
      if (app.run) app.run.failed = true;
      break;
    case "run_finished":
      finishTurn(ev);
      break;
    case "run_started":
      // The first run_started of a stream is the run itself; later ones come from subagents.
      if (app.run && !app.run.source) app.run.source = ev.source || "";
      break;
    default:
      break; // event types this UI does not show
  }
}

function finishTurn(ev) {
  const msg = ev.msg || {};
  const reason = (msg.metadata && msg.metadata.generate_reason) || "stop";
  const key = turnKey(ev);
  let turn = app.turns.get(key);
  const ownRun = !app.run || !app.run.source || (ev.source || "") === app.run.source;
  if (!turn && ownRun && Array.isArray(msg.content) && msg.content.some((b) => b.type === "text" && b.text)) {
    // Nothing was streamed (e.g. a server that does not send deltas): show the reply itself.
    turn = turnFor(ev);
    for (const block of msg.content) turn.addBlock(block);
  }
  if (turn) {
    turn.settleThinking();
    turn.renderFooter(reason);
  }
  if (ownRun && app.run) app.run.finished = reason;
}

// ---------------------------------------------------------------------------------------------
// Runs: send a message, answer approvals, interrupt

function recordDecision(card, result) {
  app.decisions.set(card.id, result);
  if ([...app.awaiting.keys()].some((id) => !app.decisions.has(id))) {
    render(); // "N more calls to answer"
    return;
  }
  for (const turn of app.turnList) {
    if (turn.reason === "awaiting_confirmation") turn.renderFooter("answered");
  }
  const results = [...app.awaiting.keys()].map((id) => app.decisions.get(id));
  const cards = [...app.awaiting.values()];
  app.awaiting.clear();
  app.decisions.clear();
  render();
  startRun("confirm", results, cards);
}

async function startRun(kind, payload, cards = []) {
  if (app.run) {
    // Approvals answered before the paused run's stream closed: send them right after it.
    app.queued = { kind, payload, cards, sessionId: app.sessionId };
    return;
  }
  const controller = new AbortController();
  const run = { controller, interrupting: false, finished: null, failed: false, timer: 0, source: "", events: 0 };
  const agent = app.agent;
  const sessionId = app.sessionId;
  app.run = run;
  app.problem = "";
  app.outcome = "";
  render();
  let outcome = null;
  try {
    const options = {
      signal: controller.signal,
      onEvent: (type, ev) => {
        run.events++;
        onEvent(type, ev);
      },
    };
    outcome =
      kind === "message"
        ? await client.sendMessage(agent, sessionId, payload, options)
        : await client.confirm(agent, sessionId, payload, options);
  } catch (err) {
    if (controller.signal.aborted) {
      notice("Stopped listening to this run.", "warning");
    } else {
      notice(errorText(err), "error");
      run.failed = true;
      if (kind === "message" && run.events === 0 && !ui.input.value) ui.input.value = payload; // nothing ran: keep the text
      if (kind === "confirm") {
        // The answers were not accepted: ask again.
        for (const card of cards) {
          app.awaiting.set(card.id, card);
          card.reopen("Sending the answer failed; try again.");
        }
      }
    }
  } finally {
    clearTimeout(run.timer);
    app.run = null;
  }
  const queued = app.queued;
  app.queued = null;
  if (queued && queued.sessionId === app.sessionId) return startRun(queued.kind, queued.payload, queued.cards);
  if (sessionId !== app.sessionId) return render(); // the user moved on to another session
  app.outcome = run.failed ? "failed" : run.finished === "interrupted" ? "interrupted" : outcome ? "ready" : "";
  render();
  if (outcome && outcome.events && !run.finished && !run.failed && !controller.signal.aborted) {
    notice("The connection closed before the run finished; press Refresh to see where it stands.", "warning");
  }
  await loading(
    (async () => {
      if (outcome && outcome.message) {
        // The server answered with JSON instead of a stream: show the stored conversation.
        await openSession(sessionId, { keepStatus: true });
      }
      await refreshSessions();
      await refreshState();
    })(),
  );
}

async function interruptRun() {
  const run = app.run;
  if (!run || run.interrupting) return;
  run.interrupting = true;
  render();
  // A run that has not reached the server's agent yet cannot be interrupted: try a few times.
  for (let attempt = 0; attempt < 4 && app.run === run && !run.finished; attempt++) {
    try {
      const answer = await client.interrupt(app.agent, app.sessionId);
      if (!answer || answer.interrupted !== false) break;
    } catch (err) {
      notice(`Interrupt failed: ${errorText(err)}`, "error");
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  // If the stream does not end by itself, stop reading it (the server interrupts on disconnect too).
  run.timer = setTimeout(() => run.controller.abort(), 5000);
}

/** Bring the composer, the status line and the phase in line with the state. */
function render() {
  const [text, kind] = currentStatus();
  if (ui.status.textContent !== text) ui.status.textContent = text; // unchanged: nothing to announce
  ui.status.dataset.kind = kind;
  document.body.dataset.phase = currentPhase();
  const running = Boolean(app.run);
  const awaiting = app.awaiting.size > 0;
  const ready = app.connected && Boolean(app.agent) && Boolean(app.sessionId);
  ui.send.disabled = !ready || running || awaiting;
  ui.interrupt.hidden = !running;
  ui.interrupt.disabled = running && app.run.interrupting;
  ui.interrupt.textContent = running && app.run.interrupting ? "Interrupting…" : "Interrupt";
  ui.hint.textContent = awaiting
    ? "Answer the pending approval above to continue."
    : running
      ? "The agent is working…"
      : "";
  ui.composer.setAttribute("aria-busy", String(running));
}

// ---------------------------------------------------------------------------------------------
// Sessions

function writeLocation() {
  const params = new URLSearchParams();
  if (app.agent) params.set("agent", app.agent);
  if (app.sessionId) params.set("session", app.sessionId);
  history.replaceState(null, "", `#${params}`);
}

function readLocation() {
  const params = new URLSearchParams(location.hash.slice(1));
  return { agent: params.get("agent") || "", session: params.get("session") || "" };
}

function normaliseSessions(data) {
  const list = Array.isArray(data) ? data : (data && (data.sessions || data.items)) || [];
  return list
    .map((s) => (typeof s === "string" ? { session_id: s } : s))
    .filter((s) => s && typeof s.session_id === "string");
}

async function refreshSessions() {
  if (!app.connected || !app.agent) return;
  const agent = app.agent;
  const seq = ++app.latest.sessions;
  try {
    const data = await client.listSessions(agent);
    if (agent !== app.agent || seq !== app.latest.sessions) return; // a newer list is coming
    app.sessions = normaliseSessions(data);
    for (const s of app.sessions) app.fresh.delete(s.session_id);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) reportProblem(`Could not list sessions: ${errorText(err)}`);
    return;
  }
  renderSessions();
}

function renderSessions() {
  const items = [...app.sessions];
  if (app.sessionId && !items.some((s) => s.session_id === app.sessionId)) {
    items.unshift({ session_id: app.sessionId, unsaved: true });
  }
  ui.sessionsEmpty.hidden = items.length > 0;
  setChildren(
    ui.sessionList,
    items.map((s) => {
      const current = s.session_id === app.sessionId;
      const meta = s.unsaved
        ? "new, not saved yet"
        : [
            typeof s.message_count === "number" ? plural(s.message_count, "message") : "",
            formatTime(s.updated_at),
          ]
            .filter(Boolean)
            .join(" · ");
      const open = h(
        "button",
        {
          type: "button",
          class: "session-open",
          "aria-current": current ? "true" : null,
          onclick: () => selectSession(s.session_id),
        },
        h("span", { class: "session-id" }, s.session_id),
        h("span", { class: "session-meta" }, meta),
      );
      const del = s.unsaved
        ? null
        : h(
            "button",
            {
              type: "button",
              class: "session-delete icon",
              "aria-label": `Delete session ${s.session_id}`,
              title: "Delete session",
            },
            "✕",
          );
      if (del) del.addEventListener("click", () => deleteSession(s.session_id, del));
      return h("li", { class: current ? "session current" : "session" }, open, del);
    }),
  );
}

async function deleteSession(sessionId, button) {
  // Two clicks: the first arms the button, the second deletes.
  if (button.dataset.armed !== "true") {
    button.dataset.armed = "true";
    button.textContent = "Delete?";
    setTimeout(() => {
      if (button.isConnected) {
        button.dataset.armed = "false";
        button.textContent = "✕";
      }
    }, 4000);
    return;
  }
  try {
    await client.deleteSession(app.agent, sessionId);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) {
      reportProblem(`Delete failed: ${errorText(err)}`);
      return;
    }
  }
  if (sessionId === app.sessionId) newSession();
  await refreshSessions();
}

function newSession() {
  const sessionId = randomId();
  app.fresh.add(sessionId);
  selectSession(sessionId);
  ui.input.focus();
}

async function selectSession(sessionId) {
  if (app.run) app.run.controller.abort(); // stop following the old session's run
  app.sessionId = sessionId;
  writeLocation();
  renderSessions();
  await openSession(sessionId);
}

/** Load a session's state and history and render both. */
async function openSession(sessionId, { keepStatus = false } = {}) {
  const token = ++app.loadToken;
  ui.currentSession.textContent = sessionId;
  clearLog();
  app.state = null;
  if (!keepStatus) {
    app.outcome = "";
    app.problem = "";
  }
  render();
  let data = null;
  if (app.connected && !app.fresh.has(sessionId)) {
    try {
      data = await loading(client.getSession(app.agent, sessionId));
    } catch (err) {
      if (token !== app.loadToken) return;
      if (!(err instanceof ApiError && err.status === 404)) app.problem = `Could not load session: ${errorText(err)}`;
    }
  }
  if (token !== app.loadToken) return;
  app.state = data ? normaliseState(data) : null;
  if (app.state) renderHistory(app.state);
  if (app.state && app.state.running === true && !app.run) {
    notice("A run is in progress on this session (started elsewhere). Press Refresh to see its result.", "warning");
  }
  renderInspector();
  render();
}

function normaliseState(data) {
  const inner = data && typeof data.state === "object" && data.state !== null ? data.state : {};
  const s = { ...inner, ...data };
  delete s.state;
  const messages = s.messages || s.history || inner.messages || [];
  return { ...s, messages: Array.isArray(messages) ? messages : [] };
}

function renderHistory(state) {
  let turn = null;
  for (const msg of state.messages) {
    if (!msg || !Array.isArray(msg.content)) continue;
    if (msg.role === "assistant") {
      if (!turn) turn = new Turn(msg.name || app.agent);
      for (const block of msg.content) turn.addBlock(block);
      turn.addUsage(msg.usage);
      turn.renderFooter((msg.metadata && msg.metadata.generate_reason) || "stop");
    } else if (msg.role === "user") {
      for (const block of msg.content) {
        if (block.type === "tool_result") cardFor(block.id, block.name).setResult(block);
      }
      const text = messageText(msg);
      if (text) {
        turn = null;
        userBubble(text);
      }
    } else if (msg.role === "system") {
      const text = messageText(msg);
      if (text) notice(text);
    }
  }
  const pending = pendingLeaves(state.pending);
  const last = app.turnList[app.turnList.length - 1];
  for (const turn of app.turnList) {
    const waiting = pending.length > 0 && turn === last;
    if (!waiting && turn.reason && turn.reason.startsWith("awaiting_")) turn.renderFooter("answered");
  }
  for (const call of pending) {
    const card = cardFor(call.id, call.name);
    card.setInput(call.input);
    if (call.kind === "external") card.setState("external");
    else {
      card.askApproval(call);
      app.awaiting.set(call.id, card);
    }
  }
  ui.log.scrollTop = ui.log.scrollHeight;
}

// ---------------------------------------------------------------------------------------------
// State inspector

async function refreshState() {
  if (!app.connected || !app.agent || !app.sessionId) return;
  if (app.fresh.has(app.sessionId)) await refreshSessions();
  if (app.fresh.has(app.sessionId)) return renderInspector();
  const token = app.loadToken;
  const seq = ++app.latest.state;
  const stale = () => token !== app.loadToken || seq !== app.latest.state; // another session, or a newer state
  try {
    const data = await client.getSession(app.agent, app.sessionId);
    if (stale()) return;
    app.state = normaliseState(data);
  } catch (err) {
    if (stale()) return;
    if (err instanceof ApiError && err.status === 404) app.state = null;
    else {
      reportProblem(`Could not load state: ${errorText(err)}`);
      return;
    }
  }
  renderInspector();
}

function reportedTokens(state) {
  for (const key of ["context_tokens", "context_size", "tokens", "token_count", "prompt_tokens"]) {
    const value = state[key];
    if (typeof value === "number") return value;
    if (value && typeof value === "object" && typeof value.tokens === "number") return value.tokens;
  }
  if (state.context && typeof state.context.tokens === "number") return state.context.tokens;
  return null;
}

function estimateTokens(state) {
  // About four characters per token for English text and JSON: only a rough guide.
  const start = Number.isInteger(state.summary_index) ? state.summary_index : 0;
  let chars = typeof state.summary === "string" ? state.summary.length : 0;
  for (const msg of state.messages.slice(start)) {
    for (const block of msg.content || []) chars += blockText(block).length;
  }
  return Math.ceil(chars / 4);
}

function renderInspector() {
  const state = app.state;
  const rows = [];
  const row = (label, ...value) => rows.push(h("dt", {}, label), h("dd", {}, ...value));
  row("Session", h("code", {}, app.sessionId || "—"));
  if (!state) {
    row("Stored", "not yet (send a message to start the session)");
    setChildren(ui.inspector, rows);
    return;
  }
  const count = state.messages.length || state.message_count || 0;
  row("Messages", h("span", { "data-field": "messages" }, String(count)));
  const reported = reportedTokens(state);
  row(
    "Context size",
    reported !== null
      ? h("span", { "data-field": "context" }, `${reported} tokens`)
      : h("span", { "data-field": "context", title: "estimated from text length" }, `≈ ${estimateTokens(state)} tokens (estimated)`),
  );
  let input = 0;
  let output = 0;
  for (const msg of state.messages) {
    if (msg.usage) {
      input += msg.usage.input_tokens || 0;
      output += msg.usage.output_tokens || 0;
    }
  }
  if (input || output) row("Tokens used", `${input} in · ${output} out`);
  if (typeof state.revision === "number") row("Revision", String(state.revision));
  row(
    "Summary",
    state.summary ? h("p", { class: "summary", "data-field": "summary" }, state.summary) : h("span", { class: "muted" }, "none"),
  );
  const rules = Array.isArray(state.rules) ? state.rules : [];
  row(
    "Accepted rules",
    rules.length
      ? h("ul", { class: "rules-list", "data-field": "rules" }, rules.map((r) => h("li", {}, describeRule(r))))
      : h("span", { class: "muted", "data-field": "rules" }, "none"),
  );
  const pending = pendingLeaves(state.pending);
  row(
    "Pending calls",
    pending.length
      ? h(
          "ul",
          { class: "pending-list", "data-field": "pending" },
          pending.map((c) =>
            h(
              "li",
              {},
              h("code", {}, c.name),
              ` — ${c.kind === "external" ? "waiting for an external result" : "waiting for approval"}`,
              h("pre", {}, pretty(c.input)),
            ),
          ),
        )
      : h("span", { class: "muted", "data-field": "pending" }, "none"),
  );
  setChildren(ui.inspector, rows);
}

// ---------------------------------------------------------------------------------------------
// API key and agents

function askForKey(message = "") {
  app.connected = false;
  apiKey.clear();
  ui.keyError.textContent = message;
  ui.keyInput.value = "";
  if (!ui.keyDialog.open) ui.keyDialog.showModal();
  ui.keyInput.focus();
  render();
}

function normaliseAgents(data) {
  const list = Array.isArray(data) ? data : (data && data.agents) || [];
  return list
    .map((a) => (typeof a === "string" ? { name: a } : a))
    .filter((a) => a && typeof a.name === "string");
}

/** Check the key, then open the agent's session from the URL (or the latest, or a new one). */
function connect(key, options = {}) {
  return loading(connectNow(key, options));
}

async function connectNow(key, { silent = false } = {}) {
  ui.keyError.textContent = "";
  let data;
  try {
    data = await client.listAgents(key);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      askForKey(silent ? "" : "That key was not accepted.");
    } else {
      ui.keyError.textContent = `Could not reach the server: ${errorText(err)}`;
      if (!ui.keyDialog.open) ui.keyDialog.showModal();
    }
    return false;
  }
  apiKey.set(key);
  app.connected = true;
  if (ui.keyDialog.open) ui.keyDialog.close();
  render();
  app.agents = normaliseAgents(data);
  const wanted = readLocation();
  const names = app.agents.map((a) => a.name);
  app.agent = names.includes(wanted.agent) ? wanted.agent : names[0] || "";
  setChildren(
    ui.agentSelect,
    app.agents.map((a) => h("option", { value: a.name, title: a.description || null }, a.name)),
  );
  ui.agentSelect.value = app.agent;
  ui.agentSelect.disabled = app.agents.length < 2;
  if (!app.agent) {
    reportProblem("The server has no agents.");
    return true;
  }
  app.sessionId = wanted.agent === app.agent && wanted.session ? wanted.session : "";
  await refreshSessions();
  if (app.sessionId) await selectSession(app.sessionId);
  else if (app.sessions.length) await selectSession(app.sessions[0].session_id);
  else newSession();
  return true;
}

// ---------------------------------------------------------------------------------------------
// Wiring

ui.keyForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = ui.keyInput.value.trim();
  if (!key) {
    ui.keyError.textContent = "Enter an API key.";
    return;
  }
  ui.keyForm.setAttribute("aria-busy", "true");
  try {
    await connect(key);
  } finally {
    ui.keyForm.removeAttribute("aria-busy");
  }
});
ui.keyDialog.addEventListener("cancel", (event) => {
  if (!app.connected) event.preventDefault(); // nothing works without a key
});

ui.forgetKey.addEventListener("click", () => {
  if (app.run) app.run.controller.abort();
  askForKey("");
});

ui.agentSelect.addEventListener("change", async () => {
  app.agent = ui.agentSelect.value;
  app.sessionId = "";
  app.sessions = [];
  await refreshSessions();
  if (app.sessions.length) await selectSession(app.sessions[0].session_id);
  else newSession();
});

ui.newSession.addEventListener("click", newSession);
ui.refreshState.addEventListener("click", () => {
  // While a run streams here the log is live; otherwise reload history and state together.
  if (app.run || !app.sessionId) refreshState();
  else openSession(app.sessionId);
});
ui.interrupt.addEventListener("click", interruptRun);

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.input.value.trim();
  if (!text || ui.send.disabled) return;
  ui.input.value = "";
  userBubble(text);
  startRun("message", text);
});
ui.input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});

render();
renderInspector();
const stored = apiKey.get();
if (stored) connect(stored, { silent: true });
else askForKey("");
