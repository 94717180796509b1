"""Evaluations: datasets of cases, evaluators, a runner and reports (docs/evals.md).

- `Case` and `Dataset` (``Dataset.from_file`` reads YAML, JSONL or CSV; `DatasetError` names the
  file and line); ``await dataset.evaluate(agent, repeat=, concurrency=, out=)`` returns an `EvalReport`.
- Evaluators return a `Score` in [0, 1] with a reason (or skipped): `Equals`, `Contains`, `Regex`,
  `JsonSchema`, `PydanticModel`, `ToolTrajectory`, `MaxLatency`, `MaxCost`, `MaxTokens`, `LLMJudge`,
  `Callable`; anything following the `Evaluator` protocol.
- `EvalReport`: summary, ``to_json``, ``to_html``, ``print_summary``; `compare(a, b)` lists regressions
  and improvements. The command line: ``agentrt eval DATASET --agent MODULE:ATTR``.
- Batch runs: ``await run_batch(agent, rows, out="out.jsonl")`` (resumable, ordered output);
  ``agentrt batch IN.jsonl --agent MODULE:ATTR --out OUT.jsonl``.
- `RayExecutor` (the ``ray`` extra) runs cases and batch rows as Ray tasks (``--ray [ADDRESS]``).

Nothing here is imported by ``import agentrt``.
"""

from __future__ import annotations

from agentrt.evals.batch import BatchInputError, BatchProgress, BatchReport, BatchRow, read_rows, run_batch
from agentrt.evals.case import Case
from agentrt.evals.compare import Change, Comparison, compare
from agentrt.evals.dataset import Dataset
from agentrt.evals.errors import DatasetError
from agentrt.evals.evaluators import (
    Callable,
    Contains,
    Equals,
    JsonSchema,
    MaxCost,
    MaxLatency,
    MaxTokens,
    PydanticModel,
    Regex,
    ToolTrajectory,
)
from agentrt.evals.executor import Executor, LocalExecutor, RemoteWork
from agentrt.evals.judge import LLMJudge
from agentrt.evals.ray_executor import RayExecutor
from agentrt.evals.report import CaseResult, EvalReport, ProgressUpdate
from agentrt.evals.score import EvalContext, Evaluator, Score
from agentrt.evals.trajectory import ArgMatcher, ExpectedToolCall, match_trajectory

__all__ = [
    "ArgMatcher",
    "BatchInputError",
    "BatchProgress",
    "BatchReport",
    "BatchRow",
    "Callable",
    "Case",
    "CaseResult",
    "Change",
    "Comparison",
    "Contains",
    "Dataset",
    "DatasetError",
    "Equals",
    "EvalContext",
    "EvalReport",
    "Evaluator",
    "ExpectedToolCall",
    "Executor",
    "JsonSchema",
    "LLMJudge",
    "LocalExecutor",
    "MaxCost",
    "MaxLatency",
    "MaxTokens",
    "ProgressUpdate",
    "PydanticModel",
    "RayExecutor",
    "Regex",
    "RemoteWork",
    "Score",
    "ToolTrajectory",
    "compare",
    "match_trajectory",
    "read_rows",
    "run_batch",
]
