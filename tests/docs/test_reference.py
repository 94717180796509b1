"""Every public name of agentrt is in the API reference of the docs site.

The public names are those of ``agentrt.__all__`` and of the ``__all__`` of every public module
(no part of its dotted name starts with an underscore), each module imported for real. The reference
is what the site says it documents: its objects inventory, ``site/objects.inv``, which mkdocstrings
writes as it renders each object (an object it cannot render is not in it). ``make test`` builds the
site first (``make docs``); run alone, this test builds it into a temporary folder when
``site/objects.inv`` is missing or older than the docs, mkdocs.yml or the sources.

A name counts as documented when the inventory has it under its own path (``agentrt.state.X``), or
when it is the very object the inventory has under another path: the lazily imported exports
(``agentrt.model.count_tokens``, ``agentrt.tool.Inject``) that griffe cannot see are documented under
the module that defines them. A missing name fails with the page to add it to.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import shutil
import subprocess
import sys
import types
import zlib
from collections.abc import Iterable
from pathlib import Path

import pytest

import agentrt

ROOT = Path(__file__).parents[2]
SITE_INVENTORY = ROOT / "site" / "objects.inv"
SOURCES = [ROOT / "mkdocs.yml", *(ROOT / "docs").rglob("*.md"), *(ROOT / "src" / "agentrt").rglob("*.py")]

Inventory = dict[str, set[str]]
"""A path of the inventory -> its roles (``py:class``, ``py:module``...)."""


# -- what is public ------------------------------------------------------------------------------
def public_modules() -> dict[str, types.ModuleType]:
    """``agentrt`` and every module under it with no ``_``-prefixed part, imported."""
    modules: dict[str, types.ModuleType] = {"agentrt": agentrt}
    for info in pkgutil.walk_packages(agentrt.__path__, "agentrt."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            modules[info.name] = importlib.import_module(info.name)
    return modules


def public_names(modules: dict[str, types.ModuleType]) -> dict[str, object]:
    """``"module.name"`` -> the object, for each public name of each module's ``__all__``."""
    names: dict[str, object] = {}
    for module_name, module in modules.items():
        for name in getattr(module, "__all__", ()):
            if not name.startswith("_"):
                names[f"{module_name}.{name}"] = getattr(module, name)
    return names


# -- what the site documents ---------------------------------------------------------------------
def read_inventory(path: Path) -> Inventory:
    """Parse a Sphinx objects inventory (version 2): four header lines, then zlib-compressed rows."""
    data = path.read_bytes()
    header, _, compressed = data.partition(b"# The remainder of this file is compressed using zlib.\n")
    assert header.startswith(b"# Sphinx inventory version 2"), f"{path} is not a Sphinx v2 inventory"
    inventory: Inventory = {}
    for row in zlib.decompress(compressed).decode().splitlines():
        name, role, *_ = row.split(" ")
        inventory.setdefault(name, set()).add(role)
    return inventory


def _resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise LookupError(path)


def undocumented(expected: dict[str, object], inventory: Inventory) -> list[str]:
    """The paths of ``expected`` the inventory documents neither by path nor as the same object."""
    by_last: dict[str, list[str]] = {}
    for path, roles in inventory.items():
        if roles - {"py:module"}:
            by_last.setdefault(path.rpartition(".")[2], []).append(path)
    missing = []
    for path, obj in expected.items():
        roles = inventory.get(path, set())
        # A module is documented as a module; anything else by a non-module entry (agentrt.evals.compare
        # names both a module and a function: the module's entry does not document the function).
        if (roles & {"py:module"}) if inspect.ismodule(obj) else (roles - {"py:module"}):
            continue
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and any(
            _same(candidate, obj) for candidate in by_last.get(path.rpartition(".")[2], ())
        ):
            continue
        missing.append(path)
    return missing


def _same(path: str, obj: object) -> bool:
    try:
        return _resolve(path) is obj
    except (LookupError, AttributeError):
        return False


def _newest_source() -> float:
    return max(path.stat().st_mtime for path in SOURCES if path.exists())


def _build_site(into: Path) -> Path:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None, "mkdocs is not installed beside this interpreter (the dev extra has it)"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--quiet", "--site-dir", str(into)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return into / "objects.inv"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    if SITE_INVENTORY.exists() and SITE_INVENTORY.stat().st_mtime >= _newest_source():
        return read_inventory(SITE_INVENTORY)
    return read_inventory(_build_site(tmp_path_factory.mktemp("site")))


@pytest.fixture(scope="module")
def modules() -> dict[str, types.ModuleType]:
    return public_modules()


# -- the checks ----------------------------------------------------------------------------------
def _page_of(path: str) -> str:
    areas = sorted((p.stem for p in (ROOT / "docs" / "reference").glob("*.md")), key=len, reverse=True)
    for area in areas:
        if path.startswith(f"agentrt.{area.replace('-', '.')}."):
            return f"docs/reference/{area}.md"
    return "docs/reference/agentrt.md"


def _report(missing: Iterable[str]) -> str:
    return "\n".join(
        f"  {path}: add it to the `::: {path.rpartition('.')[0]}` directive of {_page_of(path)}" for path in missing
    )


def test_every_public_name_is_in_the_reference(modules: dict[str, types.ModuleType], inventory: Inventory) -> None:
    expected = public_names(modules)
    # Not vacuous: the packages and names of the public API are all collected.
    assert len(modules) >= 100 and len(expected) >= 800, (len(modules), len(expected))
    for top in agentrt.__all__:
        assert f"agentrt.{top}" in expected
    for package in ("agent", "model", "tool", "state", "permission", "memory", "knowledge", "mcp", "pipeline"):
        assert sum(path.startswith(f"agentrt.{package}.") for path in expected) >= 5, package
    missing = undocumented(expected, inventory)
    assert not missing, f"{len(missing)} public name(s) missing from the API reference:\n{_report(missing)}"


def test_every_public_module_has_a_section(modules: dict[str, types.ModuleType], inventory: Inventory) -> None:
    missing = [name for name in modules if "py:module" not in inventory.get(name, set())]
    assert not missing, "public modules without a `::: module` directive in docs/reference/: " + ", ".join(missing)


def test_a_missing_name_is_reported(modules: dict[str, types.ModuleType], inventory: Inventory) -> None:
    expected = public_names(modules)
    # The same inventory, without any entry for SqliteStateStore (its paths and its members').
    crippled = {path: roles for path, roles in inventory.items() if "SqliteStateStore" not in path}
    missing = undocumented(expected, crippled)
    assert "agentrt.state.SqliteStateStore" in missing
    assert "agentrt.state.stores.sqlite.SqliteStateStore" in missing
    assert "agentrt.state.SqliteStateStore: add it to" in _report(missing)
    assert undocumented({"agentrt.state.SqliteStateStore": expected["agentrt.state.SqliteStateStore"]}, inventory) == []


def test_a_name_of_a_new_module_is_reported(inventory: Inventory) -> None:
    class Undocumented:
        pass

    fake = types.ModuleType("agentrt.not_documented")
    fake.__dict__.update(__all__=["Undocumented", "LIMIT", "_private"], Undocumented=Undocumented, LIMIT=3)
    assert public_names({"agentrt.not_documented": fake}) == {
        "agentrt.not_documented.Undocumented": Undocumented,
        "agentrt.not_documented.LIMIT": 3,
    }
    assert undocumented(public_names({"agentrt.not_documented": fake}), inventory) == [
        "agentrt.not_documented.Undocumented",
        "agentrt.not_documented.LIMIT",
    ]


def test_a_module_entry_does_not_document_a_function_of_the_same_path(inventory: Inventory) -> None:
    from agentrt.evals import compare

    assert "py:module" in inventory["agentrt.evals.compare"]
    assert undocumented({"agentrt.evals.compare": compare}, inventory) == []  # under agentrt.evals.compare.compare
    assert undocumented({"agentrt.evals.compare": compare}, {"agentrt.evals.compare": {"py:module"}}) == [
        "agentrt.evals.compare"
    ]
