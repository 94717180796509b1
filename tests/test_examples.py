"""Every example under examples/ runs offline and exits cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# Top-level scripts, and the `run_*.py` entry points of example folders (examples/evals/run_evals.py).
EXAMPLES = sorted(
    p
    for p in (*(ROOT / "examples").glob("*.py"), *(ROOT / "examples").glob("*/run_*.py"))
    if "# requires:" not in p.read_text()
)


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT / "examples")) for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "an example should show what it did"
