"""`agentrt serve` runs on the event loop uvicorn's config names: uvloop when it is installed.

`run_server` once served with ``asyncio.run(server.serve())``, which always builds the default
loop, so the uvloop that ``uvicorn[standard]`` installs was never used. Checked in a fresh
interpreter: the server reports the class of the loop it runs on from its `started` callback.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal
    from agentrt import ReActAgent
    from agentrt.model import ScriptedModel
    from agentrt.server import create_app
    from agentrt.server._serve import run_server
    from agentrt.state import InMemoryStateStore

    app = create_app({"a": ReActAgent("a", model=ScriptedModel(["hi"]))}, store=InMemoryStateStore(),
                     api_keys={"k": "u"}, facades=())

    def started(host, port):
        loop = type(asyncio.get_running_loop())
        print("LOOP", loop.__module__, loop.__name__, flush=True)
        os.kill(os.getpid(), signal.SIGINT)

    run_server(app, host="127.0.0.1", port=0, log_level="warning", access_log=False, started=started)
    """
)


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed")
def test_serve_runs_on_uvloop_when_installed() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    # uvicorn re-raises the SIGINT it caught once it has shut down: the exit status is the signal's.
    loop_line = next((line for line in done.stdout.splitlines() if line.startswith("LOOP ")), done.stderr)
    assert loop_line.split()[1].startswith("uvloop"), loop_line
