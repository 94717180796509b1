"""`agentrt serve` tunes the cyclic GC for thousands of concurrent runs, unless the application did.

Checked in a fresh interpreter (the thresholds and the frozen generation are process-wide): a real
uvicorn server is started on a free port, and its process reports the thresholds it runs with.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from agentrt.server._serve import SERVER_GC_THRESHOLD

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from agentrt import ReActAgent
    from agentrt.model import ScriptedModel
    from agentrt.server import create_app
    from agentrt.server._serve import graceful_server
    from agentrt.state import InMemoryStateStore

    if sys.argv[1] != "default":
        gc.set_threshold(*map(int, sys.argv[1].split(",")))
    agent = ReActAgent("a", model=ScriptedModel(["hi"]))
    app = create_app({"a": agent}, store=InMemoryStateStore(), api_keys={"k": "u"}, facades=())
    server = graceful_server(app, host="127.0.0.1", port=0, log_level="warning")

    async def main():
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
        server.should_exit = True
        await task

    asyncio.run(main())
    """
)


def served_gc(setting: str) -> dict[str, object]:
    import json

    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, setting], capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("setting", "expected"), [("default", list(SERVER_GC_THRESHOLD)), ("5000,15,15", [5000, 15, 15])]
)
def test_serving_tunes_the_gc_unless_the_application_did(setting: str, expected: list[int]) -> None:
    seen = served_gc(setting)
    assert seen["threshold"] == expected
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000  # modules and agents frozen at startup
