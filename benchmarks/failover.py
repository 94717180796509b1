"""Durable runs on Redis or PostgreSQL: failover time after a replica's death, and throughput of 1-3 replicas.

Real `agentrt serve --jobs URL` processes (the app of tests/integration/apps/failover_app.py: each
run is a model call, one tool call and a model call; the scripted model answers after
``--model-ms``) sharing one backend: ``--backend redis`` (127.0.0.1:6379: jobs, event logs and
sessions), ``postgres`` (127.0.0.1:5432: the same in PostgreSQL; the tool's records stay in Redis)
or ``both``.

* throughput: R replicas (1, 2, 3), each with one worker running up to ``--concurrency`` jobs;
  ``--runs`` non-streamed runs posted at once, spread over the replicas; runs per second.
* failover: two replicas, ``--failover-runs`` streamed runs whose tool takes 2 s; once every tool
  call is running, one replica is SIGKILLed. For each run it was executing, the time from the kill
  to the first event of the resumed run, as its client sees it after reconnecting to the other
  replica with ``Last-Event-ID``; p50 and p99 over ``--rounds`` rounds. The lease is ``--lease``
  seconds (the session lock's ttl the same): the floor of this time.

On PostgreSQL each running run holds a session-lock connection and the server allows 100
connections, so each replica runs at most ``--pg-concurrency`` (10) jobs at once.

Prints a table and writes benchmarks/results/failover.json. Run: ``.venv/bin/python
benchmarks/failover.py [--backend both] [--quick]`` (quick: fewer runs, one round, failover-quick.json).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any

import httpx

ROOT = Path(__file__).parents[1]
APPS = ROOT / "tests" / "integration" / "apps"
RESULTS = ROOT / "benchmarks" / "results"
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
URLS = {"redis": REDIS_URL, "postgres": POSTGRES_URL}
KEY = {"Authorization": "Bearer bench-key"}
PATH = "/v1/agents/worker/sessions"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Replicas:
    def __init__(self, count: int, *, backend: str, lease: float, concurrency: int, env: dict[str, str]) -> None:
        self.urls: list[str] = []
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[IO[str]] = []
        self.prefix = prefix = f"bf_{uuid.uuid4().hex[:8]}"  # an SQL identifier too
        self.backend = backend
        for _ in range(count):
            port = _free_port()
            cmd = [sys.executable, "-m", "agentrt.cli", "serve", "failover_app:agent", "--port", str(port)]
            cmd += ["--jobs", URLS[backend], "--jobs-prefix", prefix, "--lease", str(lease)]
            cmd += ["--concurrency", str(concurrency), "--log-level", "warning"]
            log: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
            full_env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(APPS)]),
                "AGENTRT_API_KEYS": "bench-key=bench",
                "FAILOVER_STORE_URL": URLS[backend],
                "FAILOVER_RECORD_URL": REDIS_URL,
                "FAILOVER_PREFIX": prefix,
                "FAILOVER_LOCK_TTL": str(lease),
                **env,
            }
            self.procs.append(subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, text=True))
            self.logs.append(log)
            self.urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(self.procs, self.urls, strict=True):
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"a replica exited: {self.output(self.procs.index(proc))}")
                try:
                    with urllib.request.urlopen(url + "/readyz", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)  # noqa: TID251 - start-up code, no event loop yet

    def output(self, i: int) -> str:
        self.logs[i].seek(0)
        return self.logs[i].read()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in self.logs:
            log.close()
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{self.prefix}:*", count=1000):
            client.delete(key)
        client.close()
        if self.backend == "postgres":  # called from the benchmark's loop: drop them from a thread of its own
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, _drop_tables(self.prefix)).result()


async def _drop_tables(prefix: str) -> None:
    import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        rows = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)",
            prefix + "_",
        )
        if rows:
            await conn.execute("DROP TABLE IF EXISTS " + ", ".join(f'"{r["tablename"]}"' for r in rows) + " CASCADE")
    finally:
        await conn.close()


async def throughput(backend: str, replicas: int, runs: int, model_ms: float, concurrency: int) -> dict[str, Any]:
    group = Replicas(
        replicas,
        backend=backend,
        lease=10.0,
        concurrency=concurrency,
        env={"FAILOVER_MODEL_S": str(model_ms / 1000), "FAILOVER_TOOL_S": "0"},
    )
    try:
        limits = httpx.Limits(max_connections=runs + 10)
        async with httpx.AsyncClient(timeout=300.0, limits=limits) as http:

            async def one(i: int) -> None:
                url = group.urls[i % replicas]
                body = {"input": f"task {i}", "stream": False}
                response = await http.post(f"{url}{PATH}/t{i}/messages", json=body, headers=KEY)
                assert response.status_code == 200, response.text
                assert "[success]" in response.json()["message"]["content"][0]["text"]

            await one(-1)  # warm-up
            t0 = time.perf_counter()
            try:
                await asyncio.gather(*(one(i) for i in range(runs)))
            except AssertionError:
                print(group.output(0)[-3000:])
                raise
            wall = time.perf_counter() - t0
    finally:
        group.stop()
    return {
        "backend": backend,
        "replicas": replicas,
        "concurrency": concurrency,
        "runs": runs,
        "wall_s": wall,
        "runs_per_s": runs / wall,
    }


async def _stream(http: httpx.AsyncClient, url: str, method: str, path: str, **kw: Any) -> list[tuple[float, str, str]]:
    """(arrival time, id, type) of each event until run_finished; the list so far if the connection breaks."""
    got: list[tuple[float, str, str]] = []
    event_id = event_type = ""
    try:
        async with http.stream(method, url + path, **kw) as response:
            if response.status_code != 200:
                return got
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("event: "):
                    event_type = line[7:]
                elif not line and event_type:
                    got.append((time.monotonic(), event_id, event_type))
                    if event_type == "run_finished":
                        return got
                    event_type = ""
    except httpx.TransportError:
        pass
    return got


async def failover_round(backend: str, runs: int, lease: float, model_ms: float) -> list[float]:
    import redis

    group = Replicas(
        2,
        backend=backend,
        lease=lease,
        concurrency=runs,
        env={"FAILOVER_MODEL_S": str(model_ms / 1000), "FAILOVER_TOOL_S": "2.0"},
    )
    prefix = group.prefix
    raw = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    killed_at = 0.0
    victim_pid = group.procs[0].pid
    try:
        async with httpx.AsyncClient(timeout=60.0) as http:

            async def client(i: int) -> tuple[list[tuple[float, str, str]], bool]:
                body = {"input": f"task {i}", "stream": True}
                events = await _stream(http, group.urls[1], "POST", f"{PATH}/f{i}/messages", json=body, headers=KEY)
                while not events or events[-1][2] != "run_finished":
                    last = events[-1][1] if events else ""
                    more = await _stream(
                        http, group.urls[1], "GET", f"{PATH}/f{i}/events", headers={**KEY, "Last-Event-ID": last}
                    )
                    events += more
                    if not more:
                        await asyncio.sleep(0.05)
                by = raw.lrange(f"{prefix}:started-by:{i}", 0, -1)
                return events, by[:1] == [str(victim_pid)]

            tasks = [asyncio.create_task(client(i)) for i in range(runs)]
            while len(raw.hgetall(f"{prefix}:started")) < runs:  # noqa: ASYNC110 - state in another process
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
            killed_at = time.monotonic()
            group.procs[0].send_signal(signal.SIGKILL)
            results = await asyncio.gather(*tasks)
    finally:
        raw.close()
        group.stop()
    gaps = []
    for events, on_victim in results:
        if not on_victim:
            continue
        resumed = [t for t, _, kind in events if kind == "run_started" and t > killed_at]
        if resumed:
            gaps.append(resumed[0] - killed_at)
    return gaps


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    backends = ["redis", "postgres"] if args.backend == "both" else [args.backend]
    rows = []
    failover: dict[str, Any] = {}
    for backend in backends:
        concurrency = args.concurrency if backend == "redis" else args.pg_concurrency
        for replicas in (1, 2, 3):
            row = await throughput(backend, replicas, args.runs, args.model_ms, concurrency)
            rows.append(row)
            print(
                f"{backend} throughput, {replicas} replica(s): {row['runs_per_s']:.1f} runs/s ({row['wall_s']:.2f} s)",
                flush=True,
            )
        gaps: list[float] = []
        runs = args.failover_runs if backend == "redis" else min(args.failover_runs, args.pg_concurrency)
        for _ in range(args.rounds):
            gaps += await failover_round(backend, runs, args.lease, args.model_ms)
            print(f"{backend} failover: {len(gaps)} takeovers so far", flush=True)
        failover[backend] = {
            "takeovers": len(gaps),
            "p50_s": statistics.median(gaps) if gaps else None,
            "p99_s": _pct(gaps, 0.99) if gaps else None,
            "max_s": max(gaps) if gaps else None,
        }
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "model_ms": args.model_ms,
        "lease_s": args.lease,
        "throughput": rows,
        "failover": failover,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model-ms", type=float, default=200.0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=64, help="jobs per replica at once on Redis")
    parser.add_argument("--pg-concurrency", type=int, default=10, help="jobs per replica at once on PostgreSQL")
    parser.add_argument("--backend", choices=["redis", "postgres", "both"], default="both")
    args = parser.parse_args()
    args.runs = 100 if args.quick else 400
    args.failover_runs = 10 if args.quick else 20
    args.rounds = 1 if args.quick else 3
    result = asyncio.run(main_async(args))
    lines = ["| backend | replicas | jobs at once per replica | runs | wall | runs/s |"]
    lines.append("|---|---:|---:|---:|---:|---:|")
    for row in result["throughput"]:
        lines.append(
            f"| {row['backend']} | {row['replicas']} | {row['concurrency']} | {row['runs']} | {row['wall_s']:.2f} s"
            f" | {row['runs_per_s']:.1f} |"
        )
    lines.append("")
    for backend, fo in result["failover"].items():
        lines.append(
            f"{backend} failover (lease {args.lease:g} s): {fo['takeovers']} takeovers, death to the resumed run's"
            f" first event p50 {fo['p50_s']:.2f} s, p99 {fo['p99_s']:.2f} s"
            if fo["takeovers"]
            else f"{backend} failover: no takeover measured"
        )
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("failover-quick.json" if args.quick else "failover.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
