"""HTTP error statuses → agentrt errors, the same way for every provider adapter."""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any

from agentrt.errors import AuthenticationError, ContextWindowExceededError, ModelAPIError, RateLimitError

__all__ = ["classify_api_error"]


def classify_api_error(
    status: int,
    body: Any,
    *,
    text: str,
    model: str,
    message: str = "",
    too_long: Iterable[str] = (),
    too_long_statuses: Container[int] = (400, 413, 422),
    retry_after: float | None = None,
    rate_limited: bool = False,
    auth_failed: bool = False,
    auth_hint: str = "",
    context_exceeded: bool = False,
) -> ModelAPIError:
    """The typed error for an error status.

    429 (or `rate_limited`) is a `RateLimitError`; 401, 403 (or `auth_failed`) an
    `AuthenticationError`, whose text gets `auth_hint`; a status in `too_long_statuses` whose
    provider `message` holds one of the `too_long` markers (or `context_exceeded`) a
    `ContextWindowExceededError`; anything else a `ModelAPIError`. `text` is the error's message.
    """
    cls: type[ModelAPIError] = ModelAPIError
    if status == 429 or rate_limited:
        cls = RateLimitError
    elif status in (401, 403) or auth_failed:
        cls = AuthenticationError
        text += auth_hint
    elif status in too_long_statuses and (context_exceeded or any(m in message.lower() for m in too_long)):
        cls = ContextWindowExceededError
    return cls(text, status=status, body=body, model=model, retry_after=retry_after)
