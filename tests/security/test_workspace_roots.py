"""Every tool and preset confined to a folder checks that folder the same way (`workspace_root`).

Generated spellings of a bad root (NUL bytes, bytes, non-paths, missing folders, files, protected
folders and links to them) get a `UserError` from each constructor, never another exception, and
nothing is created on disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentrt.errors import UserError
from agentrt.harness import WorkspaceAgent, WorkspaceInstructions
from agentrt.model import ScriptedModel
from agentrt.permission import workspace_root
from agentrt.tool.builtin import FileTools, PlanTools, ShellTool

CONSTRUCTORS: dict[str, Callable[[Any], object]] = {
    "FileTools": FileTools,
    "PlanTools": PlanTools,
    "ShellTool": ShellTool,
    "WorkspaceInstructions": lambda root: WorkspaceInstructions(root, user_file=None),
    "WorkspaceAgent": lambda root: WorkspaceAgent(root, ScriptedModel(["ok"]), sandbox=None),
}


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roots")
    (root / "a-file.txt").write_text("x")
    (root / ".git").mkdir()
    (root / ".ssh").mkdir()
    (root / "link-to-ssh").symlink_to(root / ".ssh")
    (root / "ok").mkdir()
    return root


def bad_roots(place: Path) -> st.SearchStrategy[object]:
    text = st.text(max_size=12)
    return st.one_of(
        text.map(lambda t: str(place / "ok") + "\x00" + t),
        text.map(lambda t: str(place / f"missing-{t.replace('/', '_').replace(chr(0), '')}-x")),
        st.sampled_from(
            [
                str(place / "a-file.txt"),
                str(place / ".git"),
                str(place / ".ssh"),
                str(place / "link-to-ssh"),
                place / ".git",
                str(place / "ok").encode(),
                None,
                42,
                ["a"],
                "",
                "   ",
            ]
        ),
    )


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_bad_roots_get_a_user_error_and_create_nothing(place: Path, name: str) -> None:
    before = sorted(p.name for p in place.rglob("*"))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(root=bad_roots(place))
    def check(root: object) -> None:
        assume(not (name == "WorkspaceInstructions" and root is None))  # None there: the user's file only
        with pytest.raises(UserError):
            CONSTRUCTORS[name](root)

    check()
    assert sorted(p.name for p in place.rglob("*")) == before


def test_a_good_root_is_its_real_path(place: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(place / "ok")
    assert workspace_root(link, "X") == os.path.realpath(place / "ok")
    assert FileTools(link).root == os.path.realpath(place / "ok")
    with pytest.raises(UserError, match="X root must be a path"):
        workspace_root(3.5, "X")
