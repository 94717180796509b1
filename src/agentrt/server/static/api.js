// HTTP client for the agentrt server: bearer auth on every request, JSON errors, SSE runs.

import { readEventStream } from "./sse.js";

const KEY_STORAGE = "agentrt.apiKey";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
  }
}

/**
 * Whether the server needs no key (`agentrt serve --dev`: its responses say `X-Agentrt-Auth: none`).
 * Asked once, on `healthz` (always 200), and only when this tab holds no key yet.
 */
async function serverNeedsNoKey() {
  try {
    if (sessionStorage.getItem(KEY_STORAGE)) return false;
    const response = await fetch(new URL("healthz", document.baseURI), { cache: "no-store" });
    return response.headers.get("x-agentrt-auth") === "none";
  } catch {
    return false;
  }
}
const openServer = await serverNeedsNoKey();
const OPEN_SERVER_KEY = "dev"; // any value: such a server ignores credentials

/**
 * The API key lives in sessionStorage: it survives reloads of this tab, not the tab itself.
 * A server that needs no key gets a placeholder, so the UI connects without asking for one.
 */
export const apiKey = {
  get() {
    try {
      return sessionStorage.getItem(KEY_STORAGE) || (openServer ? OPEN_SERVER_KEY : "");
    } catch {
      return openServer ? OPEN_SERVER_KEY : "";
    }
  },
  set(value) {
    sessionStorage.setItem(KEY_STORAGE, value);
  },
  clear() {
    sessionStorage.removeItem(KEY_STORAGE);
  },
};

// URLs are relative to the page, so the UI also works when the app is mounted under a prefix.
const apiBase = new URL("v1/", document.baseURI);
const seg = (s) => encodeURIComponent(s);

function errorMessage(status, body) {
  if (body && typeof body === "object") {
    const detail = body.detail ?? body.error ?? body.message;
    if (typeof detail === "string") return detail;
    if (detail && typeof detail === "object" && typeof detail.message === "string") return detail.message;
    if (Array.isArray(detail)) {
      return detail.map((d) => (d && typeof d === "object" ? d.msg || JSON.stringify(d) : String(d))).join("; ");
    }
  }
  if (typeof body === "string" && body.trim()) return body.trim().slice(0, 500);
  return `HTTP ${status}`;
}

export class Client {
  /** @param {{onUnauthorized?: (err: ApiError) => void}} hooks */
  constructor(hooks = {}) {
    this.hooks = hooks;
  }

  async request(path, { method = "GET", body, signal, accept = "application/json", key } = {}) {
    const headers = { Accept: accept, Authorization: `Bearer ${key ?? apiKey.get()}` };
    const init = { method, headers, signal, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(new URL(path, apiBase), init);
    if (!response.ok) {
      const text = await response.text().catch(() => "");
      let parsed = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      const err = new ApiError(response.status, errorMessage(response.status, parsed), parsed);
      if (response.status === 401 && this.hooks.onUnauthorized) this.hooks.onUnauthorized(err);
      throw err;
    }
    return response;
  }

  async json(path, options) {
    const response = await this.request(path, options);
    if (response.status === 204) return null;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  listAgents(key) {
    return this.json("agents", { key });
  }

  listSessions(agent) {
    return this.json(`agents/${seg(agent)}/sessions`);
  }

  getSession(agent, sessionId) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}`);
  }

  deleteSession(agent, sessionId) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}`, { method: "DELETE" });
  }

  /** The session's runs (replies), newest first, with their totals: {runs: [...], totals, recording}. */
  listRuns(agent, sessionId) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}/runs`);
  }

  /** The timeline of the run a reply belongs to (by the id of the reply, or of one of its messages). */
  getRun(agent, sessionId, replyId) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}/runs/${seg(replyId)}`);
  }

  /** The questions the session's running call waits for its human to answer (MCP elicitations). */
  listQuestions(agent, sessionId) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}/questions`);
  }

  /** Answer one: {question_id, action: "accept" | "decline" | "cancel", content?}. */
  answer(agent, sessionId, body) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}/answers`, { method: "POST", body });
  }

  /** The caller's knowledge bases: {knowledge_bases: [{name}], default} (404 when the server serves none). */
  listKnowledge() {
    return this.json("knowledge");
  }

  /** One passage of a knowledge base (what a citation's chunk id names). */
  getPassage(kb, chunkId) {
    return this.json(`knowledge/${seg(kb)}/chunks/${seg(chunkId)}`);
  }

  interrupt(agent, sessionId) {
    return this.json(`agents/${seg(agent)}/sessions/${seg(sessionId)}/interrupt`, { method: "POST", body: {} });
  }

  /**
   * POST a run (a message or approval answers) and stream its events.
   * Returns {events: true} after an SSE stream ended, or {message} when the server answered with JSON.
   */
  async run(path, body, { signal, onEvent }) {
    const response = await this.request(path, { method: "POST", body, signal, accept: "text/event-stream" });
    const type = response.headers.get("content-type") || "";
    if (type.includes("text/event-stream")) {
      await readEventStream(response, (ev) => {
        let data;
        try {
          data = JSON.parse(ev.data);
        } catch {
          return; // not an agent event (e.g. a keep-alive payload)
        }
        if (data && typeof data === "object") onEvent(data.type || ev.event, data, ev.id);
      });
      return { events: true };
    }
    const data = await response.json().catch(() => null);
    return { message: data && (data.message || data) };
  }

  sendMessage(agent, sessionId, input, options) {
    return this.run(`agents/${seg(agent)}/sessions/${seg(sessionId)}/messages`, { input, stream: true }, options);
  }

  confirm(agent, sessionId, results, options) {
    return this.run(`agents/${seg(agent)}/sessions/${seg(sessionId)}/confirm`, { results, stream: true }, options);
  }
}
