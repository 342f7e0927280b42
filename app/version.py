"""The server's version: the installed distribution's (pyproject.toml's `version`), read once."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "engram-graph"

try:
    VERSION = metadata.version(DISTRIBUTION)
except metadata.PackageNotFoundError:  # a source tree used without installing it
    VERSION = "0+unknown"
