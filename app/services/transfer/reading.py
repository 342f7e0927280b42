"""Reading a file: JSON Lines line by line, or the items of a JSON document in any layout, each
made a checked record by its format. Reading never holds more than one record (bounded by
MAX_RECORD_BYTES) and one read chunk."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from app.services.models import MAX_JSON_DEPTH
from app.services.transfer.format import FileFormat
from app.services.transfer.records import MAX_RECORD_BYTES, Bad, Record, Refusal

_CHUNK = 1024 * 1024
assert MAX_JSON_DEPTH <= 64  # orjson's own nesting limit (1024) is far above the checks' bound


def lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line without its end) of a byte stream; None for a line over MAX_RECORD_BYTES
    (the rest of it is skipped). Memory: one chunk and one line."""
    number = 0
    while True:
        raw = stream.readline(MAX_RECORD_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
            while (more := stream.readline(_CHUNK)) and not more.endswith(b"\n"):
                pass
            yield number, None
            continue
        yield number, raw.rstrip(b"\r\n")


_DOCUMENT = re.compile(rb'^\s*(\[|\{\s*"(entities|relations)"\s*:)')


def is_document(head: bytes) -> bool:
    """Whether a file starting with `head` is a JSON document (an array, or a KnowledgeGraph object)
    rather than JSON Lines."""
    return _DOCUMENT.match(head) is not None


def document_items(stream: BinaryIO) -> Iterator[tuple[int, str | None, bytes | None]]:
    """The items of a KnowledgeGraph document `{"entities": [...], "relations": [...]}` (or of a top-level
    array), in any layout: (line the item starts on, the key of its array or None, its bytes; None
    when over MAX_RECORD_BYTES). A document that ends early gives a last item (its line, "end", None)."""
    scanner = _Scanner()
    while chunk := stream.read(_CHUNK):
        yield from scanner.feed(chunk)
    if scanner.stack or scanner.in_string:
        yield scanner.line, "end", None


_NL, _QUOTE, _BACKSLASH, _LBRACE, _LBRACKET, _RBRACE = 0x0A, 0x22, 0x5C, 0x7B, 0x5B, 0x7D


class _Scanner:
    """Finds the items of a JSON document by its strings and brackets, without parsing the rest."""

    _TOKEN = re.compile(rb'["\\{}\[\]\n]')

    def __init__(self) -> None:
        self.stack = bytearray()  # the open containers, b"{" or b"["
        self.keys: list[str | None] = []  # per open array: the key of the top-level object it is the value of
        self.in_string = False
        self.escape = False  # the chunk ended right after a backslash in a string
        self.line = 1
        self.string: bytearray | None = None  # a string directly inside the top-level object, being read
        self.last_string = ""
        self.item: bytearray | None = None  # the item being collected
        self.item_line = 0
        self.item_key: str | None = None
        self.item_over = False

    def _item_level(self) -> bool:
        """Inside a top-level array, or an array that is a value of the top-level object."""
        return self.stack == b"[" or self.stack == b"{["

    def feed(self, chunk: bytes) -> Iterator[tuple[int, str | None, bytes | None]]:
        item_from = 0 if self.item is not None else None
        string_from = 0 if self.string is not None else None
        skip = 0 if self.escape else -1
        self.escape = False
        for m in self._TOKEN.finditer(chunk):
            i = m.start()
            if i == skip:  # the character after a backslash
                continue
            c = chunk[i]
            if c == _NL:
                self.line += 1
            elif self.in_string:
                if c == _BACKSLASH:
                    if i + 1 < len(chunk):
                        skip = i + 1
                    else:
                        self.escape = True
                elif c == _QUOTE:
                    self.in_string = False
                    if self.string is not None and string_from is not None:
                        self.string += chunk[string_from:i]
                        self.last_string = self.string.decode(errors="replace")
                        self.string, string_from = None, None
            elif c == _QUOTE:
                self.in_string = True
                if self.item is None and self.stack == b"{":
                    self.string, string_from = bytearray(), i + 1
            elif c in (_LBRACE, _LBRACKET):
                if c == _LBRACE and self.item is None and self._item_level():
                    self.item, self.item_line, self.item_over = bytearray(), self.line, False
                    self.item_key = self.keys[-1] if self.keys else None
                    item_from = i
                if c == _LBRACKET:
                    self.keys.append(self.last_string if self.stack == b"{" else None)
                self.stack.append(c)
            elif self.stack:  # } or ]
                if self.stack.pop() == _LBRACKET and self.keys:
                    self.keys.pop()
                if c == _RBRACE and self.item is not None and item_from is not None and self._item_level():
                    self._collect(chunk[item_from : i + 1])
                    yield self.item_line, self.item_key, None if self.item_over else bytes(self.item)
                    self.item, item_from = None, None
        if self.item is not None and item_from is not None:
            self._collect(chunk[item_from:])
        if self.string is not None and string_from is not None:
            self.string += chunk[string_from:]

    def _collect(self, part: bytes) -> None:
        assert self.item is not None
        if self.item_over:
            return
        if len(self.item) + len(part) > MAX_RECORD_BYTES:
            self.item_over = True
            self.item = bytearray()
            return
        self.item += part


def records(stream: BinaryIO, fmt: FileFormat, head: bytes, *, entities: bool = True) -> Iterator[Record | Bad]:
    """Every record of the stream in order, each checked, or `Bad` with the reason; `head` is the
    stream's first bytes (a neo4j file may be a document). Without `entities`, entity records are
    passed over unread where that is cheap to tell (a pass that has no use for them)."""
    if fmt.document and is_document(head):
        for line, key, raw in document_items(stream):
            if key == "entities" and not entities:
                continue
            if key == "end":
                yield Bad(line, "the document ends before it is closed")
            elif raw is None:
                yield Bad(line, f"an item over {MAX_RECORD_BYTES} bytes")
            else:
                yield _parse(line, raw, fmt, key)
        return
    for line, raw in lines(stream):
        if raw is None:
            yield Bad(line, f"a line over {MAX_RECORD_BYTES} bytes")
        elif not entities and raw.startswith(b'{"type":"entity"'):
            continue
        elif raw.strip() and raw.strip() not in (b"[", b"]", b","):
            yield _parse(line, raw, fmt, None)


def _parse(line: int, raw: bytes, fmt: FileFormat, key: str | None) -> Record | Bad:
    try:
        value: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Bad(line, f"not JSON ({str(exc).split(':')[0]})")
    if not isinstance(value, dict):
        return Bad(line, "not a JSON object")
    kind = fmt.kind(value, key)
    try:
        record = fmt.parse(kind, line, value) if kind is not None else None
    except Refusal as exc:
        return Bad(line, exc.reason, kind)
    return record if record is not None else Bad(line, f"not a record of the {fmt.name} format")
