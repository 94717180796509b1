"""The exit hint of `agentrt chat` / `agentrt work` is the whole command: parsing it gives the invocation back."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.cli import build_app
from agentrt.cli._resume import command_line, resume_from_context

ROOT = Path(__file__).parents[3]
HINT = "is saved; continue it with "

# Any text a shell can pass as one argument (no NUL, no lone surrogates): spaces, quotes, $, newlines...
texts = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
words = st.text("ab-_:=./ *'\"$", min_size=1, max_size=8)


def _command(name: str) -> Any:
    return typer.main.get_command(build_app()).commands[name]  # type: ignore[attr-defined]


def _parse(name: str, args: list[str]) -> Any:
    return _command(name).make_context(name, list(args))


def _options(draw: st.DrawFn, spec: dict[str, st.SearchStrategy[Any]]) -> list[str]:
    """Long options in the ``--name=value`` form (any value, even one starting with '-'), in a drawn order."""
    args: list[list[str]] = []
    for option, values in spec.items():
        for value in draw(values):
            if isinstance(value, bool):
                args.append([option if value else "--no-" + option.removeprefix("--")])
            else:
                args.append([f"{option}={value}"])
    order = draw(st.permutations(range(len(args)))) if args else []
    return [token for i in order for token in args[i]]


def _some(values: st.SearchStrategy[Any], most: int = 1) -> st.SearchStrategy[list[Any]]:
    return st.lists(values, max_size=most)


@st.composite
def chat_invocations(draw: st.DrawFn) -> list[str]:
    return [
        "--model=" + draw(texts),
        *_options(
            draw,
            {
                "--tools": _some(texts, 3),
                "--session": _some(texts),
                "--user": _some(texts),
                "--store": _some(texts),
                "--system": _some(texts),
                "--confirm": _some(words, 3),
                "--permission": _some(st.sampled_from(["default", "accept_edits", "explore", "bypass", "dont_ask"])),
                "--option": _some(texts, 3),
                "--max-iters": _some(st.integers(-5, 500)),
                "--thinking": _some(st.booleans()),
            },
        ),
    ]


@st.composite
def work_invocations(draw: st.DrawFn) -> list[str]:
    options = [
        "--model=" + draw(texts),
        *_options(
            draw,
            {
                "--session": _some(texts),
                "--user": _some(texts),
                "--store": _some(texts),
                "--permission": _some(st.sampled_from(["default", "accept_edits", "explore"])),
                "--option": _some(texts, 2),
                "--max-iters": _some(st.integers(0, 99)),
                "--thinking": _some(st.booleans()),
                "--sandbox": _some(st.booleans()),
                "--shell": _some(st.booleans()),
            },
        ),
    ]
    if draw(st.booleans()):
        options.append("--plan")
    if draw(st.booleans()):
        options.append("--continue")
    path = draw(st.none() | texts)
    return options if path is None else [*options, "--", path]


def _round_trip(name: str, argv: list[str], session_id: str, **resume: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the params the hint parses to, the params of the invocation it should reproduce)."""
    ctx = _parse(name, argv)
    hint = command_line(resume_from_context(ctx, ("agentrt", name), **resume)(session_id))
    tokens = shlex.split(hint)
    assert tokens[:2] == ["agentrt", name], hint
    return dict(_parse(name, tokens[2:]).params), {**ctx.params, "session": session_id}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=chat_invocations(), session_id=texts)
def test_chat_hint_parses_back_to_the_invocation(argv: list[str], session_id: str) -> None:
    again, original = _round_trip("chat", argv, session_id)
    assert again == original


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=work_invocations(), session_id=texts, root=texts)
def test_work_hint_parses_back_to_the_invocation(argv: list[str], session_id: str, root: str) -> None:
    # The folder is made absolute, --continue becomes the --session it picked.
    again, original = _round_trip("work", argv, session_id, overrides={"path": "/abs/" + root}, drop=("continue_last",))
    assert again == {**original, "path": "/abs/" + root, "continue_last": False}


def _run(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "60"}
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", *cmd], cwd=cwd, env=env, input="/exit\n", capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(HINT) == 1, done.stdout
    return done.stdout.split(HINT, 1)[1].removesuffix("\n")  # the last thing printed (it may span lines)


def test_chat_prints_the_full_command_on_exit(tmp_path: Path) -> None:
    """The real command: tools, permission mode and rules, store, user, system prompt and options come back."""
    (tmp_path / "my_tools.py").write_text(
        "from agentrt import tool\n\n@tool\ndef shout(text: str) -> str:\n    '''Shout.'''\n    return text.upper()\n"
    )
    argv = [
        "chat",
        "--model",
        "scripted:echo",
        "--tools",
        "my_tools:shout",
        "--permission",
        "explore",
        "--confirm",
        "sh*",
        "--store",
        f"sqlite:///{tmp_path / 'my state.db'}",
        "--user",
        "ann",
        "--system",
        'Be brief; it\'s $HOME, "quoted"\nand on two lines',
        "--option",
        "latency=0",
        "--max-iters",
        "3",
        "--no-thinking",
    ]
    hint = _run(argv, tmp_path)
    tokens = shlex.split(hint)
    assert tokens[:2] == ["agentrt", "chat"]
    session = _parse("chat", tokens[2:]).params
    assert session["session"].startswith("chat-")
    assert session == {**_parse("chat", argv[1:]).params, "session": session["session"]}
    # ...and running it continues that session, in that store.
    assert _run(tokens[1:], tmp_path) == hint


def test_work_prints_the_full_command_on_exit(tmp_path: Path) -> None:
    folder = tmp_path / "my project"
    folder.mkdir()
    argv = ["work", str(folder), "--model", "scripted:workspace", "--no-sandbox", "--no-shell", "--permission"]
    argv += ["accept_edits", "--user", "ann", "--continue"]
    hint = _run(argv, tmp_path)
    params = _parse("work", shlex.split(hint)[2:]).params
    expected = {**_parse("work", argv[1:]).params, "continue_last": False, "session": params["session"]}
    assert params == expected
    assert f"agentrt work {shlex.quote(str(folder))} --model scripted:workspace --session " in hint
