"""Workspace file tools: confinement (escapes, symlinks, protected paths) and each tool's behaviour."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.message import ToolUseBlock
from agentrt.permission import Decision, PermissionContext, PermissionEngine, PermissionMode, PermissionRule
from agentrt.tool import Toolkit
from agentrt.tool.builtin import FileTools
from agentrt.tool.builtin import files as files_module
from agentrt.tool.builtin.files import glob_match


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret\n")
    return out


@pytest.fixture
def ws(tmp_path: Path, outside: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("# Project\nhello world\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    print('hello')\n\n\ndef helper():\n    return 42\n")
    (root / "src" / "util.py").write_text("VALUE = 1\n")
    (root / "src" / "notes.txt").write_text("TODO: hello again\n")
    (root / ".env").write_text("API_KEY=hello-secret\n")
    (root / ".env.local").write_text("TOKEN=hello\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\nhello = 1\n")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("PRIVATE KEY hello\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "lib.js").write_text("hello from node_modules\n")
    (root / "image.bin").write_bytes(b"\x89PNG\x00\x00hello\x00")
    # Symlinks: out of the workspace (a directory and a file), inside to inside, inside to a secret.
    os.symlink(outside, root / "out_dir")
    os.symlink(outside / "secret.txt", root / "out_file.txt")
    os.symlink(root / "src" / "util.py", root / "util_link.py")
    os.symlink(root / ".env", root / "innocent.txt")
    return root


@pytest.fixture
def tools(ws: Path) -> FileTools:
    return FileTools(ws)


async def run(tools: FileTools, name: str, **args: Any) -> Any:
    """Run a tool the way the executor does: validation, injection, worker thread."""
    return await getattr(tools, name).invoke(args, RuntimeContext())


def decide(
    tools: FileTools,
    name: str,
    args: dict[str, Any],
    mode: PermissionMode = PermissionMode.DEFAULT,
    workspace: str | None = None,
    rules: tuple[PermissionRule, ...] = (),
) -> Decision:
    engine = PermissionEngine(PermissionContext(mode=mode, workspace=workspace, rules=rules))
    call = ToolUseBlock(id="call_1", name=name, input=args)
    return engine.check(getattr(tools, name), call, RuntimeContext()).decision


# -- registration and flags ----------------------------------------------------------------------------
def test_registers_six_tools_with_permission_flags(tools: FileTools) -> None:
    toolkit = Toolkit()
    toolkit.register(tools)
    assert toolkit.names() == ["edit_file", "glob_files", "grep_files", "list_dir", "read_file", "write_file"]
    for name in ("read_file", "list_dir", "glob_files", "grep_files"):
        t = toolkit.get(name)
        assert t is not None and t.read_only and not t.destructive and t.check_permission is not None
    for name in ("write_file", "edit_file"):
        t = toolkit.get(name)
        assert t is not None and t.destructive and t.edit and not t.read_only and t.check_permission is not None


def test_each_instance_checks_its_own_root(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    ta, tb = FileTools(a), FileTools(b)
    assert decide(ta, "read_file", {"path": "../b/x"}) is Decision.DENY
    assert decide(tb, "read_file", {"path": "../b/x"}) is Decision.ALLOW


def test_root_must_exist_and_not_be_protected(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not an existing directory"):
        FileTools(tmp_path / "missing")
    (tmp_path / ".ssh").mkdir()
    with pytest.raises(UserError, match="protected"):
        FileTools(tmp_path / ".ssh")


# -- confinement ---------------------------------------------------------------------------------------------
ESCAPES = [
    "../outside/secret.txt",
    "src/../../outside/secret.txt",
    "out_dir/secret.txt",  # symlink to a directory outside
    "out_file.txt",  # symlink to a file outside
    "out_dir",
]


@pytest.mark.parametrize("path", ESCAPES)
async def test_escapes_are_refused_at_execution(tools: FileTools, path: str) -> None:
    with pytest.raises(ToolRetry, match="outside the workspace"):
        await run(tools, "read_file", path=path)
    with pytest.raises(ToolRetry, match="outside the workspace"):
        await run(tools, "write_file", path=path, content="pwned")
    assert (Path(tools.root).parent / "outside" / "secret.txt").read_text() == "top secret\n"


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("mode", list(PermissionMode))
def test_escapes_are_denied_by_the_engine_in_every_mode(tools: FileTools, path: str, mode: PermissionMode) -> None:
    for name, args in (
        ("read_file", {"path": path}),
        ("list_dir", {"path": path}),
        ("grep_files", {"pattern": "x", "path": path}),
        ("write_file", {"path": path, "content": "x"}),
        ("edit_file", {"path": path, "old": "a", "new": "b"}),
    ):
        assert decide(tools, name, args, mode=mode, workspace=tools.root) is Decision.DENY, (name, mode)


async def test_absolute_paths_outside_are_refused_inside_are_allowed(tools: FileTools, outside: Path) -> None:
    with pytest.raises(ToolRetry, match="outside the workspace"):
        await run(tools, "read_file", path=str(outside / "secret.txt"))
    with pytest.raises(ToolRetry, match="outside the workspace"):
        await run(tools, "read_file", path="/etc/passwd")
    assert decide(tools, "read_file", {"path": "/etc/passwd"}) is Decision.DENY
    text = await run(tools, "read_file", path=os.path.join(tools.root, "README.md"))
    assert "hello world" in text


async def test_nul_bytes_are_refused(tools: FileTools) -> None:
    with pytest.raises(ToolRetry, match="NUL"):
        await run(tools, "read_file", path="README.md\x00.txt")
    assert decide(tools, "read_file", {"path": "README.md\x00"}) is Decision.DENY
    assert decide(tools, "glob_files", {"pattern": "*\x00"}) is Decision.DENY


async def test_symlink_inside_to_inside_is_allowed(tools: FileTools, ws: Path) -> None:
    assert "VALUE = 1" in await run(tools, "read_file", path="util_link.py")
    assert decide(tools, "read_file", {"path": "util_link.py"}) is Decision.ALLOW
    # Writing through the link replaces the target's content and keeps the link.
    await run(tools, "write_file", path="util_link.py", content="VALUE = 2\n")
    assert (ws / "src" / "util.py").read_text() == "VALUE = 2\n"
    assert (ws / "util_link.py").is_symlink()


# -- protected paths -------------------------------------------------------------------------------------------
PROTECTED = [".env", ".env.local", ".git/config", ".ssh/id_rsa", "innocent.txt", "src/../.env", ".git"]


@pytest.mark.parametrize("path", PROTECTED)
@pytest.mark.parametrize("mode", list(PermissionMode))
def test_protected_paths_are_denied_by_the_engine(tools: FileTools, path: str, mode: PermissionMode) -> None:
    assert decide(tools, "read_file", {"path": path}, mode=mode, workspace=tools.root) is Decision.DENY
    assert decide(tools, "write_file", {"path": path, "content": "x"}, mode=mode, workspace=tools.root) is (
        Decision.DENY
    )
    assert decide(tools, "list_dir", {"path": path}, mode=mode) is Decision.DENY


def test_allow_rules_cannot_override_the_protected_path_denial(tools: FileTools) -> None:
    rules = (PermissionRule(tool="*", decision=Decision.ALLOW),)
    assert decide(tools, "read_file", {"path": ".env"}, rules=rules) is Decision.DENY


@pytest.mark.parametrize("path", PROTECTED)
async def test_protected_paths_are_refused_at_execution(tools: FileTools, ws: Path, path: str) -> None:
    with pytest.raises(ToolRetry, match="protected path"):
        await run(tools, "read_file", path=path)
    with pytest.raises(ToolRetry, match="protected path"):
        await run(tools, "write_file", path=path, content="pwned")
    assert (ws / ".env").read_text() == "API_KEY=hello-secret\n"


async def test_new_protected_files_cannot_be_created(tools: FileTools, ws: Path) -> None:
    for path in (".env.production", "sub/.ssh/authorized_keys", ".git/hooks/pre-commit", "credentials.json"):
        with pytest.raises(ToolRetry, match="protected path"):
            await run(tools, "write_file", path=path, content="x")
        assert decide(tools, "write_file", {"path": path, "content": "x"}) is Decision.DENY
        assert not (ws / path).exists()


def test_mode_defaults_apply_to_allowed_paths(tools: FileTools) -> None:
    root = tools.root
    assert decide(tools, "read_file", {"path": "README.md"}) is Decision.ALLOW
    assert decide(tools, "read_file", {"path": "README.md"}, mode=PermissionMode.EXPLORE) is Decision.ALLOW
    assert decide(tools, "grep_files", {"pattern": "x"}, mode=PermissionMode.EXPLORE) is Decision.ALLOW
    write = {"path": "src/new.py", "content": "x"}
    assert decide(tools, "write_file", write) is Decision.ASK
    assert decide(tools, "write_file", write, mode=PermissionMode.EXPLORE) is Decision.DENY
    assert decide(tools, "write_file", write, mode=PermissionMode.ACCEPT_EDITS, workspace=root) is Decision.ALLOW
    edit = {"path": "README.md", "old": "a", "new": "b"}
    assert decide(tools, "edit_file", edit, mode=PermissionMode.ACCEPT_EDITS, workspace=root) is Decision.ALLOW
    assert decide(tools, "write_file", write, mode=PermissionMode.BYPASS) is Decision.ALLOW
    assert decide(tools, "write_file", write, mode=PermissionMode.DONT_ASK) is Decision.DENY


# -- read_file -----------------------------------------------------------------------------------------------------
async def test_read_file_numbers_lines(tools: FileTools) -> None:
    text = await run(tools, "read_file", path="src/app.py")
    assert text.splitlines()[0] == "     1\tdef main():"
    assert text.splitlines()[5] == "     6\t    return 42"
    assert "truncated" not in text


async def test_read_file_offset_limit_and_marker(tools: FileTools, ws: Path) -> None:
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    text = await run(tools, "read_file", path="long.txt", offset=10, limit=5)
    lines = text.splitlines()
    assert lines[:5] == [f"{n:>6}\tline {n}" for n in range(11, 16)]
    assert lines[5] == "[... truncated: showed lines 11-15 of 100; call read_file with offset=15 to read on]"
    default = await run(tools, "read_file", path="long.txt")
    assert default.splitlines()[-1] == "   100\tline 100"
    tail = await run(tools, "read_file", path="long.txt", offset=95, limit=10)
    assert tail.splitlines()[-1] == "   100\tline 100" and "truncated" not in tail
    with pytest.raises(ToolRetry, match="past the end"):
        await run(tools, "read_file", path="long.txt", offset=100)


async def test_read_file_output_size_limit(ws: Path) -> None:
    (ws / "wide.txt").write_text("".join(f"{i:04d} " + "x" * 95 + "\n" for i in range(1000)))
    small = FileTools(ws, max_read_bytes=2000)
    text = await run(small, "read_file", path="wide.txt")
    assert len(text) < 2300
    assert "truncated (output size limit)" in text and "of 1000" in text


async def test_read_file_cuts_very_long_lines(tools: FileTools, ws: Path) -> None:
    (ws / "min.js").write_text("a" * 50_000 + "\nsecond\n")
    text = await run(tools, "read_file", path="min.js")
    first, second = text.splitlines()
    assert first.endswith("[... line cut]") and len(first) < 2100
    assert second == "     2\tsecond"


async def test_read_file_refuses_binary_directories_and_missing(tools: FileTools, ws: Path) -> None:
    with pytest.raises(ToolRetry, match="binary"):
        await run(tools, "read_file", path="image.bin")
    with pytest.raises(ToolRetry, match="directory"):
        await run(tools, "read_file", path="src")
    with pytest.raises(ToolRetry, match="does not exist"):
        await run(tools, "read_file", path="nope.txt")
    (ws / "empty.txt").write_text("")
    assert await run(tools, "read_file", path="empty.txt") == "(empty.txt is empty)"


async def test_read_file_rejects_bad_arguments_via_the_schema(tools: FileTools) -> None:
    from agentrt.errors import ToolArgumentsError

    with pytest.raises(ToolArgumentsError):
        await run(tools, "read_file", path="README.md", offset=-1)
    with pytest.raises(ToolArgumentsError):
        await run(tools, "read_file", path="README.md", limit=0)


# -- list_dir ---------------------------------------------------------------------------------------------------------
async def test_list_dir(tools: FileTools) -> None:
    text = await run(tools, "list_dir")
    lines = text.splitlines()
    assert lines[0].startswith("./ (")
    assert "src/" in lines
    assert any(line.startswith("README.md  (") for line in lines)
    assert ".env  (21 B) (protected)" in lines
    assert ".git/ (protected)" in lines
    assert "out_dir@ (points outside the workspace)" in lines
    assert "util_link.py@" in lines
    assert "innocent.txt@ (protected)" in lines
    sub = await run(tools, "list_dir", path="src")
    assert sub.splitlines()[0] == "src/ (3 entries)"
    with pytest.raises(ToolRetry, match="not a directory"):
        await run(tools, "list_dir", path="README.md")


# -- glob_files -------------------------------------------------------------------------------------------------------
async def test_glob_files(tools: FileTools) -> None:
    assert (await run(tools, "glob_files", pattern="**/*.py")).splitlines() == [
        "src/app.py",
        "src/util.py",
        "util_link.py",
    ]
    assert (await run(tools, "glob_files", pattern="*.py", path="src")).splitlines() == ["src/app.py", "src/util.py"]
    assert (await run(tools, "glob_files", pattern="src/*.{txt,md}")).splitlines() == ["src/notes.txt"]
    assert (await run(tools, "glob_files", pattern="*")).splitlines() == [
        "README.md",
        "image.bin",
        "src/",
        "util_link.py",
    ]
    assert "No files match" in await run(tools, "glob_files", pattern="**/*.rs")


async def test_glob_skips_protected_outside_and_vendored(tools: FileTools) -> None:
    everything = (await run(tools, "glob_files", pattern="**")).splitlines()
    assert everything
    for hidden in (".env", ".env.local", ".git/", ".git/config", ".ssh/", "innocent.txt", "out_file.txt"):
        assert hidden not in everything
    assert not any(p.startswith(("node_modules", "out_dir/")) for p in everything)
    assert "node_modules/lib.js" in await run(tools, "glob_files", pattern="*.js", path="node_modules")


@pytest.mark.parametrize("pattern", ["/etc/*", "../outside/*", "src/../../*"])
async def test_glob_patterns_cannot_leave_the_directory(tools: FileTools, pattern: str) -> None:
    with pytest.raises(ToolRetry, match="Permission denied"):
        await run(tools, "glob_files", pattern=pattern)
    assert decide(tools, "glob_files", {"pattern": pattern}) is Decision.DENY


def test_glob_match() -> None:
    assert glob_match(["**", "*.py"], ["a.py"])
    assert glob_match(["**", "*.py"], ["x", "y", "a.py"])
    assert not glob_match(["*.py"], ["x", "a.py"])
    assert glob_match(["src", "**"], ["src", "a", "b"])
    assert glob_match(["a", "**", "b", "**", "c"], ["a", "b", "x", "c"])
    assert not glob_match(["a", "?"], ["a", "bc"])


# -- grep_files --------------------------------------------------------------------------------------------------------
async def test_grep_files(tools: FileTools) -> None:
    text = await run(tools, "grep_files", pattern=r"hel+o")
    lines = text.splitlines()
    assert "README.md:2: hello world" in lines
    assert "src/app.py:2:     print('hello')" in lines
    assert "src/notes.txt:1: TODO: hello again" in lines
    assert lines[-1].endswith("file(s)")
    joined = "\n".join(lines)
    # Secrets, repository internals, binaries, vendored dirs and files outside are never searched.
    for absent in ("secret", ".env", ".git", ".ssh", "image.bin", "node_modules", "out_dir", "out_file"):
        assert absent not in joined, absent


async def test_grep_filters_and_limits(tools: FileTools, ws: Path) -> None:
    assert (await run(tools, "grep_files", pattern="def ", glob="*.py")).splitlines()[:2] == [
        "src/app.py:1: def main():",
        "src/app.py:5: def helper():",
    ]
    assert "notes" not in await run(tools, "grep_files", pattern="hello", glob="*.py")
    assert "README" not in await run(tools, "grep_files", pattern="hello", glob="src/**")
    assert "src/notes.txt:1:" in await run(tools, "grep_files", pattern="todo", ignore_case=True)
    assert "No matches" in await run(tools, "grep_files", pattern="todo")
    single = await run(tools, "grep_files", pattern="return", path="src/app.py")
    assert single.splitlines()[0] == "src/app.py:6:     return 42"
    (ws / "many.txt").write_text("match\n" * 50)
    limited = await run(tools, "grep_files", pattern="match", path="many.txt", max_matches=5)
    assert limited.count("many.txt:") == 5 and "stopped at 5 matches" in limited


async def test_grep_bad_regex_goes_back_to_the_model(tools: FileTools) -> None:
    with pytest.raises(ToolRetry, match="Invalid regular expression"):
        await run(tools, "grep_files", pattern="(unclosed")


async def test_grep_on_protected_file_is_refused(tools: FileTools) -> None:
    with pytest.raises(ToolRetry, match="protected path"):
        await run(tools, "grep_files", pattern="KEY", path=".env")
    assert decide(tools, "grep_files", {"pattern": "KEY", "path": ".git"}) is Decision.DENY


# -- write_file ------------------------------------------------------------------------------------------------------
async def test_write_file_creates_and_overwrites_atomically(tools: FileTools, ws: Path) -> None:
    msg = await run(tools, "write_file", path="pkg/sub/mod.py", content="x = 1\ny = 2\n")
    assert msg == "Created pkg/sub/mod.py (12 bytes, 2 lines)."
    assert (ws / "pkg" / "sub" / "mod.py").read_text() == "x = 1\ny = 2\n"
    os.chmod(ws / "pkg" / "sub" / "mod.py", 0o600)
    msg = await run(tools, "write_file", path="pkg/sub/mod.py", content="z = 3")
    assert msg.startswith("Overwrote pkg/sub/mod.py")
    assert (ws / "pkg" / "sub" / "mod.py").read_text() == "z = 3"
    assert stat.S_IMODE((ws / "pkg" / "sub" / "mod.py").stat().st_mode) == 0o600
    assert sorted(os.listdir(ws / "pkg" / "sub")) == ["mod.py"]  # no temporary files left


async def test_write_file_limits(ws: Path) -> None:
    small = FileTools(ws, max_write_bytes=10)
    with pytest.raises(ToolRetry, match="limit is 10"):
        await run(small, "write_file", path="big.txt", content="x" * 11)
    assert not (ws / "big.txt").exists()
    with pytest.raises(ToolRetry, match="is a directory"):
        await run(small, "write_file", path="src", content="x")


# -- edit_file ---------------------------------------------------------------------------------------------------------
async def test_edit_file_unique_match(tools: FileTools, ws: Path) -> None:
    msg = await run(tools, "edit_file", path="src/app.py", old="return 42", new="return 43")
    assert msg == "Edited src/app.py: replaced 1 occurrence(s), first at line 6."
    assert "return 43" in (ws / "src" / "app.py").read_text()


async def test_edit_file_errors_are_clear(tools: FileTools, ws: Path) -> None:
    with pytest.raises(ToolRetry, match=r"occurs 2 times in src/app\.py \(lines 1, 5\)"):
        await run(tools, "edit_file", path="src/app.py", old="def ", new="async def ")
    with pytest.raises(ToolRetry, match="was not found"):
        await run(tools, "edit_file", path="src/app.py", old="def  main", new="x")
    with pytest.raises(ToolRetry, match="empty"):
        await run(tools, "edit_file", path="src/app.py", old="", new="x")
    with pytest.raises(ToolRetry, match="the same"):
        await run(tools, "edit_file", path="src/app.py", old="def", new="def")
    with pytest.raises(ToolRetry, match="does not exist"):
        await run(tools, "edit_file", path="missing.py", old="a", new="b")
    with pytest.raises(ToolRetry, match="binary"):
        await run(tools, "edit_file", path="image.bin", old="hello", new="bye")
    assert (ws / "src" / "app.py").read_text().count("def ") == 2  # untouched


async def test_edit_file_replace_all_and_crlf(tools: FileTools, ws: Path) -> None:
    msg = await run(tools, "edit_file", path="src/app.py", old="def ", new="async def ", replace_all=True)
    assert "replaced 2 occurrence(s)" in msg
    assert (ws / "src" / "app.py").read_text().count("async def ") == 2
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await run(tools, "edit_file", path="win.txt", old="one\ntwo", new="1\n2")
    assert (ws / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_file_replace_all_refuses_a_blowup_before_building_it(tools: FileTools, ws: Path) -> None:
    (ws / "many_a.txt").write_text("a" * 10_000)
    with pytest.raises(ToolRetry, match="larger than 1000000 bytes"):
        await run(tools, "edit_file", path="many_a.txt", old="a", new="b" * 1000, replace_all=True)
    assert (ws / "many_a.txt").read_text() == "a" * 10_000


# -- grep with RE2, and the file tools off the loop -----------------------------------------------------------
async def test_grep_speaks_re2_and_explains_python_only_syntax(tools: FileTools, ws: Path) -> None:
    (ws / "re.txt").write_text("Hello World\nthe end\nprice: $42\n")
    assert "re.txt:1:" in await run(tools, "grep_files", pattern=r"(?i)^hello (?P<who>\w+)$", path="re.txt")
    assert "re.txt:2:" in await run(tools, "grep_files", pattern=r"end\Z", path="re.txt")  # Python's \Z
    assert "re.txt:3:" in await run(tools, "grep_files", pattern=r"\$\d+", path="re.txt")
    with pytest.raises(ToolRetry, match=r"lookbehind.*does not support.*RE2") as info:
        await run(tools, "grep_files", pattern=r"(?<=\$)\d+", path="re.txt")
    assert "Rewrite the pattern" in info.value.message


async def test_grep_line_numbers_agree_with_read_file(tools: FileTools, ws: Path) -> None:
    (ws / "odd.txt").write_bytes(b"one\x0ctwo\r\nthree\x1cx\nfour\n")
    assert (await run(tools, "grep_files", pattern="four", path="odd.txt")).splitlines()[0] == "odd.txt:3: four"
    assert "     3\tfour" in await run(tools, "read_file", path="odd.txt")
    assert "odd.txt:1: one\x0ctwo" in await run(tools, "grep_files", pattern="two$", path="odd.txt")


async def test_list_dir_of_a_big_directory_shows_the_first_entries_by_name(tools: FileTools, ws: Path) -> None:
    big = ws / "big"
    big.mkdir()
    for i in reversed(range(1500)):
        (big / f"f{i:04d}").touch()
    lines = (await run(tools, "list_dir", path="big")).splitlines()
    assert lines[0] == "big/ (1500 entries)"
    assert lines[1].startswith("f0000") and lines[1000].startswith("f0999")
    assert lines[-1] == "[... 500 more entries not shown]"


async def test_walks_list_huge_directories_in_name_order(
    tools: FileTools, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "_SORT_IN_ONE_GO", 10)  # the step-by-step heap sort path
    (ws / "many").mkdir()
    for i in reversed(range(50)):
        (ws / "many" / f"n{i:02d}.txt").write_text(f"value {i}\n")
    found = (await run(tools, "grep_files", pattern="value", path="many")).splitlines()
    assert found[:3] == ["many/n00.txt:1: value 0", "many/n01.txt:1: value 1", "many/n02.txt:1: value 2"]
    assert (await run(tools, "glob_files", pattern="*.txt", path="many")).splitlines()[:2] == [
        "many/n00.txt",
        "many/n01.txt",
    ]


async def test_fifos_never_block_the_file_tools(tools: FileTools, ws: Path) -> None:
    os.mkfifo(ws / "src" / "pipe")  # opening it for reading would wait for a writer forever
    assert "src/app.py:2:" in await run(tools, "grep_files", pattern="print", path="src")
    with pytest.raises(ToolRetry, match="not a regular file"):
        await run(tools, "grep_files", pattern="x", path="src/pipe")
    with pytest.raises(ToolRetry, match="not a regular file"):
        await run(tools, "read_file", path="src/pipe")
