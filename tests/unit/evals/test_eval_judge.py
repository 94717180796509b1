"""`LLMJudge` with a scripted judge model: the prompt it sends and how it reads verdicts."""

from __future__ import annotations

import pytest

from agentrt.errors import UserError
from agentrt.evals import Case, EvalContext, LLMJudge
from agentrt.evals.judge import parse_verdict
from agentrt.message import Msg
from agentrt.model import ScriptedModel


def ctx(output: str, expected: str | None = "Paris") -> EvalContext:
    return EvalContext(
        case=Case("c", "What is the capital of France?", expected_output=expected),
        reply=Msg.assistant(output),
    )


async def test_the_judge_gets_rubric_question_expected_and_answer() -> None:
    judge_model = ScriptedModel(['{"score": 0.8, "reason": "Correct but terse."}'])
    judge = LLMJudge(judge_model, "The answer names the right city.", threshold=0.7)
    score = await judge.evaluate(ctx("Paris."))
    assert score.value == 0.8 and score.reason == "Correct but terse."
    (request,) = judge_model.requests
    system, user = request.messages
    assert "The answer names the right city." in system.text and '"score"' in system.text
    assert "What is the capital of France?" in user.text and "<expected_answer>\nParis" in user.text
    assert "<answer>\nParis.\n</answer>" in user.text
    judge_model.assert_complete()


async def test_without_expected_output_the_prompt_has_none() -> None:
    judge_model = ScriptedModel(['{"score": 1, "reason": "fine"}'])
    await LLMJudge(judge_model, "Polite.", include_expected=False).evaluate(ctx("Hello"))
    assert "<expected_answer>" not in judge_model.requests[0].messages[1].text


@pytest.mark.parametrize(
    ("text", "value", "reason"),
    [
        ('```json\n{"score": 0.5, "reason": "half"}\n```', 0.5, "half"),
        ('Here is my verdict: {"score": 1, "reason": "ok"} Thanks!', 1.0, "ok"),
        ("{'score': 0.25, 'reason': 'single quotes'}", 0.25, "single quotes"),
        ('{"score": 0.9, "reason": "trailing comma",}', 0.9, "trailing comma"),
        ('{"pass": true, "explanation": "yes"}', 1.0, "yes"),
        ('{"score": "70%", "reason": "pct"}', 0.7, "pct"),
        ('{"score": "0.3"}', 0.3, ""),
        ('[{"score": 0, "reason": "list"}]', 0.0, "list"),
    ],
)
def test_verdicts_are_parsed_leniently(text: str, value: float, reason: str) -> None:
    score, why = parse_verdict(text)
    assert score == pytest.approx(value) and why == reason


@pytest.mark.parametrize(
    "text",
    [
        "I think it is good.",
        '{"reason": "no score"}',
        '{"score": 7, "reason": "out of range"}',
        '{"score": "high"}',
        "",
    ],
)
async def test_malformed_verdicts_fail_the_score_with_the_raw_answer(text: str) -> None:
    judge = LLMJudge(ScriptedModel([text]), "Correct city.")
    score = await judge.evaluate(ctx("Paris"))
    assert score.value == 0.0 and score.reason.startswith("unreadable judge verdict")
    assert repr(text[:200]) in score.reason


def test_judge_arguments_are_checked() -> None:
    with pytest.raises(UserError, match="ChatModel"):
        LLMJudge(object(), "rubric")
    with pytest.raises(UserError, match="rubric"):
        LLMJudge(ScriptedModel([]), " ")
    with pytest.raises(UserError, match="threshold"):
        LLMJudge(ScriptedModel([]), "r", threshold=2)
