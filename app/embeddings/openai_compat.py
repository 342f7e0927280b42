"""Any OpenAI-compatible `/embeddings` endpoint: OpenAI, Azure OpenAI (v1 API), Ollama, vLLM,
text-embeddings-inference. Batched requests, a timeout per request, retries with backoff on
timeouts, connection errors, 408/409/429 and 5xx (honouring Retry-After), none on other errors."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from typing import Any

import httpx2

from app.embeddings.provider import EmbeddingError, InputRejected, Provider, Vector

_RETRYABLE_STATUS = {408, 409, 429}
_INPUT_STATUS = {400, 413, 422}  # the texts were refused (e.g. too long), not the request's credentials or URL
_BACKOFF_BASE_SECONDS = 0.5
_BACKOFF_CAP_SECONDS = 20.0


class OpenAICompatible(Provider):
    kind = "openai"

    def __init__(
        self,
        model: str,
        dimensions: int,
        *,
        base_url: str,
        api_key: str | None = None,
        request_dimensions: bool = False,
        batch_size: int = 64,
        timeout_seconds: float = 30,
        max_retries: int = 3,
    ) -> None:
        """`model` at the API root `base_url`, making vectors of `dimensions` (sent with each request
        when `request_dimensions`); `batch_size` texts per request, each request given
        `timeout_seconds`, and retried up to `max_retries` times."""
        self._model_name = model
        self.dimensions = dimensions
        # The vectors' space: the same model shortened to other dimensions is another space.
        self.model = f"openai:{self._model_name}@{self.dimensions}"
        self._url = f"{base_url}/embeddings"
        self._key = api_key
        self._send_dimensions = request_dimensions
        self._batch_size = self.job_texts = batch_size
        self._timeout = timeout_seconds
        self._attempts = max_retries + 1
        self._client: httpx2.AsyncClient | None = None

    async def start(self) -> None:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
            self._client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(self._timeout))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def embed(self, texts: Sequence[str], *, attempts: int | None = None) -> list[Vector]:
        out: list[Vector] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(await self._request(list(texts[start : start + self._batch_size]), attempts or self._attempts))
        return out

    async def _request(self, texts: list[str], attempts: int) -> list[Vector]:
        if self._client is None:
            raise EmbeddingError("the embedding client is not started")
        body: dict[str, Any] = {"model": self._model_name, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            body["dimensions"] = self.dimensions
        problem, hint = "no attempt made", None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(_backoff(attempt, hint))
            hint = None
            try:
                response = await self._client.post(self._url, json=body)
            except httpx2.TimeoutException:
                problem = f"no answer within {self._timeout:g} s"
                continue
            except httpx2.TransportError as exc:
                problem = f"cannot reach the endpoint ({type(exc).__name__})"
                continue
            if response.status_code == 200:
                return self._vectors(response, len(texts))
            problem = f"HTTP {response.status_code}{_error_message(response)}"
            if response.status_code in _INPUT_STATUS:
                raise InputRejected(f"embedding endpoint refused the texts: {problem}")
            if response.status_code not in _RETRYABLE_STATUS and response.status_code < 500:
                raise EmbeddingError(f"embedding endpoint refused the request: {problem}")
            hint = _retry_after(response)
        raise EmbeddingError(f"embedding endpoint failed after {attempts} attempt(s): {problem}")

    def _vectors(self, response: httpx2.Response, count: int) -> list[Vector]:
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError("embedding endpoint answered with an unexpected body") from exc
        if len(vectors) != count:
            raise EmbeddingError(f"embedding endpoint returned {len(vectors)} vectors for {count} texts")
        for v in vectors:
            if len(v) != self.dimensions:
                raise EmbeddingError(
                    f"embedding endpoint returned {len(v)}-d vectors; ENGRAM_EMBEDDING_DIMENSIONS is {self.dimensions}"
                )
        return [_unit(v) for v in vectors]


def _backoff(attempt: int, retry_after: float | None) -> float:
    """Exponential backoff with full jitter; the server's Retry-After, when it sent one, up to the cap."""
    if retry_after is not None:
        return min(retry_after, _BACKOFF_CAP_SECONDS)
    return random.uniform(0, min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2 ** (attempt - 1)))  # noqa: S311


def _unit(v: Vector) -> Vector:
    """Cosine distance does not need it, but scores read better when every provider's vectors have length 1."""
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v] if norm else v


def _retry_after(response: httpx2.Response) -> float | None:
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _error_message(response: httpx2.Response) -> str:
    """The endpoint's own short error text, if it sent one (never the request, which may hold user text)."""
    try:
        error = response.json().get("error")
    except ValueError:
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return f": {str(message)[:200]}" if message else ""
