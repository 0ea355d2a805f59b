"""The runs layer's `JsonPoster` (webhooks), over the registry's guarded fetcher: a webhook
passes the same allow-list and address checks as an HTTP tool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.errors import ToolError
from app.runs.ports import PostOutcome
from app.tools.fetcher import HttpFetcher


class FetcherPoster:
    """POSTs JSON through the registry's guarded fetcher: webhooks pass the same allow-list
    and address checks as HTTP tools."""

    def __init__(self, fetcher: HttpFetcher) -> None:
        self.fetcher = fetcher

    async def post_json(
        self,
        url: str,
        body: dict[str, Any],
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
    ) -> PostOutcome:
        try:
            response = await self.fetcher.fetch(
                "POST", url, json=body, headers=headers, timeout_s=timeout_s
            )
        except ToolError as exc:
            return PostOutcome(None, str(exc))
        error = None if response.ok else f"answered {response.status_line}"
        return PostOutcome(response.status_code, error)
