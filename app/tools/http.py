"""The HTTP tools: the built-in `http_get`, and `HttpTool`, declared by a request.

Both go through one shared `HttpFetcher` (guard, redirects, deadline, size cap; see
`app.tools.fetcher`), so they reach only what the allow-list opens.

`http_get` is a fetch: whatever the status, the model gets the status line, the content
type and the body (a 404 or a 500 with its body is information to act on, as in a browser or
curl), not an error. Only failures to get a response at all (refused host, timeout,
connection error, too many redirects) are errors.

`HttpTool` is an API call: the model's arguments go out as a JSON body (POST, PUT, PATCH) or
as query parameters (GET, DELETE: strings as they are, any other value JSON-encoded, so
`{"n": 3, "tags": ["a"], "on": true}` becomes `n=3&tags=["a"]&on=true`, added to the
declared URL's own query). A 2xx response
body is the result; any other status is a `ToolError` naming the status with an excerpt of
the body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.ports import ToolContext
from app.tools.base import CompiledSchema, SchemaTool, ToolError
from app.tools.fetcher import FetchedResponse, HttpFetcher

HTTP_TOOL_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
QUERY_METHODS = frozenset({"GET", "DELETE"})
ERROR_EXCERPT_CHARS = 500

HTTP_GET_PARAMETERS = {
    "type": "object",
    "properties": {
        "url": {
            "type": "string",
            "description": "The absolute http:// or https:// URL to fetch.",
            "minLength": 1,
            "maxLength": 8_000,
        }
    },
    "required": ["url"],
    "additionalProperties": False,
}


class HttpGetTool(SchemaTool):
    """GET a URL; answers `HTTP <status> <reason>`, the content type, then the body text."""

    def __init__(self, fetcher: HttpFetcher) -> None:
        super().__init__(
            name="http_get",
            description=(
                "Fetch a web page or API URL with HTTP GET. Returns the status line, the "
                f"content type and the body as text (cut at {fetcher.max_bytes:,} bytes). "
                f"{_reachable(fetcher.guard.allow_entries)}"
            ),
            parameters=HTTP_GET_PARAMETERS,
            builtin=True,
        )
        self._fetcher = fetcher

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        response = await self._fetcher.fetch("GET", arguments["url"].strip())
        lines = [response.status_line]
        if response.redirects:
            lines.append(f"URL: {response.url}")
        if response.content_type:
            lines.append(f"Content-Type: {response.content_type}")
        return "\n".join(lines) + "\n\n" + _body_text(response)


class HttpTool(SchemaTool):
    """An HTTP endpoint the request declared as a tool; see the module docstring."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: Mapping[str, Any] | CompiledSchema,
        url: str,
        fetcher: HttpFetcher,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        idempotent: bool = True,
    ) -> None:
        super().__init__(
            name=name, description=description, parameters=parameters, idempotent=idempotent
        )
        method = method.upper()
        if method not in HTTP_TOOL_METHODS:
            allowed = ", ".join(sorted(HTTP_TOOL_METHODS))
            raise ValueError(f"unsupported method {method!r} for tool {name!r}: use {allowed}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s of tool {name!r} must be positive")
        self.url = url
        self.method = method
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s if timeout_s is not None else fetcher.timeout_s
        self._fetcher = fetcher

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        if self.method in QUERY_METHODS:
            response = await self._fetcher.fetch(
                self.method,
                self.url,
                params=query_params(arguments),
                headers=self.headers,
                timeout_s=self.timeout_s,
            )
        else:
            response = await self._fetcher.fetch(
                self.method,
                self.url,
                json=arguments,
                headers=self.headers,
                timeout_s=self.timeout_s,
            )
        if not response.ok:
            excerpt = _body_text(response)[:ERROR_EXCERPT_CHARS].strip()
            raise ToolError(
                f"{self.name} answered {response.status_line}: {excerpt or '(empty body)'}"
            )
        if not response.body:
            return f"(empty body, {response.status_line})"
        return _body_text(response)


def query_params(arguments: Mapping[str, Any]) -> dict[str, str]:
    """Arguments as query parameters: strings as they are, anything else as JSON text."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        for key, value in arguments.items()
    }


def _body_text(response: FetchedResponse) -> str:
    if response.is_binary:
        kind = response.content_type or "unknown type"
        more = " or more" if response.truncated else ""
        return f"[Binary body ({kind}), {len(response.body):,} bytes{more}; not shown.]"
    text = response.text()
    if response.truncated:
        text += f"\n\n[Body cut at {len(response.body):,} bytes.]"
    return text


def _reachable(entries: Sequence[str]) -> str:
    if not entries:
        return "No host is allowed on this server, so every fetch will be refused."
    shown = ", ".join(entries[:10]) + (", ..." if len(entries) > 10 else "")
    return f"Only these hosts may be fetched ('*' means any public host): {shown}."
