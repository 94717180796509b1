"""Progress of a running evaluation: a rich bar on stderr and/or a callback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from agentrt.evals.report import CaseResult, ProgressUpdate


class Tracker:
    """Counts finished runs and reports them; `close` stops the bar."""

    def __init__(self, total: int, progress: bool | Callable[[ProgressUpdate], None] | None, title: str) -> None:
        self.total = total
        self.done = 0
        self.passed = 0
        self.errors = 0
        self.cost: float | None = None
        self.callback = progress if callable(progress) else None
        show = progress is True or (progress is None and sys.stderr.isatty())
        self._bar: Any = None
        self._task: Any = None
        if show and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._task = self._bar.add_task(title, total=total, stats="")
            self._bar.start()

    def update(self, result: CaseResult) -> None:
        self.done += 1
        self.passed += result.passed
        self.errors += result.error is not None
        cost = result.cost_usd
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        if self._bar is not None:
            spent = "cost ?" if self.cost is None else f"${self.cost:.4f}"
            stats = f"pass {self.passed / self.done:.0%} · errors {self.errors} · {spent}"
            self._bar.update(self._task, advance=1, stats=stats)
        if self.callback is not None:
            self.callback(
                ProgressUpdate(
                    done=self.done,
                    total=self.total,
                    passed=self.passed,
                    errors=self.errors,
                    cost_usd=self.cost,
                    result=result,
                )
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
