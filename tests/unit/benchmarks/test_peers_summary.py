"""benchmarks/peers.py: the committed peer summary and chart come from the harness's raw numbers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _peers() -> Any:
    spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "peers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


def _adapter(key: str, seq: float, walls: list[float], cpus: list[float]) -> dict[str, Any]:
    return {
        "meta": {},
        "versions": {"python": "3.11.7", key: "1.0"},
        "seq": {"median_ms": seq},
        "conc": {
            "rounds": [
                {"n": 500, "wall_s": w, "cpu_ms_per_run": c, "fails": 0} for w, c in zip(walls, cpus, strict=True)
            ]
        },
    }


RAW: dict[str, Any] = {
    "_meta": {
        "started": "2026-12-02 18:00:00",
        "uname": "Linux test x86_64",
        "cpus": [0, 1],
        "conc_latency_ms": 200,
        "adapters": [
            {"key": "floor_aiohttp", "NAME": "floor: raw aiohttp", "FLOOR": True},
            {"key": "agentrt", "NAME": "agentrt", "FLOOR": False},
            {"key": "agno", "NAME": "agno", "FLOOR": False},
            {"key": "broken", "NAME": "broken", "FLOOR": False},
        ],
    },
    "floor_aiohttp": _adapter("floor_aiohttp", 0.5, [0.6, 0.58, 0.7], [0.4, 0.41, 0.5]),
    "agentrt": _adapter("agentrt", 1.1, [0.7, 0.75, 0.72], [0.7, 0.66, 0.8]),
    "agno": _adapter("agno", 3.9, [4.0, 4.1, 3.9], [7.4, 7.5, 7.0]),
    "broken": {"versions": {}, "seq": {"median_ms": 1.0}},  # no concurrency phase: left out
}


def test_the_summary_takes_medians_and_the_overhead_over_the_floor() -> None:
    peers = _peers()
    summary = peers.summarise(RAW)
    rows = {r["key"]: r for r in summary["rows"]}
    assert set(rows) == {"floor_aiohttp", "agentrt", "agno"}
    assert rows["agentrt"]["overhead_ms"] == pytest.approx(0.6)
    assert rows["agno"]["overhead_ms"] == pytest.approx(3.4)
    assert rows["agentrt"]["conc_wall_s"] == pytest.approx(0.72)
    assert rows["agentrt"]["cpu_ms_per_run"] == pytest.approx(0.7)
    assert summary["floor"] == "floor: raw aiohttp"
    table = peers.table(summary)
    lines = table.splitlines()
    assert "2026-12-02 18:00:00" in lines[0] and "Linux test" in lines[0]
    order = [line.split("|")[1].strip() for line in lines[4:]]
    assert order == ["floor: raw aiohttp", "agentrt 1.0", "agno 1.0"], "floors first, then by overhead"


def test_the_chart_is_the_same_file_for_the_same_numbers(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    peers = _peers()
    summary = json.loads(json.dumps(peers.summarise(RAW)))
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    peers.chart(summary, first)
    peers.chart(summary, second)
    svg = first.read_text()
    assert first.read_bytes() == second.read_bytes()
    assert "agentrt" in svg and "2026-12-02 18:00:00" in svg
