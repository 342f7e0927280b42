"""The choice of an embedding provider from settings.

Kept apart from the interface (provider.py), which every provider imports: the providers depend on
the interface, and only this module depends on the providers.
"""

from __future__ import annotations

from app.config import Settings
from app.embeddings.local import LocalModel
from app.embeddings.openai_compat import OpenAICompatible
from app.embeddings.provider import Provider


def create_provider(settings: Settings) -> Provider | None:
    """The configured provider (not started yet), or None when embeddings are switched off."""
    if settings.embedding_provider == "none":
        return None
    if settings.embedding_provider == "openai":
        return OpenAICompatible(settings)
    return LocalModel(settings)
