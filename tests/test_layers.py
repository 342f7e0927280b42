"""The layering, checked from the source: transport → services → store.

- `app/mcp/` and `app/console/` (the transports) import neither the store nor the database driver;
- `app/hooks/` (the hook endpoints, one adapter per client) imports neither those nor `app/mcp/`,
  and `app/services/` names no client's hook event;
- `app/services/` (the domain rules) reads typed rows, never the driver's records;
- `app/store/` imports nothing above it;
- in `app/cli/`, only the database module imports the store: the other commands go through the
  services (tenants, cells, keys and reports through the operator service);
- only the CLI reaches the development database tooling (`app/devdb/`);
- SQL and Cypher are written only in `app/store/` (and `app/devdb/`).

There are no exceptions.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

from app.hooks.routes import CLIENTS
from tests.support.server import ROOT

APP = ROOT / "app"

# Text that marks a string literal as SQL or Cypher.
SQL_MARKERS = ("SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", "cypher(")

# Where SQL may be written: the store (its migrations runner included), and the development
# database tooling behind `engram db up` and the local cells, which create databases and roles
# before any schema exists.
SQL_HOMES = ("app.store", "app.devdb")


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


def test_the_hook_endpoints_do_not_reach_the_store_the_driver_or_mcp() -> None:
    """/hooks/claude-code is a transport beside app/mcp: app/hooks/ calls the hooks service, and
    no service imports it back."""
    assert not _violations("app.hooks", ("app.store", "asyncpg", "app.mcp")), "app/hooks/ must call services"
    assert not _violations("app.services", ("app.hooks",)), "the services serve every client: no adapter"
    assert "app.services.hooks" in import_graph()["app.hooks.routes"]  # the check sees the package


def test_the_services_name_no_clients_hook_event() -> None:
    """A client's event names are its adapter's (app/hooks/<client>.py): the hooks service speaks in
    neutral verbs (start, prompt, keep), so that a second client is one module, not a second
    dispatch inside the domain. A tenant's `events` setting holds them as opaque names."""
    events = {e for client in CLIENTS for e in client.events}
    named = re.compile(r"\b(" + "|".join(sorted(events)) + r")\b")
    found = {m: sorted({x for s in _strings(tree) for x in named.findall(s)}) for m, tree in _sources().items()}
    assert not {m: e for m, e in found.items() if e and _in(m, "app.services")}, "event names in app/services/"
    assert found["app.hooks.claude_code"], "the check sees an adapter's events"


def test_the_cli_administers_accounts_through_the_services() -> None:
    """`engram user`, `member` and `revoke` change accounts, memberships and grants through the
    account service the console uses (its rules, its events), never the account tables directly."""
    assert "app.authserver.accounts" in import_graph()["app.cli.accounts"]
    assert not _violations("app.cli", ("app.store.accounts",)), "app/cli/ must use app/authserver/accounts.py"
    # Import and export run the transfer service on the pools the CLI's database module opens.
    assert "app.services.transfer" in import_graph()["app.cli.transfer"]


def test_only_the_clis_database_module_reaches_the_store() -> None:
    """The CLI changes tenants, cells, keys and clients through the operator service (its loop over
    the cells, its owner connections), and reads the reports over every cell from it; only its
    database module (`engram migrate`, the pools the commands that run the services open) imports
    the store."""
    reaching = _violations("app.cli", ("app.store",))
    assert set(reaching) == {"app.cli.database"}, f"app/cli/ must use the services: {reaching}"
    assert "app.services.operator.tenants" in import_graph()["app.services.operator"]
    for group in ("app.cli.tenants", "app.cli.records", "app.cli.accounts"):
        assert _imports(group, "app.cli.common")
    assert "app.services.operator" in import_graph()["app.cli.common"]


def test_the_development_database_tooling_stays_apart_from_the_server() -> None:
    """app/devdb/ (`engram db up`, the local cells, PgBouncer) is for development and tests: only the
    CLI reaches it (to fill in the local database's URLs), never the server's modules."""
    users = {m for m in import_graph() if _imports(m, "app.devdb") and not _in(m, "app.devdb")}
    assert users == {"app.cli.common", "app.cli.database"}, users


def test_services_do_not_use_the_driver() -> None:
    assert not _violations("app.services", ("asyncpg",)), "services read typed rows, not the driver's records"


# What a service may take from the store's connection module: the owner's connection, by its name.
OWNER_NAMES = {"owner", "OwnerConnection"}


def test_services_hold_the_owner_connection_by_its_name() -> None:
    """A service that administers cells (tenant moves) opens `app.store.connect.owner` and holds
    an `OwnerConnection`, imported under those names: never the driver, the pools' plumbing, or a
    store module's alias of either."""
    taken = {
        module: {(a.name, a.asname) for a in node.names}
        for module, tree in _sources().items()
        if _in(module, "app.services")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "app.store.connect"
    }
    assert taken.get("app.services.moves") == {(name, None) for name in OWNER_NAMES}
    assert all(names <= {(name, None) for name in OWNER_NAMES} for names in taken.values()), taken


def _rebinds(tree: ast.Module, names: set[str]) -> list[int]:
    """Lines of `tree`'s top level that give one of `names` (or `asyncpg.<name>`) another name."""
    return [
        node.lineno
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and node.value is not None
        and (
            (isinstance(node.value, ast.Name) and node.value.id in names)
            or (isinstance(node.value, ast.Attribute) and ast.unparse(node.value) in {f"asyncpg.{n}" for n in names})
        )
    ]


def test_the_store_names_the_owner_connection_once() -> None:
    """Only app/store/connect.py names the owner's connection; a store module that re-exported the
    driver's connection (or `owner`) under a name of its own would hand services the driver unseen."""
    driver = {"Connection", "connect", *OWNER_NAMES}
    found = {
        module: lines
        for module, tree in _sources().items()
        if _in(module, "app.store") and module != "app.store.connect" and (lines := _rebinds(tree, driver))
    }
    assert not found, f"the owner's connection renamed: {found}"
    assert _rebinds(_sources()["app.store.connect"], driver)  # the check sees its one home


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


# The store's connection plumbing (pools, standbys, the walk over cells, connections, the migrations
# runner): no query functions to time.
PLUMBING = (
    "app.store.database",
    "app.store.pool",
    "app.store.standby",
    "app.store.cell",
    "app.store.connect",
    "app.store.migrate",
)


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


def test_only_the_emitter_writes_age_text() -> None:
    """The Cypher read subset goes tokens → tree → rewrites → text: the parser, the tree and the
    rewrites build trees only, and the database's bound checks (`engram.cypher_…`) are named only
    where the text is written. The parser that wrote text while it parsed is gone."""
    pieces = ("app.store.cypher.tokens", "app.store.cypher.tree", "app.store.cypher.parse", "app.store.cypher.rewrite")
    assert not {m for m in pieces if _imports(m, "app.store.cypher.age")}, (
        "only the package's parse() calls the emitter"
    )
    writers = {
        module
        for module, tree in _sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "engram.cypher_" in node.value
    }
    assert writers == {"app.store.cypher.age"}, writers
    assert "app.store.cypher_read" not in import_graph()
    assert not any(_imports(m, "app.store.cypher_read") for m in import_graph())


# Cypher's own syntax: a MATCH clause, or a pattern's edge (`)-[`, `]->(`).
CYPHER = re.compile(r"\bMATCH\s*\(|\)<?-\[|\]->?\(")


def test_the_store_spells_no_cypher_of_its_own() -> None:
    """The store's own Cypher (an entity's edges, `relations.touching`) is built as a tree and written
    by the emitter like query_graph's: no store module outside app/store/cypher/ spells a pattern."""
    found = {
        module: [text[:60] for text in _strings(tree) if CYPHER.search(text)]
        for module, tree in _sources().items()
        if _in(module, "app.store") and not _in(module, "app.store.cypher")
    }
    assert not {m: texts for m, texts in found.items() if texts}, found
    assert CYPHER.search("MATCH (a:Entity)-[r:REL]->(b:Entity)") and not CYPHER.search("RETURNING id, (x)")
    assert "app.store.cypher" in import_graph()["app.store.relations"]


def _calls(tree: ast.Module, owner: str, attribute: str) -> list[int]:
    """Lines where `owner.attribute` is read (`asyncpg.create_pool`, `settings.cells`)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == attribute
        and isinstance(node.value, ast.Name)
        and node.value.id == owner
    ]


def test_only_the_pool_module_opens_pools() -> None:
    """One database's pool, its lease under the call's deadline and its outages live in `app/store/pool.py`;
    everything else asks it (`Pool`) for a connection."""
    found = {m: lines for m, tree in _sources().items() if (lines := _calls(tree, "asyncpg", "create_pool"))}
    assert set(found) == {"app.store.pool"}, found


def test_owner_connections_are_opened_one_way() -> None:
    """A connection outside the pools is opened by `owner(url)` (app/store/connect.py: its codecs and
    its connect timeout), the migrations runner's included; the change feed's listener, which holds
    the run-time role's connection for LISTEN and reconnects by itself, is the only other."""
    found = {
        m: lines
        for m, tree in _sources().items()
        if _in(m, "app.store") and (lines := _calls(tree, "asyncpg", "connect"))
    }
    assert set(found) == {"app.store.connect", "app.store.changes"}, found
    assert "app.store.connect" in import_graph()["app.store.migrate"]


def test_the_cells_are_listed_only_by_the_settings() -> None:
    """`Settings.every_cell()` is the one list of the cells, main first: nothing reads `settings.cells`."""
    found = {m: lines for m, tree in _sources().items() if (lines := _calls(tree, "settings", "cells"))}
    assert not found, found


def test_no_database_is_built_inside_the_database() -> None:
    """`Database` holds pools and cells (`Pool`, `Standby`, `Cell`); only `from_settings` builds one."""
    [database] = [
        node
        for node in _sources()["app.store.database"].body
        if isinstance(node, ast.ClassDef) and node.name == "Database"
    ]
    building = {
        method.name
        for method in database.body
        if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(method)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"Database", "cls"}
    }
    assert building == {"from_settings"}, building


def test_the_tenant_key_and_id_patterns_have_one_home() -> None:
    """The tenant key's and the canonical id's regular expressions are written once, in
    `app/ids.py` (the tokens' tenant claim, the store, the console and the tools check with them)."""
    patterns = (r"[A-Za-z0-9._:@|-]{0,199}", r"[0-9a-f]{8}-[0-9a-f]{4}")
    written = {
        pattern: sorted(m for m, tree in _sources().items() if any(pattern in text for text in _strings(tree)))
        for pattern in patterns
    }
    assert written == {pattern: ["app.ids"] for pattern in patterns}, written


def _strings(tree: ast.Module) -> list[str]:
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_the_tools_write_path_does_not_reach_the_import_store() -> None:
    """The writer serves the tools and imports alike: what both need lives in the store modules of
    the things written (entities, aliases, merges, history), not in the import's own."""
    assert not _imports("app.services.writer", "app.store.transfer")


def test_audit_rows_are_built_in_one_place() -> None:
    """Every audit row's fields (who, client, tool, duration, request) come from
    app/services/audit_rows.py; only it writes rows through the store, and only it times the call
    for them."""
    writers = {
        module
        for module, tree in _sources().items()
        if not _in(module, "app.store")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("write", "KeyAudit") and _names(node.value, "audit")
    }
    assert writers == {"app.services.audit_rows"}, writers
    builders = {m for m in import_graph() if _in(m, "app.services") and _imports(m, "app.observability.context")}
    timing = {m for m in builders if "REQUEST_ID" in ast.unparse(_sources()[m])}
    assert timing == {"app.services.audit_rows"}, timing


def _names(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


# The ground floor of app/: what every floor may name (scope names, id patterns, error codes, where the
# SQL files are), importing nothing of Engram's, so that naming them never draws an arrow back up.
GROUND_FLOOR = ("app.scopes", "app.ids", "app.errors", "app.shipped")


def _room(module: str) -> str:
    """The room of app/ a module is in: its top-level package or module (`app.store.cypher.age` →
    `app.store`)."""
    return ".".join(module.split(".")[:2])


def _rooms() -> dict[str, set[str]]:
    """The rooms of app/ and the rooms each imports (an arrow between rooms, whichever modules draw it)."""
    graph: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        if module == "app":
            continue
        arrows = graph.setdefault(_room(module), set())
        arrows.update(_room(m) for m in imported if _in(m, "app") and m != "app" and _room(m) != _room(module))
    return graph


def test_no_arrow_runs_back_up_between_the_rooms_of_app() -> None:
    """The folders and top-level modules of app/ stand on floors, every arrow pointing down: no two
    rooms import each other, however far round (`auth/ → config → auth/` was one, when the settings
    took the scope names from app/auth/ and app/auth/ took the tenant key from the store)."""
    rooms = _rooms()
    back_up = sorted(room for room in rooms if room in _reached(rooms, room))
    assert not back_up, f"rooms that reach themselves: {back_up}"


# A module a reader takes in whole: past this, it holds more than one concept (docs/architecture.md).
MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in APP.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long


def test_the_ground_floor_imports_nothing_of_engrams() -> None:
    found = {m: sorted(i for i in import_graph()[m] if _in(i, "app")) for m in GROUND_FLOOR}
    assert found == {m: [] for m in GROUND_FLOOR}, found
    assert "app.scopes" in _rooms()["app.config"] and "app.ids" in _rooms()["app.auth"]  # the check sees arrows


def _circles(package: str) -> list[set[str]]:
    """The import circles among a package's modules (the `__init__`s, which gather them, left out)."""
    modules = {
        m for m in import_graph() if _in(m, package) and not (ROOT / Path(*m.split(".")) / "__init__.py").exists()
    }
    graph = {m: {i for i in import_graph()[m] if i in modules} for m in modules}
    found: list[set[str]] = []
    for start in graph:
        reach = _reached(graph, start)
        if start in reach:
            circle = {m for m in reach if start in _reached(graph, m)}
            if circle not in found:
                found.append(circle)
    return found


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    reach: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    return reach


def test_the_console_has_no_import_circle() -> None:
    """Its pages take `Kit` and `Visit` from app/console/kit.py, which imports no page (type-only
    imports count: a circle is a circle for the reader too)."""
    assert not _circles("app.console"), _circles("app.console")


def test_the_services_have_no_import_circle() -> None:
    """The audit rows sit below `Service` (base.py writes them), the audit log's pages above it."""
    assert not _circles("app.services"), _circles("app.services")


def test_the_scope_names_are_spelled_once() -> None:
    """Engram's scope names are written in app/scopes.py only; everything else names them."""
    spelled = {
        module
        for module, tree in _sources().items()
        if module != "app.scopes"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in ("memory:read", "memory:write", "memory:admin")
    }
    assert not spelled, spelled


def _store_names(tree: ast.Module) -> set[str]:
    """Names a module imports from the store (`from app.store.x import Y`, `from app.store import x`)."""
    return {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and _in(node.module, "app.store")
        for a in node.names
    }


def test_services_do_not_rename_store_types_for_the_transports() -> None:
    """A service type the tools use is the service's own (mapped onto the store's by the service), not
    the store's under a service name (`SearchFilters = Narrowing`), which would hand the store to
    the transport while keeping the import check green."""
    renamed = []
    for module, tree in _sources().items():
        if not _in(module, "app.services"):
            continue
        store = _store_names(tree)
        for node in tree.body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            root = value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in store and not isinstance(value, ast.Call):
                renamed.append(f"{module}:{node.lineno}")
    assert not renamed, f"store types re-exported under service names: {renamed}"


def test_only_the_ranking_module_fuses() -> None:
    """Search and recall are siblings over app/services/ranking.py (pager, query vector, fusion): one
    fusion, and neither reaches into the other."""
    fusers = [
        f"{module}.{node.name}"
        for module, tree in _sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and re.search(r"(^|_)fuse($|_)", node.name)
        and module != "app.services.ranking"
    ]
    assert not fusers, f"rankings fused outside app/services/ranking.py: {fusers}"
    graph = import_graph()
    assert "app.services.ranking" in graph["app.services.search"]
    assert "app.services.ranking" in graph["app.services.recall"]
    assert "app.services.search" not in graph["app.services.recall"], "recall must not reach into search"
    assert "app.services.recall" not in graph["app.services.search"]


# --- what a model reads: app/answers/ -------------------------------------------------------------

# Modules of app/answers/ that hold no tools module's answers: the form, the pieces every answer
# uses, and the hooks' brief.
ANSWER_PIECES = {"form", "text", "summaries", "brief"}


def test_answers_are_printed_apart_from_the_transports_and_the_store() -> None:
    """app/answers/ prints what a model reads for every transport (the MCP tools, the hook endpoint):
    it imports neither of them, nor the store, nor MCP's types; the services do not print."""
    assert not _violations("app.answers", ("app.mcp", "app.hooks", "app.store", "mcp", "starlette"))
    assert not _violations("app.services", ("app.answers",)), "the services decide what is left out, not how it prints"
    assert "app.answers.brief" in import_graph()["app.hooks.routes"]
    assert not _imports("app.hooks.routes", "app.mcp"), "the hook endpoint prints its brief from app/answers/"


def _tools_modules() -> dict[str, ast.Module]:
    return {m.rpartition(".")[2]: t for m, t in _sources().items() if m.startswith("app.mcp.tools.")}


def test_each_tools_module_answers_from_its_namesake() -> None:
    """One answers module per tools module, of the same name: the answers of app/mcp/tools/graph.py
    are in app/answers/graph.py, and only there."""
    answers = {m.rpartition(".")[2] for m in _sources() if m.startswith("app.answers.")} - ANSWER_PIECES
    taken = {}
    for name, tree in _tools_modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "app.answers":
                taken[name] = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app.answers."):
                assert node.module == "app.answers.form", f"{name} imports {node.module}"
    assert all(found == {name} for name, found in taken.items()), taken
    assert answers == set(taken), f"answers modules without their tools module: {answers ^ set(taken)}"


def _budgeted_tools() -> list[tuple[str, ast.AsyncFunctionDef, str]]:
    """Each tool that takes `max_tokens`, with the answer it registers (as written)."""
    out = []
    for name, tree in _tools_modules().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.AsyncFunctionDef) or "max_tokens" not in {a.arg for a in fn.args.args}:
                continue
            answer = [ast.unparse(k.value) for d in fn.decorator_list if isinstance(d, ast.Call) for k in d.keywords
                      if k.arg == "answer"]  # fmt: skip
            assert answer, f"{name}.{fn.name} takes max_tokens but registers no answer"
            out.append((name, fn, answer[0]))
    return out


def test_every_budgeted_tool_is_cut_by_the_form_it_prints_in() -> None:
    """A tool that takes `max_tokens` registers a Form (an upper-case name in its answers module) and
    passes on that same form's budget: the measure its items are cut by is its printer's."""
    budgeted = _budgeted_tools()
    assert len(budgeted) >= 6, budgeted
    for name, fn, answer in budgeted:
        assert re.fullmatch(r"shown\.[A-Z_]+", answer), f"{name}.{fn.name} answers in {answer}, not a Form"
        budgets = {
            ast.unparse(call.func.value)
            for call in ast.walk(fn)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "budget"
        }
        assert budgets == {answer}, f"{name}.{fn.name} prints in {answer} but is cut by {budgets}"


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


def test_the_cli_commands_but_serve_load_no_mcp_sdk() -> None:
    """The MCP SDK takes seconds to import: the accounts, tenants, operator, transfer and backup
    commands reach the services and the store without it (only `serve` and `client` need it)."""
    modules = "app.cli, app.services, app.services.operator, app.services.transfer, app.authserver.accounts, app.health"
    probe = f"import sys, {modules}; print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
