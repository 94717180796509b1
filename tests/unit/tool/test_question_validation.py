"""What a question may ask and what an answer must be: `schema_problem`, `url_problem`, `check_answer`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agentrt.errors import InvalidAnswerError
from agentrt.tool.questions import (
    SAMPLING_SCHEMA,
    ElicitationAnswer,
    UserQuestion,
    check_answer,
    form_problems,
    schema_problem,
    url_problem,
)
from agentrt.tool.scope import CallClock
from question_forms import Form, field_schemas, forms, valid_values

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 20},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "when": {"type": "string", "format": "date-time"},
        "site": {"type": "string", "format": "uri"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number", "minimum": 0.5},
        "agree": {"type": "boolean", "default": False},
        "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}, {"const": "h2", "title": "Batman"}]},
        "tools": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2},
        "fish": {
            "type": "array",
            "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2", "title": "Cod"}]},
        },
    },
    "required": ["name", "age"],
}


def form(schema: dict[str, Any] = FORM) -> UserQuestion:
    return UserQuestion(mode="form", message="Fill in", requested_schema=schema, id="q-1")


def problems(content: Any, schema: dict[str, Any] = FORM) -> list[tuple[str, str]]:
    with pytest.raises(InvalidAnswerError) as info:
        check_answer(form(schema), ElicitationAnswer.accept(content) if isinstance(content, dict) else content)
    assert info.value.question_id == "q-1"
    return [(p["field"], p["message"]) for p in info.value.problems]


# -- schemas ------------------------------------------------------------------------------------------
def test_the_specs_flat_form_is_accepted() -> None:
    assert schema_problem(FORM) is None
    assert schema_problem(SAMPLING_SCHEMA) is None
    assert schema_problem({"type": "object", "properties": {}}) is None


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (None, "not an object"),
        ({"properties": {}}, "type 'object'"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "field 'a': type 'object'"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4"}}}, "format 'ipv4'"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "'enum'"),
        ({"type": "object", "properties": {"a": {"type": "string", "oneOf": [{"title": "x"}]}}}, "'oneOf'"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}, "choices"),
        ({"type": "object", "properties": {"a": {"type": "integer", "minimum": "1"}}}, "'minimum'"),
        ({"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}}, "'maxLength'"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "'b'"),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}, "type None"),
        ({"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(101)}}, "more than 100"),
    ],
)
def test_other_schemas_are_refused(schema: Any, why: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and why in problem


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://auth.example.com/x?y=1", True),
        ("http://localhost:8080/cb", True),
        ("javascript:alert(1)", False),
        ("data:text/html,<b>x</b>", False),
        ("file:///etc/passwd", False),
        ("https://user:pw@evil.example/", False),
        ("https://bank.example@evil.example/", False),
        ("https://exa mple.com/", False),
        ("https://example.com/\x1b[31m", False),
        ("//example.com/", False),
        ("https://example.com:99999/", False),
        ("", False),
        (None, False),
    ],
)
def test_urls_shown_as_links(url: Any, ok: bool) -> None:
    assert (url_problem(url) is None) is ok


# -- answers ------------------------------------------------------------------------------------------
def test_a_fitting_form_is_accepted_as_given() -> None:
    content = {
        "name": "Ann",
        "email": "ann@example.com",
        "born": "1990-02-28",
        "when": "2026-01-02T03:04:05.5Z",
        "site": "https://ann.example/",
        "age": 30,
        "score": 0.5,
        "agree": True,
        "color": "green",
        "hero": "h2",
        "tools": ["a", "c"],
        "fish": [],
    }
    assert check_answer(form(), ElicitationAnswer.accept(content)) == ElicitationAnswer.accept(content)
    assert check_answer(form(), {"action": "accept", "content": {"name": "B", "age": 0}}).content == {
        "name": "B",
        "age": 0,
    }


def test_each_problem_is_named_by_its_field() -> None:
    assert problems({"age": 3}) == [("name", "this field is required")]
    assert problems({"name": "", "age": 3}) == [("name", "must have at least 1 character(s)")]
    assert problems({"name": "A", "age": 151}) == [("age", "must be at most 150")]
    assert problems({"name": "A", "age": 1.5}) == [("age", "must be an integer")]
    assert problems({"name": "A", "age": True}) == [("age", "must be an integer")]
    assert problems({"name": "A", "age": 1, "score": 0.25}) == [("score", "must be at least 0.5")]
    assert problems({"name": "A", "age": 1, "email": "ann"}) == [("email", "not a valid email")]
    assert problems({"name": "A", "age": 1, "born": "1990-02-30"}) == [("born", "not a valid date")]
    assert problems({"name": "A", "age": 1, "when": "2026-01-02T03:04:05"}) == [("when", "not a valid date-time")]
    assert problems({"name": "A", "age": 1, "site": "not a uri"}) == [("site", "not a valid uri")]
    assert problems({"name": "A", "age": 1, "color": "Red"}) == [("color", "not one of the choices")]
    assert problems({"name": "A", "age": 1, "hero": "Superman"}) == [("hero", "not one of the choices")]
    assert problems({"name": "A", "age": 1, "tools": []}) == [("tools", "choose at least 1")]
    assert problems({"name": "A", "age": 1, "tools": ["a", "b", "c"]}) == [("tools", "choose at most 2")]
    assert problems({"name": "A", "age": 1, "tools": ["a", "a"]}) == [("tools", "a choice is listed more than once")]
    assert problems({"name": "A", "age": 1, "fish": ["f3"]}) == [("fish", "not one of the choices")]
    assert problems({"name": "A", "age": 1, "extra": 1}) == [("extra", "the form has no such field")]
    assert problems({"name": "A", "age": float("nan")})[0][0] == "age"
    assert problems({"name": {"first": "A"}, "age": 1})[0] == (
        "name",
        "must be a string, a number, a boolean or a list of strings",
    )
    assert len(problems({"name": 1, "age": "x", "color": 2})) == 3  # every problem at once


def test_decline_and_cancel_carry_no_content() -> None:
    assert check_answer(form(), ElicitationAnswer("decline", {"name": 1})) == ElicitationAnswer.decline()
    assert check_answer(form(), {"action": "cancel"}) == ElicitationAnswer.cancel()


def test_url_and_sampling_answers() -> None:
    url = UserQuestion(mode="url", message="Go", url="https://example.com/")
    assert check_answer(url, ElicitationAnswer.accept()) == ElicitationAnswer.accept()
    assert check_answer(url, ElicitationAnswer.accept({})) == ElicitationAnswer.accept()
    with pytest.raises(InvalidAnswerError):
        check_answer(url, ElicitationAnswer.accept({"token": "secret"}))
    sampling = UserQuestion(mode="sampling", message="Allow?", requested_schema=SAMPLING_SCHEMA)
    assert check_answer(sampling, ElicitationAnswer.accept()) == ElicitationAnswer.accept()
    assert check_answer(sampling, ElicitationAnswer.accept({"approve": False})).content == {"approve": False}
    with pytest.raises(InvalidAnswerError):
        check_answer(sampling, ElicitationAnswer.accept({"approve": "no"}))


@pytest.mark.parametrize(
    "answer",
    [{"action": "ok"}, {"action": "accept", "content": "x"}, {"action": "accept", "extra": 1}, ["accept"], None],
)
def test_malformed_answers_are_refused(answer: Any) -> None:
    with pytest.raises(InvalidAnswerError):
        check_answer(form(), answer)


def test_the_json_form_of_an_answer() -> None:
    answer = ElicitationAnswer.accept({"a": 1})
    assert answer.to_dict() == {"action": "accept", "content": {"a": 1}}
    assert ElicitationAnswer.coerce(answer.to_dict()) == answer
    assert ElicitationAnswer.decline().to_dict() == {"action": "decline", "content": None}


# -- properties ---------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forms())
def test_fitting_contents_are_accepted_and_broken_ones_refused(generated: Form) -> None:
    assert schema_problem(generated.schema) is None
    question = form(generated.schema)
    accepted = check_answer(question, ElicitationAnswer.accept(generated.good))
    assert accepted == ElicitationAnswer.accept(generated.good)
    with pytest.raises(InvalidAnswerError) as info:
        check_answer(question, ElicitationAnswer.accept(generated.bad))
    assert generated.bad_field in {p["field"] for p in info.value.problems}, info.value.problems


@settings(max_examples=200, deadline=None)
@given(field_schemas().flatmap(lambda prop: valid_values(prop).map(lambda value: (prop, value))))
def test_every_valid_value_of_a_field_fits(pair: tuple[dict[str, Any], Any]) -> None:
    prop, value = pair
    assert form_problems({"type": "object", "properties": {"f": prop}}, {"f": value}) == []


# -- the call's deadline stands still while a question waits ------------------------------------------
async def test_a_paused_deadline_resumes_with_the_time_that_was_left() -> None:
    clock = CallClock()
    loop = asyncio.get_running_loop()
    thought = asyncio.Event()
    async with asyncio.timeout(0.2) as deadline:
        clock.attach(deadline)
        before = deadline.when()
        assert before is not None
        with clock.paused():
            assert deadline.when() is None  # suspended
            with clock.paused():  # nested: still suspended
                pass
            assert deadline.when() is None
            loop.call_later(0.4, thought.set)  # "the human thinks" longer than the whole timeout
            await thought.wait()
        after = deadline.when()
        assert after is not None and after > loop.time()  # resumed, not expired
        clock.detach()
