"""Serve an agent over HTTP and talk to it: JSON, SSE events, an approval, the OpenAI-compatible route.

Offline (a scripted model). Needs the server extra and httpx: pip install 'agentrt[server]' httpx.
Run: .venv/bin/python examples/serve_agent.py
Serve it for real: cd examples && AGENTRT_API_KEYS=sk-demo=alice agentrt serve serve_agent:agent
"""

from __future__ import annotations

import asyncio
import json
import socket

import httpx

from agentrt import Msg, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import create_app
from agentrt.server.app import graceful_server
from agentrt.state import InMemoryStateStore


@tool(destructive=True)
def restart_service(name: str) -> str:
    """Restart a service.

    Args:
        name: The service to restart.
    """
    return f"{name} restarted"


def plan(request: ModelRequest) -> object:
    last: Msg = request.messages[-1]
    if any(isinstance(b, ToolResultBlock) for b in last.content):
        return f"Done: {last.content[0].text}."  # type: ignore[union-attr]
    if "restart" in last.text:
        return ToolUseBlock(id="call-restart", name="restart_service", input={"name": "billing"})
    return f"You said: {last.text}"


agent = ReActAgent(
    "ops",
    "You run operations.",
    model=ScriptedModel.from_function(plan),
    toolkit=Toolkit([restart_service]),
    description="Operations assistant",
)


async def main() -> None:
    app = create_app({"ops": agent}, store=InMemoryStateStore(), api_keys={"sk-demo": "alice"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = graceful_server(app, host="127.0.0.1", port=port, log_level="warning")
    task = asyncio.create_task(server.serve())
    for _ in range(1000):  # up to 10 s for uvicorn to bind
        if server.started:
            break
        await asyncio.sleep(0.01)

    auth = {"Authorization": "Bearer sk-demo"}
    session = f"http://127.0.0.1:{port}/v1/agents/ops/sessions/demo"
    async with httpx.AsyncClient(headers=auth, timeout=30) as http:
        agents = (await http.get(f"http://127.0.0.1:{port}/v1/agents")).json()["agents"]
        print("agents:", [a["name"] for a in agents])

        reply = (await http.post(f"{session}/messages", json={"input": "hello"})).json()["message"]
        print("reply:", reply["content"][0]["text"])

        print("streamed events:")
        body = {"input": "please restart billing", "stream": True}
        async with http.stream("POST", f"{session}/messages", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    print("  ", line[7:])
                elif line.startswith("data: ") and '"require_user_confirm"' in line:
                    call = json.loads(line[6:])["tool_calls"][0]
                    print(f"   -> approval needed: {call['name']}({call['input']})")

        answer = {"results": [{"tool_call_id": "call-restart", "confirmed": True}]}
        reply = (await http.post(f"{session}/confirm", json=answer)).json()["message"]
        print("after approval:", reply["content"][0]["text"])

        completion = await http.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "ops", "messages": [{"role": "user", "content": "status?"}]},
            headers={"X-Session-Id": "demo"},
        )
        print("chat completion:", completion.json()["choices"][0]["message"]["content"])
        history = (await http.get(session)).json()
        print("messages in the session:", history["message_count"])

    server.should_exit = True
    await task


if __name__ == "__main__":
    asyncio.run(main())
