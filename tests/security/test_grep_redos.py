"""grep_files with hostile patterns: answers come promptly, the event loop keeps ticking, RE2 gaps are explained.

Python's `re` backtracks: ``(a+)+$`` on 27 ``a`` and a ``!`` took seconds while holding the GIL, so a
worker thread froze the whole server. grep_files now matches with RE2 (linear time, GIL released);
each test runs the real tool through an agent while a 10 ms ticker measures the loop's longest stall.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop_lag_support import LAG_BUDGET, LoopLagProbe, run_calls

from agentrt import RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock
from agentrt.errors import ToolRetry
from agentrt.tool.builtin import FileTools
from agentrt.tool.builtin import files as files_module

# Sized so Python's `re` needs seconds (not hours) on them: ``(a+)+$`` takes ~6 s on 26 "a" and a "!",
# four times LAG_BUDGET, so a regression fails by seconds.
HOSTILE_LINES = ["a" * 26 + "!", "x" * 26, "ab" * 13, "word " * 5 + "!", "ok"]
HOSTILE_PATTERNS = [
    r"(a+)+$",
    r"(a|aa)+$",
    r"(.*a){20}",
    r"(x+x+)+y",
    r"(\w+\s?)*$",
    r"^(a*)*b$",
    r"(a|a?)+$",
    r"([a-z]+)*[0-9]",
    r"(.*){1,32000}[bc]",
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grep_ws")
    (root / "hostile.txt").write_text("\n".join(HOSTILE_LINES) + "\n")
    (root / "sub").mkdir()
    (root / "sub" / "more.txt").write_text("\n".join(reversed(HOSTILE_LINES)) + "\n")
    return root


async def grep(root: Path, **args: object) -> tuple[ToolResultBlock, float, float]:
    """Run grep_files through an agent: ``(result, loop's longest stall, seconds taken)``."""
    toolkit = Toolkit()
    toolkit.register(FileTools(root))
    started = time.monotonic()
    async with LoopLagProbe() as probe:
        results = await run_calls(toolkit, [ToolUseBlock(id="g", name="grep_files", input=dict(args))])
    return results["g"], probe.max_gap, time.monotonic() - started


@pytest.mark.parametrize("pattern", HOSTILE_PATTERNS)
async def test_hostile_patterns_answer_without_stalling_the_loop(ws: Path, pattern: str) -> None:
    result, lag, _ = await grep(ws, pattern=pattern)
    assert lag < LAG_BUDGET, f"{pattern!r} stalled the event loop for {lag:.2f} s"
    text = str(result.output)
    assert "timed out" not in text, text
    assert result.state == "success" or "RE2" in text or "Invalid regular expression" in text, text


async def test_results_are_still_right(ws: Path) -> None:
    result, lag, _ = await grep(ws, pattern=r"(a+)+!$")
    assert lag < LAG_BUDGET
    assert result.state == "success"
    lines = str(result.output).splitlines()
    assert "hostile.txt:1: " + "a" * 26 + "!" in lines
    assert "sub/more.txt:5: " + "a" * 26 + "!" in lines
    assert lines[-1] == "2 matching line(s) in 2 file(s)"


def nested_quantifiers() -> st.SearchStrategy[str]:
    """Patterns with nested quantifiers and alternations: the classic catastrophic-backtracking shapes."""
    atoms = st.sampled_from(["a", "aa", "a|aa", ".", r"\w", "a?", "[ab]", "x", r"\s?", "(?:a|b)"])
    quantifiers = st.sampled_from(["+", "*", "?", "{1,5}", "{2,}", "+?", "*?", "{0,30}"])
    leaf = st.builds(lambda atom, q: f"(?:{atom}){q}", atoms, quantifiers)
    tree = st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(lambda body, q: f"({body}){q}", inner, quantifiers),
            st.builds(lambda left, right: left + right, inner, inner),
            st.builds(lambda left, right: f"(?:{left}|{right})+", inner, inner),
        ),
        max_leaves=6,
    )
    return st.builds(
        lambda head, body, tail: head + body + tail,
        st.sampled_from(["", "^"]),
        tree,
        st.sampled_from(["$", "b", "!", "y", ""]),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=nested_quantifiers())
async def test_generated_nested_quantifiers_never_stall_the_loop(ws: Path, pattern: str) -> None:
    result, lag, _ = await grep(ws, pattern=pattern)
    assert lag < LAG_BUDGET, f"{pattern!r} stalled the event loop for {lag:.2f} s"
    assert "timed out" not in str(result.output), (pattern, result.output)


@pytest.mark.parametrize(
    ("pattern", "unsupported"),
    [
        (r"(a)\1", r"backreferences (\1)"),
        (r"(?P<q>['\"]).*(?P=q)", "named backreferences"),
        (r"foo(?=bar)", "lookahead"),
        (r"foo(?!bar)", "negative lookahead"),
        (r"(?<=\$)\d+", "lookbehind"),
        (r"(?<!x)y", "negative lookbehind"),
        (r"(?>a+)b", "atomic groups"),
        (r"a*+b", "possessive quantifiers"),
        (r"(a)?(?(1)b|c)", "conditional groups"),
        (r"(?x) a b", "inline flags"),
        (r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10", r"backreferences (\10)"),  # RE2 alone reads \10 as octal
        (r"x\12", r"backreferences (\12)"),
    ],
)
async def test_unsupported_syntax_goes_back_to_the_model_saying_what(ws: Path, pattern: str, unsupported: str) -> None:
    result, _, _ = await grep(ws, pattern=pattern)
    assert result.state == "error"
    text = str(result.output)
    assert unsupported in text and "RE2" in text and "does not support" in text, text
    assert "hostile.txt" not in text  # nothing was searched


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [("(unclosed", "Invalid regular expression"), ("a{2000}", "limited to 1000"), (r"[z-a]", "Invalid")],
)
async def test_invalid_patterns_get_a_clear_error(ws: Path, pattern: str, fragment: str) -> None:
    result, _, _ = await grep(ws, pattern=pattern)
    assert result.state == "error" and fragment in str(result.output), result.output


async def test_python_end_of_string_anchor_is_translated(ws: Path) -> None:
    result, _, _ = await grep(ws, pattern=r"word !\Z")
    assert result.state == "success" and "hostile.txt:4:" in str(result.output), result.output


async def test_long_lines_are_searched_exactly_in_bounded_windows(tmp_path: Path) -> None:
    # 1.5 MB lines: a 1006-character match at the very end, and a needle in the middle that "^" must not find.
    (tmp_path / "long.txt").write_text(
        "b" * 1_500_000 + "y" * 1000 + "needle\n" + "c" * 700_000 + "needle" + "c" * 700_000 + "\n"
    )
    big_program = r"y{1000}needle$"  # ~1000 instructions: the lines are searched in windows
    result, lag, _ = await grep(tmp_path, pattern=big_program)
    assert lag < LAG_BUDGET
    assert result.state == "success" and "long.txt:1:" in str(result.output), result.output
    assert "long.txt:2:" not in str(result.output)
    anchored, _, _ = await grep(tmp_path, pattern=r"^c{1000}needle")
    assert "No matches" in str(anchored.output), anchored.output  # "^" holds at the line start only
    inside, _, _ = await grep(tmp_path, pattern=r"c{1000}needlec{500}")
    assert "long.txt:2:" in str(inside.output), inside.output
    shown = next(line for line in str(result.output).splitlines() if line.startswith("long.txt:1:"))
    assert shown.endswith(" [...]") and len(shown) < 400  # a huge line is never printed in full


async def test_the_time_budget_stops_a_slow_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # RE2's slowest mode costs (line length x program size); many such lines exceed any budget.
    monkeypatch.setattr(files_module, "SEARCH_SECONDS", 1.0)
    noise = random.Random(7).randbytes(300 * 10_000).translate(bytes(b"ab"[i % 2] for i in range(256)))
    (tmp_path / "slow.txt").write_bytes(b"\n".join(noise[i : i + 300] for i in range(0, len(noise), 300)))
    pattern = r"(\w{1,200}a\w{1,200}b){5}$"  # on random a/b lines RE2 needs its NFA: milliseconds a line
    result, lag, took = await grep(tmp_path, pattern=pattern, max_matches=2000)
    assert lag < LAG_BUDGET
    assert result.state == "success", result.output
    assert "stopped after 1 s" in str(result.output), str(result.output)[-300:]
    assert took < 10  # the budget (1 s) plus one bounded regex step, not the 10 000 lines


async def test_python_backreferences_are_never_searched_as_octal(tmp_path: Path) -> None:
    """``\\10`` is group 10 for Python and the character 0o10 for RE2: refused, not silently searched."""
    (tmp_path / "ctl.txt").write_text("a\x08\nb\n\nS\n")
    for pattern in (r"\10", r"(a)\12", r"\18"):
        result, _, _ = await grep(tmp_path, pattern=pattern)
        assert result.state == "error" and "backreferences" in str(result.output), (pattern, result.output)
        assert "ctl.txt" not in str(result.output)
    octal, _, _ = await grep(tmp_path, pattern=r"\123")  # three octal digits: "S" for both engines
    assert "ctl.txt:4: S" in str(octal.output), octal.output


@pytest.mark.parametrize("pattern", ["\ud800", "a\udcff", "(\udbff)+"])
async def test_lone_surrogates_get_a_clear_error(ws: Path, pattern: str) -> None:
    """JSON can carry a lone surrogate (``"\\ud800"``); UTF-8 cannot, so RE2 never sees it."""
    tools = FileTools(ws)
    with pytest.raises(ToolRetry, match="not valid Unicode"):
        await tools.grep_files.invoke({"pattern": pattern}, RuntimeContext())
