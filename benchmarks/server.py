"""The HTTP server under load: N concurrent SSE sessions against a real uvicorn process.

Two floors answer the same request with the same SSE events on the same uvicorn (uvloop and
httptools, as ``agentrt serve`` runs it), with no agent and no store: "floor" from a bare Starlette
endpoint (a StreamingResponse), "floor-asgi" from a raw ASGI callable (what uvicorn alone costs).

The server (a separate process started by this script) serves one agent whose scripted model
answers after 200 ms (streamed word by word), with the in-memory store by default. The client opens
N SSE streams at once (``POST .../messages`` with ``stream: true``, one session each) and measures,
per request, the time to the first SSE event (``run_started``, before the model is called), the
time to the first text delta (after the model's latency) and the time to ``run_finished``. The
default client writes the request on a raw socket and looks for the event markers in the bytes it
receives: it shares the two cores with the server, and aiohttp's client (``--client aiohttp``)
spends more CPU per request than the server does, which would show up as server latency. Server
CPU (user + system) comes from ``resource.getrusage`` in the server process through a stats route
that only the benchmark mode of this script mounts.

Prints a table and writes benchmarks/results/server.json.
Run: `.venv/bin/python benchmarks/server.py [--sessions 1000] [--latency 0.2] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
KEY = "bench-key"
ANSWER = "The answer to your question is forty-two, as always."


# -- server mode -------------------------------------------------------------------------------------------------
REDIS_PREFIX = "agentrt-server-bench"


def _store(url: str) -> Any:
    from agentrt.state import InMemoryStateStore, store_from_url

    if url == "memory":
        return InMemoryStateStore()
    if url.startswith("redis"):
        return store_from_url(url, prefix=REDIS_PREFIX)
    return store_from_url(url)


def _drop_redis_keys(url: str) -> None:
    """Delete the sessions the Redis row wrote (all under REDIS_PREFIX)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{REDIS_PREFIX}:*", count=5000))
        for start in range(0, len(keys), 5000):
            client.delete(*keys[start : start + 5000])
    finally:
        client.close()


def serve_floor(port: int, latency: float) -> None:
    """The floor row: bare Starlette + uvicorn answering the same request with the same SSE events, no agent."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    from agentrt.server._serve import graceful_server

    words = [w + " " for w in ANSWER.split(" ")]

    async def message(request: Request) -> StreamingResponse:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            raise RuntimeError("unauthenticated")
        body = json.loads(await request.body())

        async def events() -> Any:
            started = json.dumps({"type": "run_started", "input": body["input"]}).encode()
            yield b"event: run_started\ndata: " + started + b"\n\n"
            await asyncio.sleep(latency)
            for word in words:
                yield b'event: text_delta\ndata: {"type":"text_delta","delta":' + json.dumps(word).encode() + b"}\n\n"
            yield b'event: run_finished\ndata: {"type":"run_finished"}\n\n'

        return StreamingResponse(events(), media_type="text/event-stream")

    async def stats(request: Request) -> JSONResponse:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return JSONResponse({"cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_kib": usage.ru_maxrss})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/v1/agents/bench/sessions/{session_id}/messages", message, methods=["POST"]),
            Route("/_bench/stats", stats),
            Route("/healthz", healthz),
        ]
    )
    server = graceful_server(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096)
    server.run()  # uvicorn builds its loop (uvloop when installed), as `agentrt serve` does


def serve_floor_asgi(port: int, latency: float) -> None:
    """A lower floor: a raw ASGI callable on the same uvicorn (no Starlette): what uvicorn alone costs."""
    from agentrt.server._serve import graceful_server

    words = [w + " " for w in ANSWER.split(" ")]
    header = [(b"content-type", b"text/event-stream")]
    start_message = {"type": "http.response.start", "status": 200, "headers": header}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if path == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        if path == "/_bench/stats":
            usage = resource.getrusage(resource.RUSAGE_SELF)
            data = json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_kib": usage.ru_maxrss})
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": data.encode()})
            return
        if dict(scope["headers"]).get(b"authorization") != f"Bearer {KEY}".encode():
            raise RuntimeError("unauthenticated")
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.loads(b"".join(chunks))
        await send(start_message)
        started = json.dumps({"type": "run_started", "input": body["input"]}).encode()
        await send(
            {"type": "http.response.body", "body": b"event: run_started\ndata: " + started + b"\n\n", "more_body": True}
        )
        await asyncio.sleep(latency)
        rest = b"".join(
            b'event: text_delta\ndata: {"type":"text_delta","delta":' + json.dumps(word).encode() + b"}\n\n"
            for word in words
        )
        await send({"type": "http.response.body", "body": rest, "more_body": True})
        await send({"type": "http.response.body", "body": b'event: run_finished\ndata: {"type":"run_finished"}\n\n'})

    server = graceful_server(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096)
    server.run()  # uvicorn builds its loop (uvloop when installed), as `agentrt serve` does


def serve(port: int, latency: float, store_url: str = "memory") -> None:
    if store_url == "floor":
        serve_floor(port, latency)
        return
    if store_url == "floor-asgi":
        serve_floor_asgi(port, latency)
        return
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from agentrt import ReActAgent
    from agentrt.model import ScriptedModel
    from agentrt.server import create_app
    from agentrt.server._serve import graceful_server

    model = ScriptedModel([ANSWER], latency=latency, repeat=True, record=False)
    agent = ReActAgent("bench", "You answer.", model=model)
    app = create_app({"bench": agent}, store=_store(store_url), api_keys={KEY: "bench-user"}, facades=())

    profile_to = os.environ.get("AGENTRT_BENCH_PROFILE")
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()

    async def stats(request: Request) -> JSONResponse:
        if profiler is not None and profile_to:
            if request.query_params.get("profile") == "start":
                profiler.enable()
            elif request.query_params.get("profile") == "stop":
                profiler.disable()
                profiler.dump_stats(profile_to)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return JSONResponse({"cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_kib": usage.ru_maxrss})

    # The stats route joins the app's own routes: mounting the app under another Starlette would
    # run every request through a second middleware stack and router, which a deployment does not.
    app.router.routes.insert(0, Route("/_bench/stats", stats))
    server = graceful_server(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096)
    server.run()  # uvicorn builds its loop (uvloop when installed), as `agentrt serve` does


# -- client mode ------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


async def one_session(session: Any, url: str, index: int, tag: str) -> dict[str, float]:
    body = {"input": f"question {index}", "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    start = time.perf_counter()
    first_event = first_text = None
    finished = False
    async with session.post(f"{url}/v1/agents/bench/sessions/{tag}-{index}/messages", json=body, headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"status {r.status}: {await r.text()}")
        async for raw in r.content:
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("event: "):
                continue
            now = time.perf_counter()
            if first_event is None:
                first_event = now - start
            if first_text is None and line == "event: text_delta":
                first_text = now - start
            if line == "event: run_finished":
                finished = True
    end = time.perf_counter() - start
    if not finished or first_event is None or first_text is None:
        raise RuntimeError(f"session {index}: incomplete stream")
    return {"first_event": first_event, "first_text": first_text, "total": end}


class _SseProbe(asyncio.Protocol):
    """One streamed request over a raw socket, timing its first event, first text delta and end.

    The load generator shares the machine's cores with the server, so its own cost shows up in
    the latencies it measures: this client does nothing but write one request and look for three
    markers in the bytes that come back (about a tenth of aiohttp's CPU per request). Frames are
    sent whole, so a marker is never split by the chunked encoding, only by a read boundary.
    """

    def __init__(self, request: bytes, start: float, done: asyncio.Future[dict[str, float]]) -> None:
        self.request = request
        self.start = start
        self.done = done
        self.seen = b""
        self.times: dict[str, float] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter() - self.start
        window = self.seen[-32:] + data
        if not self.seen and not data.startswith(b"HTTP/1.1 200"):  # the first bytes: the status line
            self._fail(RuntimeError(f"unexpected response: {data[:300]!r}"))
            return
        for marker, name in ((b"event: ", "first_event"), (b"event: text_delta", "first_text")):
            if name not in self.times and marker in window:
                self.times[name] = now
        self.seen = window
        if b"event: run_finished" in window:
            self.times["total"] = now
            if len(self.times) == 3 and not self.done.done():
                self.done.set_result(self.times)
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or RuntimeError("connection closed before run_finished"))

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


async def one_raw_session(host: str, port: int, index: int, tag: str) -> dict[str, float]:
    body = json.dumps({"input": f"question {index}", "stream": True}).encode()
    request = (
        f"POST /v1/agents/bench/sessions/{tag}-{index}/messages HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    done: asyncio.Future[dict[str, float]] = loop.create_future()
    await loop.create_connection(lambda: _SseProbe(request, start, done), host, port)
    return await done


async def load(url: str, sessions: int, tag: str, client: str = "raw") -> tuple[float, list[dict[str, float]]]:
    if client == "raw":
        host, _, port = url.removeprefix("http://").partition(":")
        start = time.perf_counter()
        results = await asyncio.gather(*(one_raw_session(host, int(port), i, tag) for i in range(sessions)))
        return time.perf_counter() - start, list(results)
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        results = await asyncio.gather(*(one_session(session, url, i, tag) for i in range(sessions)))
        wall = time.perf_counter() - start
    return wall, list(results)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def run(
    sessions: int,
    latency: float,
    rounds: int,
    profile: str | None = None,
    store: str = "memory",
    client: str = "raw",
) -> dict[str, Any]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    if profile:
        env["AGENTRT_BENCH_PROFILE"] = profile
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--latency", str(latency), "--store", store],
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _get_json(url + "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the benchmark server did not start") from None
                time.sleep(0.05)  # noqa: TID251 - outside any event loop
        asyncio.run(load(url, min(100, sessions), "warmup", client))
        best: dict[str, Any] | None = None
        for n in range(rounds):
            start_stats = _get_json(url + "/_bench/stats" + ("?profile=start" if profile else ""))
            before = start_stats["cpu_s"]
            client_before = _own_cpu()
            wall, results = asyncio.run(load(url, sessions, f"r{n}", client))
            client_cpu = _own_cpu() - client_before
            after = _get_json(url + "/_bench/stats" + ("?profile=stop" if profile else ""))
            row = {
                "store": store,
                "client": client,
                "sessions": sessions,
                "model_latency_s": latency,
                "wall_s": wall,
                "first_event_p50_ms": 1000 * statistics.median(r["first_event"] for r in results),
                "first_event_p99_ms": 1000 * pct([r["first_event"] for r in results], 99),
                "first_text_p50_ms": 1000 * statistics.median(r["first_text"] for r in results),
                "first_text_p99_ms": 1000 * pct([r["first_text"] for r in results], 99),
                "total_p50_ms": 1000 * statistics.median(r["total"] for r in results),
                "total_p99_ms": 1000 * pct([r["total"] for r in results], 99),
                "server_cpu_ms_per_run": 1000 * (after["cpu_s"] - before) / sessions,
                "server_max_rss_mib": after["max_rss_kib"] / 1024,
                "server_kib_per_stream": max(0, after["max_rss_kib"] - start_stats["max_rss_kib"]) / sessions,
                "client_cpu_ms_per_run": 1000 * client_cpu / sessions,
            }
            print(
                f"round {n + 1}/{rounds}: wall {wall:.2f} s, server CPU {row['server_cpu_ms_per_run']:.2f} ms/run, "
                f"client CPU {row['client_cpu_ms_per_run']:.2f} ms/run"
            )
            if best is None or row["wall_s"] < best["wall_s"]:
                best = row
        assert best is not None
        return best
    finally:
        server.terminate()
        server.wait(timeout=30)


def table(*rows: dict[str, Any]) -> str:
    lines = [
        "| store | sessions | model latency | wall | first event p50 / p99 | first text p50 / p99 | done p50 / p99 "
        "| server CPU per run | server RSS | RSS per open stream |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.get('store', 'memory')} | {row['sessions']} | {row['model_latency_s'] * 1000:.0f} ms "
            f"| {row['wall_s']:.2f} s "
            f"| {row['first_event_p50_ms']:.0f} / {row['first_event_p99_ms']:.0f} ms "
            f"| {row['first_text_p50_ms']:.0f} / {row['first_text_p99_ms']:.0f} ms "
            f"| {row['total_p50_ms']:.0f} / {row['total_p99_ms']:.0f} ms "
            f"| {row['server_cpu_ms_per_run']:.2f} ms | {row['server_max_rss_mib']:.0f} MiB "
            f"| {row.get('server_kib_per_stream', 0):.1f} KiB |"
        )
    return "\n".join(lines)


def matrix() -> list[tuple[int, str]]:
    """The committed rows: both floors, memory and SQLite at 1,000 and 10,000 sessions, and Redis at 10,000."""
    import tempfile

    rows = [
        (1000, "floor-asgi"),
        (1000, "floor"),
        (1000, "memory"),
        (1000, f"sqlite:///{tempfile.mkdtemp()}/server-bench.db"),
        (10_000, "floor-asgi"),
        (10_000, "floor"),
        (10_000, "memory"),
        (10_000, f"sqlite:///{tempfile.mkdtemp()}/server-bench.db"),
    ]
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            rows.append((10_000, "redis://127.0.0.1:6379/0"))
    except OSError:
        print("Redis is not reachable on 127.0.0.1:6379: no Redis row")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, help="one row with this many sessions (printed, not written)")
    parser.add_argument(
        "--store",
        default="memory",
        help="'memory', a store URL, or 'floor' (bare Starlette answering with the same events, no agent)",
    )
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument(
        "--client",
        choices=("raw", "aiohttp"),
        default="raw",
        help="load generator: raw sockets (default; least CPU taken from the server's cores) or aiohttp",
    )
    parser.add_argument("--rounds", type=int, default=3, help="best round (by wall time) is reported")
    parser.add_argument(
        "--profile", action="store_true", help="profile the server (cProfile); print its top 25; write no results"
    )
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency, args.store)
        return
    if args.profile:
        profile_server(args.sessions or 1000, args.latency, args.rounds, args.client)
        return
    if args.sessions:
        print(table(run(args.sessions, args.latency, args.rounds, store=args.store, client=args.client)))
        return
    rows = []
    for sessions, store in matrix():
        print(f"== {sessions} sessions, store {store}")
        try:
            rounds = args.rounds if sessions <= 1000 else 1
            rows.append(run(sessions, args.latency, rounds, store=store, client=args.client))
        finally:
            if store.startswith("redis"):
                _drop_redis_keys(store)
    for row in rows:
        row["store"] = row["store"].split("://")[0]
    print()
    print(table(*rows))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "server.json"
    import uvicorn

    meta = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "uvicorn": uvicorn.__version__,
        "loop": "uvloop" if _has("uvloop") else "asyncio",
        "http": "httptools" if _has("httptools") else "h11",
    }
    out.write_text(json.dumps({**meta, "result": rows[0], "rows": rows}, indent=2) + "\n")
    print(f"\nwritten {out}")


def profile_server(sessions: int, latency: float, rounds: int, client: str = "raw") -> None:
    """Run the load against a profiled server; print the server's 25 costliest functions (own time)."""
    import pstats
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "server.prof")
        row = run(sessions, latency, rounds, profile=path, client=client)
        print()
        print(table(row))
        print("\nserver profile (cProfile adds overhead: compare shares, not absolute times)")
        pstats.Stats(path).sort_stats("tottime").print_stats(25)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
