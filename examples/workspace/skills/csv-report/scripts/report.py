"""Summarise a CSV file as Markdown: rows, columns, and min / max / mean of each numeric column.

Usage: python3 report.py FILE.csv [--out REPORT.md]   (without --out the report goes to stdout)
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def summarise(path: Path) -> str:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0]) if rows else []
    lines = [f"# {path.name}", "", f"{len(rows)} rows; columns: {', '.join(columns) or '(none)'}", ""]
    numeric, other = [], []
    for column in columns:
        values = [_number(row[column] or "") for row in rows]
        if values and all(v is not None for v in values):
            nums = [v for v in values if v is not None]
            numeric.append(f"| {column} | {min(nums):g} | {max(nums):g} | {sum(nums) / len(nums):g} |")
        else:
            other.append(column)
    if numeric:
        lines += ["| column | min | max | mean |", "|---|---|---|---|", *numeric, ""]
    if other:
        lines.append(f"Not numeric: {', '.join(other)}")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--out", type=Path, help="Write the report here instead of to stdout.")
    args = parser.parse_args(argv)
    try:
        report = summarise(args.file)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        print(f"report.py: cannot summarise {args.file}: {exc}", file=sys.stderr)
        return 1
    if args.out is None:
        sys.stdout.write(report)
    else:
        args.out.write_text(report, encoding="utf-8")
        print(f"wrote {args.out} ({len(report.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
