"""The layering, checked from the source: transport → services → store.

- `app/mcp/` and `app/console/` (the transports) import neither the store nor the database driver;
- `app/services/` (the domain rules) reads typed rows, never the driver's records;
- `app/store/` imports nothing above it;
- SQL and Cypher are written only in `app/store/` (and the development database tooling).

There are no exceptions.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.support.server import ROOT

APP = ROOT / "app"

# Text that marks a string literal as SQL or Cypher.
SQL_MARKERS = ("SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", "cypher(")

# Where SQL may be written: the store (its migrations runner included), and the development
# database tooling behind `engram db up` and the local cells, which create databases and roles
# before any schema exists.
SQL_HOMES = ("app.store", "app.provision", "app.localcells")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _sources() -> dict[str, ast.Module]:
    return {_module(p): ast.parse(p.read_text(), str(p)) for p in sorted(APP.rglob("*.py"))}


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Each module of `app` and every module it imports, anywhere in its body (`from a import b`
    counts as importing `a` and, when `a.b` is a module, `a.b`)."""
    modules = _sources()
    graph = {}
    for name, tree in modules.items():
        package = name if (APP / Path(*name.split(".")[1:]) / "__init__.py").exists() else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules)
        graph[name] = frozenset(found)
    return graph


def _imports(module: str, prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in import_graph()[module])


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for module in import_graph():
        if _in(module, package):
            bad = sorted(p for p in forbidden if _imports(module, p))
            if bad:
                out[module] = bad
    return out


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "app.store.entities" in graph["app.services.entities"]
    assert "app.services.refs" in graph["app.services.graph"]
    assert "app.store.database" in graph["app.store.entities"]


def test_transport_does_not_reach_the_store_or_the_driver() -> None:
    assert not _violations("app.mcp", ("app.store",)), "app/mcp/ must call services, not the store"
    assert not _violations("app.mcp", ("asyncpg",)), "app/mcp/ must not use the database driver"


def test_the_console_does_not_reach_the_store_or_the_driver() -> None:
    """The console is a transport like app/mcp: its pages call the services as the signed-in person."""
    assert not _violations("app.console", ("app.store",)), "app/console/ must call services, not the store"
    assert not _violations("app.console", ("asyncpg",)), "app/console/ must not use the database driver"


def test_the_hook_endpoint_does_not_reach_the_store_or_the_driver() -> None:
    """/hooks/claude-code is a transport like app/mcp: it calls the hooks service."""
    assert not _violations("app.hook_routes", ("app.store", "asyncpg")), "app/hook_routes.py must call services"


def test_the_cli_administers_accounts_through_the_services() -> None:
    """`engram user`, `member` and `revoke` change accounts, memberships and grants through the
    account service the console uses (its rules, its events), never the account tables directly."""
    assert "app.authserver.accounts" in import_graph()["app.cli"]
    assert not _violations("app.cli", ("app.store.accounts",)), "app/cli.py must use app/authserver/accounts.py"
    # Import and export run the transfer service; the CLI only builds its database (as the server does).
    reached = {m for m in import_graph()["app.cli_transfer"] if _in(m, "app.store") or _in(m, "asyncpg")}
    assert reached == {"app.store.database"}, "app/cli_transfer.py must run the services"


def test_services_do_not_use_the_driver() -> None:
    assert not _violations("app.services", ("asyncpg",)), "services read typed rows, not the driver's records"


def test_the_store_imports_nothing_above_it() -> None:
    assert not _violations("app.store", ("app.services", "app.mcp", "app.server", "app.cli"))


def _sql_literals(tree: ast.Module) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(marker in node.value for marker in SQL_MARKERS)
    ]


def test_sql_and_cypher_live_in_the_store() -> None:
    found = {
        module: lines
        for module, tree in _sources().items()
        if not any(_in(module, home) for home in SQL_HOMES) and (lines := _sql_literals(tree))
    }
    assert not found, f"SQL or Cypher outside the store: {found}"


def test_the_sql_check_sees_sql() -> None:
    assert _sql_literals(_sources()["app.store.entities"])
    assert _sql_literals(_sources()["app.store.relations"])  # Cypher included


def test_the_authorization_servers_pages_do_not_reach_the_store() -> None:
    pages = ("app.authserver.pages", "app.authserver.upstream")
    assert not {m: v for m, v in _violations("app.authserver", ("app.store", "asyncpg")).items() if m in pages}


# The store's connection plumbing (pools, connections, the migrations runner): no query functions to time.
PLUMBING = ("app.store.database", "app.store.connect", "app.store.migrate")


def test_every_store_function_is_timed() -> None:
    """Each query function of the store carries `@timed`, so its latency is in engram_db_query_duration_seconds."""
    untimed = [
        f"{module}.{node.name}"
        for module, tree in _sources().items()
        if _in(module, "app.store") and module not in PLUMBING
        for node in tree.body
        if isinstance(node, ast.AsyncFunctionDef)
        and not node.name.startswith("_")
        and not any(isinstance(d, ast.Name) and d.id == "timed" for d in node.decorator_list)
    ]
    assert not untimed


# --- the tests' own house: shared helpers live in tests/support/ ------------------------------------


def _test_imports(tree: ast.Module) -> set[str]:
    """The modules of `tests` a test source imports, anywhere in its body (`from tests import x`
    counts as importing `tests.x`; relative imports are resolved from `tests`)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(["tests", *([node.module] if node.module else [])]) if node.level else node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("tests.")}


def _leans_on_a_test_module(module: str) -> bool:
    """A test module (`tests.test_*`) or conftest.py, which holds fixtures only, not helpers."""
    return module.split(".")[1].startswith("test_") or module.split(".")[1] == "conftest"


def test_no_test_module_imports_another() -> None:
    """A test module imports what it shares from tests/support/ (fixtures come from conftest.py by
    name), never from another test module or conftest.py: a helper has one home, and running one
    test module never collects another."""
    found = {
        str(path.relative_to(ROOT)): sorted(leaned)
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (leaned := {m for m in _test_imports(ast.parse(path.read_text())) if _leans_on_a_test_module(m)})
    }
    assert not found, f"put what is shared in tests/support/: {found}"


def test_the_test_import_check_sees_imports() -> None:
    sources = "from tests.test_console import seed\nimport tests.test_deploy\nfrom tests import conftest\n"
    leaned = {m for m in _test_imports(ast.parse(sources)) if _leans_on_a_test_module(m)}
    assert leaned == {"tests.test_console", "tests.test_console.seed", "tests.test_deploy", "tests.conftest"}
    assert _test_imports(ast.parse("from tests.support.server import serve\n")) >= {"tests.support.server"}
