"""The C allocator, set up before `engram serve` starts its threads.

glibc gives each thread that allocates an arena of its own (up to 8 per core), and memory freed in
one arena is not reused by another: a server whose threads take turns (the embedding workers, the
default executor's) keeps the high-water mark of each. Two arenas hold the same work with less
memory kept; the event loop, which does almost all the allocating, never waits for a lock, as
the other threads allocate little. An operator's MALLOC_ARENA_MAX wins (glibc has applied it).
"""

from __future__ import annotations

import ctypes
import os

_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Bound glibc's arenas; False where the allocator is not glibc's or the operator chose."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl, macOS: another allocator, nothing to bound
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))
