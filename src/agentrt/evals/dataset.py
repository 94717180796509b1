"""`Dataset`: named cases and the evaluators that score them; loaded from files or built in code."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt.errors import InvalidValueError
from agentrt.evals.case import Case, check_evaluators
from agentrt.evals.errors import DatasetError
from agentrt.evals.score import Evaluator

if TYPE_CHECKING:
    from agentrt.evals.executor import Executor
    from agentrt.evals.report import EvalReport, ProgressUpdate

__all__ = ["Dataset"]


@dataclass(frozen=True, slots=True)
class Dataset:
    """Named cases (names unique) and the evaluators every case runs.

    Built in code (``Dataset([Case(...), ...])``) or loaded with `Dataset.from_file` (YAML, JSONL or
    CSV). A case is scored by the dataset's evaluators, then its own; when none of them reads a
    field the case sets, a default does: `Equals` for ``expected_output``, `ToolTrajectory` for
    ``expected_tools``.
    """

    cases: Sequence[Case]
    name: str = "dataset"
    evaluators: Sequence[Evaluator] = ()

    def __post_init__(self) -> None:
        cases = tuple(self.cases)
        seen: set[str] = set()
        for case in cases:
            if not isinstance(case, Case):
                raise InvalidValueError(f"Dataset.cases must hold Case objects, not {type(case).__name__}")
            if case.name in seen:
                raise DatasetError(f"duplicate case name {case.name!r}")
            seen.add(case.name)
        object.__setattr__(self, "cases", cases)
        if not isinstance(self.name, str) or not self.name:
            raise InvalidValueError(f"Dataset.name must be a non-empty string, not {self.name!r}")
        object.__setattr__(self, "evaluators", check_evaluators(self.evaluators, f"dataset {self.name!r}"))

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __getitem__(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(name)

    @classmethod
    def from_file(cls, path: str | Path, *, name: str | None = None, evaluators: Sequence[Evaluator] = ()) -> Dataset:
        """Load a dataset from a ``.yaml``/``.yml``, ``.jsonl`` or ``.csv`` file (docs/evals.md, "Datasets").

        Raises:
            DatasetError: the file cannot be read or a case is invalid; the message names the file and line.
        """
        from agentrt.evals.loaders import load_file

        loaded = load_file(path)
        return cls(
            loaded.cases,
            name=name or loaded.name,
            evaluators=(*evaluators, *loaded.evaluators),
        )

    def evaluators_for(self, case: Case) -> tuple[Evaluator, ...]:
        """The evaluators that score `case`: the dataset's, the case's, then the defaults its fields imply."""
        from agentrt.evals.evaluators import Equals, ToolTrajectory

        chosen: tuple[Evaluator, ...] = (*self.evaluators, *case.evaluators)
        reads = {f for e in chosen for f in getattr(e, "reads", ())}
        defaults: list[Evaluator] = []
        if case.expected_output is not None and "expected_output" not in reads:
            defaults.append(Equals())
        if case.expected_tools is not None and "expected_tools" not in reads:
            defaults.append(ToolTrajectory())
        return (*chosen, *defaults)

    async def evaluate(
        self,
        agent: Any,
        *,
        repeat: int = 1,
        concurrency: int = 8,
        usage_limits: Any = None,
        timeout: float | None = None,
        progress: bool | Callable[[ProgressUpdate], None] | None = None,
        out: str | Path | None = None,
        executor: Executor | None = None,
        evaluator_timeout: float | None = 60.0,
    ) -> EvalReport:
        """Run every case against `agent` (each repetition in its own session) and score it.

        `agent` is an agent, or the ``"MODULE:ATTR"`` naming one (or a factory of one): an executor
        that runs cases in other processes (`RayExecutor`) needs that form, to build the agent there.

        `concurrency` bounds the runs in flight (`executor` replaces the default `LocalExecutor`);
        `timeout` (seconds) ends one run, recorded as its error. `evaluator_timeout` (seconds, 60
        by default; None: unbounded) bounds each evaluator's scoring of a run, and so does
        `timeout` when shorter: an evaluator that takes longer scores 0, "the evaluator timed out
        after N s", and the other evaluators and runs go on. `usage_limits` is
        passed to each call. `progress`: True shows a progress bar on stderr, a callable gets a `ProgressUpdate`
        after each run, None shows the bar when stderr is a terminal. `out`: a directory that gets
        ``results.json`` and ``report.html``.
        """
        from agentrt.evals.runner import evaluate

        return await evaluate(
            self,
            agent,
            repeat=repeat,
            concurrency=concurrency,
            usage_limits=usage_limits,
            timeout=timeout,
            progress=progress,
            out=out,
            executor=executor,
            evaluator_timeout=evaluator_timeout,
        )
