"""What the packaging tests share: scripts/check_dist.py (as a module and as a command) and the built files."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "check_dist.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


check_dist = _load(SCRIPT, "check_dist")
"""The script `make dist` runs: its content checks and its table of extras are what the tests use too."""


def run_check_dist(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python scripts/check_dist.py ARGS`` as `make dist` runs it (this venv's Python, from the checkout)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass(frozen=True, slots=True)
class Built:
    """The sdist and wheel `check_dist.py` built and checked, and what it printed."""

    wheel: Path
    sdist: Path
    output: str
