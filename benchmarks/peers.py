"""agentrt against its peers on the shared harness: keep the summary, print it, draw the chart.

The measurement itself is the team's peer harness, which lives outside this repository (in the
workspace's ``shared/bench`` folder, beside this checkout): it installs each framework in its own
virtualenv from pinned versions, starts a fake OpenAI-compatible model server on 127.0.0.1 and runs
the same task on every framework ("What is the weather in Paris?": one tool call, then an answer),
interleaving the frameworks and rotating their order every round. See docs/performance.md ("Against
the peers") for what it measures. This script turns one of its raw JSON files into the committed
summary `benchmarks/results/peers.json`, prints it as a table, and draws docs/img/peers.svg from
it (matplotlib, deterministic output: the same JSON gives the same SVG).

    BENCH_WORK=$PWD/.bench ../shared/bench/run_peers.sh --out /tmp/peers-raw.json --md /tmp/peers.md
    .venv/bin/python benchmarks/peers.py import /tmp/peers-raw.json   # -> benchmarks/results/peers.json
    make bench-chart                                                  # -> docs/img/peers.svg
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "benchmarks" / "results" / "peers.json"
CHART = ROOT / "docs" / "img" / "peers.svg"
FLOORS_BY_PREFERENCE = ("floor_aiohttp", "floor_httpx")
"""The reference: the same two HTTP requests with raw aiohttp (else httpx) and a hand-written tool loop."""

AGENTRT = "#D55E00"
PEER = "#0072B2"
FLOORS = "#999999"


# -- summary ----------------------------------------------------------------------------------------------------
def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    """The numbers the chart and the table need, from a raw harness file."""
    meta = raw["_meta"]
    rows = []
    for adapter in meta["adapters"]:
        key = adapter["key"]
        data = raw.get(key)
        if not isinstance(data, dict) or "seq" not in data or "conc" not in data:
            continue
        rounds = [r for r in data["conc"].get("rounds", []) if not r.get("fails")]
        versions = {k: v for k, v in data.get("versions", {}).items() if k != "python"}
        rows.append(
            {
                "key": key,
                "name": adapter["NAME"],
                "floor": bool(adapter.get("FLOOR")),
                "versions": versions,
                "seq_ms": data["seq"]["median_ms"],
                "conc_n": rounds[0]["n"] if rounds else None,
                "conc_wall_s": statistics.median(r["wall_s"] for r in rounds) if rounds else None,
                "cpu_ms_per_run": statistics.median(r["cpu_ms_per_run"] for r in rounds) if rounds else None,
            }
        )
    by_key = {r["key"]: r for r in rows}
    floor = next((by_key[k] for k in FLOORS_BY_PREFERENCE if k in by_key), None)
    for row in rows:
        row["overhead_ms"] = None if floor is None else row["seq_ms"] - floor["seq_ms"]
    return {
        "measured": meta["started"],
        "machine": meta["uname"],
        "cpus": len(meta.get("cpus", [])),
        "python": next((raw[r["key"]].get("versions", {}).get("python") for r in rows), None),
        "latency_ms": meta.get("conc_latency_ms"),
        "floor": floor["name"] if floor is not None else None,
        "rows": rows,
    }


def table(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (floors first, then by sequential overhead)."""
    lines = [
        f"Measured {summary['measured']} on `{summary['machine']}` ({summary['cpus']} CPUs), "
        f"Python {summary['python']}; overhead over {summary['floor']}.",
        "",
        "| | sequential ms/run | overhead over the floor | concurrent wall | CPU ms/run |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in _ordered(summary["rows"]):
        overhead = "-" if row["floor"] or row["overhead_ms"] is None else f"{row['overhead_ms']:.2f} ms"
        wall = "-" if row["conc_wall_s"] is None else f"{row['conc_wall_s']:.2f} s ({row['conc_n']} runs)"
        cpu = "-" if row["cpu_ms_per_run"] is None else f"{row['cpu_ms_per_run']:.2f}"
        lines.append(f"| {_label(row)} | {row['seq_ms']:.2f} | {overhead} | {wall} | {cpu} |")
    return "\n".join(lines)


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (not r["floor"], r["overhead_ms"] if r["overhead_ms"] is not None else 1e9))


def _label(row: dict[str, Any]) -> str:
    version = next(iter(row["versions"].values()), "") if not row["floor"] else ""
    return f"{row['name']} {version}".strip()


# -- chart ----------------------------------------------------------------------------------------------------------
def chart(summary: dict[str, Any], out: Path) -> None:
    """Three horizontal bar panels: overhead per run, concurrent wall time, CPU per run."""
    try:
        import matplotlib
    except ImportError:
        sys.exit(
            "benchmarks/peers.py needs matplotlib: .venv/bin/pip install -e '.[bench]' (or run `make bench-chart`)"
        )
    matplotlib.use("svg")
    matplotlib.rcParams.update(
        {
            "svg.hashsalt": "agentrt-benchmarks",
            "svg.fonttype": "none",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    from matplotlib.figure import Figure

    rows = [r for r in _ordered(summary["rows"]) if r["conc_wall_s"] is not None]
    panels = [
        ("overhead_ms", f"Overhead per run over {summary['floor']} (ms)"),
        ("conc_wall_s", f"{rows[0]['conc_n']} concurrent runs at {summary['latency_ms']} ms: wall (s)"),
        ("cpu_ms_per_run", "CPU per run under concurrency (ms)"),
    ]
    items = list(reversed(rows))  # matplotlib draws the first bar at the bottom
    labels = [_label(r) for r in items]
    colours = [AGENTRT if r["key"] == "agentrt" else FLOORS if r["floor"] else PEER for r in items]
    fig = Figure(figsize=(12, 0.3 * len(rows) + 1.9))
    axes = fig.subplots(1, 3, sharey=True)
    for ax, (field, title) in zip(axes, panels, strict=True):
        floor_row = field == "overhead_ms"
        values = [0.0 if floor_row and r["floor"] else max(0.0, r[field] or 0.0) for r in items]
        bars = ax.barh(labels, values, color=colours)
        for bar, value, row in zip(bars, values, items, strict=True):
            text = " (floor)" if floor_row and row["floor"] else f" {value:.2f}"
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=7.5)
        ax.set_title(title, fontsize=9)
        ax.set_xlim(0, max(values) * 1.22 if any(values) else 1)
        ax.tick_params(axis="y", labelsize=8, length=0)
    fig.suptitle("agentrt against its peers: the same task, the same fake model server (lower is better)", fontsize=11)
    caption = (
        f"Shared peer harness, measured {summary['measured']} on {summary['machine']} ({summary['cpus']} CPUs, "
        f"Python {summary['python']}); medians. agentrt with its defaults (SQLite state store). Grey: floors "
        "(no framework). benchmarks/results/peers.json; `make bench-chart` redraws this from it."
    )
    fig.text(0.01, 0.01, caption, fontsize=7.5, color="#555555", ha="left", va="bottom", wrap=True)
    fig.subplots_adjust(left=0.17, right=0.98, top=0.84, bottom=0.2, wspace=0.12)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="summarise a raw harness JSON into benchmarks/results/peers.json")
    imp.add_argument("raw", type=Path)
    sub.add_parser("table", help="print the summary as a Markdown table")
    draw = sub.add_parser("chart", help="draw docs/img/peers.svg from the summary")
    draw.add_argument("--out", type=Path, default=CHART)
    args = parser.parse_args()
    if args.command == "import":
        summary = summarise(json.loads(args.raw.read_text()))
        if not summary["rows"]:
            sys.exit(f"{args.raw}: no adapter with both sequential and concurrent results")
        SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
        print(table(summary))
        print(f"\nwritten {SUMMARY}")
        return
    if not SUMMARY.exists():
        sys.exit(f"{SUMMARY} is missing: run the peer harness, then `benchmarks/peers.py import RAW.json`")
    summary = json.loads(SUMMARY.read_text())
    if args.command == "table":
        print(table(summary))
    else:
        chart(summary, args.out)
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
