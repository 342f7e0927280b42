"""Tool registration: every tool checks its caller's scope, runs, and reports domain errors alike."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import CallToolResult, ToolAnnotations
from mcp.types import Tool as Listed
from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic.fields import FieldInfo

from app.answers.form import Form
from app.auth.principal import Principal, principal_from_token
from app.errors import EngramError
from app.mcp.answering import Renderer, answer
from app.observability.context import CALL, Call
from app.services import models
from app.services.calls import retrying, within
from app.services.fairness import Fairness

logger = logging.getLogger("engram.tools")
T = TypeVar("T")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def caller(tenant_claims: Sequence[str], scope: str) -> Principal:
    """The verified principal of this request, which must hold `scope`."""
    token = get_access_token()
    if token is None:
        raise EngramError("forbidden", "this call carries no verified token")
    principal = principal_from_token(token, tenant_claims)
    if scope not in principal.scopes:
        raise EngramError("forbidden", f"this tool needs the {scope!r} scope", required_scope=scope)
    return principal


@dataclass
class ToolSet:
    """Collects tools whose first parameter is the calling Principal (hidden from the schema).

    The server is built from `tools` once every set has registered (MCPServer(tools=...)); `listed`
    is what tools/list says of them (app/mcp/listing.py). A compact set lists them lean (see
    `listing`); the drop-in dialects are listed as their reference servers list theirs.
    """

    tenant_claims: Sequence[str]
    prefix: str = ""
    scopes: dict[str, str] = field(default_factory=dict)  # tool name -> required scope
    tools: list[Tool] = field(default_factory=list)
    listed: list[Listed] = field(default_factory=list)
    compact: bool = False
    output_schemas: bool = True  # whether tools/list carries output schemas (ENGRAM_TOOL_OUTPUT_SCHEMAS)
    disabled: frozenset[str] = frozenset()  # tool names (without prefix) not served (ENGRAM_DISABLED_TOOLS)
    skipped: set[str] = field(default_factory=set)  # those of them the set has
    fairness: Fairness | None = None  # each call within its tenant's rate and concurrent calls
    deadline: float = math.inf  # seconds a call's database work may take (ENGRAM_CALL_DEADLINE_SECONDS)

    def __call__(
        self,
        scope: str,
        annotations: ToolAnnotations,
        *,
        name: str | None = None,
        title: str | None = None,
        answers_offline: bool = False,
        one_of: Sequence[str] = (),
        any_of: Sequence[str] = (),
        answer: Renderer | None = None,
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        """Register a tool. `answer`: the concise text of its answer (app/answers/): the answer is
        then that text, or the complete record as JSON when the call asks for `detail="full"`; a
        tool without one (the drop-in dialects) answers as it returns. A tool that takes
        `max_tokens` answers in a `Form`, whose budget its body passes on.
        `answers_offline`: the tool answers without waiting for the database (it
        bounds its own database work), so its admission does not read the tenant's limits either.
        `one_of` / `any_of`: arguments of which the call must give exactly one / at least one. The
        description says it and the call is checked here, never the schema: the Anthropic and OpenAI
        tool APIs refuse an input schema with `oneOf`/`anyOf`/`allOf` at its root, and Claude Code
        drops such a tool (docs/tools.md, "Schemas every client accepts")."""
        spec = _Spec(scope, annotations, name, title, answers_offline, tuple(one_of), tuple(any_of), answer)
        return functools.partial(self._register, spec)

    def _register(self, spec: _Spec, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """Add `fn` as a tool (unless disabled); returns it unchanged."""
        if (spec.name or fn.__name__) in self.disabled:
            self.skipped.add(spec.name or fn.__name__)
            return fn
        if self.compact and not spec.title:
            raise ValueError(f"tool {spec.name or fn.__name__} has no title")
        if "max_tokens" in inspect.signature(fn).parameters and not isinstance(spec.answer, Form):
            raise ValueError(f"tool {spec.name or fn.__name__} takes max_tokens: its answer must be a Form")
        tool_name = self.prefix + (spec.name or fn.__name__)
        doc = " ".join(filter(None, (inspect.getdoc(fn), _choice_rule(spec))))
        tool = self._tool(spec, self._runner(spec, fn, tool_name), doc, tool_name)
        self.tools.append(tool)
        self.listed.append(listing(tool, compact=self.compact, output_schema=self.output_schemas))
        self.scopes[tool_name] = spec.scope
        return fn

    def _runner(self, spec: _Spec, fn: Callable[..., Awaitable[Any]], tool_name: str) -> Callable[..., Awaitable[Any]]:
        """What the SDK calls: `fn`'s signature without the caller, the arguments by their Python
        names, the call run, its answer shaped."""
        signature = inspect.signature(fn)
        renamed = _aliases(signature)

        @functools.wraps(fn)
        async def run(**kwargs: Any) -> Any:
            if renamed:  # the SDK passes aliases ("from")
                kwargs = {renamed.get(k, k): v for k, v in kwargs.items()}
            result = await self._called(spec, fn, tool_name, kwargs)
            if spec.answer is None:
                return result
            return answer(result, spec.answer, kwargs.get("detail", "concise"), self.output_schemas)

        published = [p.replace(annotation=_as_text(p.annotation)) for p in list(signature.parameters.values())[1:]]
        # inspect.signature() honours __signature__; typeshed does not declare it on functions
        run.__signature__ = signature.replace(parameters=published)  # type: ignore[attr-defined]
        del run.__wrapped__  # the SDK must read the signature above, not fn's
        return run

    async def _called(
        self, spec: _Spec, fn: Callable[..., Awaitable[Any]], tool_name: str, kwargs: dict[str, Any]
    ) -> Any:
        """One call as the verified caller: admitted by its fair share, within the deadline, retried
        on a race; its outcome recorded, a domain error made the tool's error."""
        call = CALL.get()
        try:
            _check_choice(spec, kwargs)
            who = caller(self.tenant_claims, spec.scope)
            if call is not None:
                call.subject, call.client_id, call.tenant = who.subject, who.client_id, who.tenant
            admit = self.fairness.admit(who, read=not spec.answers_offline) if self.fairness else None
            async with admit or contextlib.nullcontext():
                result = await within(
                    self.deadline,
                    functools.partial(retrying, fn, who, **kwargs),
                    writes=not spec.annotations.read_only_hint,
                )
        except EngramError as exc:  # domain errors, and tenants the store refuses (`forbidden`)
            _ended(call, _OUTCOMES.get(exc.code, "tool_error"))
            if exc.code == "unavailable":
                warn_unavailable(f"tool call {tool_name}", call.tenant if call else None, exc)
            raise ToolError(str(exc)) from exc
        except Exception:
            _ended(call, "internal")
            raise
        _ended(call, "ok")
        return result

    @staticmethod
    def _tool(spec: _Spec, run: Callable[..., Awaitable[Any]], doc: str | None, tool_name: str) -> Tool:
        """The SDK's tool for `run`, its schemas made lean and strict (unknown arguments refused)."""
        tool = Tool.from_function(
            run,
            name=tool_name,
            description=doc,
            title=spec.title,
            annotations=spec.annotations,
            meta={"engram/requiredScope": spec.scope},  # listed by the dialects; the compact lists leave it out
        )
        tool.parameters = lean(tool.parameters) | {"additionalProperties": False}  # see `_Arguments`
        fields = {f: getattr(tool.fn_metadata, f) for f in FuncMetadata.model_fields}
        fields["output_schema"] = lean(fields["output_schema"], output=True)
        known = frozenset(f.alias or name for name, f in fields["arg_model"].model_fields.items())
        tool.fn_metadata = _Arguments(**fields, known=known)
        return tool


@dataclass(frozen=True, slots=True)
class _Spec:
    """How a tool is registered: what `ToolSet.__call__` was given."""

    scope: str
    annotations: ToolAnnotations
    name: str | None
    title: str | None
    answers_offline: bool
    one_of: tuple[str, ...]
    any_of: tuple[str, ...]
    answer: Renderer | None


def _choice_rule(spec: _Spec) -> str:
    """The sentence of the description that says which alternative arguments a call must give."""
    if spec.one_of:
        return f"Give exactly one of {_names(spec.one_of)}."
    if spec.any_of:
        return f"Give at least one of {_names(spec.any_of)}."
    return ""


def _check_choice(spec: _Spec, kwargs: Mapping[str, Any]) -> None:
    """Refuse a call that gives not exactly one of `one_of`, or none of `any_of` (`invalid`, naming them)."""
    given = sum(kwargs.get(n) not in (None, [], "") for n in spec.one_of or spec.any_of)
    if (spec.one_of and given != 1) or (spec.any_of and given == 0):
        raise EngramError("invalid", _choice_rule(spec)[0].lower() + _choice_rule(spec)[1:-1])


def _names(names: Sequence[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return " or ".join(quoted) if len(quoted) <= 2 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def listing(tool: Tool, *, compact: bool, output_schema: bool) -> Listed:
    """What tools/list says of a tool. Compact, it says only what a model needs to call it: no
    output schema unless asked (results still carry structured content, checked against it), no
    `_meta`, an optional argument as its type alone (leaving it out is how it is omitted; null
    is still accepted), and of the hints only those that mean something for the tool."""
    return Listed(
        name=tool.name,
        title=tool.title,
        description=" ".join(tool.description.split()) if compact and tool.description else tool.description,
        input_schema=lean(tool.parameters, compact=True) if compact else tool.parameters,
        output_schema=tool.output_schema if output_schema else None,
        annotations=_hints(tool.annotations) if compact and tool.annotations else tool.annotations,
        _meta=None if compact else tool.meta,
    )


def _hints(hints: ToolAnnotations) -> ToolAnnotations:
    """The hints that differ from the spec's defaults (read-only false, destructive true, idempotent
    false, open world true); destructive and idempotent mean nothing for a read-only tool."""
    closed = False if hints.open_world_hint is False else None
    if hints.read_only_hint:
        return ToolAnnotations(read_only_hint=True, open_world_hint=closed)
    return ToolAnnotations(
        destructive_hint=False if hints.destructive_hint is False else None,
        idempotent_hint=True if hints.idempotent_hint else None,
        open_world_hint=closed,
    )


def lean(schema: Any, *, output: bool = False, compact: bool = False) -> Any:
    """A JSON schema as small as it can be with the same meaning, since every tools/list carries it.

    The `title` keywords pydantic derives from names ("Entity Id" for entity_id) go: they repeat the
    property and definition names (properties called `title` stay). In an output schema, defaults
    (which only inputs use) go too, and `anyOf: [{type: X}, {type: null}]` becomes `type: [X, null]`.
    `compact` (what a model needs to call the tool): an input's `{anyOf: [X, {type: null}], default:
    null}` becomes X, an id's pattern `format: uuid`; `type: string` goes beside an `enum` or a
    `format: date-time`, which say it, and an enum's default when it is its first value (the native
    instructions say so); a cursor (returned by the server, passed back
    as it came) loses its pattern, and the rules of `_unneeded` go. The arguments are still checked
    against the full rules, and a refusal names the field and the rule.
    """
    if isinstance(schema, list):
        return [lean(item, output=output, compact=compact) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    opaque = False  # a cursor: its length bound goes with its pattern
    for key, value in schema.items():
        if (key == "title" and isinstance(value, str)) or (output and key == "default"):
            continue
        if compact and key == "pattern" and value in _COMPACT_PATTERNS:
            out.update(_COMPACT_PATTERNS[value])
            opaque = value == models.CURSOR_PATTERN
            continue
        if compact and _unneeded(key, value):
            continue
        if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
            out[key] = {name: lean(child, output=output, compact=compact) for name, child in value.items()}
            if compact and key == "$defs":  # a model's docstring speaks to developers
                out[key] = {name: _without(child, "description") for name, child in out[key].items()}
        elif key in ("const", "enum", "examples", "default"):
            out[key] = value  # values, not schemas
        else:
            out[key] = lean(value, output=output, compact=compact)
    if opaque:
        out.pop("maxLength", None)
    if compact and out.get("type") == "string" and ("enum" in out or out.get("format") == "date-time"):
        del out["type"]  # the values, or the format, say it
    if compact and isinstance(out.get("enum"), list) and out["enum"] and out.get("default") == out["enum"][0]:
        del out["default"]  # the instructions say: of listed values, the first is the default
    branches = out.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        other = next(b for b in branches if b != {"type": "null"})
        if compact and isinstance(other, dict):
            return other | {k: v for k, v in out.items() if k != "anyOf" and not (k == "default" and v is None)}
        if output and isinstance(other, dict) and set(other) == {"type"} and isinstance(other["type"], str):
            del out["anyOf"]
            out["type"] = [other["type"], "null"]
    return out


def _without(schema: Any, key: str) -> Any:
    return {k: v for k, v in schema.items() if k != key} if isinstance(schema, dict) else schema


def _unneeded(key: str, value: Any) -> bool:
    """Rules a compact listing leaves to the server's refusal: closed objects, non-empty strings,
    the length bound of short ones (names, labels, queries: 1000 characters at most), the upper bound of the ids
    and versions the server hands out, defaults false and []."""
    return (
        (key == "additionalProperties" and isinstance(value, bool))
        or (key == "minLength" and value == 1)
        or (key == "maxLength" and isinstance(value, int) and value <= _SHORT)
        or (key == "maximum" and isinstance(value, int) and value >= 2**31 - 1)  # ids, versions: handed out
        or (key == "default" and (value is False or value == []))
    )


_SHORT = 1000
_COMPACT_PATTERNS: dict[str, dict[str, str]] = {models.UUID_PATTERN: {"format": "uuid"}, models.CURSOR_PATTERN: {}}


class InvalidArguments(ValidationError):
    """Arguments the input schema refused, worded like every other Engram error: `invalid: field: rule`."""

    problems: list[str]

    def __str__(self) -> str:
        first, *more = self.problems
        return str(EngramError("invalid", first, problems=more) if more else EngramError("invalid", first))


class _Arguments(FuncMetadata):
    """The SDK's argument validation, with its refusals reported as `invalid` (field and rule, never the
    input); and an answer without structured content passed as it is (the output schema, when one is
    listed, is what structured content is checked against: app/mcp/answering.py)."""

    known: frozenset[str] = frozenset()  # the argument names the tool takes, set at registration

    def convert_result(self, result: Any) -> Any:
        if isinstance(result, CallToolResult) and result.structured_content is None:
            return result
        return super().convert_result(result)

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        if unknown := sorted(arguments_to_validate.keys() - self.known):  # pydantic would drop them silently
            refused = InvalidArguments.from_exception_data("arguments", [])
            refused.problems = [f"{name[:100]}: unknown argument" for name in unknown[:10]]
            raise refused
        try:
            return super().validate_arguments(arguments_to_validate)
        except ValidationError as exc:
            refused = InvalidArguments.from_exception_data(exc.title, [])
            refused.problems = [
                f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            ] or ["the arguments do not match the input schema"]
            raise refused from None


def _keep_none(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    return None if value is None else handler(value)


def _as_text(annotation: Any) -> Any:
    """`str | None` published as `str` that may be null, with the same schema.

    The SDK JSON-decodes a string argument unless its annotation is exactly `str`, so a name like
    "null" or "[1]" would arrive as None or a list. Other annotations are returned unchanged.
    """
    outer: list[Any] = []
    union = annotation
    if get_origin(union) is Annotated:
        union, *outer = get_args(union)
    if get_origin(union) not in (Union, types.UnionType) or type(None) not in get_args(union):
        return annotation
    inner = [a for a in get_args(union) if a is not type(None)]
    if len(inner) != 1:
        return annotation
    base, *constraints = get_args(inner[0]) if get_origin(inner[0]) is Annotated else (inner[0],)
    if base is not str:
        return annotation
    return Annotated[str, *constraints, *outer, WrapValidator(_keep_none, json_schema_input_type=union)]


def _aliases(signature: inspect.Signature) -> dict[str, str]:
    """Parameter names by their schema alias, for parameters such as `from_` published as "from"."""
    out = {}
    for name, param in signature.parameters.items():
        for meta in getattr(param.annotation, "__metadata__", ()):
            if isinstance(meta, FieldInfo) and meta.alias:
                out[meta.alias] = name
    return out


_OUTCOMES = {"invalid": "invalid", "limit": "limited", "forbidden": "unauthorized", "unavailable": "unavailable"}


def _ended(call: Call | None, outcome: str) -> None:
    if call is not None:
        call.outcome = outcome


def warn_unavailable(what: str, tenant: str | None, exc: EngramError) -> None:
    """One line per call the database failed, not a traceback: the cause is outside this process."""
    logger.warning("%s unavailable: %s", what, exc.message, extra={"tool": what, "tenant": tenant, **exc.details})
