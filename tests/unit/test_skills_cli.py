"""`agentrt skills list|show` on the example skills and on broken ones."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentrt.cli import build_app

EXAMPLES = Path(__file__).parents[2] / "examples" / "workspace" / "skills"


def test_list_shows_name_description_and_folder() -> None:
    result = CliRunner().invoke(build_app(), ["skills", "list", str(EXAMPLES)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "csv-report" in out and "release-notes" in out
    assert out.index("csv-report") < out.index("release-notes")
    for header in ("name", "description", "folder"):
        assert header in out

    as_json = CliRunner().invoke(build_app(), ["skills", "list", "--json", str(EXAMPLES)])
    assert as_json.exit_code == 0, as_json.output
    rows = json.loads(as_json.output)
    assert [(r["name"], r["folder"]) for r in rows] == [
        ("csv-report", str(EXAMPLES / "csv-report")),
        ("release-notes", str(EXAMPLES / "release-notes")),
    ]
    assert rows[1]["description"].startswith("Write release notes for a version")


def test_list_several_folders_later_wins(tmp_path: Path) -> None:
    folder = tmp_path / "csv-report"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: csv-report\ndescription: My own version.\n---\nBody\n")
    result = CliRunner().invoke(build_app(), ["skills", "list", "--json", str(EXAMPLES), str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["csv-report"]["description"] == "My own version."
    assert rows["csv-report"]["folder"] == str(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    none = CliRunner().invoke(build_app(), ["skills", "list", str(empty)])
    assert none.exit_code == 0 and "no skills in" in none.output


def test_show_prints_front_matter_files_and_body() -> None:
    result = CliRunner().invoke(build_app(), ["skills", "show", str(EXAMPLES), "csv-report"])
    assert result.exit_code == 0, result.output
    out = result.output
    head, body = out.split("\n---\n", 1)
    assert head.splitlines()[0] == "name: csv-report"
    for line in (
        "license: Apache-2.0",
        "compatibility: Needs python3 and the shell tool (run_command).",
        "allowed-tools: run_command",
        "metadata:",
        "  version: 1.0",
        f"folder: {EXAMPLES / 'csv-report'}",
        "files: scripts/report.py",
    ):
        assert line in head.splitlines(), line
    assert body.startswith("# CSV report\n") and "[bold]" not in out
    # One skill folder needs no name.
    single = CliRunner().invoke(build_app(), ["skills", "show", str(EXAMPLES / "release-notes")])
    assert single.exit_code == 0 and single.output.startswith("name: release-notes\n")


def test_errors_exit_1_naming_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: bad\ndescription: ok\nname: again\n---\n")
    result = CliRunner().invoke(build_app(), ["skills", "list", str(tmp_path)])
    assert result.exit_code == 1
    assert f"SkillError: {bad / 'SKILL.md'}:4: field 'name' is given twice" in result.output

    missing = CliRunner().invoke(build_app(), ["skills", "show", str(EXAMPLES), "nope"])
    assert missing.exit_code == 1
    assert "no skill named 'nope'" in missing.output and "csv-report, release-notes" in missing.output
    several = CliRunner().invoke(build_app(), ["skills", "show", str(EXAMPLES)])
    assert several.exit_code == 1 and "several skills: name one" in several.output
    gone = CliRunner().invoke(build_app(), ["skills", "list", str(tmp_path / "gone")])
    assert gone.exit_code == 1 and "does not exist" in gone.output
