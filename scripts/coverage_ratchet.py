"""Coverage ratchet: fail when branch coverage of src/agentrt drops below the landed floor.

``make test`` runs pytest with ``--cov`` (branch coverage, settings in pyproject.toml's
``[tool.coverage.*]``), then this script, which reads the combined ``.coverage`` data file, prints
the total and exits 1 when it is below the floor stored in ``coverage-floor.txt``.

``--update`` (``make coverage-ratchet``) raises the stored floor to the measured total rounded
down to 0.1, less `SLACK` (a hair for run-to-run noise: branches taken only under some timings,
subprocesses that may be killed before they save), when that is higher; it never lowers it.
Lowering the floor is a deliberate edit of ``coverage-floor.txt`` that a reviewer sees.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR_FILE = ROOT / "coverage-floor.txt"
WORST = 8
SLACK = 0.1


def read_floor(path: Path) -> float:
    """The floor: the first line of the file that is not blank or a ``#`` comment."""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return float(line)
    raise SystemExit(f"{path}: no floor figure found")


def write_floor(path: Path, floor: float) -> None:
    """Replace the figure in the floor file, keeping its comment lines."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    kept = [line for line in lines if line.strip().startswith("#")]
    path.write_text("\n".join([*kept, f"{floor:.1f}"]) + "\n", encoding="utf-8")


def measure(data_file: Path) -> tuple[float, list[str]]:
    """Total coverage (percent, branches included) and the report lines of the files missing most."""
    import coverage

    if not data_file.exists():
        raise SystemExit(f"{data_file} not found: run `make test` (pytest --cov) first")
    cov = coverage.Coverage(data_file=str(data_file), config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    report = io.StringIO()
    total = cov.report(file=report, ignore_errors=True, sort="-miss")
    lines = report.getvalue().splitlines()
    rows = [line for line in lines[2:] if line and not line.startswith(("-", "TOTAL")) and "skipped" not in line]
    return total, [*lines[:2], *rows[:WORST]] if rows else []


def main(argv: list[str] | None = None) -> int:
    """Check (default) or raise (``--update``) the coverage floor; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="raise the stored floor when coverage went up")
    parser.add_argument("--data-file", type=Path, default=ROOT / ".coverage", help="combined coverage data")
    parser.add_argument("--floor-file", type=Path, default=FLOOR_FILE, help="file holding the floor")
    args = parser.parse_args(argv)

    total, worst = measure(args.data_file)
    floor = read_floor(args.floor_file) if args.floor_file.exists() else 0.0
    print(f"branch coverage of src/agentrt: {total:.2f}% (floor {floor:.1f}%, {args.floor_file.name})")
    if worst:
        print("\n".join(["files missing most (`.venv/bin/coverage report -m` for all):", *worst]))

    candidate = round(math.floor(total * 10) / 10 - SLACK, 1)
    if args.update:
        if candidate > floor:
            write_floor(args.floor_file, candidate)
            print(f"floor raised to {candidate:.1f}%: commit {args.floor_file.name}")
        else:
            print("floor unchanged")
        return 0
    if total + 1e-9 < floor:
        print(
            f"FAIL: coverage {total:.2f}% is below the floor {floor:.1f}%. Add tests for the new code "
            f"(`.venv/bin/coverage report -m` lists the missed lines), or lower {args.floor_file.name} "
            "deliberately in the same change.",
            file=sys.stderr,
        )
        return 1
    if candidate > floor:
        print(f"coverage went up: `make coverage-ratchet` raises the floor to {candidate:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
