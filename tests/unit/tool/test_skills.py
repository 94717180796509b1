"""Agent Skills: SKILL.md front matter (validation with file and line), discovery, confined reads."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.context import RuntimeContext
from agentrt.errors import SkillError, ToolRetry, UserError
from agentrt.tool import Skill, Toolkit
from agentrt.tool.skills import (
    GROUP_METADATA_KEY,
    LOAD_SKILL,
    load_skills,
    render_skill,
    skill_tool,
    skills_prompt,
)

EXAMPLES = Path(__file__).parents[3] / "examples" / "workspace" / "skills"


def write_skill(root: Path, name: str, front: str, body: str = "# Steps\nDo the thing.\n") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\n{front.rstrip()}\n---\n{body}", encoding="utf-8")
    return folder


def basic(root: Path, name: str, description: str = "Does things.", body: str = "# Steps\nDo the thing.\n") -> Path:
    return write_skill(root, name, f"name: {name}\ndescription: {description}", body)


# -- the example skills ---------------------------------------------------------------------------------


def test_the_example_skills_load() -> None:
    skills = load_skills(EXAMPLES)
    assert sorted(skills) == ["csv-report", "release-notes"]
    notes, csv = skills["release-notes"], skills["csv-report"]
    assert notes.description.startswith("Write release notes for a version")
    assert "\n" not in notes.description  # a folded block scalar
    assert notes.license == "Apache-2.0"
    assert dict(notes.metadata) == {"author": "agentrt examples", "version": "1.0"}
    assert notes.files() == ["references/style.md"]
    assert "references/style.md" in notes.body
    assert csv.allowed_tools == ("run_command",)
    assert csv.compatibility == "Needs python3 and the shell tool (run_command)."
    assert csv.files() == ["scripts/report.py"]
    assert csv.folder == EXAMPLES / "csv-report" and csv.file == EXAMPLES / "csv-report" / "SKILL.md"


# -- parsing ----------------------------------------------------------------------------------------------


def test_front_matter_fields(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "pdf-forms",
        """name: pdf-forms
description: |
  Fill PDF forms.
  Use for any form.
license: MIT
compatibility: needs poppler
allowed-tools: Bash(git add:*) Read, run_command
metadata:
  version: 1.0
  flag: yes
  empty:
  agentrt-tool-group: pdf, ocr
x-unknown-field: kept out of the way""",
    )
    skill = Skill.from_folder(folder)
    assert skill.name == "pdf-forms"
    assert skill.description == "Fill PDF forms.\nUse for any form."
    assert (skill.license, skill.compatibility) == ("MIT", "needs poppler")
    assert skill.allowed_tools == ("Bash(git add:*)", "Read", "run_command")
    # Scalars keep the text the author wrote (1.0 is not turned into 1.0 float, yes not into True).
    assert dict(skill.metadata) == {"version": "1.0", "flag": "yes", "empty": "", GROUP_METADATA_KEY: "pdf, ocr"}
    assert skill.tool_groups == ("pdf", "ocr")
    with pytest.raises(TypeError):
        skill.metadata["x"] = "y"  # type: ignore[index]  # read-only on purpose


def test_allowed_tools_as_a_list_and_crlf_and_bom(tmp_path: Path) -> None:
    folder = tmp_path / "crlf"
    folder.mkdir()
    text = (
        "\ufeff---\r\nname: crlf\r\ndescription: Windows line ends.\r\n"
        "allowed-tools:\r\n  - a\r\n  - b\r\n---\r\nBody\r\n"
    )
    (folder / "SKILL.md").write_bytes(text.encode("utf-8"))
    skill = Skill.from_folder(folder)
    assert (skill.name, skill.description, skill.allowed_tools) == ("crlf", "Windows line ends.", ("a", "b"))
    assert skill.body == "Body\r\n"


def test_the_body_is_read_on_first_use_only(tmp_path: Path) -> None:
    folder = basic(tmp_path, "lazy", body="first body\n")
    skill = load_skills(folder)["lazy"]
    # Loading read the front matter only: a body changed after loading is what the skill gives.
    (folder / "SKILL.md").write_text("---\nname: lazy\ndescription: Does things.\n---\nsecond body\n")
    assert skill.body == "second body\n"
    (folder / "SKILL.md").write_text("---\nname: lazy\ndescription: Does things.\n---\nthird body\n")
    assert skill.body == "second body\n"  # read once


def test_skills_are_immutable_and_errors_pickle(tmp_path: Path) -> None:
    skill = Skill.from_folder(basic(tmp_path, "frozen"))
    with pytest.raises(AttributeError):
        skill.name = "other"  # type: ignore[misc]
    err = SkillError("bad", path="/x/SKILL.md", line=3)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.path, back.line) == ("/x/SKILL.md:3: bad", "/x/SKILL.md", 3)
    assert isinstance(err, UserError)


# -- discovery --------------------------------------------------------------------------------------------


def test_a_folder_of_skills_a_skill_folder_and_a_skill_file(tmp_path: Path) -> None:
    basic(tmp_path, "b-skill")
    basic(tmp_path, "a-skill")
    basic(tmp_path, ".hidden")  # hidden folders are skipped (its name would not even be valid)
    (tmp_path / "not-a-skill").mkdir()
    assert list(load_skills(tmp_path)) == ["a-skill", "b-skill"]
    assert list(load_skills(tmp_path / "a-skill")) == ["a-skill"]
    assert list(load_skills(str(tmp_path / "a-skill" / "SKILL.md"))) == ["a-skill"]
    assert load_skills([]) == {}
    assert load_skills(tmp_path / "not-a-skill") == {}


def test_later_folders_win(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    basic(first, "shared", "From the first folder.")
    basic(first, "only-first")
    basic(second, "shared", "From the second folder.")
    skills = load_skills([first, second])
    assert skills["shared"].description == "From the second folder." and "only-first" in skills
    assert load_skills([second, first])["shared"].description == "From the first folder."
    # A Skill object counts as an entry too.
    assert load_skills([first, Skill.from_folder(second / "shared")])["shared"].folder == second / "shared"


def test_toolkit_register_skills(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    basic(first, "shared", "Old.")
    basic(second, "shared", "New.")
    toolkit = Toolkit()
    assert toolkit.skills == {}
    before = toolkit.skills
    assert [s.name for s in toolkit.register_skills(first)] == ["shared"]
    toolkit.register_skills([second])
    assert toolkit.skills["shared"].description == "New."
    assert before == {}  # a snapshot taken earlier does not change


@pytest.mark.parametrize("bad", [42, [42], None])
def test_bad_entries_are_user_errors(bad: object) -> None:
    with pytest.raises(UserError, match="folder paths or Skill objects"):
        load_skills(bad)  # type: ignore[arg-type]  # the wrong type on purpose


def test_missing_folders_and_files(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="does not exist") as missing:
        load_skills(tmp_path / "nope")
    assert missing.value.path == str(tmp_path / "nope")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(SkillError, match="is not a folder"):
        load_skills(tmp_path / "file.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SkillError, match=r"no SKILL\.md"):
        Skill.from_folder(tmp_path / "empty")


# -- front matter errors: file and line ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("# no front matter\n", 1, "must start with YAML front matter"),
        ("---\nname: s\ndescription: d\n", 1, "never closed"),
        ("---\n---\nbody\n", 1, "is empty"),
        ("---\n- a list\n---\n", 2, "must be a mapping"),
        ("---\nname: s\n", 1, "never closed"),
        ("---\ndescription: d\n---\n", 1, "no 'name' field"),
        ("---\nname: s\n---\n", 1, "no 'description' field"),
        ("---\n# a comment\nname: Bad_Name\ndescription: d\n---\n", 3, "lowercase letters"),
        ("---\nname: other\ndescription: d\n---\n", 2, "must equal the skill folder's name 's'"),
        ("---\nname: s\n\ndescription: [a, b]\n---\n", 4, "'description' must be text, not a list"),
        ("---\nname: s\ndescription:\n---\n", 3, "'description' is empty"),
        ("---\nname: s\ndescription: d\nname: s\n---\n", 4, "given twice (first on line 2)"),
        ("---\nname: s\ndescription: d\nmetadata: [x]\n---\n", 4, "'metadata' must be a mapping"),
        ("---\nname: s\ndescription: d\nmetadata:\n  a: b\n  nested:\n    c: d\n---\n", 6, "not a nested value"),
        ("---\nname: s\ndescription: d\nallowed-tools: {a: b}\n---\n", 4, "'allowed-tools' must be"),
        ("---\nname: s\ndescription: d\nallowed-tools:\n  - a\n  - [b]\n---\n", 6, "each entry"),
        ("---\nname: s\ndescription: d\nlicense: x: y\n---\n", 4, "invalid YAML"),
        ('---\nname: s\ndescription: "unterminated\n---\n', 3, "invalid YAML"),
        ("---\nname: s\ndescription: d\ncompatibility: " + "x" * 501 + "\n---\n", 4, "at most 500"),
        ("---\nname: s\ndescription: " + "x" * 1025 + "\n---\n", 3, "at most 1024"),
        ("---\nname: s\n[a]: b\n---\n", 3, "keys must be plain names"),
        ("---\nname: s\ndescription: bell \x07 here\n---\n", 3, "invalid character"),
    ],
)
def test_front_matter_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "SKILL.md").write_text(text, encoding="utf-8")
    with pytest.raises(SkillError) as caught:
        Skill.from_folder(folder)
    err = caught.value
    assert (err.path, err.line) == (str(folder / "SKILL.md"), line), str(err)
    assert str(err).startswith(f"{folder / 'SKILL.md'}:{line}: ")
    assert message in str(err)


def test_non_utf8_and_oversized_files(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(b"---\nname: s\ndescription: caf\xe9\n---\n")
    with pytest.raises(SkillError, match="not UTF-8") as caught:
        Skill.from_folder(folder)
    assert caught.value.line == 3
    (folder / "SKILL.md").write_bytes(b"---\nname: s\ndescription: d\n---\n" + b"x" * (1 << 20))
    with pytest.raises(SkillError, match="larger than"):
        Skill.from_folder(folder)


# The property: whatever the other lines are, one defect is reported at its own line.
@dataclass(frozen=True)
class Defect:
    lines: tuple[str, ...]
    """The defect's lines, or () for a missing field (reported on line 1, where the front matter opens)."""
    replaces: str | None
    """The field whose good line it stands in for, if any."""
    message: str
    at: int = 0
    """Which of `lines` the error names."""


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


_bad_names = st.one_of(
    st.from_regex(r"[a-z]{1,8}[A-Z_. ][a-z]{1,8}", fullmatch=True),
    st.from_regex(r"-[a-z]{1,8}|[a-z]{1,8}-|[a-z]{1,4}--[a-z]{1,4}", fullmatch=True),
    st.integers(65, 90).map(lambda n: "a" * n),
)
_defects = st.one_of(
    _bad_names.map(lambda n: Defect((f"name: {_q(n)}",), "name", "lowercase letters")),
    st.just(Defect(("name: other-name",), "name", "must equal the skill folder's name")),
    st.sampled_from(["name:", "name: ~", "name: ''"]).map(lambda ln: Defect((ln,), "name", "'name' is empty")),
    st.sampled_from(["name: [a]", "name: {a: b}"]).map(lambda ln: Defect((ln,), "name", "'name' must be text")),
    st.integers(1025, 1500).map(lambda n: Defect((f"description: {'d' * n}",), "description", "at most 1024")),
    st.just(Defect(("description: |", "  "), "description", "'description' is empty")),
    st.just(Defect(("description:", "  - a list"), "description", "must be text, not a list")),
    st.just(Defect(("metadata: just text",), None, "'metadata' must be a mapping")),
    st.just(Defect(("metadata:", "  k:", "    - v"), None, "must be a string, not a nested value", at=1)),
    st.just(Defect(("allowed-tools: {a: 1}",), None, "'allowed-tools' must be")),
    st.integers(501, 700).map(lambda n: Defect((f"compatibility: {'c' * n}",), None, "at most 500")),
    st.just(Defect(("license: a: b",), None, "invalid YAML")),
    st.just(Defect(("x-extra: 1", "  bad: indent"), None, "invalid YAML", at=1)),
    st.just(Defect((), "name", "no 'name' field")),
    st.just(Defect((), "description", "no 'description' field")),
)
_FILLERS = ["# a comment", "", "license: Apache-2.0", "x-vendor: anything", "metadata: {a: b}"]
_descriptions = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\ufffe\uffff"),
    min_size=1,
    max_size=200,
).filter(lambda t: t.strip() != "" and len(t.strip()) <= 1024)


def _with_skill_folder(check: Callable[[Path], None]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "my-skill"
        folder.mkdir()
        check(folder)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    defect=_defects,
    fillers=st.lists(st.sampled_from(_FILLERS), unique=True),
    cut=st.integers(0, len(_FILLERS)),
    name_first=st.booleans(),
)
def test_property_every_front_matter_defect_is_reported_at_its_line(
    defect: Defect, fillers: list[str], cut: int, name_first: bool
) -> None:
    keys = {ln.split(":")[0] for ln in defect.lines if ln and not ln.startswith(" ")}
    fillers = [f for f in fillers if f.split(":")[0] not in keys]  # a filler must not repeat the defect's key
    good = {"name": "name: my-skill", "description": "description: Does things."}
    fields = [good[k] for k in (("name", "description") if name_first else ("description", "name"))]
    fields = [f for f in fields if not f.startswith(f"{defect.replaces}:")]
    body = [*fillers[:cut], *defect.lines, *fillers[cut:]]
    lines = ["---", *fields[:1], *body, *fields[1:], "---", "# Body"]
    expected = 1 if not defect.lines else len(fields[:1]) + len(fillers[:cut]) + defect.at + 2

    def check(folder: Path) -> None:
        (folder / "SKILL.md").write_text("\n".join(lines), encoding="utf-8")
        with pytest.raises(SkillError) as caught:
            Skill.from_folder(folder)
        err = caught.value
        assert err.path == str(folder / "SKILL.md")
        assert err.line == expected, (str(err), lines)
        assert str(err).startswith(f"{folder / 'SKILL.md'}:{expected}: ")
        assert defect.message in str(err)

    _with_skill_folder(check)


def test_a_repeated_field_is_reported_at_its_second_line(tmp_path: Path) -> None:
    folder = tmp_path / "my-skill"
    folder.mkdir()
    for lines, line in [
        (["---", "name: my-skill", "description: d", "# x", "name: my-skill", "---"], 5),
        (["---", "description: d", "name: my-skill", "", "description: e", "---"], 5),
    ]:
        (folder / "SKILL.md").write_text("\n".join(lines))
        with pytest.raises(SkillError, match="given twice") as caught:
            Skill.from_folder(folder)
        assert caught.value.line == line


@settings(max_examples=100, deadline=None)
@given(description=_descriptions, before=st.lists(st.sampled_from(_FILLERS), unique=True))
def test_property_a_valid_front_matter_gives_back_what_was_written(description: str, before: list[str]) -> None:
    lines = ["---", "name: my-skill", *before, f"description: {_q(description)}", "---", "body"]

    def check(folder: Path) -> None:
        (folder / "SKILL.md").write_text("\n".join(lines), encoding="utf-8")
        skill = Skill.from_folder(folder)
        assert (skill.name, skill.description) == ("my-skill", description.strip())
        assert skill.body == "body"

    _with_skill_folder(check)


# -- reading files of a skill -------------------------------------------------------------------------------


@pytest.fixture
def confined(tmp_path: Path) -> Skill:
    (tmp_path / "secret.txt").write_text("TOP-SECRET-OUTSIDE\n")
    folder = basic(tmp_path / "skills", "docs")
    (folder / "references").mkdir()
    (folder / "references" / "guide.md").write_text("# Guide\nStep one.\n")
    (folder / "references" / "inner.md").symlink_to(folder / "references" / "guide.md")
    (folder / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (folder / "escape-dir").symlink_to(tmp_path)
    (folder / ".env").write_text("KEY=skill-secret\n")
    (folder / "data.bin").write_bytes(b"\x00\x01binary")
    (folder / "big.txt").write_text("é" * 100)  # 200 bytes
    return Skill.from_folder(folder)


def test_reads_files_inside_the_folder(confined: Skill) -> None:
    assert confined.read("references/guide.md") == "# Guide\nStep one.\n"
    assert confined.read("./references//guide.md") == "# Guide\nStep one.\n"
    assert confined.read("references/inner.md") == "# Guide\nStep one.\n"  # a symlink that stays inside
    assert confined.read("references") == "references/ in skill 'docs':\nguide.md\ninner.md"
    # The folder's own listing leaves out what cannot be read: hidden, protected and escaping entries.
    assert confined.read(".") == "./ in skill 'docs':\nSKILL.md\nbig.txt\ndata.bin\nreferences/"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../secret.txt", "'..' is not allowed"),
        ("references/../../secret.txt", "'..' is not allowed"),
        ("escape.txt", "leads out of the skill folder"),
        ("escape-dir/secret.txt", "leads out of the skill folder"),
        ("/etc/passwd", "is absolute"),
        ("\\etc\\passwd", "is absolute"),
        ("C:/Windows/win.ini", "is absolute"),
        (".env", "protected path"),
        ("data.bin", "binary file"),
        ("missing.md", "does not exist"),
        ("", "non-empty string"),
        ("a\x00b", "NUL byte"),
    ],
)
def test_refused_paths(confined: Skill, path: str, why: str) -> None:
    with pytest.raises(SkillError, match=why) as caught:
        confined.read(path)
    assert "TOP-SECRET" not in str(caught.value) and "skill-secret" not in str(caught.value)


def test_where_the_skill_lives_does_not_make_its_files_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ".envs" would be a protected name inside a skill; above it (or as the working directory) it is not.
    folder = basic(tmp_path / ".envs" / "skills", "docs")
    (folder / "notes.md").write_text("notes\n")
    monkeypatch.chdir(tmp_path / ".envs")
    skill = load_skills(folder)["docs"]
    assert skill.read("notes.md") == "notes\n" and skill.files() == ["notes.md"]


def test_reads_are_capped_at_a_character_boundary(confined: Skill) -> None:
    text = confined.read("big.txt", max_bytes=51)
    head, note = text.split("\n", 1)
    assert head == "é" * 25  # 50 bytes: the half character is left out
    assert note == "[cut: big.txt has 200 bytes; only the first 51 are shown]"
    assert confined.read("big.txt") == "é" * 100


def test_file_listing_skips_hidden_protected_and_symlinked_folders(confined: Skill) -> None:
    assert confined.files() == ["big.txt", "data.bin", "references/guide.md", "references/inner.md"]
    assert confined.files(limit=2) == ["big.txt", "data.bin"]


# -- the listing and the tool ------------------------------------------------------------------------------------


def test_listing_shows_names_and_descriptions_only(tmp_path: Path) -> None:
    basic(tmp_path, "b-skill", "Second <b>&</b> one.", body="BODY-B")
    basic(tmp_path, "a-skill", "First\n  one.", body="BODY-A")
    skills = load_skills(tmp_path)
    listing = skills_prompt(skills.values())
    assert '<skill name="a-skill">First one.</skill>' in listing
    assert '<skill name="b-skill">Second &lt;b&gt;&amp;&lt;/b&gt; one.</skill>' in listing
    assert listing.index("a-skill") < listing.index("b-skill")
    assert "BODY" not in listing and LOAD_SKILL in listing
    assert skills_prompt([]) == ""


async def test_the_tool_outside_an_agent(tmp_path: Path) -> None:
    folder = basic(tmp_path, "docs", body="The body.\n")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "run.sh").write_text("echo hi\n")
    skills = load_skills(tmp_path)
    loads: list[str] = []

    async def on_load(skill: Skill, ctx: RuntimeContext) -> str | None:
        loads.append(skill.name)
        return "A note."

    tool = skill_tool(lambda: skills, on_load=on_load)
    assert tool.read_only and tool.name == LOAD_SKILL
    ctx = RuntimeContext()
    text = await tool.invoke({"name": "docs"}, ctx)
    assert text.startswith(f'<skill name="docs" folder="{folder}">\nThe body.\n</skill>')
    assert "scripts/run.sh" in text and "only through the shell tool" in text and text.endswith("A note.")
    assert loads == ["docs"]
    assert await tool.invoke({"name": "docs", "path": "scripts/run.sh"}, ctx) == "echo hi\n"
    assert loads == ["docs"]  # reading a file is not loading the skill
    cases: list[tuple[dict[str, object], str]] = [
        ({"name": "nope"}, "unknown skill 'nope'; skills: docs"),
        ({"name": ""}, "'name' must be"),
        ({"name": "docs", "path": 3}, "'path' must be"),
        ({"name": "docs", "path": "../x"}, "'..' is not allowed"),
    ]
    for args, message in cases:
        with pytest.raises(ToolRetry, match=message):
            await tool.invoke(args, ctx)
    with pytest.raises(UserError):
        skill_tool(lambda: skills, max_bytes=0)


def test_render_skill_caps_the_instructions(tmp_path: Path) -> None:
    skill = Skill.from_folder(basic(tmp_path, "long", body="x" * 300))
    text = render_skill(skill, max_bytes=100)
    assert "x" * 100 + "\n[cut: the instructions have 300 bytes; only the first 100 are shown]" in text


def test_missing_pyyaml_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    folder = basic(tmp_path, "s")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(UserError, match=r"pip install 'agentrt\[harness\]'"):
        Skill.from_folder(folder)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_files_are_refused(tmp_path: Path) -> None:
    folder = basic(tmp_path, "s")
    os.mkfifo(folder / "pipe")
    with pytest.raises(SkillError, match="not a regular file"):
        Skill.from_folder(folder).read("pipe")
