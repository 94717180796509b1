"""Evaluate an agent on a YAML dataset, offline: scripted models, a real tool, an LLM judge.

Loads capitals.yaml (beside this file), adds an `LLMJudge` (itself a scripted model here) and a
plain Python check, runs every case twice in its own session, prints the summary table, writes
results.json + report.html to a temporary folder, then compares the run with a worse agent's.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from agentrt import ReActAgent, Toolkit, ToolUseBlock, tool
from agentrt.evals import Callable, Dataset, EvalContext, LLMJudge, compare
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

HERE = Path(__file__).parent


@tool
def get_weather(city: str, units: str = "metric") -> str:
    """Current weather in a city."""
    return f"Sunny, 21 °C in {city}."


def answers(request: ModelRequest) -> str | ToolUseBlock:
    """A scripted 'model' that knows a few capitals and calls the weather tool when asked."""
    question = request.last_user_text
    last = request.messages[-1]
    if "weather" in question:
        if last.role == "user" and any(b.type == "tool_result" for b in last.content):
            return "It is sunny in Paris, 21 °C."
        return ToolUseBlock(name="get_weather", input={"city": "Paris", "units": "metric"})
    for country, city in (("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome")):
        if country in question:
            return city
    if "Berlin" in question:
        return "About 3.7 million people live in Berlin."
    return "I do not know."


def build_agent(model: ScriptedModel) -> ReActAgent:
    toolkit = Toolkit()
    toolkit.register(get_weather)
    return ReActAgent(
        "geo", "Answer geography questions.", model=model, toolkit=toolkit, state_store=InMemoryStateStore()
    )


agent = build_agent(ScriptedModel.from_function(answers))
"""The agent `agentrt eval ... --agent examples.evals.run_evals:agent` evaluates."""


def short_answer(ctx: EvalContext) -> bool:
    """Any Python function is an evaluator: here, answers stay under 60 characters."""
    return len(ctx.output) < 60


def files_in(folder: str) -> list[str]:
    return sorted(p.name for p in Path(folder).iterdir())


async def main() -> None:
    judge_model = ScriptedModel.from_function(
        lambda request: '{"score": 0.9, "reason": "Answers the question directly."}'
    )
    judge = LLMJudge(judge_model, "The answer is correct and direct.", threshold=0.7)
    dataset = Dataset.from_file(HERE / "capitals.yaml", evaluators=[judge, Callable(short_answer)])
    print(f"dataset {dataset.name!r}: {len(dataset)} cases")

    with tempfile.TemporaryDirectory() as out:
        report = await dataset.evaluate(agent, repeat=2, concurrency=4, out=out, progress=False)
        report.print_summary()
        print("files:", files_in(out))

    # A worse agent: forgets Tokyo. `compare` lists what regressed, case by case and score by score.
    def forgetful(request: ModelRequest) -> str | ToolUseBlock:
        reply = answers(request)
        return "Kyoto" if reply == "Tokyo" else reply

    worse = await dataset.evaluate(build_agent(ScriptedModel.from_function(forgetful)), progress=False)
    changes = compare(report, worse)
    print(changes.summary_line())
    for change in changes.regressions:
        what = change.evaluator or "pass rate"
        print(f"  regression: {change.case} / {what}: {change.before:.2f} -> {change.after:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
