"""The wheel and sdist, built once per session by scripts/check_dist.py (the `make dist` check)."""

from __future__ import annotations

import pytest
from dist_support import Built, run_check_dist

BUILD_TIMEOUT = 300.0
"""Build, twine check, a fresh venv and ``agentrt demo``: about 10 s with uv's cache, more on a cold one."""


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`make dist`'s whole check, into a temporary folder: fails with the script's output if a step fails."""
    outdir = tmp_path_factory.mktemp("dist")
    proc = run_check_dist("--outdir", str(outdir), timeout=BUILD_TIMEOUT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"scripts/check_dist.py failed:\n{output}"
    (wheel,) = outdir.glob("agentrt-*.whl")
    (sdist,) = outdir.glob("agentrt-*.tar.gz")
    return Built(wheel=wheel, sdist=sdist, output=output)
