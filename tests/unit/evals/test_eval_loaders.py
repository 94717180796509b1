"""Dataset files: YAML, JSONL and CSV load into cases; every mistake names its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.errors import UserError
from agentrt.evals import Case, Contains, Dataset, DatasetError, Equals, MaxLatency, Regex, ToolTrajectory
from agentrt.message import Msg

YAML = """\
name: geography
evaluators:
  - max_latency: 5
cases:
  - name: capital
    input: What is the capital of France?
    expected_output: Paris
    evaluators:
      - contains: {case_sensitive: false}
  - name: weather
    input:
      - {role: system, content: "Be brief."}
      - {role: user, content: "Weather in Paris?"}
    expected_tools:
      - name: get_weather
        args: {city: {regex: "^Par"}, units: {any: true}}
      - lookup
    expected_tools_order: any
    metadata: {difficulty: easy}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_dataset_loads_cases_options_and_evaluators(tmp_path: Path) -> None:
    ds = Dataset.from_file(write(tmp_path, "geo.yaml", YAML))
    assert ds.name == "geography" and len(ds) == 2
    assert isinstance(ds.evaluators[0], MaxLatency) and ds.evaluators[0].limit == 5
    capital = ds["capital"]
    assert capital.input == "What is the capital of France?" and capital.expected_output == "Paris"
    assert isinstance(capital.evaluators[0], Contains) and not capital.evaluators[0].case_sensitive
    assert capital.evaluators[0].value is None  # it reads expected_output
    weather = ds["weather"]
    assert isinstance(weather.input, tuple) and [m.role for m in weather.input] == ["system", "user"]
    assert weather.expected_tools_order == "any" and weather.metadata == {"difficulty": "easy"}
    assert weather.expected_calls is not None
    first, second = weather.expected_calls
    assert first.name == "get_weather" and first.args["city"].kind == "regex" and first.args["units"].kind == "any"
    assert second.name == "lookup" and not second.args
    # Contains reads expected_output, so no default Equals; expected_tools brings a ToolTrajectory.
    assert [type(e) for e in ds.evaluators_for(capital)] == [MaxLatency, Contains]
    assert [type(e) for e in ds.evaluators_for(weather)] == [MaxLatency, ToolTrajectory]


def test_yaml_list_form_takes_the_file_stem_as_name(tmp_path: Path) -> None:
    ds = Dataset.from_file(write(tmp_path, "smoke.yml", "- {name: a, input: hi, expected_output: hello}\n"))
    assert ds.name == "smoke" and [type(e) for e in ds.evaluators_for(ds["a"])] == [Equals]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("- name: a\n  input: hi\n- name: b\n  inptu: typo\n", 4, "unknown case field"),
        ("- name: a\n  input: hi\n- name: b\n", 3, "has no 'input'"),
        ("- name: a\n  input: hi\n  expected_tools:\n    - {name: t, args: {x: {regex: '('}}}\n", 4, "invalid regex"),
        ("- name: a\n  input: hi\n  evaluators: [{nope: 1}]\n", 3, "unknown evaluator 'nope'"),
        ("- name: a\n  input: hi\n  expected_tools_order: sorted\n", 3, "expected_tools_order"),
        ("- name: a\n  input: [1, 2]\n", 2, "an input message is"),
        ("cases:\n  - name: a\n    input: [x\n", 4, "invalid YAML"),
        ("name: x\nevaluators: [{regex: '['}]\ncases: []\n", 2, "invalid pattern"),
        ("name: x\nsomething: 1\ncases: []\n", 1, "unknown dataset field"),
        ("- name: a\n  input: hi\n- name: a\n  input: again\n", 3, "duplicate case name 'a' (first at line 1)"),
    ],
)
def test_yaml_errors_name_file_and_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(DatasetError) as info:
        Dataset.from_file(path)
    assert info.value.path == str(path) and info.value.line == line, str(info.value)
    assert words in str(info.value) and str(info.value).startswith(f"{path}:{line}: ")
    assert isinstance(info.value, UserError)


def test_jsonl_loads_and_reports_the_line(tmp_path: Path) -> None:
    good = '{"name": "a", "input": "hi", "expected_output": "hello"}\n\n{"name": "b", "input": "yo"}\n'
    ds = Dataset.from_file(write(tmp_path, "d.jsonl", good))
    assert [c.name for c in ds] == ["a", "b"]
    with pytest.raises(DatasetError, match=r"d2\.jsonl:3: invalid JSON"):
        Dataset.from_file(write(tmp_path, "d2.jsonl", good.replace('{"name": "b"', '{"name": "b",,')))
    with pytest.raises(DatasetError, match=r"d3\.jsonl:3: duplicate case name 'a' \(first at line 1\)"):
        Dataset.from_file(write(tmp_path, "d3.jsonl", good.replace('"b"', '"a"')))
    with pytest.raises(DatasetError, match=r"d4\.jsonl:1: a case is a mapping"):
        Dataset.from_file(write(tmp_path, "d4.jsonl", "[1, 2]\n"))


def test_csv_loads_json_columns_and_extra_columns_as_metadata(tmp_path: Path) -> None:
    text = (
        "name,input,expected_output,expected_tools,topic\n"
        'a,"hi, there",hello,,greeting\n'
        'b,"multi\nline",,"[{""name"": ""add"", ""args"": {""a"": 1}}]",math\n'
        "c,third,,,\n"
    )
    ds = Dataset.from_file(write(tmp_path, "d.csv", text))
    assert ds["a"].input == "hi, there" and ds["a"].metadata == {"topic": "greeting"}
    assert ds["b"].input == "multi\nline" and ds["b"].expected_calls is not None
    assert ds["b"].expected_calls[0].describe() == "add(a=1)"
    assert ds["c"].expected_output is None and ds["c"].metadata == {}


def test_csv_errors_name_the_row_start_line(tmp_path: Path) -> None:
    text = 'name,input,expected_tools\na,one,\nb,"two\nlines",\nc,three,"[not json"\n'
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(DatasetError) as info:
        Dataset.from_file(path)
    assert info.value.line == 5 and "column 'expected_tools' must hold JSON" in str(info.value)
    with pytest.raises(DatasetError, match=r"nohead\.csv:1: the CSV header has no 'input' column"):
        Dataset.from_file(write(tmp_path, "nohead.csv", "name,question\na,b\n"))
    with pytest.raises(DatasetError, match=r"dup\.csv:3: duplicate case name"):
        Dataset.from_file(write(tmp_path, "dup.csv", "name,input\na,x\na,y\n"))


def test_unreadable_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read the dataset"):
        Dataset.from_file(tmp_path / "missing.yaml")
    with pytest.raises(DatasetError, match=r"unknown dataset format '\.txt'"):
        Dataset.from_file(write(tmp_path, "d.txt", "x"))
    with pytest.raises(DatasetError, match="holds no cases"):
        Dataset.from_file(write(tmp_path, "empty.jsonl", "\n"))
    with pytest.raises(DatasetError, match="holds no cases"):
        Dataset.from_file(write(tmp_path, "empty.yaml", ""))


def test_cases_and_datasets_in_code_are_validated() -> None:
    with pytest.raises(UserError, match=r"Case\.name"):
        Case("", "hi")
    with pytest.raises(UserError, match=r"Case\.input"):
        Case("a", 42)  # type: ignore[arg-type]  # a wrong type on purpose
    with pytest.raises(UserError, match="not an evaluator"):
        Case("a", "hi", evaluators=["equals"])  # type: ignore[list-item]  # a spec is not an evaluator
    with pytest.raises(DatasetError, match="duplicate case name 'a'"):
        Dataset([Case("a", "x"), Case("a", "y")])
    case = Case("m", [Msg.user("hi"), Msg.user("there")], evaluators=[Regex("hi")])
    assert case.input_text == "hi\nthere" and case.to_dict()["evaluators"] == ["regex"]
    with pytest.raises(KeyError):
        Dataset([case])["nope"]
