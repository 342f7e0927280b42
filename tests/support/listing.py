"""What the tests of tool listings share: each endpoint's tools and the scope each needs (as this
code registers them, no database needed), and arguments made from a listing alone the way a model
fills them in (`Values`), on a tenant seeded with the names and ids they use (`seed`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from mcp import Client

from app.auth.principal import ADMIN, READ, WRITE
from app.config import Settings
from app.mcp.server import build_endpoints
from app.observability.usage import Usage
from app.services import Services
from app.services.indexing import Indexer
from app.store.database import Database
from tests.support.client import record

ALL = (READ, WRITE, ADMIN)
# Settings and services that build the endpoints without reaching any database.
OFFLINE_SETTINGS = Settings(database_url="postgresql://nobody@127.0.0.1:1/none", embedding_provider="none")
_DB = Database.from_settings(OFFLINE_SETTINGS)
OFFLINE_SERVICES = Services.from_settings(
    OFFLINE_SETTINGS, _DB, Indexer.from_settings(_DB, OFFLINE_SETTINGS), fairness=None
)
# Each tool set's tools and the scope each needs.
SCOPES: dict[str, Mapping[str, str]] = {
    e.tool_set: e.scopes
    for e in build_endpoints(OFFLINE_SETTINGS, OFFLINE_SERVICES, None, Usage())  # type: ignore[arg-type]
}
# What the Anthropic Messages API and OpenAI's function calling accept as a tool's parameters: an
# object schema with no composition or value keyword at its root ("input_schema does not support
# oneOf, allOf, or anyOf at the top level"; OpenAI: "must have type 'object' and not have
# 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level"). Claude Code drops such a tool.
ROOT_REFUSED = {"oneOf", "anyOf", "allOf", "not", "if", "then", "else", "enum", "const"}


class Values:
    """What a model would fill in: the memory's own names and ids, times, the listed bounds."""

    def __init__(self, names: list[str], entity_id: str) -> None:
        self.names = itertools.cycle(names)
        self.entity_id = entity_id

    def of(self, schema: dict[str, Any], defs: dict[str, Any]) -> Any:
        if "$ref" in schema:
            return self.of(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        if schema.get("examples"):
            return schema["examples"][0]
        if "enum" in schema:
            return schema.get("default", schema["enum"][0])
        kind = schema.get("type")
        if kind == "object":
            return self.arguments(schema, defs)
        if kind == "array":
            count = max(schema.get("minItems", 0), 1)
            return [self.of(schema.get("items", {}), defs) for _ in range(count)]
        if kind == "string":
            if schema.get("format") in ("date-time", "uuid"):
                return {"date-time": "2024-01-31T12:00:00Z", "uuid": self.entity_id}[schema["format"]]
            name = next(self.names)
            if "pattern" in schema:  # the listing's pattern, followed as a model would: a name that fits
                name = next(n for n in (name, re.sub(r"\W", "_", name)) if re.search(schema["pattern"], n))
            return name
        if kind in ("integer", "number"):
            return schema.get("default", schema.get("minimum", 1))
        if kind == "boolean":
            return schema.get("default", False)
        raise AssertionError(f"no value for {schema}")

    def arguments(self, schema: dict[str, Any], defs: dict[str, Any], description: str = "") -> dict[str, Any]:
        required = list(schema.get("required", []))
        choice = re.search(r"Give (?:exactly|at least) one of `(\w+)`", description)
        if choice and choice[1] not in required:
            required.append(choice[1])
        properties = schema.get("properties", {})
        return {name: self.of(properties[name], defs) for name in required}

    def for_tool(self, input_schema: dict[str, Any], description: str | None) -> dict[str, Any]:
        """The arguments of one call of a listed tool."""
        return self.arguments(input_schema, input_schema.get("$defs", {}), description or "")


async def seed(c: Client) -> Values:
    """Three people, a relation and an episode in the client's tenant; the values that name them.
    Only the record `detail="full"` reads is used, so a server listing no output schemas serves."""
    people = [{"name": f"Person {i}", "type": "person", "observations": [f"Person {i} likes tea"]} for i in range(3)]
    relation = {"from": "Person 0", "to": "Person 1", "type": "knows"}
    for tool, arguments in [
        ("upsert_entities", {"entities": people}),
        ("connect_entities", {"relations": [relation]}),
        ("add_episodes", {"episodes": [{"text": "Person 0 met Person 1."}]}),
    ]:
        done = await c.call_tool(tool, arguments)
        assert not done.is_error, (tool, done.content)
    first = record(await c.call_tool("get_entity", {"name": "Person 0", "detail": "full"}))
    return Values([p["name"] for p in people], first["id"])
