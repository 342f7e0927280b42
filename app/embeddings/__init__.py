"""Embedding providers: one small interface, a local model and any OpenAI-compatible endpoint."""
