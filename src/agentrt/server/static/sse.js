// Incremental parser for text/event-stream (the WHATWG "server-sent events" wire format).
//
// EventSource cannot send an Authorization header, so the UI reads the stream with fetch() and
// feeds the decoded text here chunk by chunk. Chunks may split anywhere: inside a line, between
// "\r" and "\n", inside a multi-byte character (TextDecoderStream handles that one).

export class SseParser {
  /** @param {(ev: {event: string, data: string, id: string|null}) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.eventType = "";
    this.dataLines = [];
    this.lastEventId = null;
  }

  /** Feed one decoded chunk of the stream. */
  feed(chunk) {
    const buf = this.buffer + chunk;
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      const c = buf.charCodeAt(i);
      if (c !== 10 && c !== 13) continue; // \n, \r
      if (c === 13 && i + 1 === buf.length) break; // "\r" at the end: a "\n" may follow in the next chunk
      const line = buf.slice(start, i);
      if (c === 13 && buf.charCodeAt(i + 1) === 10) i++;
      start = i + 1;
      this.#line(line);
    }
    this.buffer = buf.slice(start);
  }

  /** The stream ended: a pending "\r" ends its line; an event without its blank line is dropped (per spec). */
  end() {
    if (this.buffer.endsWith("\r")) this.#line(this.buffer.slice(0, -1));
    this.buffer = "";
    this.eventType = "";
    this.dataLines = [];
  }

  #line(line) {
    if (line === "") return this.#dispatch();
    if (line.charCodeAt(0) === 58) return; // ":" comment, e.g. a heartbeat
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === "event") this.eventType = value;
    else if (field === "data") this.dataLines.push(value);
    else if (field === "id") {
      if (!value.includes("\0")) this.lastEventId = value;
    }
    // "retry" and unknown fields are ignored: this client never reconnects on its own.
  }

  #dispatch() {
    if (this.dataLines.length === 0) {
      this.eventType = "";
      return;
    }
    const ev = { event: this.eventType || "message", data: this.dataLines.join("\n"), id: this.lastEventId };
    this.eventType = "";
    this.dataLines = [];
    this.onEvent(ev);
  }
}

/**
 * Read an SSE response body to its end, calling onEvent for each event.
 * @param {Response} response
 * @param {(ev: {event: string, data: string, id: string|null}) => void} onEvent
 */
export async function readEventStream(response, onEvent) {
  const parser = new SseParser(onEvent);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(value);
    }
    parser.end();
  } finally {
    reader.releaseLock();
  }
}
