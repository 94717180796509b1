"""Tests for `agentrt.errors`: the documented hierarchy, error fields and pickling."""

import pickle

import pytest

from agentrt import errors
from agentrt.errors import (
    AgentrtError,
    AuthenticationError,
    ContextWindowExceededError,
    DuplicateToolError,
    ModelAPIError,
    ModelBehaviorError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    SessionBusyError,
    StateConflictError,
    StateStoreError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    ToolRetry,
    UnexpectedModelCallError,
    UserError,
)

# (child, parent) pairs straight from the tree in the module docstring.
HIERARCHY = [
    (UserError, AgentrtError),
    (ToolDefinitionError, UserError),
    (ModelError, AgentrtError),
    (ModelAPIError, ModelError),
    (RateLimitError, ModelAPIError),
    (AuthenticationError, ModelAPIError),
    (ContextWindowExceededError, ModelAPIError),
    (ModelTimeoutError, ModelError),
    (ModelConnectionError, ModelError),
    (ModelBehaviorError, ModelError),
    (UnexpectedModelCallError, ModelError),
    (ToolError, AgentrtError),
    (ToolDefinitionError, ToolError),
    (DuplicateToolError, ToolError),
    (ToolArgumentsError, ToolError),
    (StateStoreError, AgentrtError),
    (StateConflictError, StateStoreError),
    (SessionBusyError, StateStoreError),
    (AgentrtError, Exception),
]


@pytest.mark.parametrize(("child", "parent"), HIERARCHY, ids=[f"{c.__name__}<{p.__name__}" for c, p in HIERARCHY])
def test_hierarchy(child: type, parent: type) -> None:
    assert issubclass(child, parent)


@pytest.mark.parametrize(
    ("cls", "not_parent"),
    [
        (ModelError, UserError),
        (ModelAPIError, ModelTimeoutError),
        (ModelTimeoutError, ModelAPIError),
        (ModelConnectionError, ModelAPIError),
        (ToolArgumentsError, UserError),
        (StateStoreError, ModelError),
        (ToolError, ModelError),
        (RateLimitError, AuthenticationError),
        (SessionBusyError, StateConflictError),
    ],
)
def test_branches_are_separate(cls: type, not_parent: type) -> None:
    assert not issubclass(cls, not_parent)


def test_tool_retry_sits_outside_the_tree() -> None:
    assert issubclass(ToolRetry, Exception)
    assert not issubclass(ToolRetry, AgentrtError)
    retry = ToolRetry("try again with a smaller page")
    assert retry.message == "try again with a smaller page"
    assert str(retry) == "try again with a smaller page"


def test_every_exported_error_is_an_exception() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert isinstance(cls, type)
        assert issubclass(cls, Exception)
        if cls not in (ToolRetry, errors.ToolSuspended):
            assert issubclass(cls, AgentrtError), name


def test_model_api_error_fields() -> None:
    err = ModelAPIError("bad request", status=400, body={"error": {"message": "nope"}}, model="openai:gpt-4o")
    assert str(err) == "bad request"
    assert err.status == 400
    assert err.body == {"error": {"message": "nope"}}
    assert err.model == "openai:gpt-4o"
    assert err.retry_after is None


def test_model_api_error_defaults() -> None:
    err = ModelAPIError("x")
    assert (err.status, err.body, err.model, err.retry_after) == (None, None, None, None)


def test_rate_limit_error_carries_retry_after() -> None:
    err = RateLimitError("slow down", status=429, retry_after=2.5)
    assert err.retry_after == 2.5
    assert err.status == 429
    assert isinstance(err, ModelAPIError)


@pytest.mark.parametrize(
    "err",
    [
        ModelAPIError("server error", status=503, body={"detail": ["a", 1]}, model="m1", retry_after=None),
        RateLimitError("slow down", status=429, body="text body", model="m2", retry_after=7.0),
        AuthenticationError("bad key", status=401),
        ContextWindowExceededError("too long", status=400, model="m3"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_pickle_round_trip_preserves_type_and_fields(err: ModelAPIError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.status == err.status
    assert back.body == err.body
    assert back.model == err.model
    assert back.retry_after == err.retry_after


@pytest.mark.parametrize(
    "err",
    [UserError("u"), ModelTimeoutError("t"), UnexpectedModelCallError("x"), SessionBusyError("busy"), ToolRetry("r")],
    ids=lambda e: type(e).__name__,
)
def test_plain_errors_pickle(err: Exception) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)


def test_tool_arguments_error_fields() -> None:
    err = ToolArgumentsError("bad args", errors=[{"loc": ["x"], "msg": "required"}])
    assert err.errors == [{"loc": ["x"], "msg": "required"}]
    assert ToolArgumentsError("bad").errors == []


def test_tool_arguments_error_pickle_keeps_errors() -> None:
    err = ToolArgumentsError("bad args", errors=[{"loc": ["x"], "msg": "required"}])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ToolArgumentsError
    assert str(back) == "bad args"
    assert back.errors == [{"loc": ["x"], "msg": "required"}]


def test_bad_values_are_user_errors_and_still_value_or_type_errors() -> None:
    import pytest

    from agentrt import Msg, RuntimeContext

    with pytest.raises(errors.InvalidValueError) as bad_role:
        Msg(role="robot", content="x")  # type: ignore[arg-type]
    assert isinstance(bad_role.value, errors.UserError) and isinstance(bad_role.value, ValueError)
    with pytest.raises(errors.InvalidValueError):
        RuntimeContext(user_id="")
    with pytest.raises(errors.InvalidTypeError) as bad_block:
        Msg(role="user", content=[object()])  # type: ignore[list-item]
    assert isinstance(bad_block.value, TypeError)
