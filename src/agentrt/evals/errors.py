"""The errors of the evals package."""

from __future__ import annotations

from agentrt.errors import UserError

__all__ = ["DatasetError"]


class DatasetError(UserError):
    """A dataset file (or a `Case` built in code) cannot be used.

    The message starts with ``file:line:`` when the problem has a place; `path` and `line` hold them
    (None when unknown). YAML lines come from the parser's marks, JSONL lines are the file's lines,
    CSV lines are where the row starts (the header is line 1).
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}:{line}: " if path and line else f"{path}: " if path else ""
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line
        self.problem = message
