"""The CLI's side of the HTTP API: requests, and a run's events over SSE.

httpx's errors become the CLI's own (`app.cli.errors`) at this boundary, most specific first.
`follow_events` reads a run's events to its terminal event, reconnecting with
`Last-Event-ID` after a dropped stream (bounded attempts, backoff) and yielding each seq once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from app.cli.errors import CliError, ConnectionLostError, ServiceError, UnreachableError
from app.engine.events import TERMINAL_EVENT_TYPES

Event = dict[str, Any]
"""One event in its wire form: run_id, seq, type, ts, step, then the payload."""


DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How a dropped event stream is retried: `attempts` in a row without an event in
    between, waiting `backoff_s`, then twice that, and so on (at most `max_backoff_s`)."""

    attempts: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    pause: Callable[[float], None] = time.sleep  # noqa: TID251 (a backoff, not synchronisation)

    def delay(self, failures: int) -> float:
        return min(self.backoff_s * 2.0 ** (failures - 1), self.max_backoff_s)


def _run_path(run_id: str, rest: str = "") -> str:
    return f"/runs/{quote(run_id, safe='')}{rest}"


def _refusal(response: httpx.Response) -> ServiceError:
    try:
        error = response.json()["error"]
        details = error.get("details")
        return ServiceError(response.status_code, error["type"], error["message"], details)
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:300] or response.reason_phrase
        return ServiceError(response.status_code, "http_error", text)


class Api:
    """A client of one finishline service. Use as a context manager (it owns a connection pool)."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        stream_read_timeout_s: float = 90.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"User-Agent": "finishline-cli"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            transport=transport,
        )
        # the server sends keep-alive comments meanwhile; silence this long means a dead stream
        self._stream_timeout = httpx.Timeout(timeout_s, read=stream_read_timeout_s)

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.close()

    # -- the resources ----------------------------------------------------------------------

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", "/runs", json=body)

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self._json("GET", _run_path(run_id))

    def list_runs(
        self, *, statuses: Iterable[str] = (), limit: int = 20, cursor: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if statuses:
            params["status"] = list(statuses)
        if cursor:
            params["cursor"] = cursor
        return self._json("GET", "/runs", params=params)

    def list_threads(self, *, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return self._json("GET", "/threads", params=params)

    def get_thread(self, thread_id: str) -> dict[str, Any]:
        return self._json("GET", f"/threads/{quote(thread_id, safe='')}")

    def thread_runs(
        self, thread_id: str, *, limit: int = 200, cursor: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return self._json("GET", f"/threads/{quote(thread_id, safe='')}/runs", params=params)

    def termination_report(self, **params: str | None) -> dict[str, Any]:
        given = {k: v for k, v in params.items() if v is not None}
        return self._json("GET", "/reports/termination", params=given)

    def schedules(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """/schedules and below (DESIGN §21); {} for an answer with no body (a delete)."""
        with _translated(self.base_url):
            response = self._client.request(method, "/schedules" + path, **kwargs)
        if response.status_code >= 400:
            raise _refusal(response)
        return response.json() if response.content else {}

    def list_agents(self) -> dict[str, Any]:
        return self._json("GET", "/agents")

    def get_agent(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/agents/{quote(name, safe='')}")

    def send_message(self, run_id: str, content: str) -> dict[str, Any]:
        return self._json("POST", _run_path(run_id, "/messages"), json={"content": content})

    def wait_run(self, run_id: str, timeout_s: float = 20.0) -> dict[str, Any]:
        """The run once it ends or waits for a person, or as it stands after `timeout_s`."""
        return self._json("GET", _run_path(run_id, "/wait"), params={"timeout_s": timeout_s})

    def decide(self, run_id: str, decisions: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"decisions": decisions}
        return self._json("POST", _run_path(run_id, "/approvals"), json=body)

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        return self._json("POST", _run_path(run_id, "/cancel"))

    def event_page(self, run_id: str, *, after: int = 0, limit: int = 500) -> dict[str, Any]:
        return self._json(
            "GET",
            _run_path(run_id, "/events"),
            params={"after": after, "limit": limit},
            headers={"Accept": "application/json"},
        )

    def stream_events(self, run_id: str, *, after: int = 0) -> Generator[Event, None, None]:
        """One SSE connection: the run's events after seq `after`, as they arrive, until the
        server closes the stream. Raises ServiceError, UnreachableError or ConnectionLostError."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if after:
            headers["Last-Event-ID"] = str(after)
        with (
            _translated(self.base_url),
            self._client.stream(
                "GET", _run_path(run_id, "/events"), headers=headers, timeout=self._stream_timeout
            ) as response,
        ):
            if response.status_code >= 400:
                response.read()
                raise _refusal(response)
            try:
                yield from parse_sse(response.iter_lines())
            except ValueError as exc:  # the service sent an event that is not JSON
                raise ServiceError(response.status_code, "bad_event", f"not JSON: {exc}") from None

    # -- plumbing ---------------------------------------------------------------------------

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        with _translated(self.base_url):
            response = self._client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise _refusal(response)
        try:
            body = response.json()
        except ValueError:
            raise ServiceError(
                response.status_code, "bad_response", f"not JSON: {response.text[:200]!r}"
            ) from None
        if not isinstance(body, dict):
            raise ServiceError(response.status_code, "bad_response", "expected a JSON object")
        return body


@contextmanager
def _translated(base_url: str) -> Iterator[None]:
    """httpx's transport errors become ours, most specific first."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise UnreachableError(
            f"cannot connect to {base_url}: {exc or type(exc).__name__} "
            "(is the service running? `finishline serve`, or set FINISHLINE_URL)"
        ) from exc
    except (httpx.UnsupportedProtocol, httpx.ProxyError) as exc:
        raise UnreachableError(f"cannot reach {base_url}: {exc}") from exc
    except httpx.TransportError as exc:
        raise ConnectionLostError(
            f"lost the connection to {base_url}: {exc or type(exc).__name__}"
        ) from exc


def parse_sse(lines: Iterable[str]) -> Iterator[Event]:
    """The events of an SSE body, line by line: `data:` lines joined and parsed as JSON;
    comments (keep-alives) and events without data skipped. An event is yielded only once its
    blank line arrives, so a stream cut mid-event yields nothing of it."""
    data: list[str] = []
    event_id: str | None = None
    for line in lines:
        if not line:
            if data:
                event = json.loads("\n".join(data))
                if isinstance(event, dict):
                    if "seq" not in event and event_id is not None and event_id.isdigit():
                        event["seq"] = int(event_id)
                    yield event
            data, event_id = [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "id":
            event_id = value


def follow_events(
    api: Api, run_id: str, *, after: int = 0, reconnect: Reconnect | None = None
) -> Generator[Event, None, None]:
    """The run's events after seq `after`, through its terminal event, across reconnects:
    a dropped or early-closed stream is reopened with Last-Event-ID = the last seq yielded,
    and no seq is yielded twice. Gives up with the error of the last attempt after
    `reconnect.attempts` failures in a row. Final at once: a ServiceError under 500, and failing
    to connect the first time."""
    policy = reconnect or Reconnect()
    last, failures, connected = after, 0, False
    while True:
        try:
            with closing(api.stream_events(run_id, after=last)) as stream:
                for event in stream:
                    connected = True
                    seq = int(event.get("seq", 0))
                    if seq <= last:
                        continue
                    last, failures = seq, 0
                    yield event
                    if event.get("type") in TERMINAL_EVENT_TYPES:
                        return
            error: CliError = ConnectionLostError(
                f"the event stream of {run_id} closed before the run ended (after event {last})"
            )
        except ConnectionLostError as exc:
            error = exc
        except UnreachableError as exc:
            if not connected:  # never reached it: no point in retrying
                raise
            error = exc
        except ServiceError as exc:
            if exc.status < 500:
                raise
            error = exc
        connected = True
        failures += 1
        if failures > policy.attempts:
            raise error
        policy.pause(policy.delay(failures))
