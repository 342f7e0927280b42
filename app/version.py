"""The server's version: the installed distribution's (pyproject.toml's `version`), read once; and
the commit it was built from, which the image carries in ENGRAM_REVISION (the Dockerfile's
REVISION build argument)."""

from __future__ import annotations

import os
import re
from importlib import metadata

DISTRIBUTION = "engram-graph"

try:
    VERSION = metadata.version(DISTRIBUTION)
except metadata.PackageNotFoundError:  # a source tree used without installing it
    VERSION = "0+unknown"

# Build metadata like the version, not a setting: a commit id or tag, else "unknown".
REVISION = os.environ.get("ENGRAM_REVISION", "").strip()
if not re.fullmatch(r"[0-9A-Za-z._+-]{1,64}", REVISION):
    REVISION = "unknown"
