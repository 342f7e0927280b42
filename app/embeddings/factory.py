"""The choice of an embedding provider from settings, and its settings mapped to its parameters.

Kept apart from the interface (provider.py), which every provider imports: the providers depend on
the interface, and only this module depends on the providers.
"""

from __future__ import annotations

from app.config import Settings
from app.embeddings.local import LocalModel
from app.embeddings.openai_compat import OpenAICompatible
from app.embeddings.provider import DEFAULT_LOCAL_MODEL, Provider
from app.embeddings.torch_model import SentenceTransformersModel


def create_provider(settings: Settings) -> Provider | None:
    """The configured provider (not started yet), or None when embeddings are switched off."""
    if settings.embedding_provider == "none":
        return None
    if settings.embedding_provider == "openai":
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
        return SentenceTransformersModel(
            settings.embedding_model or DEFAULT_LOCAL_MODEL,
            dimensions=settings.embedding_dimensions,
            device=settings.embedding_device,
            threads=settings.embedding_threads,
            batch_size=settings.embedding_batch_size,
        )
    return LocalModel(
        settings.embedding_model or DEFAULT_LOCAL_MODEL,
        dimensions=settings.embedding_dimensions,
        threads=settings.embedding_threads,
        batch_size=settings.embedding_batch_size,
    )
