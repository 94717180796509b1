"""Dataset files: YAML (cases with their lines from the parser's marks), JSONL and CSV."""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt import _json
from agentrt.errors import UserError
from agentrt.evals.case import Case
from agentrt.evals.errors import DatasetError
from agentrt.evals.score import Evaluator
from agentrt.evals.trajectory import ExpectedToolCall
from agentrt.message import Msg

__all__ = ["FieldError", "LoadedFile", "case_from_mapping", "load_file"]

CASE_FIELDS = frozenset(
    {"name", "input", "expected_output", "expected_tools", "expected_tools_order", "metadata", "evaluators"}
)
_ROLES = ("user", "assistant", "system")


@dataclass(frozen=True, slots=True)
class LoadedFile:
    """What a dataset file holds: its cases, its name (the file's stem unless it names itself) and evaluators."""

    cases: list[Case]
    name: str
    evaluators: tuple[Evaluator, ...]


def load_file(path: str | Path) -> LoadedFile:
    """Load a dataset file by its suffix; errors are `DatasetError` naming the file and line."""
    file = Path(path)
    shown = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read the dataset: {exc}", path=shown) from None
    suffix = file.suffix.lower()
    if suffix in (".yaml", ".yml"):
        cases, options = _load_yaml(text, shown)
    elif suffix == ".jsonl":
        cases, options = _load_jsonl(text, shown), {}
    elif suffix == ".csv":
        cases, options = _load_csv(text, shown), {}
    else:
        raise DatasetError(
            f"unknown dataset format {suffix or '(no suffix)'!r}: use .yaml, .yml, .jsonl or .csv", path=shown
        )
    _refuse_duplicates(cases, shown)
    return LoadedFile(
        cases=[case for case, _ in cases],
        name=options.get("name") or file.stem,
        evaluators=tuple(options.get("evaluators", ())),
    )


def _refuse_duplicates(cases: list[tuple[Case, int]], path: str) -> None:
    first: dict[str, int] = {}
    for case, line in cases:
        if case.name in first:
            raise DatasetError(
                f"duplicate case name {case.name!r} (first at line {first[case.name]})", path=path, line=line
            )
        first[case.name] = line


class FieldError(UserError):
    """A case field is invalid: `field` (and `index`, for an item of a list field) say which."""

    def __init__(self, message: str, *, field: str, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.index = index


def case_from_mapping(data: Any, *, default_name: str | None = None) -> Case:
    """A `Case` from its data form (a file's row); raises `UserError` (`FieldError`) saying what is wrong."""
    if not isinstance(data, Mapping):
        raise UserError(f"a case is a mapping of {sorted(CASE_FIELDS)}, not {type(data).__name__}")
    unknown = sorted(map(str, set(data) - CASE_FIELDS))
    if unknown:
        raise FieldError(f"unknown case field(s) {unknown}; a case has {sorted(CASE_FIELDS)}", field=unknown[0])
    name = data.get("name", default_name)
    if name is None:
        raise UserError("a case needs a 'name'")
    if "input" not in data:
        raise UserError(f"case {name!r} has no 'input'")
    fields: dict[str, Any] = {
        "name": name,
        "input": _field("input", lambda: _input(data["input"])),
        "expected_output": data.get("expected_output"),
        "expected_tools": _list_field(data, "expected_tools", ExpectedToolCall.parse),
        "metadata": data.get("metadata") or {},
        "evaluators": _list_field(data, "evaluators", _evaluator) or (),
    }
    if "expected_tools_order" in data:
        fields["expected_tools_order"] = data["expected_tools_order"]
    try:
        return Case(**fields)
    except UserError as exc:
        wrong = next((f for f in ("name", "expected_tools_order", "metadata") if f"Case.{f}" in str(exc)), None)
        if wrong is None:
            raise
        raise FieldError(str(exc), field=wrong) from None


def _evaluator(spec: Any) -> Evaluator:
    from agentrt.evals.evaluators import evaluator_from_spec

    return evaluator_from_spec(spec)


def _field(name: str, make: Callable[[], Any], index: int | None = None) -> Any:
    try:
        return make()
    except UserError as exc:
        raise FieldError(str(exc), field=name, index=index) from None


def _list_field(data: Mapping[str, Any], name: str, parse: Callable[[Any], Any]) -> tuple[Any, ...] | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(f"{name!r} must be a list, not {type(value).__name__}", field=name)
    out = []
    for i, item in enumerate(value):
        try:
            out.append(parse(item))
        except UserError as exc:
            raise FieldError(str(exc), field=name, index=i) from None
    return tuple(out)


def _input(value: Any) -> str | list[Msg]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        messages = []
        for item in value:
            if (
                not isinstance(item, Mapping)
                or item.get("role") not in _ROLES
                or not isinstance(item.get("content"), str)
            ):
                raise UserError(f"an input message is {{role: user|assistant|system, content: text}}, not {item!r}")
            messages.append(Msg(role=item["role"], content=item["content"]))
        return messages
    raise UserError(f"'input' must be text or a list of {{role, content}} messages, not {value!r}")


# -- YAML ------------------------------------------------------------------------------------------
def _load_yaml(text: str, path: str) -> tuple[list[tuple[Case, int]], dict[str, Any]]:
    try:
        import yaml
    except ImportError:
        raise DatasetError("YAML datasets need PyYAML: pip install 'agentrt[evals]'", path=path) from None
    loader = _yaml_loader()(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _refuse_alias_bombs(loader, root, path)
            data = loader.construct_document(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise DatasetError(f"invalid YAML: {problem}", path=path, line=mark.line + 1 if mark else None) from None
    except RecursionError:
        raise DatasetError("the YAML is nested too deeply", path=path, line=_mark_line(loader.get_mark())) from None
    finally:
        loader.dispose()
    if root is None:
        raise DatasetError("the file holds no cases", path=path)
    options: dict[str, Any] = {}
    cases_node = root
    if isinstance(data, Mapping):
        data, cases_node, options = _yaml_options(data, root, path)
    if not isinstance(data, list):
        raise DatasetError("a YAML dataset is a list of cases or a mapping with 'cases'", path=path, line=1)
    cases = []
    for item, node in zip(data, cases_node.value, strict=True):
        line = node.start_mark.line + 1
        try:
            cases.append((case_from_mapping(item), line))
        except UserError as exc:
            raise DatasetError(str(exc), path=path, line=_field_line(node, exc) or line) from None
    return cases, options


MAX_ALIAS_NODES = 100_000
"""How many nodes YAML aliases may add to a dataset file (or as many as it writes out, if more)."""


@functools.cache
def _yaml_loader() -> Any:
    """A `yaml.SafeLoader` that records every alias (its mark and target) and counts the nodes written out."""
    import yaml

    class Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.aliases: list[tuple[Any, Any]] = []
            self.written = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                node = super().compose_node(parent, index)
                self.aliases.append((mark, node))
                return node
            self.written += 1
            return super().compose_node(parent, index)

    return Loader


class _CycleError(Exception):
    pass


def _refuse_alias_bombs(loader: Any, root: Any, path: str) -> None:
    """Refuse aliases that expand to more than `MAX_ALIAS_NODES` nodes ("billion laughs") or to a cycle.

    Aliases share the loaded objects, so the bomb goes off later, where the cases are serialised
    (``Case.to_dict``, results.json): what the aliases add is counted here, before anything is built.
    """
    import yaml

    sizes: dict[int, int] = {}
    active: set[int] = set()

    def expanded(node: Any) -> int:
        if isinstance(node, yaml.ScalarNode):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _CycleError
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(expanded(k) + expanded(v) for k, v in node.value)
        else:
            total = 1 + sum(expanded(child) for child in node.value)
        active.discard(key)
        sizes[key] = total
        return total

    budget = max(MAX_ALIAS_NODES, loader.written)
    added = 0
    for mark, target in loader.aliases:
        try:
            added += expanded(target)
        except _CycleError:
            raise DatasetError(
                "a YAML alias refers to a node that contains it (a recursive structure)",
                path=path,
                line=_mark_line(mark),
            ) from None
        if added > budget:
            raise DatasetError(
                f"YAML aliases expand to more than {budget:,} nodes (an alias bomb?)", path=path, line=_mark_line(mark)
            )


def _mark_line(mark: Any) -> int | None:
    line = getattr(mark, "line", None)
    return line + 1 if isinstance(line, int) else None


def _yaml_options(data: Mapping[str, Any], root: Any, path: str) -> tuple[Any, Any, dict[str, Any]]:
    from agentrt.evals.evaluators import evaluator_from_spec

    unknown = set(data) - {"name", "evaluators", "cases"}
    if unknown:
        raise DatasetError(
            f"unknown dataset field(s) {sorted(map(str, unknown))}; use name, evaluators, cases", path=path, line=1
        )
    nodes = {key.value: value for key, value in root.value}
    if "cases" not in nodes:
        raise DatasetError("the dataset mapping has no 'cases' list", path=path, line=1)
    options: dict[str, Any] = {}
    if data.get("name") is not None:
        options["name"] = str(data["name"])
    specs = data.get("evaluators") or []
    spec_nodes = getattr(nodes.get("evaluators"), "value", [])
    if not isinstance(specs, list):
        raise DatasetError("'evaluators' must be a list", path=path, line=nodes["evaluators"].start_mark.line + 1)
    evaluators = []
    for spec, node in zip(specs, spec_nodes, strict=True):
        try:
            evaluators.append(evaluator_from_spec(spec))
        except UserError as exc:
            raise DatasetError(str(exc), path=path, line=node.start_mark.line + 1) from None
    options["evaluators"] = evaluators
    return data["cases"], nodes["cases"], options


def _field_line(node: Any, exc: Exception) -> int | None:
    """The line of the field (or list item) a `FieldError` names, in the case's YAML node."""
    if not isinstance(exc, FieldError):
        return None
    for key, value in getattr(node, "value", []):
        if getattr(key, "value", None) != exc.field:
            continue
        items = getattr(value, "value", None)
        if exc.index is not None and isinstance(items, list) and exc.index < len(items):
            return int(items[exc.index].start_mark.line) + 1
        return int((key if exc.field not in CASE_FIELDS else value).start_mark.line) + 1
    return None


# -- JSONL -----------------------------------------------------------------------------------------
def _load_jsonl(text: str, path: str) -> list[tuple[Case, int]]:
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = _json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"invalid JSON: {exc}", path=path, line=number) from None
        try:
            cases.append((case_from_mapping(data), number))
        except UserError as exc:
            raise DatasetError(str(exc), path=path, line=number) from None
    if not cases:
        raise DatasetError("the file holds no cases", path=path)
    return cases


# -- CSV -------------------------------------------------------------------------------------------
_JSON_COLUMNS = ("expected_tools", "metadata", "evaluators")


def _load_csv(text: str, path: str) -> list[tuple[Case, int]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise DatasetError(f"invalid CSV: {exc}", path=path, line=reader.line_num or 1) from None
    for required in ("name", "input"):
        if required not in header:
            raise DatasetError(f"the CSV header has no {required!r} column (it has {header})", path=path, line=1)
    cases = []
    line = reader.line_num + 1
    rows = iter(reader)
    while True:
        try:
            row = next(rows, None)
        except csv.Error as exc:  # e.g. a field over csv.field_size_limit()
            raise DatasetError(f"invalid CSV: {exc}", path=path, line=line) from None
        if row is None:
            break
        try:
            cases.append((case_from_mapping(_csv_row(row)), line))
        except UserError as exc:
            raise DatasetError(str(exc), path=path, line=line) from None
        line = reader.line_num + 1
    if not cases:
        raise DatasetError("the file holds no cases", path=path)
    return cases


def _csv_row(row: Mapping[str | None, Any]) -> dict[str, Any]:
    """Known columns become fields (JSON ones parsed), every other column goes into metadata."""
    if None in row:
        raise UserError("the row has more cells than the header")
    data: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in row.items():
        assert key is not None
        if value is None or value == "":
            continue
        if key in _JSON_COLUMNS:
            try:
                data[key] = _json.loads(value)
            except ValueError as exc:
                raise UserError(f"column {key!r} must hold JSON: {exc}") from None
        elif key in CASE_FIELDS:
            data[key] = value
        else:
            extra[key] = value
    if extra:
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise UserError("column 'metadata' must hold a JSON object")
        data["metadata"] = {**extra, **metadata}
    return data
