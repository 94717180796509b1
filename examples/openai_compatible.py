"""An agent on an OpenAI-compatible endpoint, fully offline.

The same code talks to OpenAI, DeepSeek, Ollama, vLLM, LM Studio or any server that speaks
Chat Completions: only the model id (and maybe `base_url`) changes. To stay offline, this example
starts a tiny local server that answers like one (it asks for the weather tool once, then answers),
and fails the very first request with a 503, to show the built-in retry.

Run: `python examples/openai_compatible.py`. Against a real endpoint, drop the fake server and use
e.g. `model_from_id("openai:gpt-4o-mini")` with OPENAI_API_KEY set, or
`model_from_id("ollama:llama3.1")` with Ollama running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from aiohttp import web

from agentrt import ReActAgent, RuntimeContext, Toolkit, tool
from agentrt.model import model_from_id


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    return f"Sunny, 22 C in {city}."


# --------------------------------------------------------------------------------------------------
# a stand-in for the provider: Chat Completions over SSE, the way OpenAI streams it
# --------------------------------------------------------------------------------------------------
def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-local", "object": "chat.completion.chunk", "created": 0, "model": "local"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class FakeProvider:
    def __init__(self) -> None:
        self.requests = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        body = await request.json()
        if self.requests == 1:  # a transient overload: the RetryModel around the adapter retries it
            return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
        last = body["messages"][-1]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if last["role"] == "tool":
            for word in ["The ", "weather ", "tool ", "says: ", last["content"]]:
                await resp.write(_chunk({"content": word}))
            await resp.write(_chunk({}, "stop"))
        else:
            call = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
            await resp.write(_chunk({"role": "assistant", "tool_calls": [call]}))
            for piece in ['{"city": ', '"Paris"}']:
                await resp.write(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            await resp.write(_chunk({}, "tool_calls"))
        usage = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp


async def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="log        %(message)s", stream=sys.stdout)
    provider = FakeProvider()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", provider.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    print(f"fake provider at {base_url}")

    # The one line that differs per provider. model_from_id wraps the adapter in a RetryModel
    # (2 retries, 60 s to the first chunk, 30 s idle between chunks).
    model = model_from_id("openai:gpt-4o-mini", base_url=base_url, api_key="sk-local", temperature=0.2)
    toolkit = Toolkit()
    toolkit.register(get_weather)
    agent = ReActAgent(name="assistant", sys_prompt="You are a helpful assistant.", model=model, toolkit=toolkit)
    try:
        ctx = RuntimeContext(user_id="demo", session_id="weather")
        in_text = False
        async for event in agent.stream_events("What is the weather in Paris?", ctx):
            if event.type == "text_delta":
                print(event.delta if in_text else f"text       {event.delta}", end="", flush=True)
                in_text = True
                continue
            if in_text:
                print()
                in_text = False
            if event.type == "tool_call_started":
                print(f"tool call  {event.name} ({event.tool_call_id})")
            elif event.type == "tool_result":
                print(f"result     {event.result.output}")
            elif event.type == "usage":
                print(f"usage      {event.usage.input_tokens} in / {event.usage.output_tokens} out")
            elif event.type == "run_finished":
                print(f"final      {event.msg.text!r}")
        print(f"requests   {provider.requests} (one 503, retried)")
    finally:
        await model.aclose()
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
