"""Suggested rules are never wider than the call: interpreters and wrappers get the exact command only,
a generalisation never covers options, chaining or other programs, and rules sent back with an answer
are vetted by `check_answer_rule`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import (
    ConfirmResult,
    GenerateReason,
    Msg,
    PermissionMode,
    PermissionRule,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt.errors import UserError
from agentrt.model import ScriptedModel
from agentrt.permission import Decision, check_answer_rule, suggest_rules
from agentrt.permission.commands import _COMPOUND_WORDS
from agentrt.permission.suggest import _GENERALISABLE
from agentrt.state import InMemoryStateStore
from agentrt.tool.builtin import FileTools, ShellTool

# Calls of interpreters and wrappers: each may run anything, so only the exact call may be suggested.
WRAPPED = [
    "sh -c 'echo hi'",
    "bash -c 'echo hi'",
    "zsh -c 'echo hi'",
    "dash -c 'echo hi'",
    "fish -c 'echo hi'",
    "python -c 'print(1)'",
    "python3 script.py",
    "python3.12 -m http.server",
    "node -e 1",
    "perl -e 1",
    "ruby -e 1",
    "php -r 1",
    "env X=1 ls",
    "xargs ls",
    "sudo ls",
    "doas ls",
    "su -c ls",
    "nohup ls",
    "timeout 5 ls",
    "nice -n 5 ls",
    "time ls",
    "watch ls",
    "exec ls",
    "eval ls",
    "source env.sh",
    ". env.sh",
    "command ls",
    "builtin echo hi",
    "busybox ls",
    "npx cowsay hi",
    "uvx ruff check",
    "find . -name x -exec ls {} ;",
    "find . -delete",
    "find . -fprint out",
    "git -c core.pager=less status",
    "git -C sub status",
    "git --exec-path=/tmp status",
    "git push --receive-pack=git-receive-pack origin main",
    "git config core.fsmonitor true",
    "awk '{print}' f",
    "sed s/a/b/ f",
    "make test",
    "./run.sh",
    "bin/tool --fast",
    # programs no deny-list names: interpreters, wrappers and runners under other names
    "pipenv run pytest",
    "sqlite3 app.db 'select 1'",
    "ksh93 build.sh",
    "bash5 build.sh",
    "gosu app ls",
    "chrt 5 ls",
    "taskset 1 ls",
    "hyperfine ls",
    "xvfb-run ls",
    "rustup run stable cargo",
    "mise exec ls",
    "m4 macros.m4",
    "mycli --fast",
    # writes named by an option value or an operand
    "sort -o out.txt in.txt",
    "tree -o out.txt",
    "rg --pre cat TODO .",
    "uniq in.txt",
    "tee out.txt",
    "touch a.txt",
    # git subcommands that discard or redirect work
    "git checkout main",
    "git restore a.txt",
    "git reset HEAD~1",
    "git stash",
    "git rm a.txt",
    "git remote add up x",
    "git reflog",
    # line continuations bash removes before it reads assignments and reserved words
    "X\\\n=1 bash x.sh",
    "!\\\n bash x.sh",
]

DANGEROUS_TAILS = [
    "; rm -rf ~",
    " && touch /tmp/pwned",
    " | sh",
    " $(touch /tmp/pwned)",
    " > ~/.bashrc",
    " --receive-pack='touch /tmp/pwned'",
    " --rec='touch /tmp/pwned'",
    " -exec rm -rf {} ;",
    " -delete",
    " -c core.sshCommand='touch /tmp/pwned'",
    " rm -rf ~",
]


def _rules_for(command: str) -> list[PermissionRule]:
    return suggest_rules("run_command", {"command": command})


@pytest.mark.parametrize("command", WRAPPED)
def test_wrappers_and_interpreters_get_only_the_exact_call(command: str) -> None:
    [exact] = _rules_for(command)
    assert exact.matches("run_command", {"command": command})


@st.composite
def _altered(draw: st.DrawFn) -> tuple[str, str]:
    original = draw(st.sampled_from([*WRAPPED, "git push origin main", "ls -la", "find . -name x", "cat a.txt"]))
    how = draw(st.integers(0, 3))
    if how == 0:  # a dangerous tail
        return original, original + draw(st.sampled_from(DANGEROUS_TAILS))
    words = original.split(" ")
    if how == 1:  # the program, or an argument, replaced by a dangerous one
        i = draw(st.integers(0, len(words) - 1))
        choices = ["rm", "sh", "sudo"] if i == 0 else ["-delete", "--upload-pack=x", "-c", "--exec=x", "-exec"]
        words[i] = draw(st.sampled_from(choices))
        return original, " ".join(words)
    if how == 2:  # a dangerous option inserted after the program (and subcommand)
        i = draw(st.integers(1, min(2, len(words))))
        words.insert(i, draw(st.sampled_from(["-c x=y", "--exec=x", "--upload-pack=x", "-C /", "-exec sh ;"])))
        return original, " ".join(words)
    # another program in the same shape
    return original, "rm" + original[len(words[0]) :]


@settings(max_examples=400, deadline=None)
@given(_altered())
def test_suggestions_never_match_an_altered_dangerous_call(case: tuple[str, str]) -> None:
    original, altered = case
    if altered == original:
        return
    rules = _rules_for(original)
    assert rules, original
    for rule in rules:
        assert rule.matches("run_command", {"command": original})
        assert not rule.matches("run_command", {"command": altered}), (original, altered, rule.args)


def test_find_generalisation_excludes_actions() -> None:
    _, general = _rules_for("find . -name '*.py'")
    assert general.matches("run_command", {"command": "find . -name '*.md'"})
    for command in ("find . -delete", "find . -name x -delete", "find . -exec rm {} \\;", "find . -fprint /etc/x"):
        assert not general.matches("run_command", {"command": command}), command


def test_git_remote_generalisations_take_names_only() -> None:
    for command in ("git push origin main", "git fetch origin", "git pull origin main"):
        _, general = _rules_for(command)
        assert general.matches("run_command", {"command": command.replace("origin", "upstream")})
        sub = command.split()[1]
        for other in (
            f"git {sub} https://evil.example/x.git main",
            f"git {sub} git@evil.example:x.git main",
            f"git {sub} origin +main",
            f"git {sub} origin :main",
            f"git {sub} origin main:refs/heads/x",
            f"git {sub} ext::sh main",
            f"git {sub} /tmp/elsewhere main",
            f"git {sub} 'origin' 'x y'",
        ):
            assert not general.matches("run_command", {"command": other}), (command, other)


_PROGRAM = st.from_regex(r"[a-z][a-z0-9._+-]{0,10}", fullmatch=True)
_ARGS = st.lists(st.from_regex(r"[a-z0-9./]{1,6}", fullmatch=True), max_size=3)


@settings(max_examples=300, deadline=None)
@given(program=_PROGRAM, args=_ARGS)
def test_an_unknown_program_gets_only_the_exact_call(program: str, args: list[str]) -> None:
    """An allow-list, not a deny-list: a program not known to only read its operands is never generalised."""
    if program in _GENERALISABLE:
        return
    command = " ".join([program, *args])
    if program in _COMPOUND_WORDS:  # a shell keyword ("in", "do", ...) is no program: no rule at all
        assert _rules_for(command) == []
        return
    [exact] = _rules_for(command)
    assert exact.matches("run_command", {"command": command})
    assert not exact.matches("run_command", {"command": command + " x"})


def test_git_push_generalisation_excludes_options() -> None:
    _, general = _rules_for("git push origin main")
    assert general.matches("run_command", {"command": "git push upstream feature"})
    for command in (
        "git push --receive-pack='touch x' origin",
        "git push --rec=x origin",
        "git push --exec=x origin",
        "git -c core.sshCommand=x push origin",
        "git push origin main; touch x",
        "git pushx",
    ):
        assert not general.matches("run_command", {"command": command}), command


def test_path_generalisation_is_never_the_root_or_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for path in ("/etc", "/x.txt", f"{tmp_path}/home/x.txt", f"{tmp_path}/x.txt", "~/notes.txt"):
        rules = suggest_rules("write_file", {"path": path, "content": "x"}, workspace=str(tmp_path / "home" / "ws"))
        assert len(rules) == 1, (path, rules)
    rules = suggest_rules("write_file", {"path": "src/a.py", "content": "x"}, workspace=str(tmp_path / "home" / "ws"))
    assert rules[-1].args == {"path": "src/**"}


def test_a_command_that_cannot_be_parsed_gets_no_suggestion() -> None:
    assert suggest_rules("run_command", {"command": "echo $'\\x41'"}) == []


# -- check_answer_rule --------------------------------------------------------------------------------------
def _tools(tmp_path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"run_command": ShellTool(tmp_path).run_command}
    files = FileTools(tmp_path)
    out.update(read_file=files.read_file, write_file=files.write_file)

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return to

    out["send_email"] = send_email
    return out


REFUSED = [
    ("run_command", PermissionRule(tool="*")),
    ("run_command", PermissionRule(tool="run_*", args={"command": "ls"})),
    ("run_command", PermissionRule(tool="run_comman?", args={"command": "ls"})),
    ("run_command", PermissionRule(tool="[r]un_command", args={"command": "ls"})),
    ("run_command", PermissionRule(tool="write_file", args={"path": "x"})),
    ("run_command", PermissionRule(tool="run_command")),
    ("run_command", PermissionRule(tool="run_command", args={"command": "*"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "re:.*"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "re:.+"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "re:(?s).*"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "?*"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "bash *"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "python3 *"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "git *"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "git push *"})),
    ("run_command", PermissionRule(tool="run_command", args={"command": "re:git push.*"})),
    ("run_command", PermissionRule(tool="run_command", args={"timeout": "10"})),
    ("write_file", PermissionRule(tool="write_file")),
    ("write_file", PermissionRule(tool="write_file", args={"path": "/**"})),
    ("write_file", PermissionRule(tool="write_file", args={"path": "~/**"})),
    ("write_file", PermissionRule(tool="write_file", args={"path": "../**"})),
    ("write_file", PermissionRule(tool="write_file", args={"path": "re:.*"})),
    ("write_file", PermissionRule(tool="write_file", args={"content": "*"})),
]


@pytest.mark.parametrize(("name", "rule"), REFUSED)
def test_check_answer_rule_refuses_wide_allow_rules(tmp_path: Path, name: str, rule: PermissionRule) -> None:
    assert check_answer_rule(rule, tool=_tools(tmp_path)[name], mode=PermissionMode.DEFAULT) is not None


def test_check_answer_rule_refuses_non_read_only_tools_in_explore(tmp_path: Path) -> None:
    tools = _tools(tmp_path)
    rule = PermissionRule(tool="write_file", args={"path": "a.txt"})
    assert check_answer_rule(rule, tool=tools["write_file"], mode=PermissionMode.EXPLORE) is not None
    assert check_answer_rule(rule, tool=tools["write_file"], mode=PermissionMode.DEFAULT) is None
    read = PermissionRule(tool="read_file", args={"path": "a.txt"})
    assert check_answer_rule(read, tool=tools["read_file"], mode=PermissionMode.EXPLORE) is None


@pytest.mark.parametrize(
    "rule",
    [
        PermissionRule(tool="*", decision=Decision.DENY),
        PermissionRule(tool="run_*", decision=Decision.ASK, args={"command": "*"}),
        PermissionRule(tool="other", decision=Decision.DENY),
    ],
)
def test_check_answer_rule_accepts_deny_and_ask_rules(tmp_path: Path, rule: PermissionRule) -> None:
    assert check_answer_rule(rule, tool=_tools(tmp_path)["run_command"], mode=PermissionMode.EXPLORE) is None


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("run_command", {"command": "git push origin main"}),
        ("run_command", {"command": "ls -la src"}),
        ("run_command", {"command": "bash -c 'echo hi; ls'"}),
        ("run_command", {"command": "find . -name '*.py'"}),
        ("write_file", {"path": "src/a.py", "content": "x"}),
        ("send_email", {"to": "bob@example.com", "body": "hi"}),
    ],
)
def test_every_suggestion_passes_check_answer_rule(tmp_path: Path, name: str, args: dict[str, Any]) -> None:
    tool_obj = _tools(tmp_path)[name]
    rules = suggest_rules(name, args, workspace=str(tmp_path))
    assert rules
    for rule in rules:
        assert check_answer_rule(rule, tool=tool_obj, mode=PermissionMode.DEFAULT) is None, rule


# -- side effects: answers through a real agent ---------------------------------------------------------------
def _shell_agent(ws: Path, steps: list[Any], store: InMemoryStateStore) -> tuple[ReActAgent, ScriptedModel]:
    toolkit = Toolkit()
    toolkit.register(ShellTool(ws, timeout=20))
    model = ScriptedModel(steps)
    agent = ReActAgent("dev", "s", model=model, toolkit=toolkit, state_store=store, permission=PermissionMode.DEFAULT)
    return agent, model


async def test_an_accepted_generalisation_does_not_cover_a_chained_call(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    first = ToolUseBlock(id="c1", name="run_command", input={"command": "ls -la"})
    second = ToolUseBlock(id="c2", name="run_command", input={"command": f"ls -la; touch {marker}"})
    store = InMemoryStateStore()
    agent, _ = _shell_agent(tmp_path, [first, "listed", second, "never"], store)
    ctx = RuntimeContext(user_id="u", session_id="s")
    paused = await agent.call("list", ctx)
    [pending] = paused.metadata["pending_tool_calls"]
    general = PermissionRule.from_dict(pending["suggested_rules"][-1])
    assert general.args is not None and general.args["command"].startswith("re:ls")
    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=first, rules=[general])]), ctx)
    assert reply.text == "listed"
    paused = await agent.call("again", ctx)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert not marker.exists()


async def test_a_too_wide_rule_sent_with_an_answer_never_takes_effect(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    first = ToolUseBlock(id="c1", name="run_command", input={"command": "ls"})
    second = ToolUseBlock(id="c2", name="run_command", input={"command": f"touch {marker}"})
    store = InMemoryStateStore()
    agent, model = _shell_agent(tmp_path, [first, "listed", second, "never"], store)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.call("list", ctx)
    wide = PermissionRule(tool="run_command", args={"command": "*"})
    try:
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=first, rules=[wide])]), ctx)
    except UserError:
        state = await agent.get_state("u", "s")
        assert state.pending is not None  # refused before anything ran: the call is still pending
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=first)]), ctx)
    state = await agent.get_state("u", "s")
    assert all(PermissionRule.from_dict(r).args != {"command": "*"} for r in state.rules)
    paused = await agent.call("touch it", ctx)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert not marker.exists()
    results = [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)]
    assert all("touch" not in str(r.output) for r in results)
