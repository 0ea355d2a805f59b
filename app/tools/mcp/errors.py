"""The MCP source's refusals the rest of the service names, without the MCP SDK: a service
with no MCP server configured never imports it (app.main imports the source only then)."""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.errors import FinishlineError


class UnknownServerError(FinishlineError, LookupError):
    """Servers were named that are not configured, or have not listed their tools yet."""

    def __init__(self, message: str, unknown: Sequence[str], available: Sequence[str]) -> None:
        super().__init__(message)
        self.unknown = list(unknown)
        self.available = list(available)
