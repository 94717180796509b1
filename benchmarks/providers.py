"""Client CPU per request of the OpenAI-compatible adapter against raw aiohttp.

A fake Chat Completions server runs in a separate process (the shared benchmark's
`fake_server.py`, pinned to CPU 0 when the machine has two; the client takes CPU 1) with a fixed
latency, so N requests are really in flight at once. For N = 100 / 500 / 1000 concurrent requests,
each variant sends the same first-turn request (system + user message, one tool) and reads the
reply; the table shows client CPU (user + sys) per request, median of several rounds, variants
interleaved so machine drift hits all alike:

  raw aiohttp SSE      one shared ClientSession (TCPConnector(limit=1000)), json.dumps body,
                       `async for line in resp.content` + json.loads per data line
  adapter stream       OpenAIChatModel.stream (Msg formatting, orjson, incremental SSE parser,
                       ChatResponse chunks)
  adapter + retry      the same wrapped in RetryModel (what model_from_id returns: retries,
                       first-chunk and idle timeouts)
  raw aiohttp JSON     non-streaming request, json.loads(await resp.read()) (the harness floor)
  adapter JSON         OpenAIChatModel(stream=False)

It also times the parse path alone (one streamed reply: SSE decode + JSON per chunk) with orjson
and with the standard library, and the body serialisation, to justify orjson.

Run: `.venv/bin/python benchmarks/providers.py [--quick] [--fake-server PATH]`. Prints a table and
writes benchmarks/results/providers.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
import timeit
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from agentrt import _json
from agentrt.message import Msg
from agentrt.model import ChatModel, GenerateOptions, ToolSchema
from agentrt.model.providers._sse import SSEDecoder
from agentrt.model.providers.openai import OpenAIChatModel
from agentrt.model.resilience import RetryModel

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
DEFAULT_SERVER = ROOT.parent / "shared" / "bench" / "fake_server.py"

SYSTEM = "You are a helpful assistant."
PROMPT = "What is the weather in Paris?"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = ToolSchema(name="get_weather", description="Get the current weather for a city.", parameters=PARAMS)
WIRE_TOOLS = [
    {"type": "function", "function": {"name": TOOL.name, "description": TOOL.description, "parameters": PARAMS}}
]
WIRE_MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
MESSAGES = [Msg.system(SYSTEM), Msg.user(PROMPT)]


# --------------------------------------------------------------------------------------------------
# the fake server
# --------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(path: Path, latency_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    if not path.exists():
        sys.exit(f"fake server not found at {path}; pass --fake-server PATH (shared/bench/fake_server.py)")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(path), "--port", str(port), "--latency-ms", str(latency_ms)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(cpus) >= 2:
        first, *rest = sorted(cpus)
        os.sched_setaffinity(proc.pid, {first})
        os.sched_setaffinity(0, set(rest))
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=1):
                return proc, base
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                sys.exit("the fake server did not start")
            time.sleep(0.05)  # noqa: TID251 - before any event loop exists


# --------------------------------------------------------------------------------------------------
# clients
# --------------------------------------------------------------------------------------------------
class Raw:
    """Hand-written aiohttp client: the floor."""

    def __init__(self, base: str) -> None:
        self.url = base + "/chat/completions"
        self.headers = {"Authorization": "Bearer sk-bench", "content-type": "application/json"}
        self.session: aiohttp.ClientSession | None = None

    def open(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                headers=self.headers,
                connector=aiohttp.TCPConnector(limit=1000),
                timeout=aiohttp.ClientTimeout(total=60),
            )
        return self.session

    async def stream(self) -> str:
        body = {
            "model": "gpt-4o",
            "messages": WIRE_MESSAGES,
            "tools": WIRE_TOOLS,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        args: list[str] = []
        async with self.open().post(self.url, data=json.dumps(body)) as r:
            async for line in r.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or ():
                    for call in (choice.get("delta") or {}).get("tool_calls") or ():
                        args.append(call["function"].get("arguments") or "")
        return "".join(args)

    async def json(self) -> str:
        body = {"model": "gpt-4o", "messages": WIRE_MESSAGES, "tools": WIRE_TOOLS}
        async with self.open().post(self.url, data=json.dumps(body)) as r:
            data = await r.read()
        msg = json.loads(data)["choices"][0]["message"]
        return str(msg["tool_calls"][0]["function"]["arguments"])

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


async def consume(model: ChatModel) -> str:
    args: list[str] = []
    async for chunk in model.stream(MESSAGES, [TOOL]):
        for call in chunk.tool_calls:
            args.append(call.arguments)
    return "".join(args)


# --------------------------------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------------------------------
def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def measure(one: Callable[[], Awaitable[str]], n: int) -> dict[str, float]:
    for _ in range(3):  # warm-up: lazy imports, caches
        await one()
    await asyncio.gather(*(one() for _ in range(min(n, 200))))
    gc.collect()
    c0, t0 = _cpu(), time.perf_counter()
    outs = await asyncio.gather(*(one() for _ in range(n)))
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    bad = [o for o in outs if "Paris" not in o]
    if bad:
        raise RuntimeError(f"wrong replies: {bad[:3]!r}")
    return {"cpu_us": cpu / n * 1e6, "wall_s": wall}


async def run_levels(base: str, levels: list[int], rounds: int) -> dict[str, Any]:
    raw = Raw(base)
    bare = OpenAIChatModel("gpt-4o", base_url=base, api_key="sk-bench")
    wrapped = RetryModel(OpenAIChatModel("gpt-4o", base_url=base, api_key="sk-bench"))
    nostream = OpenAIChatModel("gpt-4o", base_url=base, api_key="sk-bench", stream=False)
    variants: dict[str, Callable[[], Awaitable[str]]] = {
        "raw aiohttp SSE": raw.stream,
        "adapter stream": lambda: consume(bare),
        "adapter + retry": lambda: consume(wrapped),
        "raw aiohttp JSON": raw.json,
        "adapter JSON": lambda: consume(nostream),
    }
    out: dict[str, Any] = {}
    try:
        for n in levels:
            samples: dict[str, list[float]] = {name: [] for name in variants}
            walls: dict[str, list[float]] = {name: [] for name in variants}
            names = list(variants)
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    m = await measure(variants[name], n)
                    samples[name].append(m["cpu_us"])
                    walls[name].append(m["wall_s"])
            out[str(n)] = {
                name: {
                    "cpu_us_per_request": statistics.median(samples[name]),
                    "cpu_us_samples": samples[name],
                    "wall_s": statistics.median(walls[name]),
                }
                for name in variants
            }
            print(f"  N={n}: " + ", ".join(f"{k} {v['cpu_us_per_request']:.0f} us" for k, v in out[str(n)].items()))
    finally:
        await raw.aclose()
        for model in (bare, wrapped, nostream):
            await model.aclose()
    return out


def parse_path() -> dict[str, float]:
    """Microseconds to decode one streamed reply (SSE + JSON per chunk) and to serialise one body."""
    from agentrt.model.providers._openai_format import ChatCompletionsFormat, parse_chunk

    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
        *(
            {**base, "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
            for word in ["It", "is", "sunny", "and", "twenty", "two", "degrees", "in", "Paris", "today", "."]
        ),
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}},
    ]
    stream = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    def decode(loads: Callable[[bytes], Any]) -> None:
        for _, payload in SSEDecoder().feed(stream):
            if payload != b"[DONE]":
                parse_chunk(loads(payload))

    fmt = ChatCompletionsFormat()
    number = 20000
    body = fmt.body("gpt-4o", MESSAGES, [TOOL], GenerateOptions(), stream=True, stream_usage=True)
    return {
        "decode_reply_orjson_us": timeit.timeit(lambda: decode(orjson.loads), number=number) / number * 1e6,
        "decode_reply_json_us": timeit.timeit(lambda: decode(json.loads), number=number) / number * 1e6,
        "decode_reply_agentrt_json_loads_us": timeit.timeit(lambda: decode(_json.loads), number=number) / number * 1e6,
        "body_orjson_us": timeit.timeit(lambda: _json.dumps_bytes(body), number=number) / number * 1e6,
        "body_json_us": timeit.timeit(lambda: json.dumps(body).encode(), number=number) / number * 1e6,
        "format_body_cached_us": timeit.timeit(
            lambda: fmt.body("gpt-4o", MESSAGES, [TOOL], GenerateOptions(), stream=True, stream_usage=True),
            number=number,
        )
        / number
        * 1e6,
        "chunks_per_reply": len(chunks),
    }


def table(result: dict[str, Any]) -> str:
    levels = result["levels"]
    names = list(next(iter(levels.values())))
    head = "| variant | " + " | ".join(f"N={n} CPU us/req" for n in levels) + " | vs raw (largest N) |"
    lines = [head, "|---|" + "---:|" * (len(levels) + 1)]
    last = levels[list(levels)[-1]]
    for name in names:
        floor = last["raw aiohttp JSON" if "JSON" in name else "raw aiohttp SSE"]["cpu_us_per_request"]
        cells = [f"{levels[n][name]['cpu_us_per_request']:.0f}" for n in levels]
        ratio = last[name]["cpu_us_per_request"] / floor
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
    p = result["parse_path"]
    lines += [
        "",
        f"parse path, one streamed reply of {p['chunks_per_reply']} chunks (SSE decode + JSON + ChatResponse):",
        f"  orjson {p['decode_reply_orjson_us']:.1f} us | json {p['decode_reply_json_us']:.1f} us | "
        f"agentrt._json.loads {p['decode_reply_agentrt_json_loads_us']:.1f} us",
        f"request body serialisation: orjson {p['body_orjson_us']:.2f} us | json {p['body_json_us']:.2f} us; "
        f"format Msg list -> body (cached messages) {p['format_body_cached_us']:.2f} us",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round, N=100 and 500")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--levels", default="100,500,1000")
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--fake-server", type=Path, default=DEFAULT_SERVER)
    args = ap.parse_args()
    levels = [100, 500] if args.quick else [int(x) for x in args.levels.split(",")]
    rounds = 1 if args.quick else args.rounds
    proc, base = start_server(args.fake_server, args.latency_ms)
    try:
        print(f"fake server {base} (latency {args.latency_ms:g} ms); {rounds} round(s)")
        result: dict[str, Any] = {"levels": asyncio.run(run_levels(base, levels, rounds))}
    finally:
        proc.terminate()
        proc.wait(10)
    result["parse_path"] = parse_path()
    result["meta"] = {
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "orjson": orjson.__version__,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "latency_ms": args.latency_ms,
        "rounds": rounds,
    }
    print()
    print(table(result))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "providers.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
