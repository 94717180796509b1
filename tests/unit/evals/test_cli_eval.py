"""`agentrt eval DATASET --agent MODULE:ATTR` and `agentrt eval compare A B`: output files and exit codes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentrt.cli import build_app

AGENT_MODULE = """
from agentrt import ReActAgent
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore


def answer(request):
    text = request.last_user_text
    if "capital of France" in text:
        return "Paris"
    if "capital of Italy" in text:
        return "Rome" if {good} else "Milan"
    return "I do not know"


agent = ReActAgent("geo", model=ScriptedModel.from_function(answer), state_store=InMemoryStateStore())


def make_agent():
    return agent
"""

DATASET = """\
name: capitals
cases:
  - {name: france, input: "What is the capital of France?", expected_output: Paris}
  - {name: italy, input: "What is the capital of Italy?", expected_output: Rome}
"""


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str]:
    """A folder with a dataset and two agent modules (one right on both cases, one wrong on Italy)."""
    monkeypatch.chdir(tmp_path)
    tag = uuid.uuid4().hex[:8]
    good, bad = f"geo_good_{tag}", f"geo_bad_{tag}"
    (tmp_path / f"{good}.py").write_text(AGENT_MODULE.replace("{good}", "True"))
    (tmp_path / f"{bad}.py").write_text(AGENT_MODULE.replace("{good}", "False"))
    (tmp_path / "capitals.yaml").write_text(DATASET)
    return tmp_path, good, bad


def test_eval_writes_results_and_report_and_gates_on_fail_under(project: tuple[Path, str, str]) -> None:
    folder, good, bad = project
    code, out = invoke("eval", "capitals.yaml", "--agent", f"{good}:agent", "--out", "run-good", "--fail-under", "1.0")
    assert code == 0, out
    assert "france" in out and "pass rate 100.0%" in out
    data = json.loads((folder / "run-good" / "results.json").read_text())
    assert data["summary"]["pass_rate"] == 1.0 and data["agent"] == "geo" and data["dataset"] == "capitals"
    assert (folder / "run-good" / "report.html").exists()

    code, out = invoke(
        "eval", "capitals.yaml", "--agent", f"{bad}:make_agent", "--out", "run-bad", "--fail-under", "0.9"
    )
    assert code == 1, out
    assert "pass rate 50.0% is under --fail-under 90.0%" in out
    code, out = invoke("eval", "capitals.yaml", "--agent", f"{bad}:agent", "--fail-under", "0.5", "--repeat", "2")
    assert code == 0, out
    assert "pass@2 50.0%" in out

    code, out = invoke("eval", "compare", "run-good/results.json", "run-bad/results.json")
    assert code == 0, out
    assert "italy" in out and "regression" in out and "pass rate 100.0% -> 50.0%" in out
    code, out = invoke("eval", "compare", "run-good/results.json", "run-bad/results.json", "--fail-on-regression")
    assert code == 1 and "2 regression(s)" in out
    code, out = invoke("eval", "compare", "run-bad/results.json", "run-good/results.json", "--fail-on-regression")
    assert code == 0 and "improvement" in out


def test_usage_errors_exit_2(project: tuple[Path, str, str]) -> None:
    folder, good, _ = project
    (folder / "broken.jsonl").write_text('{"name": "a", "input": "x"}\n{"name": \n')
    cases = [
        (("eval", "capitals.yaml"), "--agent MODULE:ATTR is required"),
        (("eval", "capitals.yaml", "other.yaml", "--agent", f"{good}:agent"), "expected one DATASET"),
        (("eval", "broken.jsonl", "--agent", f"{good}:agent"), "broken.jsonl:2: invalid JSON"),
        (("eval", "capitals.yaml", "--agent", "no_such_module_xyz:agent"), "cannot import module"),
        (("eval", "capitals.yaml", "--agent", f"{good}:answer"), "not an agent"),
        (("eval", "compare", "only-one.json"), "compare takes two results.json files"),
        (("eval", "compare", "capitals.yaml", "capitals.yaml"), "cannot read the eval report"),
    ]
    for args, words in cases:
        code, out = invoke(*args)
        assert code == 2, (args, out)
        assert words in out, (args, out)


@pytest.mark.parametrize(
    ("given", "bound"), [((), 60.0), (("--evaluator-timeout", "0.5"), 0.5), (("--evaluator-timeout", "0"), None)]
)
def test_evaluator_timeout_reaches_the_runner(
    project: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch, given: tuple[str, ...], bound: float | None
) -> None:
    from agentrt.evals import Dataset

    seen: list[object] = []
    real = Dataset.evaluate

    async def spy(self: Dataset, agent: object, **kwargs: object) -> object:
        seen.append(kwargs["evaluator_timeout"])
        return await real(self, agent, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Dataset, "evaluate", spy)
    good = project[1]
    code, out = invoke("eval", "capitals.yaml", "--agent", f"{good}:agent", *given)
    assert code == 0, out
    assert seen == [bound]
