"""What every command group shares: the settings (with the local database filled in), running a
command's coroutine with domain errors as exit messages, and the operator service over the cells.

Imports stay inside the functions, so that building the parser loads nothing heavy."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

if TYPE_CHECKING:
    from app.config import Settings
    from app.services.operator import Operator

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

T = TypeVar("T")

UNSET = object()  # a flag not given (`default` is a value: back to the server's setting)


def version() -> str:
    from app.version import VERSION

    return f"engram {VERSION}"


def read_settings() -> Settings:
    from pydantic import ValidationError

    from app.config import Settings

    try:
        return Settings()
    except ValidationError as exc:
        lines = [
            f"  ENGRAM_{'_'.join(str(p) for p in e['loc']).upper() or '(settings)'}: {e['msg']}" for e in exc.errors()
        ]
        sys.exit("configuration error:\n" + "\n".join(lines))


def with_database(settings: Settings) -> Settings:
    from app.devdb import provision

    try:
        return provision.with_local_database(settings)
    except provision.ProvisionError as exc:
        sys.exit(f"error: {exc}")


def exiting(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main()`; a domain error exits with its message."""
    from app.errors import EngramError

    try:
        return asyncio.run(main())
    except EngramError as exc:
        sys.exit(f"error: {exc.message}")


def skipped(cell: str) -> None:
    """A cell a command over every cell passes over: said on stderr."""
    print(f"cell {cell}: skipped: no ENGRAM_CELL_{cell.upper()}_URL or _ADMIN_URL here", file=sys.stderr)


def operator() -> Operator:
    """The operator service over every cell this configuration names."""
    from app.services.operator import Operator

    return Operator.from_settings(with_database(read_settings()), skipped=skipped)
