"""Draw the scaling charts of docs/performance.md from the benchmarks' JSON results.

Reads benchmarks/results/scaling.json (CPU per run and wall time against concurrent sessions,
written by benchmarks/scaling.py) and benchmarks/results/state-per-call.json (CPU per agent call
against messages in the session, written by `benchmarks/state.py --per-call`), and writes
docs/img/scaling-concurrency.svg and docs/img/scaling-conversation.svg: log x axis, one line per
store. The SVGs carry no date and use a fixed hash salt, so the same JSON gives the same files
byte for byte (with the same matplotlib).

Needs matplotlib: `.venv/bin/pip install -e '.[bench]'` (`make charts` does it).
Run: `make charts` or `.venv/bin/python benchmarks/charts.py [--quick] [--out DIR]`; `--quick`
reads the *-quick.json files the scripts' quick modes write instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "img"

# label, colour (Okabe-Ito, colour-blind safe), marker
STYLE: dict[str, tuple[str, str, str]] = {
    "memory": ("memory", "#0072B2", "o"),
    "sqlite": ("SQLite (default)", "#D55E00", "s"),
    "redis": ("Redis", "#CC79A7", "^"),
    "postgres": ("PostgreSQL", "#009E73", "D"),
    "mariadb": ("MariaDB", "#E69F00", "v"),
    "jsonfile": ("JSON files", "#56B4E9", "P"),
}
RC = {
    "svg.hashsalt": "agentrt-benchmarks",  # ids derived from it, not from random numbers
    "svg.fonttype": "none",  # text stays text: smaller files, readable diffs
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
METADATA = {"Date": None}  # no timestamp: regenerating from the same data gives the same file


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        sys.exit("benchmarks/charts.py needs matplotlib: .venv/bin/pip install -e '.[bench]' (or run `make charts`)")
    return matplotlib


def _load(name: str, quick: bool, how: str) -> dict[str, Any]:
    path = RESULTS / (f"{name}-quick.json" if quick else f"{name}.json")
    if not path.exists():
        sys.exit(f"{path} is missing: run `{how}{' --quick' if quick else ''}` first")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _style(store: str) -> tuple[str, str, str]:
    return STYLE.get(store, (store, "#000000", "x"))


def _decades(values: set[int]) -> list[int]:
    """Powers of ten from the smallest to the largest value (the x ticks: 10, 100, 1,000, ...)."""
    low, high = len(str(min(values))) - 1, len(str(max(values))) - 1
    return [10**k for k in range(low, high + 1)]


def _axes(ax: Any, xticks: list[int], xlabel: str, ylabel: str, title: str) -> None:
    """Log x and log y (a line's slope is its relative growth, whatever its level), plain numbers."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(xticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:,g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)


def _finish(fig: Any, ax: Any, data: dict[str, Any], title: str, what: str) -> None:
    """Title, one legend for both panels, and a caption saying what was measured where."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.085), ncol=5, frameon=False)
    fig.suptitle(title, fontsize=11)
    text = f"{what} Python {data.get('python', '?')}, {data.get('cpus', '?')} CPUs."
    if data.get("quick"):
        text += " Quick run (fewer points and repetitions): indicative only."
    caption = "\n".join(textwrap.wrap(text, 185))
    fig.text(0.01, 0.01, caption, fontsize=7.5, color="#555555", ha="left", va="bottom")
    fig.subplots_adjust(left=0.085, right=0.985, top=0.86, bottom=0.29, wspace=0.24)


def concurrency_figure(data: dict[str, Any]) -> Any:
    """CPU per run (left) and wall time (right) against concurrent sessions, one line per store."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.8))
    cpu_ax, wall_ax = fig.subplots(1, 2)
    sizes: set[int] = set(data["sizes"])
    for row in data["stores"]:
        points = sorted((p for p in row["points"] if "error" not in p), key=lambda p: p["n"])
        failed = sorted((p for p in row["points"] if "error" in p), key=lambda p: p["n"])
        label, colour, marker = _style(row["store"])
        if failed:  # say so in the legend rather than end the line silently (the errors are in the JSON)
            label += f" (failed at N = {', '.join(format(p['n'], ',') for p in failed)})"
        ns = [p["n"] for p in points]
        cpu_ax.plot(ns, [p["cpu_us_per_run"] for p in points], marker=marker, color=colour, label=label)
        wall_ax.plot(ns, [p["wall_s"] for p in points], marker=marker, color=colour, label=label)
    latency_ms = data["latency_s"] * 1000
    ideal = f"ideal wall time (2 turns \N{MULTIPLICATION SIGN} {latency_ms:.0f} ms)"
    wall_ax.axhline(2 * data["latency_s"], color="#777777", linestyle="--", linewidth=1, label=ideal)
    xticks = _decades(sizes)
    _axes(
        cpu_ax,
        xticks,
        "concurrent sessions (log scale)",
        "CPU per run (µs, log scale)",
        "CPU per run: flat is the goal",
    )
    _axes(
        wall_ax, xticks, "concurrent sessions (log scale)", "wall time (s, log scale)", "Wall time of N concurrent runs"
    )
    _finish(
        fig,
        wall_ax,
        data,
        "agentrt: CPU per run against concurrent sessions, by state store",
        "benchmarks/scaling.py: one process and one agent; a run is one tool call then an answer, from a scripted "
        f"model with {latency_ms:.0f} ms latency per turn; CPU is the process's user + sys time (all its threads, "
        "not the Redis or PostgreSQL server's) divided by the runs; medians.",
    )
    return fig


def conversation_figure(data: dict[str, Any]) -> Any:
    """CPU per agent call against messages in the session: cache on (left), first load (right)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.8))
    cached_ax, first_ax = fig.subplots(1, 2, sharey=True)
    lengths_seen: set[int] = set()
    for row in data["rows"]:
        lengths = sorted(int(n) for n in row["lengths"])
        values = [row["lengths"][str(n)] for n in lengths]
        if values and "cached_cpu_ms" not in values[0]:
            sys.exit("state-per-call results without CPU times: re-run `benchmarks/state.py --per-call`")
        lengths_seen.update(lengths)
        label, colour, marker = _style(row["backend"])
        if not row.get("session_cache_bytes", 1):
            label += " (no cache: its sessions already are objects)"
        cached_ax.plot(lengths, [v["cached_cpu_ms"] for v in values], marker=marker, color=colour, label=label)
        first_ax.plot(lengths, [v["uncached_cpu_ms"] for v in values], marker=marker, color=colour, label=label)
        if values and "summarised_cpu_ms" in values[0]:
            first_ax.plot(
                lengths,
                [v["summarised_cpu_ms"] for v in values],
                marker=marker,
                color=colour,
                linestyle="--",
                label=f"{label}, summarised",
            )
    xticks = _decades(lengths_seen or {10, 10_000})
    _axes(
        cached_ax,
        xticks,
        "messages in the session (log scale)",
        "CPU per call (ms, log scale)",
        "Every call, session cache on (default): flat is the goal",
    )
    _axes(first_ax, xticks, "messages in the session (log scale)", "", "First call in a process (cache empty)")
    first_ax.tick_params(axis="y", labelleft=True)
    _finish(
        fig,
        cached_ax,
        data,
        "agentrt: CPU per agent call against conversation length, by state store",
        "benchmarks/state.py --per-call: a ReActAgent whose scripted model answers at once, on a session holding N "
        "messages; CPU is the process's user + sys time (all its threads, not the Redis or PostgreSQL server's); "
        "median over the calls. Right: the session cache disabled, so each call loads the session as the first call "
        "of a session in a process does: the whole transcript (solid), or, when a summary covers all but the last 20 "
        "messages, only those (dashed).",
    )
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="read the *-quick.json results of the quick modes")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the SVGs go (default: {OUT.relative_to(ROOT)})")
    args = parser.parse_args()
    scaling = _load("scaling", args.quick, ".venv/bin/python benchmarks/scaling.py")
    per_call = _load("state-per-call", args.quick, ".venv/bin/python benchmarks/state.py --per-call")
    matplotlib = _matplotlib()
    args.out.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(RC):
        for name, fig in (
            ("scaling-concurrency.svg", concurrency_figure(scaling)),
            ("scaling-conversation.svg", conversation_figure(per_call)),
        ):
            dest = args.out / name
            fig.savefig(dest, format="svg", metadata=METADATA)
            print(f"written {dest}")


if __name__ == "__main__":
    main()
