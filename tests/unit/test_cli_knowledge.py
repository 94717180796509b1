"""`agentrt knowledge add|search|list|delete` on real files in a temporary folder and a SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentrt.cli import build_app
from agentrt.cli.knowledge import ENV_KNOWLEDGE_URL


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "guides").mkdir(parents=True)
    (folder / "install.md").write_text("# Install\n\n## Linux\n\nRun the frobnicator installer with apt.\n")
    (folder / "guides" / "faq.txt").write_text("Questions and answers about the quasar telemetry exporter.\n")
    (folder / "page.html").write_text(
        "<html><head><title>Billing</title></head><body><article><h1>Billing</h1>"
        "<p>Invoices are sent on the first working day of every month by the accounting team, "
        "and the zeppelin surcharge appears as a separate line on each invoice.</p></article></body></html>"
    )
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7 this is not a PDF")
    (folder / "image.png").write_bytes(b"\x89PNG")
    return folder


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args), env={"COLUMNS": "400", **(env or {})})
    return result.exit_code, result.output


def test_add_reports_added_skipped_and_failed_then_is_idempotent(docs: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    code, out = invoke("knowledge", "add", str(docs), "--kb", "handbook", "--db", db, "--tag", "v1")
    assert code == 1, out  # the broken PDF failed: exit 1, the others still went in
    assert "3 added" in out and "1 failed" in out and "1 skipped" in out
    assert "broken.pdf" in out and "failed" in out
    assert "image.png" in out

    code, out = invoke("knowledge", "list", "--db", db)
    assert code == 0 and out.split() == ["handbook"]
    code, out = invoke("knowledge", "list", "--kb", "handbook", "--db", db)
    assert code == 0
    for name in ("install.md", "faq.txt", "page.html"):
        assert name in out
    assert "broken.pdf" not in out

    (docs / "broken.pdf").unlink()
    code, out = invoke("knowledge", "add", str(docs), "--kb", "handbook", "--db", db, "--tag", "v1")
    assert code == 0, out
    assert "0 added" in out and "4 skipped" in out, "re-adding unchanged files is a no-op"
    (docs / "install.md").write_text("# Install\n\n## Linux\n\nUse the frobnicator snap package now.\n")
    code, out = invoke("knowledge", "add", str(docs / "install.md"), "--kb", "handbook", "--db", db)
    assert code == 0 and "1 added" in out, "a changed file is indexed again"

    code, out = invoke("knowledge", "search", "frobnicator snap", "--kb", "handbook", "--db", db, "--json")
    assert code == 0, out
    rows = json.loads(out)
    assert rows[0]["source"].endswith("install.md") and "snap package" in rows[0]["text"]
    assert all("apt" not in row["text"] for row in rows), "the old version's chunks are gone"
    assert rows[0]["location"] == "Install > Linux"

    code, out = invoke("knowledge", "search", "zeppelin surcharge", "--kb", "handbook", "--db", db, "-k", "1")
    assert code == 0 and "[1] Billing" in out and "zeppelin" in out
    code, out = invoke("knowledge", "search", "xylophonist", "--kb", "handbook", "--db", db)
    assert code == 0 and "no passages match" in out


def test_delete_and_drop(docs: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    assert invoke("knowledge", "add", str(docs / "install.md"), str(docs / "guides"), "--kb", "k1", "--db", db)[0] == 0
    assert invoke("knowledge", "add", str(docs / "install.md"), "--kb", "k2", "--db", db)[0] == 0
    code, out = invoke("knowledge", "delete", str(docs / "install.md"), "--kb", "k1", "--db", db)
    assert code == 0 and "deleted" in out
    code, out = invoke("knowledge", "list", "--kb", "k1", "--db", db)
    assert "install.md" not in out and "faq.txt" in out
    code, out = invoke("knowledge", "delete", "nothing.md", "--kb", "k1", "--db", db)
    assert code == 1 and "no document" in out
    code, out = invoke("knowledge", "delete", "--drop", "--kb", "k1", "--db", db)
    assert code == 0 and "1 document" in out
    code, out = invoke("knowledge", "list", "--db", db)
    assert out.split() == ["k2"], "the other kb is untouched"
    assert invoke("knowledge", "delete", "--drop", "--kb", "k1", "--db", db)[0] == 1
    assert invoke("knowledge", "delete", "--kb", "k1", "--db", db)[0] == 1  # neither SOURCE nor --drop
    assert invoke("knowledge", "delete", "x.md", "--drop", "--kb", "k1", "--db", db)[0] == 1
    assert invoke("knowledge", "delete", "x.md", "--db", db)[0] == 1  # no --kb


def test_env_url_namespaces_and_errors(docs: Path, tmp_path: Path) -> None:
    env = {ENV_KNOWLEDGE_URL: f"sqlite:///{tmp_path / 'env.db'}"}
    code, out = invoke("knowledge", "add", str(docs / "install.md"), "--kb", "kb", "-n", "alice", env=env)
    assert code == 0, out
    assert (tmp_path / "env.db").exists(), "AGENTRT_KNOWLEDGE_URL names the default store"
    assert invoke("knowledge", "list", env=env)[1].startswith("no knowledge bases"), "another namespace"
    assert invoke("knowledge", "list", "-n", "alice", env=env)[1].split() == ["kb"]
    code, out = invoke("knowledge", "search", "frobnicator", "--kb", "kb", "-k", "0", env=env)
    assert code == 1 and "k must be between 1 and 100" in out
    code, out = invoke("knowledge", "search", "x", "--kb", "bad name", env=env)
    assert code == 1 and "knowledge base name" in out
    code, out = invoke("knowledge", "list", "--db", "ftp://nope")
    assert code == 1 and "unknown knowledge store scheme" in out


def test_home_default_store(docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(ENV_KNOWLEDGE_URL, raising=False)
    code, out = invoke("knowledge", "add", str(docs / "install.md"), "--kb", "kb")
    assert code == 0, out
    assert (tmp_path / "home" / ".agentrt" / "knowledge.db").exists()
