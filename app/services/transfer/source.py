"""An import's input, read as many times as needed: a file, or bytes received over HTTP."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import BinaryIO

from app.services.transfer.records import MAX_RECORD_BYTES


class Source:
    def __init__(self, path: Path | None = None, data: bytes | None = None) -> None:
        if (path is None) == (data is None):
            raise ValueError("a file or bytes")
        self.path, self.data = path, data
        self.digest = b""
        self.lines = 0
        self.head = b""

    def open(self) -> BinaryIO:
        return self.path.open("rb") if self.path is not None else io.BytesIO(self.data or b"")

    def scan(self) -> None:
        """Its SHA-256 (the import's identity), lines and first bytes (at least its first line, up to
        a record's bound, so that its format can be told): one read, bounded memory."""
        digest, lines, last = hashlib.sha256(), 0, b""
        with self.open() as stream:
            self.head = stream.read(4096)
            while b"\n" not in self.head and len(self.head) < MAX_RECORD_BYTES:  # a long first line
                more = stream.read(1 << 16)
                if not more:
                    break
                self.head += more
            stream.seek(0)
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                lines += chunk.count(b"\n")
                last = chunk
        self.digest = digest.digest()
        self.lines = lines + (1 if last and not last.endswith(b"\n") else 0)
