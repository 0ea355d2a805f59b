"""What the runs layer needs from the composition root (`app.assembly`), as Protocols and
plain values: a run checked and resolved at creation, equipped at start (`RunInputs`, the
engine's own type), and a way to POST JSON for webhooks. The runs layer imports only
`app.engine` and itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from app.engine.inputs import RunInputs
from app.engine.policies import Limits
from app.runs.records import RunRecord
from app.runs.spec import RunRequest


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    """A request the server accepts: the model that runs it, every setting resolved, the
    names of its tools (registered, then request-declared), and the request the run is made
    of: the one given, with its agent profile's values as defaults when it names one."""

    model: str
    limits: Limits
    tool_names: list[str]
    request: RunRequest


class RunAssembler(Protocol):
    """Turns requests into runs: server-dependent checks at creation, the engine's inputs at
    start."""

    async def check(self, request: RunRequest) -> CheckedRequest:
        """Raise `InvalidRunError` naming the field when the server refuses the request. Work
        in proportion to the request's size (tool schemas) is done off the event loop. A
        request read whole where it came in (`RunRequest.within_caps`: its sizes checked
        against the caps) without HTTP tools has nothing costly left."""
        ...

    async def inputs(self, record: RunRecord) -> RunInputs:
        """The task, model, tools, limits and prompts of a checked run; called in the run's
        own task.
        Work in proportion to the request's size is done off the event loop."""
        ...

    async def check_arguments(
        self, record: RunRecord, tool: str, arguments: dict[str, Any]
    ) -> str | None:
        """Why `arguments` do not fit the schema of the run's `tool`, or None when they do."""
        ...


@dataclass(frozen=True, slots=True)
class PostOutcome:
    """One POST: the HTTP status (None when no answer), and why it failed (None when 2xx)."""

    status_code: int | None
    error: str | None


class JsonPoster(Protocol):
    """POSTs a JSON body to a URL (allow-list and address checks are the poster's), with
    `headers` added to the request."""

    async def post_json(
        self,
        url: str,
        body: dict[str, Any],
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
    ) -> PostOutcome: ...


__all__ = ["CheckedRequest", "JsonPoster", "PostOutcome", "RunAssembler", "RunInputs"]
