"""The choice of an embedding provider from settings, and its settings mapped to its parameters.

Kept apart from the interface (provider.py), which every provider imports: the providers depend on
the interface, and only this module depends on the providers. Each provider is imported only when
chosen, so that choosing one loads none of the others' libraries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.embeddings.provider import DEFAULT_LOCAL_MODEL, Provider

if TYPE_CHECKING:
    from app.config import Settings

# A provider `preload` began loading, and the settings it was made from: the next create_provider
# with the same settings takes it instead of making another.
_early: tuple[tuple[object, ...], Provider] | None = None


def _key(settings: Settings) -> tuple[object, ...]:
    return tuple(v for k, v in settings if k.startswith("embedding_"))


def preload(settings: Settings) -> None:
    """Begin loading the configured model now, on a thread of its own (`engram serve` does this
    first, so the model loads while the server's code is imported: ready about half a second sooner)."""
    global _early
    if (provider := _make(settings)) is not None:
        provider.preload()
        _early = (_key(settings), provider)


def create_provider(settings: Settings) -> Provider | None:
    """The configured provider (not started yet), or None when embeddings are switched off."""
    global _early
    if _early is not None and _early[0] == _key(settings):
        provider, _early = _early[1], None
        return provider
    return _make(settings)


def _make(settings: Settings) -> Provider | None:
    if settings.embedding_provider == "none":
        return None
    if settings.embedding_provider == "openai":
        from app.embeddings.openai_compat import OpenAICompatible

        # Settings refuses the openai provider without a model and dimensions.
        assert settings.embedding_model is not None and settings.embedding_dimensions is not None
        return OpenAICompatible(
            settings.embedding_model,
            settings.embedding_dimensions,
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None,
            request_dimensions=settings.embedding_request_dimensions,
            batch_size=settings.embedding_batch_size,
            timeout_seconds=settings.embedding_timeout_seconds,
            max_retries=settings.embedding_max_retries,
        )
    if settings.embedding_provider == "sentence-transformers":
        from app.embeddings.torch_model import SentenceTransformersModel

        return SentenceTransformersModel(
            settings.embedding_model or DEFAULT_LOCAL_MODEL,
            dimensions=settings.embedding_dimensions,
            device=settings.embedding_device,
            threads=settings.embedding_threads,
            batch_size=settings.embedding_batch_size,
        )
    from app.embeddings.local import LocalModel
    from app.embeddings.onnx_model import OnnxModel, is_model_directory

    model = settings.embedding_model or DEFAULT_LOCAL_MODEL
    local = OnnxModel if is_model_directory(model) else LocalModel  # a directory with engram-model.json
    return local(
        model,
        dimensions=settings.embedding_dimensions,
        threads=settings.embedding_threads,
        batch_size=settings.embedding_batch_size,
        workers=settings.embedding_workers,
    )
