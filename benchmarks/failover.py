"""Durable runs on Redis: failover time after a replica's death, and throughput of 1, 2 and 3 replicas.

Real `agentrt serve --jobs redis://...` processes (the app of tests/integration/apps/failover_app.py:
each run is a model call, one tool call and a model call; the scripted model answers after
``--model-ms``), one shared Redis on 127.0.0.1:6379.

* throughput: R replicas (1, 2, 3), each with one worker running up to ``--concurrency`` jobs;
  ``--runs`` non-streamed runs posted at once, spread over the replicas; runs per second.
* failover: two replicas, ``--failover-runs`` streamed runs whose tool takes 2 s; once every tool
  call is running, one replica is SIGKILLed. For each run it was executing, the time from the kill
  to the first event of the resumed run, as its client sees it after reconnecting to the other
  replica with ``Last-Event-ID``; p50 and p99 over ``--rounds`` rounds. The lease is ``--lease``
  seconds (the session lock's ttl the same): the floor of this time.

Prints a table and writes benchmarks/results/failover.json. Run: ``.venv/bin/python
benchmarks/failover.py [--quick]`` (quick: fewer runs, one round, failover-quick.json).
"""

from __future__ import annotations

import argparse
import asyncio
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
KEY = {"Authorization": "Bearer bench-key"}
PATH = "/v1/agents/worker/sessions"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Replicas:
    def __init__(self, count: int, *, prefix: str, lease: float, concurrency: int, env: dict[str, str]) -> None:
        self.urls: list[str] = []
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[IO[str]] = []
        self.prefix = prefix
        for _ in range(count):
            port = _free_port()
            cmd = [sys.executable, "-m", "agentrt.cli", "serve", "failover_app:agent", "--port", str(port)]
            cmd += ["--jobs", REDIS_URL, "--jobs-prefix", prefix, "--lease", str(lease)]
            cmd += ["--concurrency", str(concurrency), "--log-level", "warning"]
            log: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
            full_env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(APPS)]),
                "AGENTRT_API_KEYS": "bench-key=bench",
                "FAILOVER_STORE_URL": REDIS_URL,
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


async def throughput(replicas: int, runs: int, model_ms: float, concurrency: int) -> dict[str, float]:
    group = Replicas(
        replicas,
        prefix=f"bf-{uuid.uuid4().hex[:8]}",
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
    return {"replicas": replicas, "runs": runs, "wall_s": wall, "runs_per_s": runs / wall}


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


async def failover_round(runs: int, lease: float, model_ms: float) -> list[float]:
    import redis

    prefix = f"bf-{uuid.uuid4().hex[:8]}"
    group = Replicas(
        2,
        prefix=prefix,
        lease=lease,
        concurrency=runs,
        env={"FAILOVER_MODEL_S": str(model_ms / 1000), "FAILOVER_TOOL_S": "2.0"},
    )
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
    rows = []
    for replicas in (1, 2, 3):
        row = await throughput(replicas, args.runs, args.model_ms, args.concurrency)
        rows.append(row)
        print(f"throughput, {replicas} replica(s): {row['runs_per_s']:.1f} runs/s ({row['wall_s']:.2f} s)", flush=True)
    gaps: list[float] = []
    for _ in range(args.rounds):
        gaps += await failover_round(args.failover_runs, args.lease, args.model_ms)
        print(f"failover: {len(gaps)} takeovers so far", flush=True)
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "model_ms": args.model_ms,
        "lease_s": args.lease,
        "throughput": rows,
        "failover": {
            "takeovers": len(gaps),
            "p50_s": statistics.median(gaps) if gaps else None,
            "p99_s": _pct(gaps, 0.99) if gaps else None,
            "max_s": max(gaps) if gaps else None,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model-ms", type=float, default=200.0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    args.runs = 100 if args.quick else 400
    args.failover_runs = 10 if args.quick else 20
    args.rounds = 1 if args.quick else 3
    result = asyncio.run(main_async(args))
    lines = ["| replicas | runs | wall | runs/s |", "|---:|---:|---:|---:|"]
    for row in result["throughput"]:
        lines.append(f"| {row['replicas']} | {row['runs']} | {row['wall_s']:.2f} s | {row['runs_per_s']:.1f} |")
    fo = result["failover"]
    lines += [
        "",
        f"failover (lease {args.lease:g} s): {fo['takeovers']} takeovers, death to the resumed run's first event "
        f"p50 {fo['p50_s']:.2f} s, p99 {fo['p99_s']:.2f} s"
        if fo["takeovers"]
        else "failover: no takeover measured",
    ]
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("failover-quick.json" if args.quick else "failover.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
