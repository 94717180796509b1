"""Embedding functions for long-term memory: an OpenAI-compatible ``/embeddings`` client.

Any callable ``embed(texts) -> vectors`` (sync or async) works as a memory's `embed`; this module
provides one for OpenAI and everything serving the same endpoint (Azure-compatible proxies, vLLM,
Ollama ``/v1``, LM Studio, DashScope compatible mode), over the shared aiohttp session the chat
adapters use. Requires the ``openai`` extra (aiohttp).
"""

from __future__ import annotations

import os
from typing import Any

from agentrt import _json
from agentrt.errors import ModelBehaviorError, ModelConnectionError, ModelTimeoutError, UserError

__all__ = ["OpenAIEmbeddings"]

_DEFAULT_BASE = "https://api.openai.com/v1"


class OpenAIEmbeddings:
    """``await embed(texts)`` → one vector per text, from ``POST {base_url}/embeddings``.

    Args:
        model: The embedding model (``text-embedding-3-small`` by default).
        base_url: The API root; ``OPENAI_BASE_URL`` or OpenAI's when None.
        api_key: Bearer token; ``OPENAI_API_KEY`` when None (local servers may need none).
        dimensions: Ask for shorter vectors (models that support it).
        batch_size: Texts per request.
        timeout: Seconds per request.
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
    ) -> None:
        if batch_size < 1:
            raise UserError(f"batch_size must be at least 1, not {batch_size!r}")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout = timeout
        self._lease: Any = None

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        """Embed `texts` (in batches of `batch_size`), in order."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(await self._batch(texts[start : start + self.batch_size]))
        return out

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
                    )
        except TimeoutError as exc:
            raise ModelTimeoutError(f"embeddings {self.model!r}: no answer from {url} in {self.timeout}s") from exc
        except aiohttp.ClientError as exc:
            raise ModelConnectionError(f"embeddings {self.model!r}: cannot reach {url}: {exc}") from exc
        try:
            data = _json.loads(raw)["data"]
            vectors = [[float(x) for x in entry["embedding"]] for entry in sorted(data, key=lambda e: e["index"])]
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelBehaviorError(f"embeddings {self.model!r}: unexpected response from {url}: {exc}") from exc
        if len(vectors) != len(texts):
            raise ModelBehaviorError(f"embeddings {self.model!r}: {len(vectors)} vectors for {len(texts)} texts")
        return vectors

    async def aclose(self) -> None:
        """Stop using the shared HTTP session."""
        if self._lease is not None:
            await self._lease.release()

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings({self.model!r}, base_url={self.base_url!r})"
