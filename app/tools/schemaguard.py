"""A schema resolves only its own resources: nothing is fetched, and no reference loops.

Every JSON Schema finishline checks values against (a run's `output_schema`, a tool's
`parameters`, an MCP server's input schema) comes from outside. jsonschema's default registry
fetches a `$ref` it cannot find in the schema (`http://…`, `file://…`, a relative reference
under a remote `$id`) with no allow-list, timeout or size cap: a read of anything the server
can reach, whose values come back in validation messages. So:

- `LOCAL_ONLY` is the registry every validator is built with: its `retrieve` refuses, so a
  reference that is not the schema's own is never fetched (`app.tools.base`).
- `reference_problem` finds, once per schema (it is compiled once per content), the first
  `$ref`/`$dynamicRef` that resolves outside the schema or to nothing in it, and the first
  chain of references that comes back to where it started without going into the value
  (`a → b → a`, `{"$ref": "#"}`), which would recurse until Python's stack ran out. An `$id`
  is a name, never dereferenced: it is fine as long as every reference stays in the schema.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from app.engine.errors import FinishlineError
from app.engine.paths import field_path

if TYPE_CHECKING:
    from referencing import Registry
    from referencing._core import Resolver
    from referencing.jsonschema import Schema

_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
"""Applicators that apply a subschema to the same value (no progress into it)."""
_REFERENCES = ("$ref", "$dynamicRef")
Path = tuple[str | int, ...]


class RemoteReferenceError(FinishlineError):
    """Raised by the registry's `retrieve`: a schema's reference outside the schema."""


def _refuse(uri: str) -> Any:
    raise RemoteReferenceError(uri)


def local_registry() -> Registry[Any]:
    """An empty registry whose `retrieve` refuses (fetches nothing)."""
    from referencing import Registry

    return Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _in_place(node: Mapping[str, Any]) -> Iterator[Any]:
    """The subschemas `node` applies to the value it is applied to itself."""
    for key in _IN_PLACE_LISTS:
        items = node.get(key)
        if isinstance(items, list):
            yield from items
    for key in _IN_PLACE_ONE:
        if key in node:
            yield node[key]
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, dict):
        yield from dependent.values()


def _where(path: Path) -> str:
    return field_path(path) or "(root)"


def reference_problem(schema: Schema) -> str | None:
    """The first reference of `schema` (a valid Draft 2020-12 schema) that leaves it, points
    nowhere or loops without progress, as " at 'where': what"; None when there is none."""
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    root = DRAFT202012.create_resource(schema)
    base = root.id() or ""
    registry = local_registry().with_resource(base, root).crawl()
    # every schema object: where it is, how references resolve from it, what it applies in
    # place; first the schema's own subschemas, then what a reference points to elsewhere
    nodes: dict[int, tuple[Any, Resolver[Any], Path]] = {}
    _walk(schema, registry.resolver(base_uri=base), (), nodes)
    edges: dict[int, list[int]] = {}
    pending = list(nodes)
    while pending:
        key = pending.pop()
        node, here, path = nodes[key]
        targets = edges[key] = [id(s) for s in _in_place(node) if isinstance(s, dict)]
        for keyword in _REFERENCES:
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            where = _where((*path, keyword))
            try:
                resolved = here.lookup(ref)
            except Unresolvable as exc:
                uri = _remote(exc)
                if uri is not None:
                    named = repr(ref) if uri == ref else f"{ref!r} ({uri})"
                    return (
                        f" at '{where}': the reference {named} is outside the schema; only"
                        " the schema's own resources are resolved, nothing is fetched"
                    )
                return f" at '{where}': the reference {ref!r} points to nothing in the schema"
            if isinstance(resolved.contents, dict):
                targets.append(id(resolved.contents))
                if id(resolved.contents) not in nodes:  # not where a subschema goes
                    before = set(nodes)
                    _walk(resolved.contents, resolved.resolver, (*path, keyword), nodes)
                    pending.extend(k for k in nodes if k not in before)
    loop = _loop(edges)
    if loop is None:
        return None
    chain = " → ".join(_where(nodes[i][2]) for i in loop)
    return f": the references loop without going into the value ({chain})"


def _remote(exc: BaseException) -> str | None:
    """The URI the registry refused to fetch (see `_refuse`) when that is why the lookup
    failed, else None."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, RemoteReferenceError):
            return str(cause.args[0])
        cause = cause.__cause__ or cause.__context__
    return None


def _walk(
    top: Any,
    resolver: Resolver[Any],
    path: Path,
    nodes: dict[int, tuple[Any, Resolver[Any], Path]],
) -> None:
    """Each schema object under `top` into `nodes`, with the resolver of its base URI."""
    from referencing.jsonschema import DRAFT202012

    stack = [(top, resolver, path)]
    while stack:
        node, here, where = stack.pop()
        if not isinstance(node, dict) or id(node) in nodes:
            continue
        nodes[id(node)] = (node, here, where)
        for key, child in subschemas(node):
            sub = here.in_subresource(DRAFT202012.create_resource(child))
            stack.append((child, sub, (*where, *key)))


def subschemas(node: Mapping[str, Any]) -> Iterator[tuple[Path, Any]]:
    """Each subschema of `node` (any keyword that holds schemas), with where it is."""
    from referencing.jsonschema import DRAFT202012

    known = set(map(id, DRAFT202012.subresources_of(node)))
    for key, value in node.items():
        if id(value) in known:
            yield (key,), value
        elif isinstance(value, list):
            yield from (((key, i), v) for i, v in enumerate(value) if id(v) in known)
        elif isinstance(value, dict):
            yield from (((key, k), v) for k, v in value.items() if id(v) in known)


def _loop(edges: Mapping[int, list[int]]) -> list[int] | None:
    """A cycle of `edges` (iterative depth-first search), as its nodes, first one repeated."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if state.get(start):
            continue
        path: list[int] = [start]
        iters = [iter(edges.get(start, ()))]
        state[start] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(edges.get(nxt, ())))
    return None
