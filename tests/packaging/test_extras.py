"""Every extra installs cleanly on its own, from the built wheel, into a brand-new venv, and works.

scripts/check_dist.py ``--extras`` makes one venv per extra (``agentrt[openai]``, ..., ``[all]``,
and ``[ray]``, which `all` leaves out), two at a time, with uv from its cache, and runs its probe
in each: the modules the extra enables import and their main classes are built (a model of each
provider, the Redis and SQL stores, the ASGI app serving the web UI from the wheel, the MCP client,
the telemetry middlewares, skills, YAML datasets, DOCX/HTML loading with sqlite-vec, prices, Ray).
In the same venv, each feature whose extra is *not* installed must fail with agentrt's typed error
naming ``agentrt[EXTRA]``; the few that do not yet are the probe's known gaps (``gap`` lines), which
fail the probe once they are fixed, so the table is kept true. One run serves all the tests here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from dist_support import Built, check_dist, run_check_dist

EXTRAS_TIMEOUT = 900.0
"""Fifteen venvs: about a minute with uv's cache on two cores; the first run on a machine downloads ~600 MB."""

EXTRAS: list[str] = check_dist.feature_extras()


@pytest.fixture(scope="module")
def extras_report(dist: Built, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each extra's outcome and output, from one ``check_dist.py --wheel W --extras`` run."""
    report = tmp_path_factory.mktemp("extras") / "report.json"
    proc = run_check_dist("--wheel", str(dist.wheel), "--extras", "--report", str(report), timeout=EXTRAS_TIMEOUT)
    assert report.is_file(), f"scripts/check_dist.py --extras wrote no report:\n{proc.stdout}{proc.stderr}"
    return {r["extra"]: r for r in json.loads(Path(report).read_text())}


def test_every_feature_extra_has_a_probe() -> None:
    """A new extra in pyproject.toml needs its checks in scripts/check_dist.py (ENABLED and MISSING)."""
    extras = set(EXTRAS) - {"all"}
    assert set(check_dist.ENABLED) == extras
    assert set(check_dist.MISSING) == extras
    assert {"ray", "all"} <= set(EXTRAS)
    assert "ray" not in check_dist.extra_members("all")  # large: left out of `all`
    assert set(check_dist.extra_members("all")) == extras - {"ray"}


@pytest.mark.slow
@pytest.mark.timeout(EXTRAS_TIMEOUT + 60)
@pytest.mark.parametrize("extra", EXTRAS)
def test_the_extra_installs_alone_and_its_modules_work(extra: str, extras_report: dict[str, dict[str, Any]]) -> None:
    result = extras_report[extra]
    log = result["log"]
    assert result["ok"], f"agentrt[{extra}]: {result['error']}\n{log}"
    for member in check_dist.extra_members(extra):
        assert re.search(rf"^ok   agentrt\[{member}\] enabled: ", log, re.MULTILINE), log
    assert "+ agentrt==" in log and ".whl)" in log, "agentrt came from the built wheel"
    assert not re.search(r"^FAIL ", log, re.MULTILINE)


@pytest.mark.slow
@pytest.mark.timeout(EXTRAS_TIMEOUT + 60)
@pytest.mark.parametrize("extra", EXTRAS)
def test_features_of_other_extras_name_the_extra_to_install(
    extra: str, extras_report: dict[str, dict[str, Any]]
) -> None:
    log = extras_report[extra]["log"]
    named = re.findall(r"^ok   agentrt\[(\w+)\] missing: .*agentrt\[\1\]", log, re.MULTILINE)
    assert named, f"agentrt[{extra}]: no feature of a missing extra was tried\n{log}"
    assert extra not in named
