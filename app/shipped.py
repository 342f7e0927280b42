"""Where the files the server reads beside its code are: the SQL migrations and the database
image's recipe. In the repository they are `sql/`, beside `app/` (docs/architecture.md, "The
repository"); the wheel carries them as `app/sql/`, mapped there at build time by pyproject.toml's
build configuration, not copied in the tree. On the ground floor: it imports nothing of Engram's."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def sql_dir() -> Path:
    """`app/sql/` of an installed wheel, else `sql/` of the checkout the package runs from."""
    installed = _PACKAGE / "sql"
    return installed if installed.is_dir() else _PACKAGE.parent / "sql"


def migrations_dir() -> Path:
    return sql_dir() / "migrations"
