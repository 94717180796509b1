// The run timeline (waterfall) of one reply: every model call, tool execution and approval wait as a bar
// on one time axis, from GET .../sessions/{id}/runs/{reply_id}. Plain DOM, text only (dom.js): the
// record holds what models and tools wrote. Bars are positioned in percent of the axis (CSSOM styles,
// allowed by the page's CSP), each on its own row: calls that ran in parallel overlap in time.

import { h, setChildren } from "./dom.js";

const KIND_ORDER = { call: 0, model: 1, tool: 2, approval: 3, external: 4 };
const KIND_LABELS = { call: "request", model: "model", tool: "tool", approval: "approval", external: "external" };
const MARK_GLYPHS = { retry: "↻", fallback: "⇢", compression: "⇲" };

const num = (value) => (typeof value === "number" && Number.isFinite(value) ? value : null);
const str = (value) => (typeof value === "string" ? value : "");

/** A duration for people: 0.4 ms, 12.3 ms, 1.23 s, 2 min 5 s. */
export function formatMs(ms) {
  const value = num(ms);
  if (value === null) return "—";
  if (value < 10) return `${value.toFixed(1)} ms`;
  if (value < 1000) return `${Math.round(value)} ms`;
  if (value < 60_000) return `${(value / 1000).toFixed(value < 10_000 ? 2 : 1)} s`;
  const minutes = Math.floor(value / 60_000);
  return `${minutes} min ${Math.round((value % 60_000) / 1000)} s`;
}

/** A cost in US dollars (fractions of a cent below one cent), or "" when unknown. */
export function formatUsd(value) {
  const cost = num(value);
  if (cost === null) return "";
  if (cost >= 1) return `$${cost.toFixed(2)}`;
  if (cost === 0 || cost >= 0.0001) return `$${cost.toFixed(4)}`;
  return "<$0.0001";
}

/** "120 in · 40 out tokens · $0.0012" for a record's (or a run listing's) totals. */
export function totalsText(totals) {
  const t = totals && typeof totals === "object" ? totals : {};
  const parts = [];
  if (num(t.input_tokens) !== null || num(t.output_tokens) !== null) {
    parts.push(`${t.input_tokens || 0} in · ${t.output_tokens || 0} out tokens`);
  }
  const cost = formatUsd(t.cost_usd);
  if (cost) parts.push(cost);
  return parts.join(" · ");
}

function spanEnd(span, axis) {
  const end = num(span.end_ms);
  return end === null ? axis : end;
}

function spanLabel(span) {
  switch (span.kind) {
    case "call":
      return str(span.status).replaceAll("_", " ") || "call";
    case "model":
      return str(span.served_by) || str(span.model) || "model";
    default:
      return str(span.name) || KIND_LABELS[span.kind] || str(span.kind);
  }
}

function spanState(span) {
  if (span.kind === "approval" || span.kind === "external") {
    if (num(span.end_ms) === null) return "waiting";
    return str(span.decision).startsWith("denied") ? "denied" : "answered";
  }
  if (span.error) return "error";
  return str(span.state) || str(span.status) || "done";
}

function spanSummary(span, axis) {
  const parts = [`${KIND_LABELS[span.kind] || span.kind} ${spanLabel(span)}`];
  const open = num(span.end_ms) === null;
  parts.push(open ? `waiting since ${formatMs(span.start_ms)}` : formatMs(spanEnd(span, axis) - span.start_ms));
  if (span.kind === "model") {
    if (num(span.input_tokens) !== null) parts.push(`${span.input_tokens} in · ${span.output_tokens || 0} out`);
    const cost = formatUsd(span.cost_usd);
    if (cost) parts.push(cost);
    if (span.retries) parts.push(`${span.retries} ${span.retries === 1 ? "retry" : "retries"}`);
    if (span.fallback) parts.push("fallback");
  }
  if (span.decision) parts.push(span.decision);
  if (span.state && span.kind === "tool") parts.push(span.state);
  return parts.join(" · ");
}

function ticks(axis) {
  return [0, 0.25, 0.5, 0.75, 1].map((f) =>
    (() => {
      const tick = h("span", { class: "tl-tick" }, formatMs(axis * f));
      tick.style.left = `${f * 100}%`;
      return tick;
    })(),
  );
}

const MIN_WIDTH = 0.4; // percent of the axis a bar keeps however short it is (a few pixels)

/** Place a bar at its start; one too short to see gets a few pixels, kept inside the axis (a bar at its very end
 * moves left by at most that much). */
function placed(el, start, end, axis) {
  const width = Math.max(MIN_WIDTH, Math.min(100, ((end - start) / axis) * 100));
  const left = Math.max(0, Math.min(100 - width, (start / axis) * 100));
  el.style.left = `${left}%`;
  el.style.width = `${width}%`;
  return el;
}

function markEl(mark, axis) {
  const at = num(mark.at_ms) ?? 0;
  const title = [mark.kind, formatMs(at), str(mark.error) || str(mark.reason) || str(mark.to)]
    .concat(num(mark.before_tokens) !== null ? [`${mark.before_tokens} → ${mark.after_tokens} tokens (tier ${mark.tier})`] : [])
    .filter(Boolean)
    .join(" · ");
  const el = h("span", { class: "tl-mark", dataset: { kind: str(mark.kind) }, title, "aria-label": title }, MARK_GLYPHS[mark.kind] || "•");
  el.style.left = `${Math.max(0, Math.min(100, (at / axis) * 100))}%`;
  return el;
}

/**
 * Draw `record` into `chart` (rows of bars under an axis) with `detail` showing the clicked bar.
 * Returns the number of bars drawn.
 */
export function renderTimeline(chart, detail, record) {
  const spans = (Array.isArray(record.spans) ? record.spans : []).filter(
    (s) => s && typeof s === "object" && num(s.start_ms) !== null && typeof s.kind === "string",
  );
  const marks = (Array.isArray(record.marks) ? record.marks : []).filter((m) => m && num(m.at_ms) !== null);
  const axis = Math.max(
    1,
    num(record.duration_ms) || 0,
    ...spans.map((s) => num(s.end_ms) ?? s.start_ms),
    ...marks.map((m) => m.at_ms),
  );
  const ordered = [...spans].sort(
    (a, b) => a.start_ms - b.start_ms || (KIND_ORDER[a.kind] ?? 9) - (KIND_ORDER[b.kind] ?? 9),
  );
  const tracks = new Map();
  const rows = ordered.map((span) => {
    const open = num(span.end_ms) === null;
    const summary = spanSummary(span, axis);
    const bar = h(
      "button",
      {
        type: "button",
        class: "tl-bar",
        title: summary,
        "aria-label": summary,
        dataset: { kind: span.kind, spanId: str(span.id), state: spanState(span), open: open ? "true" : "false" },
      },
      h("span", { class: "tl-bar-text" }, formatMs(spanEnd(span, axis) - span.start_ms)),
    );
    placed(bar, span.start_ms, spanEnd(span, axis), axis);
    bar.addEventListener("click", () => {
      for (const other of chart.querySelectorAll(".tl-bar[aria-pressed='true']")) other.setAttribute("aria-pressed", "false");
      bar.setAttribute("aria-pressed", "true");
      showDetail(detail, span, record, axis);
    });
    const track = h("div", { class: "tl-track" }, bar);
    tracks.set(span.id, track);
    return h(
      "div",
      { class: "tl-row", role: "listitem", dataset: { kind: span.kind } },
      h("span", { class: "tl-label", title: spanLabel(span) }, h("span", { class: "tl-kind" }, KIND_LABELS[span.kind] || span.kind), " ", spanLabel(span)),
      track,
    );
  });
  const loose = [];
  for (const mark of marks) {
    const track = mark.span ? tracks.get(mark.span) : null;
    if (track) track.append(markEl(mark, axis));
    else loose.push(mark);
  }
  if (loose.length) {
    const track = h("div", { class: "tl-track" }, loose.map((m) => markEl(m, axis)));
    rows.push(h("div", { class: "tl-row marks", role: "listitem" }, h("span", { class: "tl-label" }, h("span", { class: "tl-kind" }, "marks")), track));
  }
  const axisRow = h(
    "div",
    { class: "tl-row tl-axis-row", "aria-hidden": "true" },
    h("span", { class: "tl-label" }),
    h("div", { class: "tl-track tl-axis" }, ticks(axis)),
  );
  setChildren(chart, axisRow, rows);
  setChildren(detail, h("p", { class: "muted" }, "Click a bar to see its details."));
  return spans.length;
}

function fact(label, value) {
  if (value === null || value === undefined || value === "") return [];
  return [h("dt", {}, label), h("dd", {}, value)];
}

function pre(value) {
  let text = value;
  if (typeof value !== "string") {
    try {
      text = JSON.stringify(value ?? null, null, 2);
    } catch {
      text = String(value);
    }
  }
  return h("pre", {}, text);
}

function messageView(msg) {
  if (!msg || typeof msg !== "object") return null;
  if (msg.missing) return h("li", { class: "tl-msg missing" }, h("span", { class: "tl-role" }, str(msg.role) || "?"), " (no longer in the session)");
  const blocks = (Array.isArray(msg.content) ? msg.content : []).map((b) => {
    if (!b || typeof b !== "object") return null;
    switch (b.type) {
      case "text":
        return h("div", { class: "tl-text" }, str(b.text));
      case "thinking":
        return h("div", { class: "tl-text muted" }, `(thinking) ${str(b.thinking)}`);
      case "tool_use":
        return h("div", { class: "tl-text" }, `→ ${str(b.name)} `, h("code", {}, JSON.stringify(b.input ?? {})));
      case "tool_result":
        return h("div", { class: "tl-text" }, `← ${str(b.name)} (${str(b.state)}): ${str(b.output)}`);
      default:
        return h("div", { class: "tl-text muted" }, `[${str(b.type)}]`);
    }
  });
  return h("li", { class: "tl-msg", dataset: { role: str(msg.role) } }, h("span", { class: "tl-role" }, str(msg.role)), blocks);
}

function showDetail(detail, span, record, axis) {
  const end = spanEnd(span, axis);
  const facts = [
    ...fact("Kind", KIND_LABELS[span.kind] || span.kind),
    ...fact("Name", spanLabel(span)),
    ...fact("Start", formatMs(span.start_ms)),
    ...fact("Duration", num(span.end_ms) === null ? `waiting (${formatMs(end - span.start_ms)} so far)` : formatMs(end - span.start_ms)),
    ...fact("Reply", str(span.reply_id)),
    ...fact("Span id", str(span.id)),
  ];
  if (span.kind === "model") {
    facts.push(
      ...fact("Model", str(span.model)),
      ...fact("Served by", span.served_by && span.served_by !== span.model ? str(span.served_by) : ""),
      ...fact("Tokens", num(span.input_tokens) !== null ? `${span.input_tokens} in · ${span.output_tokens || 0} out` : ""),
      ...fact("Cost", formatUsd(span.cost_usd) || "unknown"),
      ...fact("Finish", str(span.finish_reason)),
      ...fact("Retries", span.retries ? String(span.retries) : ""),
      ...fact("Fallback", span.fallback ? "yes" : ""),
    );
  }
  if (span.kind === "tool" || span.kind === "approval" || span.kind === "external") {
    facts.push(...fact("Tool call", str(span.tool_call_id)), ...fact("State", str(span.state)), ...fact("Decision", str(span.decision)));
  }
  if (span.error) facts.push(...fact("Error", `${str(span.error.type)}: ${str(span.error.message)}`));
  const sections = [h("dl", { class: "facts tl-facts" }, facts)];
  if (span.reason) sections.push(h("h4", {}, "Reason"), pre(span.reason));
  if (span.arguments !== undefined) sections.push(h("h4", {}, "Arguments"), pre(span.arguments));
  if (span.result !== undefined) sections.push(h("h4", {}, "Result"), pre(span.result));
  if (span.input) sections.push(h("h4", {}, "Input"), pre(span.input));
  const request = span.request && typeof span.request === "object" ? span.request : null;
  if (request && Array.isArray(request.messages)) {
    const more = num(request.omitted) ? ` (and ${request.omitted} earlier, not shown)` : "";
    sections.push(
      h("h4", {}, `Request: ${request.messages.length} messages${more}`),
      h("ol", { class: "tl-messages", "data-field": "request" }, request.messages.map(messageView)),
    );
    if (Array.isArray(request.tools) && request.tools.length) sections.push(h("p", { class: "muted" }, `Tools offered: ${request.tools.join(", ")}`));
  } else if (request && request.dropped) {
    sections.push(h("p", { class: "muted" }, "The request was dropped to keep the record within its size limit."));
  }
  if (span.response && typeof span.response === "object" && !span.response.dropped) {
    sections.push(h("h4", {}, "Response"), h("ol", { class: "tl-messages", "data-field": "response" }, messageView(span.response)));
  }
  const marks = (Array.isArray(record.marks) ? record.marks : []).filter((m) => m && m.span === span.id);
  if (marks.length) {
    sections.push(
      h("h4", {}, "Marks"),
      h("ul", {}, marks.map((m) => h("li", {}, `${MARK_GLYPHS[m.kind] || ""} ${m.kind} at ${formatMs(m.at_ms)}: ${str(m.error) || str(m.reason) || str(m.to)}`))),
    );
  }
  setChildren(detail, sections);
}
