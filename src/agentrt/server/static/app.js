// agentrt web UI: sessions, streaming chat, tool cards with approvals, MCP questions, state inspector,
// run timelines (the waterfall of each reply, and the session's runs with their totals).
//
// Everything that comes from the server, the model or a tool is put into the page as text
// (textContent / text nodes via dom.js), never parsed as HTML.

import { ApiError, Client, apiKey } from "./api.js";
import { h, setChildren } from "./dom.js";
import { formatMs, renderTimeline, totalsText } from "./timeline.js";

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
  passageDialog: $("passage-dialog"),
  passageTitle: $("passage-title"),
  passageMeta: $("passage-meta"),
  passageText: $("passage-text"),
  timelineDialog: $("timeline-dialog"),
  timelineTitle: $("timeline-title"),
  timelineSummary: $("timeline-summary"),
  timelineChart: $("timeline-chart"),
  timelineDetail: $("timeline-detail"),
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
  /** Open questions of the running call (MCP elicitations), by question id. */
  questions: new Map(),
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
  latest: { sessions: 0, state: 0, runs: 0 },
  /** The session's runs (GET .../runs), or null before they are loaded (or when the server has none). */
  runs: null,
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
  if (app.questions.size) return ["Waiting for your answer", "attention"];
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
  asking: "waiting for your answer",
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
    this.questions = h("div", { class: "tool-questions" });
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
      this.questions,
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
      ...approvalReason(call.reason),
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

/**
 * The reason line of an approval, and what follows its first line (a plan to approve) as a block,
 * so multi-line text keeps its lines. Text only: the model wrote it.
 */
function approvalReason(reason) {
  if (!reason) return [h("p", { class: "approval-reason" }, "Needs your approval.")];
  const cut = reason.indexOf("\n");
  const head = cut < 0 ? reason : reason.slice(0, cut);
  const rest = cut < 0 ? "" : reason.slice(cut + 1).trim();
  return [
    h("p", { class: "approval-reason" }, `Needs your approval: ${head}`),
    rest ? h("pre", { class: "approval-detail" }, rest) : null,
  ];
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

// ---------------------------------------------------------------------------------------------
// Questions from MCP servers (elicitation): a form to fill, a page to visit, or leave to use the model.
// The server is untrusted: its text goes in as text, its URL is shown with its host and opened only by
// the user's own click (never automatically), and the agent validates the answer before sending it.

const QUESTION_OUTCOMES = {
  expired: "Expired unanswered: the server was told the question was cancelled.",
  interrupted: "Cancelled: the run was interrupted.",
  withdrawn: "Withdrawn: the tool call stopped waiting for it.",
  ended: "Closed: the run ended.",
  gone: "This question is no longer open.",
};
const ACTION_LABELS = { accept: "Accepted.", decline: "Declined.", cancel: "Cancelled." };

/** A URL the user may visit: absolute http(s), a host, no credentials (which can disguise the host); else null. */
function safeUrl(text) {
  let url;
  try {
    url = new URL(String(text));
  } catch {
    return null;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return null;
  if (url.username || url.password || !url.hostname) return null;
  return url;
}

const str = (value) => (typeof value === "string" ? value : "");

/** The choices of a single-choice field: `oneOf` [{const, title}], or `enum` (with legacy `enumNames`). */
function choicesOf(spec) {
  if (Array.isArray(spec.oneOf)) {
    return spec.oneOf
      .filter((o) => o && typeof o.const === "string")
      .map((o) => ({ value: o.const, label: str(o.title) || o.const }));
  }
  if (Array.isArray(spec.anyOf)) {
    return spec.anyOf
      .filter((o) => o && typeof o.const === "string")
      .map((o) => ({ value: o.const, label: str(o.title) || o.const }));
  }
  if (Array.isArray(spec.enum)) {
    const names = Array.isArray(spec.enumNames) ? spec.enumNames : [];
    return spec.enum.map((v, i) => ({ value: String(v), label: str(names[i]) || String(v) }));
  }
  return null;
}

/** One field of a question's form, built from its (flat) JSON Schema property. */
class FormField {
  constructor(name, prop, required) {
    this.name = name;
    this.prop = prop && typeof prop === "object" ? prop : {};
    this.required = required;
    const p = this.prop;
    const id = uid("qf");
    const title = str(p.title) || name;
    const help = str(p.description) ? h("p", { class: "field-help muted", id: `${id}-help` }, p.description) : null;
    this.error = h("p", { class: "error field-error", id: `${id}-error` });
    const described = [help ? `${id}-help` : "", `${id}-error`].filter(Boolean).join(" ");
    const mark = required ? h("span", { class: "required", title: "required" }, " *") : null;
    this.inputs = [];
    let body;
    if (p.type === "boolean") {
      this.kind = "boolean";
      const box = h("input", { type: "checkbox", id, name, "aria-describedby": described });
      box.checked = p.default === true;
      this.inputs.push(box);
      body = h("label", { class: "field-check", for: id }, box, " ", title, mark);
    } else if (p.type === "array") {
      this.kind = "multi";
      const choices = choicesOf(p.items && typeof p.items === "object" ? p.items : {}) || [];
      const chosen = new Set(Array.isArray(p.default) ? p.default.map(String) : []);
      body = h(
        "fieldset",
        { class: "field-choices", "aria-describedby": described },
        h("legend", {}, title, mark),
        choices.map((c) => {
          const box = h("input", { type: "checkbox", name, value: c.value });
          box.checked = chosen.has(c.value);
          this.inputs.push(box);
          return h("label", {}, box, " ", c.label);
        }),
      );
    } else if (choicesOf(p) && p.type === "string") {
      this.kind = "choice";
      const select = h(
        "select",
        { id, name, "aria-describedby": described, "aria-required": required ? "true" : null },
        h("option", { value: "" }, required ? "— choose —" : "— none —"),
        choicesOf(p).map((c) => h("option", { value: c.value }, c.label)),
      );
      if (typeof p.default === "string") select.value = p.default;
      this.inputs.push(select);
      body = [h("label", { for: id }, title, mark), select];
    } else {
      this.kind = p.type === "integer" || p.type === "number" ? p.type : "string";
      const type =
        this.kind !== "string"
          ? "number"
          : { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[p.format] || "text";
      const input = h("input", {
        type,
        id,
        name,
        "aria-describedby": described,
        "aria-required": required ? "true" : null,
        step: this.kind === "integer" ? "1" : this.kind === "number" ? "any" : null,
        min: typeof p.minimum === "number" ? String(p.minimum) : null,
        max: typeof p.maximum === "number" ? String(p.maximum) : null,
        minlength: Number.isInteger(p.minLength) ? String(p.minLength) : null,
        maxlength: Number.isInteger(p.maxLength) ? String(p.maxLength) : null,
        autocomplete: "off",
      });
      if ((typeof p.default === "string" && type !== "datetime-local") || typeof p.default === "number") {
        input.value = String(p.default);
      }
      this.inputs.push(input);
      body = [h("label", { for: id }, title, mark), input];
    }
    this.el = h("div", { class: "field", dataset: { field: name } }, body, help, this.error);
  }

  /** {present, value} or {error}: what the answer carries for this field. */
  read() {
    const [first] = this.inputs;
    switch (this.kind) {
      case "boolean":
        return { present: true, value: first.checked };
      case "multi": {
        const value = this.inputs.filter((b) => b.checked).map((b) => b.value);
        return { present: value.length > 0 || this.required, value };
      }
      case "choice":
        return first.value === "" ? { present: false } : { present: true, value: first.value };
      case "integer":
      case "number":
        if (first.validity && first.validity.badInput) return { error: "not a number" };
        if (first.value === "") return { present: false };
        return { present: true, value: Number(first.value) };
      default: {
        const text = first.value;
        if (text === "") return { present: false };
        if (first.type === "datetime-local") {
          const when = new Date(text);
          if (Number.isNaN(when.getTime())) return { error: "not a valid date and time" };
          return { present: true, value: when.toISOString() }; // RFC 3339, as the spec's date-time wants
        }
        return { present: true, value: text };
      }
    }
  }

  showError(message) {
    this.error.textContent = message || "";
    for (const input of this.inputs) {
      if (message) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
  }
}

/** A question of the running call: the message, a form / a link / nothing, and Accept · Decline · Cancel. */
class QuestionCard {
  constructor(q, sessionId) {
    this.id = q.question_id || q.id;
    this.mode = q.mode === "url" || q.mode === "sampling" ? q.mode : "form";
    this.sessionId = sessionId;
    this.toolCallId = q.tool_call_id || "";
    this.closed = false;
    this.fields = [];
    const server = str(q.server);
    const who = server ? `MCP server ${server}` : str(q.tool) ? `Tool ${q.tool}` : "A tool";
    const title =
      this.mode === "url"
        ? `${who} asks you to visit a page`
        : this.mode === "sampling"
          ? `${who} asks to use the model`
          : `${who} asks you`;
    const until = formatTime(q.expires_at);
    this.status = h("p", { class: "question-status", role: "status" });
    const parts = [h("p", { class: "question-message" }, str(q.message))];
    if (this.mode === "form") parts.push(this.#form(q.requested_schema));
    if (this.mode === "url") parts.push(this.#link(q.url));
    const labels = { form: "Submit", url: "Accept", sampling: "Allow" };
    this.accept = h("button", { type: "button", class: "accept" }, labels[this.mode]);
    this.decline = h("button", { type: "button", class: "decline danger" }, this.mode === "sampling" ? "Deny" : "Decline");
    this.cancel = h("button", { type: "button", class: "cancel secondary" }, "Cancel");
    this.accept.addEventListener("click", () => this.submit("accept"));
    this.decline.addEventListener("click", () => this.submit("decline"));
    this.cancel.addEventListener("click", () => this.submit("cancel"));
    this.el = h(
      "section",
      { class: "question-card", "aria-label": `Question from ${server || str(q.tool) || "a tool"}`, dataset: { questionId: this.id, state: "open", mode: this.mode } },
      h(
        "header",
        { class: "question-head" },
        h("span", { class: "question-icon", "aria-hidden": "true" }, "?"),
        h("span", { class: "question-title" }, title),
        until ? h("span", { class: "question-expiry muted" }, `answer by ${until}`) : null,
      ),
      parts,
      h("div", { class: "buttons" }, this.accept, this.decline, this.cancel),
      this.status,
    );
  }

  #form(schema) {
    const spec = schema && typeof schema === "object" ? schema : {};
    const props = spec.properties && typeof spec.properties === "object" ? spec.properties : {};
    const required = new Set(Array.isArray(spec.required) ? spec.required : []);
    this.fields = Object.entries(props).map(([name, prop]) => new FormField(name, prop, required.has(name)));
    const form = h("form", { class: "question-form", novalidate: true }, this.fields.map((f) => f.el));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit("accept");
    });
    return form;
  }

  #link(text) {
    const url = safeUrl(text);
    if (!url) {
      return h("p", { class: "question-url error" }, "The server sent an address that cannot be shown as a link: ", h("code", {}, str(text)));
    }
    return h(
      "div",
      { class: "question-url" },
      h("p", {}, "Host: ", h("strong", { class: "url-host" }, url.host)),
      h(
        "p",
        {},
        h("a", { href: url.href, target: "_blank", rel: "noopener noreferrer nofollow", referrerpolicy: "no-referrer" }, url.href),
      ),
      h("p", { class: "muted" }, "Open it yourself if you trust it; it is never opened for you."),
    );
  }

  get controls() {
    return [this.accept, this.decline, this.cancel, ...this.fields.flatMap((f) => f.inputs)];
  }

  #collect() {
    const content = {};
    let bad = false;
    for (const field of this.fields) {
      const read = field.read();
      field.showError(read.error || "");
      if (read.error) bad = true;
      else if (read.present) content[field.name] = read.value;
    }
    return bad ? null : content;
  }

  async submit(action) {
    if (this.closed || this.busy) return;
    const body = { question_id: this.id, action };
    if (action === "accept" && this.mode === "form") {
      const content = this.#collect();
      if (!content) {
        this.status.textContent = "Check the highlighted fields.";
        return;
      }
      body.content = content;
    }
    this.busy = true;
    for (const c of this.controls) c.disabled = true;
    this.status.textContent = "Sending…";
    try {
      await client.answer(app.agent, this.sessionId, body);
      this.settle("answered", action);
    } catch (err) {
      this.busy = false;
      if (err instanceof ApiError && err.status === 409 && err.body?.error?.code === "question_not_open") {
        this.settle("gone");
        return;
      }
      for (const c of this.controls) c.disabled = false;
      if (err instanceof ApiError && err.status === 422) {
        const details = Array.isArray(err.body?.error?.details) ? err.body.error.details : [];
        for (const field of this.fields) {
          const mine = details.filter((d) => Array.isArray(d.loc) && d.loc[1] === field.name).map((d) => d.msg);
          field.showError(mine.join("; "));
        }
        const general = details.filter((d) => !Array.isArray(d.loc) || d.loc.length < 2).map((d) => d.msg);
        this.status.textContent = general.length ? general.join("; ") : "Check the highlighted fields.";
        return;
      }
      this.status.textContent = `Sending the answer failed: ${errorText(err)}`;
    }
  }

  /** The question is settled (by this page, another tab, its timeout, an interrupt or the server). */
  settle(reason, action) {
    if (this.closed) return;
    this.closed = true;
    for (const c of this.controls) c.disabled = true;
    this.el.dataset.state = reason === "answered" ? action || "answered" : reason;
    this.status.textContent = reason === "answered" ? ACTION_LABELS[action] || "Answered." : QUESTION_OUTCOMES[reason] || "Closed.";
    app.questions.delete(this.id);
    const card = app.cards.get(this.toolCallId);
    if (card && card.state === "asking" && ![...app.questions.values()].some((q) => q.toolCallId === this.toolCallId)) {
      card.setState("running");
    }
    render();
  }
}

/** Show a question (from an `mcp_elicitation` event, or a session's open questions after a reload). */
function showQuestion(q, ev) {
  const id = q.question_id || q.id;
  if (!id || app.questions.has(id)) return;
  const question = new QuestionCard(q, app.sessionId);
  app.questions.set(id, question);
  if (q.tool_call_id) {
    const card = cardFor(q.tool_call_id, q.tool, ev);
    follow(() => card.questions.append(question.el));
    if (card.state === "calling" || card.state === "running") card.setState("asking");
  } else {
    follow(() => (ev ? turnFor(ev) : new Turn(app.agent)).append(question.el));
  }
  render();
}

class Turn {
  constructor(source) {
    this.source = source || app.agent || "assistant";
    this.blocks = new Map();
    this.stepEls = [];
    // cost: US dollars of the calls with a known price; priced: every call so far had one (else no cost is shown).
    this.usage = { input: 0, output: 0, cost: 0, calls: 0, priced: true };
    this.body = h("div", { class: "msg-body" });
    this.sources = h("nav", { class: "citations", "aria-label": "Sources", hidden: true });
    this.footer = h("footer", { class: "msg-footer muted" });
    /** The reply ids of this turn's calls and the ids of its messages: what finds its run's timeline. */
    this.replyIds = new Set();
    this.messageIds = [];
    this.actions = h("div", { class: "msg-actions" });
    this.el = h(
      "article",
      { class: "msg assistant", "aria-label": `${this.source} replied` },
      h("header", { class: "msg-head" }, h("span", { class: "who" }, this.source)),
      this.body,
      this.sources,
      this.footer,
      this.actions,
    );
    follow(() => ui.log.append(this.el));
    app.turnList.push(this);
  }

  #add(el) {
    this.stepEls.push(el);
    follow(() => this.body.append(el));
    return el;
  }

  /** Add an element of this turn (e.g. a question not tied to a tool call). */
  append(el) {
    return this.#add(el);
  }

  /** Offer this reply's timeline once the reply is complete (or paused) and its run is stored. */
  showTimelineButton() {
    if (this.timelineButton || (!this.replyIds.size && !this.messageIds.length)) return;
    this.timelineButton = h(
      "button",
      { type: "button", class: "timeline-open secondary", "aria-label": `Show the timeline of this reply of ${this.source}` },
      "Timeline",
    );
    this.timelineButton.addEventListener("click", () => openTimeline([...this.replyIds, ...[...this.messageIds].reverse()]));
    this.actions.append(this.timelineButton);
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

  addUsage(usage, cost) {
    if (!usage) return;
    this.usage.input += usage.input_tokens || 0;
    this.usage.output += usage.output_tokens || 0;
    this.usage.calls += 1;
    if (typeof cost === "number" && Number.isFinite(cost)) this.usage.cost += cost;
    else this.usage.priced = false;
    this.renderFooter();
  }

  /** The call's own account of what it spent (a reply's `metadata.usage`: subagents included) wins. */
  setReportedUsage(usage) {
    if (!usage || typeof usage !== "object") return;
    const cost = usage.cost_usd;
    if (typeof cost === "number" && Number.isFinite(cost)) {
      this.usage.cost = cost;
      this.usage.priced = true;
      this.usage.calls = Math.max(this.usage.calls, 1);
    } else if (usage.requests) {
      this.usage.priced = false;
    }
  }

  /** Show the knowledge passages the reply cites (its `metadata.citations`), numbered, under the message. */
  setCitations(citations) {
    const items = citationList(citations);
    if (!items.length) return;
    setChildren(this.sources, h("h4", {}, "Sources"), h("ol", {}, items.map(citationItem)));
    this.sources.hidden = false;
  }

  renderFooter(reason) {
    if (reason !== undefined) this.reason = reason;
    const parts = [];
    const label = REASON_LABELS[this.reason];
    if (label) parts.push(label);
    if (this.usage.input || this.usage.output) parts.push(`${this.usage.input} in · ${this.usage.output} out tokens`);
    if (this.usage.calls && this.usage.priced) parts.push(formatCost(this.usage.cost));
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

/** The well-formed entries of a reply's `metadata.citations` (anything else is ignored). */
function citationList(citations) {
  if (!Array.isArray(citations)) return [];
  return citations.filter(
    (c) => c && typeof c === "object" && typeof c.chunk_id === "string" && typeof c.source === "string",
  );
}

/**
 * One cited passage: "title — location" (a link to the source when it is an http(s) URL, else a link
 * opening the passage view, which fetches the passage by chunk id), then the source and the chunk id. Citations come from documents, which anyone may have written: text only.
 */
function citationItem(c) {
  const title = str(c.title) || c.source;
  const label = str(c.location) ? `${title} — ${c.location}` : title;
  const url = safeUrl(c.source);
  const head = url
    ? h("a", { class: "citation-link", href: url.href, target: "_blank", rel: "noopener noreferrer" }, label)
    : h(
        "a",
        {
          class: "citation-link citation-passage",
          href: `#passage-${encodeURIComponent(c.chunk_id)}`,
          onclick: (event) => {
            event.preventDefault();
            showPassage(c, label);
          },
        },
        label,
      );
  return h(
    "li",
    { class: "citation", dataset: { chunkId: c.chunk_id } },
    head,
    " ",
    h("span", { class: "citation-source muted" }, c.source),
    " ",
    h("code", { class: "citation-id", title: "chunk id" }, c.chunk_id),
  );
}

/** The passage a citation names, fetched from the caller's knowledge bases (the default one first). */
async function fetchPassage(chunkId) {
  const listing = await client.listKnowledge();
  const names = (listing && Array.isArray(listing.knowledge_bases) ? listing.knowledge_bases : [])
    .map((kb) => str(kb && kb.name))
    .filter(Boolean);
  const first = str(listing && listing.default);
  const order = first ? [first, ...names.filter((n) => n !== first)] : names;
  for (const kb of order) {
    try {
      return await client.getPassage(kb, chunkId);
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 404) throw err;
    }
  }
  return null;
}

/** Show a cited passage in a dialog, as text: documents are untrusted. */
async function showPassage(c, label) {
  ui.passageTitle.textContent = label;
  ui.passageMeta.textContent = c.source;
  ui.passageText.textContent = "Loading…";
  if (!ui.passageDialog.open) ui.passageDialog.showModal();
  let passage = null;
  let problem = "";
  try {
    passage = await fetchPassage(c.chunk_id);
  } catch (err) {
    problem = err instanceof ApiError && err.status === 404 ? "" : String(err.message || err);
  }
  if (passage && typeof passage.text === "string") {
    const where = [str(passage.source), str(passage.location)].filter(Boolean).join(" — ");
    ui.passageMeta.textContent = str(passage.kb) ? `${where} (knowledge base ${passage.kb})` : where;
    ui.passageText.textContent = passage.text;
  } else {
    ui.passageText.textContent =
      problem || "This passage is not available: it was deleted, or this server does not serve knowledge bases.";
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
    if (ev.reply_id) turn.replyIds.add(ev.reply_id);
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
  app.questions.clear();
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
    case "mcp_elicitation":
      if (ev.question_id) showQuestion(ev, ev);
      else if (ev.tool_call_id && app.cards.has(ev.tool_call_id)) {
        // Asked and answered by the application's own handler: say so, there is nothing to answer here.
        const who = ev.server ? `MCP server ${ev.server}` : "The tool";
        follow(() => app.cards.get(ev.tool_call_id).questions.append(h("p", { class: "muted" }, `${who} asked: ${ev.message || ""}`)));
      }
      break;
    case "mcp_elicitation_closed": {
      const question = app.questions.get(ev.question_id);
      if (question) question.settle(ev.reason || "answered", ev.action);
      break;
    }
    case "external_execution_result":
      for (const result of ev.results || []) cardFor(result.id, result.name, ev).setResult(result);
      break;
    case "usage": {
      const turn = app.turns.get(turnKey(ev));
      if (turn) turn.addUsage(ev.usage, ev.cost_usd);
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

/** A cost in US dollars for a footer: cents from a dollar up, fractions of a cent below. */
function formatCost(value) {
  if (value >= 1) return `$${value.toFixed(2)}`;
  if (value === 0 || value >= 0.0001) return `$${value.toFixed(4)}`;
  return "<$0.0001";
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
    turn.setCitations(msg.metadata && msg.metadata.citations);
    turn.setReportedUsage(msg.metadata && msg.metadata.usage);
    turn.renderFooter(reason);
    if (ownRun) turn.showTimelineButton();
  }
  if (ownRun && app.run) app.run.finished = reason;
  if (ownRun) for (const question of [...app.questions.values()]) question.settle("ended"); // none outlives its run
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
  ui.hint.textContent = app.questions.size
    ? "Answer the question above: the run waits for it."
    : awaiting
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
  app.runs = null;
  if (app.state) refreshRuns().then(() => token === app.loadToken && renderInspector());
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
      if (typeof msg.id === "string" && msg.id) turn.messageIds.push(msg.id);
      for (const block of msg.content) turn.addBlock(block);
      turn.addUsage(msg.usage);
      turn.setReportedUsage(msg.metadata && msg.metadata.usage);
      turn.setCitations(msg.metadata && msg.metadata.citations);
      turn.renderFooter((msg.metadata && msg.metadata.generate_reason) || "stop");
      turn.showTimelineButton();
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
  if (last && state.pending && typeof state.pending.reply_id === "string" && state.pending.reply_id) {
    last.replyIds.add(state.pending.reply_id); // the paused call: its run is stored under its reply id
  }
  for (const turn of app.turnList) {
    const waiting = pending.length > 0 && turn === last;
    if (!waiting && turn.reason && turn.reason.startsWith("awaiting_")) turn.renderFooter("answered");
  }
  for (const q of Array.isArray(state.questions) ? state.questions : []) {
    if (q && typeof q === "object") showQuestion(q);
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
// Run timelines

/** Open the timeline of the run one of `ids` (reply or message ids, best first) belongs to. */
async function openTimeline(ids) {
  const agent = app.agent;
  const sessionId = app.sessionId;
  ui.timelineTitle.textContent = "Timeline";
  ui.timelineSummary.textContent = "Loading…";
  ui.timelineChart.replaceChildren();
  ui.timelineDetail.replaceChildren();
  document.body.dataset.timeline = "loading";
  if (!ui.timelineDialog.open) ui.timelineDialog.showModal();
  let record = null;
  let problem = "";
  for (const id of [...new Set(ids)].filter(Boolean)) {
    try {
      record = await client.getRun(agent, sessionId, id);
      break;
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) {
        problem = errorText(err);
        break;
      }
    }
  }
  if (!record) {
    ui.timelineSummary.textContent = problem || "No timeline was recorded for this reply (or it has expired).";
    document.body.dataset.timeline = "missing";
    return;
  }
  const bars = renderTimeline(ui.timelineChart, ui.timelineDetail, record);
  const call = (Array.isArray(record.spans) ? record.spans : []).find((span) => span && span.kind === "call");
  const asked = call && typeof call.input === "string" ? call.input.trim() : "";
  ui.timelineTitle.textContent = asked ? `Timeline: “${asked.length > 60 ? `${asked.slice(0, 60)}…` : asked}”` : "Timeline";
  const totals = record.totals || {};
  ui.timelineSummary.textContent = [
    `${formatTime(record.started_at)}`,
    `${formatMs(record.duration_ms)} in total`,
    `${plural(totals.model_calls || 0, "model call")}, ${plural(totals.tool_calls || 0, "tool call")}`,
    totals.wait_ms ? `${formatMs(totals.wait_ms)} waiting for you` : "",
    totalsText(totals),
    record.status || "",
    record.truncated ? "some details were cut to keep the record small" : "",
  ]
    .filter(Boolean)
    .join(" · ");
  ui.timelineDialog.dataset.bars = String(bars);
  document.body.dataset.timeline = "shown";
}

/** Load the session's runs (for the inspector's list); null when the server keeps none. */
async function refreshRuns() {
  if (!app.connected || !app.agent || !app.sessionId || app.fresh.has(app.sessionId)) {
    app.runs = null;
    return;
  }
  const seq = ++app.latest.runs;
  const sessionId = app.sessionId;
  try {
    const data = await client.listRuns(app.agent, sessionId);
    if (seq !== app.latest.runs || sessionId !== app.sessionId) return;
    app.runs = data && Array.isArray(data.runs) ? data : null;
  } catch {
    if (seq === app.latest.runs) app.runs = null; // an older server, or the session is gone
  }
}

function runsView() {
  const data = app.runs;
  if (!data || !data.runs.length) {
    return h("span", { class: "muted", "data-field": "runs" }, data && !data.recording ? "not recorded" : "none yet");
  }
  const t = data.totals || {};
  const total = [plural(t.runs || data.runs.length, "run"), `${formatMs(t.duration_ms)} in total`, totalsText(t)].filter(Boolean).join(" · ");
  return h(
    "div",
    { "data-field": "runs" },
    h("p", { class: "run-totals muted" }, total),
    h(
      "ul",
      { class: "runs-list" },
      data.runs.map((run) =>
        h(
          "li",
          {},
          h(
            "button",
            { type: "button", class: "run-open", dataset: { replyId: run.reply_id }, onclick: () => openTimeline([run.reply_id]) },
            h("span", { class: "run-title" }, run.title || run.reply_id),
            h(
              "span",
              { class: "run-meta" },
              [formatTime(run.started_at), formatMs(run.duration_ms), totalsText(run.totals), run.status].filter(Boolean).join(" · "),
            ),
          ),
        ),
      ),
    ),
  );
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
    const [data] = await Promise.all([client.getSession(app.agent, app.sessionId), refreshRuns()]);
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
  row("Runs", runsView());
  const questions = Array.isArray(state.questions) ? state.questions : [];
  if (questions.length) {
    row(
      "Open questions",
      h(
        "ul",
        { class: "pending-list", "data-field": "questions" },
        questions.map((q) => h("li", {}, h("code", {}, q.server || q.tool || "tool"), ` — ${q.message || ""}`)),
      ),
    );
  }
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
