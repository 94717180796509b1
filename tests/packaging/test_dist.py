"""The wheel and sdist: built, checked by twine, installed alone into a fresh venv that runs the demo.

`make dist` and these tests run the same script, scripts/check_dist.py (the ``dist`` fixture runs
it once per session), so `make test`, and CI with it, builds and installs the package on every run.
The tests then read the archives themselves: the wheel holds every file of ``src/agentrt`` (the web
UI's static files, ``py.typed``, any data file) and nothing else, the sdist what a build needs.
A wheel broken on purpose shows the script's own content check fails it.
"""

from __future__ import annotations

import re
import tarfile
import zipfile
from pathlib import Path

import pytest
from dist_support import ROOT, Built, check_dist

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

PACKAGE = ROOT / "src" / "agentrt"
MAKEFILE = ROOT / "Makefile"


def source_files() -> set[str]:
    """The files of src/agentrt as ``agentrt/...``, caches left out (listed here, not by the script)."""
    return {
        "agentrt/" + p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_dist_check_runs_every_step(dist: Built) -> None:
    out = dist.output
    assert "Building wheel from sdist" in out  # the wheel was built from the sdist, not from the tree
    assert out.count("PASSED") == 2, "twine check --strict passes the wheel and the sdist"
    version = check_dist.project()["version"]
    assert f"agentrt {version}\n" in out  # `agentrt --version` from the fresh venv
    assert "/site-packages/agentrt/__init__.py" in out  # imported from that venv, not from src/
    assert "Final answer: 128 * 37 + 500 = 5236." in out  # `agentrt demo`
    assert "dist check passed" in out
    assert dist.wheel.name == f"agentrt-{version}-py3-none-any.whl"
    assert dist.sdist.name == f"agentrt-{version}.tar.gz"


def test_the_wheel_holds_the_package_its_data_files_and_nothing_else(dist: Built) -> None:
    names = wheel_names(dist.wheel)
    dist_info = f"agentrt-{check_dist.project()['version']}.dist-info/"
    package = {n for n in names if not n.startswith(dist_info)}
    assert package == source_files()
    static = {"agentrt/server/static/" + p.name for p in (PACKAGE / "server" / "static").iterdir()}
    assert {"agentrt/server/static/index.html", "agentrt/server/static/app.js"} <= static <= names
    assert "agentrt/py.typed" in names
    data = {n for n in source_files() if not n.endswith(".py")}  # schemas, SQL, scripts, assets: whatever src has
    assert data <= names
    assert f"{dist_info}licenses/LICENSE" in names
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n]
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo")) or "/." in n]


def test_the_wheel_metadata_declares_the_command_and_every_extra(dist: Built) -> None:
    with zipfile.ZipFile(dist.wheel) as archive:
        prefix = f"agentrt-{check_dist.project()['version']}.dist-info/"
        metadata = archive.read(prefix + "METADATA").decode()
        entry_points = archive.read(prefix + "entry_points.txt").decode()
    assert re.search(r"^agentrt = agentrt\.cli:main$", entry_points, re.MULTILINE)
    assert "Requires-Python: >=3.11" in metadata
    assert "License-Expression: Apache-2.0" in metadata
    for extra in check_dist.project()["optional-dependencies"]:
        assert f"Provides-Extra: {extra}" in metadata
    assert "Requires-Dist: redis>=5.0; extra == 'redis'" in metadata


def test_the_sdist_holds_what_a_build_needs_and_no_local_files(dist: Built) -> None:
    with tarfile.open(dist.sdist) as archive:
        names = {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile() and "/" in m.name}
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO"} <= names
    assert {"src/" + n for n in source_files()} <= names
    tops = {n.split("/", 1)[0] for n in names}
    assert not tops & {".git", ".venv", "dist", "build", "site", "test-artifacts", "htmlcov", ".hypothesis"}
    assert not [n for n in names if n.split("/", 1)[0].endswith("_cache") or n.endswith("CACHEDIR.TAG")]
    assert not [n for n in names if "__pycache__" in n or "node_modules" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.split("/")[-1].startswith(".coverage")]


def test_the_content_check_fails_a_broken_wheel(dist: Built, tmp_path: Path) -> None:
    broken = tmp_path / dist.wheel.name
    with zipfile.ZipFile(dist.wheel) as source, zipfile.ZipFile(broken, "w") as target:
        for item in source.infolist():
            if item.filename != "agentrt/server/static/index.html":
                target.writestr(item, source.read(item))
        target.writestr("tests/test_leak.py", "")
        target.writestr("agentrt/__pycache__/cli.cpython-311.pyc", b"")
    problems = "\n".join(check_dist.wheel_problems(broken))
    assert "missing from the wheel: agentrt/server/static/index.html" in problems
    assert "unexpected in the wheel: tests/test_leak.py" in problems
    assert "a test or cache file in the wheel: agentrt/__pycache__/cli.cpython-311.pyc" in problems
    assert check_dist.wheel_problems(dist.wheel) == []


def make_rules() -> dict[str, str]:
    """Each Makefile rule's target line and recipe, by target name."""
    rules: dict[str, str] = {}
    name = ""
    for line in MAKEFILE.read_text().splitlines():
        if line.startswith("\t") and name:
            rules[name] += line + "\n"
        elif m := re.match(r"^([$()A-Za-z_.-]+):(?!=)(.*)$", line):
            name = m.group(1)
            rules[name] = m.group(2) + "\n"
        else:
            name = ""
    return rules


def test_make_dist_runs_this_check_and_make_demo_installs_no_extra() -> None:
    rules = make_rules()
    phony = next(line for line in MAKEFILE.read_text().splitlines() if line.startswith(".PHONY:"))
    assert {"dist", "demo"} <= set(phony.split()[1:])
    assert "scripts/check_dist.py --outdir dist" in rules["dist"]
    demo = rules["demo"]
    assert "$(STAMP)" not in demo.split("\n", 1)[0], "`make demo` must not need the dev,all install"
    (stamp,) = re.findall(r"\$\((\w+STAMP)\)", demo.split("\n", 1)[0])
    install = rules[f"$({stamp})"]
    assert "pip install -e .;" in install or "pip install -e . " in install, install  # no [extras]
    assert "--quiet" not in install and "echo" in install  # progress shown, and what is installed said
