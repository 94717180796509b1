"""Embedding functions for long-term memory: an OpenAI-compatible ``/embeddings`` client.

Any callable ``embed(texts) -> vectors`` (sync or async) works as a memory's `embed`; this module
provides one for OpenAI and everything serving the same endpoint (Azure-compatible proxies, vLLM,
Ollama ``/v1``, LM Studio, DashScope compatible mode), over the shared aiohttp session the chat
adapters use. Requires the ``openai`` extra (aiohttp).

Batches go out concurrently (at most `max_concurrency` at a time) and come back in input order; a
batch that fails with what may pass (429 unless the quota is spent, 5xx, connection errors,
timeouts: `agentrt.model.resilience.is_retryable`) is retried with full-jitter exponential backoff,
honouring ``Retry-After``. A response that does not hold exactly one vector per input, each index
once, all of one length (`dimensions` when set) is a `ModelBehaviorError`, never a silent mismatch.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import Any

from agentrt import _json
from agentrt.errors import ModelBehaviorError, ModelConnectionError, ModelError, ModelTimeoutError, UserError

__all__ = ["OpenAIEmbeddings"]

_DEFAULT_BASE = "https://api.openai.com/v1"
_sleep = asyncio.sleep  # tests replace this to observe backoff without waiting
logger = logging.getLogger("agentrt.memory")


class OpenAIEmbeddings:
    """``await embed(texts)`` → one vector per text, from ``POST {base_url}/embeddings``.

    Args:
        model: The embedding model (``text-embedding-3-small`` by default).
        base_url: The API root; ``OPENAI_BASE_URL`` or OpenAI's when None.
        api_key: Bearer token; ``OPENAI_API_KEY`` when None (local servers may need none).
        dimensions: Ask for shorter vectors (models that support it).
        batch_size: Texts per request.
        timeout: Seconds per request.
        max_retries: Extra attempts per batch after a failure that may pass (0: none).
        max_concurrency: Batches in flight at once.
        backoff: Base delay in seconds; retry n waits a random time in [0, backoff * 2**(n-1)],
            at most `max_backoff`, unless the server sent ``Retry-After`` (capped at `max_retry_after`).
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_concurrency: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if batch_size < 1:
            raise UserError(f"batch_size must be at least 1, not {batch_size!r}")
        if max_retries < 0:
            raise UserError(f"max_retries must be >= 0, not {max_retries!r}")
        if max_concurrency < 1:
            raise UserError(f"max_concurrency must be at least 1, not {max_concurrency!r}")
        if dimensions is not None and dimensions < 1:
            raise UserError(f"dimensions must be at least 1, not {dimensions!r}")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self._lease: Any = None

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        """Embed `texts` (in batches of `batch_size`, up to `max_concurrency` at once), in order."""
        batches = [texts[start : start + self.batch_size] for start in range(0, len(texts), self.batch_size)]
        if not batches:
            return []
        if len(batches) == 1:
            results = [await self._retrying(batches[0])]
        else:
            results = await self._gather(batches)
        out = [vector for result in results for vector in result]
        if len({len(vector) for vector in out}) > 1:
            raise ModelBehaviorError(f"embeddings {self.model!r}: batches came back with different vector lengths")
        return out

    async def _gather(self, batches: Sequence[list[str]]) -> list[list[list[float]]]:
        """Every batch's vectors, in batch order; the first failure (in batch order) cancels the rest."""
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(batch: list[str]) -> list[list[float]]:
            async with gate:
                return await self._retrying(batch)

        tasks = [asyncio.ensure_future(one(batch)) for batch in batches]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error
        return [task.result() for task in tasks]

    async def _retrying(self, texts: list[str]) -> list[list[float]]:
        """One batch, retried on the failures that may pass."""
        from agentrt.model.resilience import is_retryable

        attempt = 0
        while True:
            try:
                return await self._batch(texts)
            except ModelError as exc:
                if attempt >= self.max_retries or not is_retryable(exc):
                    raise
                attempt += 1
                wait = self.delay(attempt, exc)
                logger.warning(
                    "embeddings %r failed (%s: %s); retry %d of %d in %.2f s",
                    self.model,
                    type(exc).__name__,
                    exc,
                    attempt,
                    self.max_retries,
                    wait,
                )
            await _sleep(wait)

    def delay(self, attempt: int, exc: BaseException) -> float:
        """Seconds to wait before retry number `attempt` (1-based) after `exc`."""
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after >= 0:
            return float(min(retry_after, self.max_retry_after))
        import random

        return random.uniform(0.0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        import aiohttp

        from agentrt.model.providers._http import SessionLease
        from agentrt.model.providers._openai_format import api_error

        if self._lease is None:
            self._lease = SessionLease()
        session = await self._lease.acquire()
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/embeddings"
        try:
            async with session.post(
                url, data=_json.dumps_bytes(body), headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise api_error(
                        provider="openai",
                        model=self.model,
                        status=resp.status,
                        headers=resp.headers,
                        raw=raw,
                        api_key=self.api_key,
                        key_env="OPENAI_API_KEY",
                        url=url,
                        base_url=self.base_url,
                    )
        except TimeoutError as exc:
            raise ModelTimeoutError(f"embeddings {self.model!r}: no answer from {url} in {self.timeout}s") from exc
        except aiohttp.ClientError as exc:
            raise ModelConnectionError(f"embeddings {self.model!r}: cannot reach {url}: {exc}") from exc
        return self._vectors(raw, len(texts), url)

    def _vectors(self, raw: bytes, count: int, url: str) -> list[list[float]]:
        """The response's vectors in input order, checked: one per input, each index once, one length."""
        where = f"embeddings {self.model!r}: unexpected response from {url}"
        try:
            data = _json.loads(raw)["data"]
            if not isinstance(data, list):
                raise TypeError(f"'data' is {type(data).__name__}, not a list")
            by_index: dict[int, list[float]] = {}
            for entry in data:
                index = entry["index"]
                embedding = entry["embedding"]
                if not isinstance(index, int) or isinstance(index, bool) or not isinstance(embedding, list):
                    raise TypeError("each item needs an integer 'index' and a list 'embedding'")
                if index in by_index:
                    raise ModelBehaviorError(f"{where}: index {index} twice")
                by_index[index] = [float(x) for x in embedding]
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelBehaviorError(f"{where}: {exc}") from exc
        if len(by_index) != count or set(by_index) != set(range(count)):
            got = "" if len(by_index) != count else " (indexes not 0 to n-1)"
            raise ModelBehaviorError(f"embeddings {self.model!r}: {len(by_index)} vectors for {count} texts{got}")
        vectors = [by_index[i] for i in range(count)]
        lengths = {len(vector) for vector in vectors}
        expected = {self.dimensions} if self.dimensions is not None else lengths
        if len(lengths) != 1 or lengths != expected or 0 in lengths:
            want = f" (asked for {self.dimensions})" if self.dimensions is not None else ""
            raise ModelBehaviorError(f"{where}: vector lengths {sorted(lengths)}{want}")
        return vectors

    async def aclose(self) -> None:
        """Stop using the shared HTTP session."""
        if self._lease is not None:
            await self._lease.release()

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings({self.model!r}, base_url={self.base_url!r})"
