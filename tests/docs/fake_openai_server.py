"""A fake OpenAI-compatible server: Chat Completions without a key, a network or a GPU.

Run it, then point any OpenAI client (or agentrt's "openai:..." models) at it:

    python fake_openai_server.py 8999
    export OPENAI_BASE_URL=http://127.0.0.1:8999/v1 OPENAI_API_KEY=sk-fake

Each user turn, it calls the first tool offered (arguments made up from the tool's JSON Schema),
then answers with a sentence quoting the last tool result or user message. Structured output
(`response_format`) gets a JSON value made up from the schema; a forced `tool_choice` gets that tool.
Streamed (SSE) and whole replies both work. Standard library only.
"""

import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def sample(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A value that fits the JSON Schema (the common keywords)."""
    defs = defs if defs is not None else schema.get("$defs", schema.get("definitions", {}))
    if "$ref" in schema:
        return sample(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum") or schema.get("examples"):
        return (schema.get("enum") or schema["examples"])[0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return sample(options[0], defs)
    kind = schema.get("type", "object")
    kind = next((t for t in kind if t != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: sample(properties[name], defs) for name in schema.get("required", properties)}
    if kind == "array":
        return [sample(schema.get("items", {}), defs) for _ in range(schema.get("minItems", 1))]
    if kind in ("integer", "number"):
        return max(schema.get("minimum", 1), schema.get("exclusiveMinimum", 0) + 1)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    formats = {"date-time": "2025-01-01T12:00:00Z", "date": "2025-01-01", "email": "ann@example.com"}
    return formats.get(schema.get("format", ""), "example".ljust(schema.get("minLength", 0), "!"))


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for a request body: a tool call, JSON, or a sentence."""
    messages, tools = body["messages"], body.get("tools") or []
    choice = body.get("tool_choice", "auto")
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    called = any(m["role"] == "tool" for m in messages[last_user + 1 :])
    if isinstance(choice, dict):
        tools = [t for t in tools if t["function"]["name"] == choice["function"]["name"]]
    wants_json = (body.get("response_format") or {}).get("type") == "json_schema"
    if tools and choice != "none" and (isinstance(choice, dict) or choice == "required" or not (called or wants_json)):
        function = tools[0]["function"]
        arguments = json.dumps(sample(function.get("parameters", {})))
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function"}
        return {"tool_calls": [{**call, "function": {"name": function["name"], "arguments": arguments}}]}
    if wants_json:
        return {"content": json.dumps(sample(body["response_format"]["json_schema"]["schema"]))}
    content = messages[-1].get("content") or ""
    if isinstance(content, list):  # content parts
        content = " ".join(part.get("text", "") for part in content)
    said = "The tool answered" if messages[-1]["role"] == "tool" else "You said"
    return {"content": f"(fake model) {said}: {content[:200]}"}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_json({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model", "owned_by": "fake"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message = {"role": "assistant", **reply(body)}
        finish = "tool_calls" if "tool_calls" in message else "stop"
        words = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
        usage = {"prompt_tokens": words, "completion_tokens": 8, "total_tokens": words + 8}
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body["model"]}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return self.send_json({**head, "object": "chat.completion", "choices": [choice], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunk = {**head, "object": "chat.completion.chunk"}
        if "tool_calls" in message:
            message["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        for delta, reason in ((message, None), ({}, finish)):
            self.send_event({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self.send_event({**chunk, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")

    def send_json(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8999), Handler)
    print(f"OPENAI_BASE_URL=http://127.0.0.1:{server.server_port}/v1", flush=True)
    server.serve_forever()
