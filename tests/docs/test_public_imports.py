"""Every agentrt import that README.md, docs/ and examples/ show uses the public API.

A user copies imports from the docs: each ``from agentrt... import name`` must name a public module
(no ``_private`` part) and a name in that module's ``__all__`` (or a public submodule), and must
really import. ``import agentrt.x`` lines must name public modules too.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?:python|py|pycon)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
# An agentrt import statement on its own line(s), in a block that is not whole Python.
STATEMENT = re.compile(r"^(?:from\s+agentrt[\w.]*\s+import\s+(?:\([^)]*\)|.*)|import\s+agentrt.*)$", re.M)
# `from agentrt.x import a, b` written inline in prose (in backticks), outside code blocks.
INLINE = re.compile(r"`(?P<stmt>(?:from\s+agentrt[\w.]*\s+import\s+[^`]+|import\s+agentrt[\w.]*[^`]*))`")


@dataclass(frozen=True)
class Import:
    where: str
    module: str
    names: tuple[str, ...]  # empty: `import module`

    def __str__(self) -> str:
        return f"{self.where}: from {self.module} import {', '.join(self.names)}" if self.names else self.module


def _from_tree(tree: ast.AST, where: str, first_line: int) -> list[Import]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "agentrt" or node.module.startswith("agentrt."):
                names = tuple(alias.name for alias in node.names)
                found.append(Import(f"{where}:{first_line + node.lineno - 1}", node.module, names))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "agentrt" or alias.name.startswith("agentrt."):
                    found.append(Import(f"{where}:{first_line + node.lineno - 1}", alias.name, ()))
    return found


def _parse(source: str) -> ast.AST | None:
    try:
        tree: ast.AST = compile(source, "<docs>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return tree
    except SyntaxError:
        return None


def _dedent(body: str, indent: str) -> str:
    return "\n".join(line.removeprefix(indent) for line in body.splitlines())


def _imports_of_markdown(path: Path) -> list[Import]:
    text = path.read_text()
    where = str(path.relative_to(ROOT))
    found: list[Import] = []
    for block in FENCE.finditer(text):
        line = text.count("\n", 0, block.start("body")) + 1
        body = _dedent(block["body"], block["indent"])
        tree = _parse(body)
        if tree is None:  # not runnable Python (an excerpt): take its import statements one by one
            for statement in STATEMENT.findall(body):
                parsed = _parse(statement)
                assert parsed is not None, f"{where}:{line}: cannot parse {statement!r}"
                found += _from_tree(parsed, where, line)
            continue
        found += _from_tree(tree, where, line)
    prose = FENCE.sub("", text)
    for inline in INLINE.finditer(prose):
        parsed = _parse(inline["stmt"])
        if parsed is not None:
            found += _from_tree(parsed, where, 1)
    return found


def _imports() -> list[Import]:
    found: list[Import] = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]
    for path in pages:
        found += _imports_of_markdown(path)
    for path in sorted((ROOT / "examples").rglob("*.py")):
        tree = ast.parse(path.read_text())
        found += _from_tree(tree, str(path.relative_to(ROOT)), 1)
    return found


IMPORTS = _imports()


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _problems(item: Import) -> list[str]:
    if _private(item.module):
        return [f"{item}: {item.module} is a private module"]
    try:
        module = importlib.import_module(item.module)
    except ImportError as exc:
        return [f"{item}: cannot import {item.module}: {exc}"]
    problems = []
    exported = getattr(module, "__all__", None)
    for name in item.names:
        if name == "*":
            problems.append(f"{item}: a star import")
        elif exported is not None and name in exported:
            if not hasattr(module, name):
                problems.append(f"{item}: {item.module}.__all__ lists {name!r}, which does not resolve")
        elif not name.startswith("_") and _is_submodule(f"{item.module}.{name}"):
            continue
        elif exported is None:
            problems.append(f"{item}: {item.module} has no __all__, so {name!r} is not declared public")
        else:
            problems.append(f"{item}: {name!r} is not in {item.module}.__all__")
    return problems


def _is_submodule(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def test_the_docs_and_examples_have_imports_to_check() -> None:
    modules = {item.module for item in IMPORTS}
    assert len(IMPORTS) > 100 and {"agentrt", "agentrt.pipeline", "agentrt.mcp"} <= modules


@pytest.mark.parametrize("module", sorted({item.module for item in IMPORTS}))
def test_docs_import_only_public_names(module: str) -> None:
    problems = [problem for item in IMPORTS if item.module == module for problem in _problems(item)]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_private_and_unexported_imports() -> None:
    assert _problems(Import("x.md:1", "agentrt.server._serve", ("graceful_server",)))
    assert _problems(Import("x.md:1", "agentrt.pipeline", ("not_there",))) == [
        "x.md:1: from agentrt.pipeline import not_there: 'not_there' is not in agentrt.pipeline.__all__"
    ]
    assert _problems(Import("x.md:1", "agentrt.pipeline", ("MsgHub",))) == []
    assert _problems(Import("x.md:1", "agentrt.tool", ("builtin",))) == []  # a public submodule
