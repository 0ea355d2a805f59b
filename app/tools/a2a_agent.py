"""A remote A2A agent as a sub-agent (DESIGN §15, §17): `{"a2a_url": URL}` in a run's
`agents`. A call sends the remote agent its task with the official `a2a-sdk` client (its
card resolved from the URL, as the SDK does, then `SendMessage` returning at once) and polls
`GetTask` until the task ends; its answer (the text of its artifacts, else of its status
message) is the call's observation.

Every request goes through the tools' network guard (the URL's host must be allow-listed,
FINISHLINE_HTTP_TOOL_ALLOW_HOSTS, and every address it resolves to is checked), each call
with an HTTP client of its own, which reads no response (the card, each answer) past the HTTP
tools' cap, FINISHLINE_HTTP_TOOL_MAX_BYTES: a longer one fails the call, naming the cap. The
engine bounds the call by the run's deadline and cancel; when it stops waiting, `stop` sends
the remote agent `CancelTask`. The SDK is imported only when such a call is made.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import structlog

from app.engine.delegating import ChildCall, ChildOutcome, ChildRefusedError
from app.tools.fetcher import guarded_clients
from app.tools.netguard import NetworkGuard

if TYPE_CHECKING:
    from a2a.client import Client
    from a2a.types import Task

log = structlog.get_logger("finishline.tools")

POLL_S = (0.1, 1.0)
"""The first and the longest pause between two `GetTask` of a task still going."""
CANCEL_TIMEOUT_S = 5.0
ENDED = {
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "cancelled",
    "TASK_STATE_REJECTED": "failed",
}
ASKS = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}
_stopping: set[asyncio.Task[None]] = set()
"""CancelTask requests on their way (kept from the garbage collector until they are done)."""


class RemoteAgent:
    """The `ChildStarter` of one remote agent, shared by every call of a run's agent."""

    def __init__(self, url: str, guard: NetworkGuard, *, max_bytes: int) -> None:
        self.url = url
        self.guard = guard
        self.max_bytes = max_bytes

    async def start(self, call: ChildCall) -> RemoteTask:
        from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
        from a2a.helpers.proto_helpers import new_text_part
        from a2a.types import Message, Role, SendMessageRequest

        guarded_client = await guarded_clients()
        http = guarded_client(
            self.guard, timeout_s=max(call.time_left_s, 1.0), max_response_bytes=self.max_bytes
        )
        try:
            card = await A2ACardResolver(http, self.url).get_agent_card()
            config = ClientConfig(streaming=False, polling=True, httpx_client=http)
            client = ClientFactory(config).create(card)
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[new_text_part(call.task)],
            )
            request = SendMessageRequest(message=message)
            request.configuration.return_immediately = True
            responses = [r async for r in client.send_message(request)]
        except Exception as exc:  # unreachable, refused, not an A2A agent: the model is told
            await http.aclose()
            raise ChildRefusedError("unavailable", _said(exc)) from exc
        first = responses[0] if responses else None
        if first is None or not first.HasField("task"):
            answer = _text(first.message.parts) if first is not None else None
            await http.aclose()
            return RemoteTask(None, http, None, ChildOutcome("completed", "answered", answer))
        log.info("a2a_task_sent", url=self.url, task_id=first.task.id)
        return RemoteTask(client, http, first.task)


class RemoteTask:
    """A remote agent's task, as the parent's call waits on it (`ChildHandle`)."""

    run_id: str | None = None

    def __init__(
        self,
        client: Client | None,
        http: httpx.AsyncClient,
        task: Task | None,
        answered: ChildOutcome | None = None,
    ) -> None:
        self.client = client
        self.http = http
        self.task = task
        self.answered = answered
        self.task_id = task.id if task is not None else None

    async def outcome(self) -> ChildOutcome:
        if self.answered is not None:  # a message, no task: the answer is already here
            return self.answered
        from a2a.types import GetTaskRequest

        assert self.client is not None
        assert self.task is not None
        task, pause = self.task, POLL_S[0]
        try:
            while True:
                state = _state(task)
                if state in ENDED or state in ASKS:
                    await self.http.aclose()
                    return _outcome(task, state)
                await asyncio.sleep(pause)
                pause = min(pause * 2, POLL_S[1])
                task = await self.client.get_task(GetTaskRequest(id=task.id))
        except (asyncio.CancelledError, GeneratorExit):
            raise  # the parent stopped waiting: `stop` cancels the task and closes the client
        except Exception as exc:  # the remote agent went away mid-task
            await self.http.aclose()
            return ChildOutcome("failed", "error", error=_said(exc))

    def stop(self) -> None:
        if self.client is None or self.task_id is None:
            return
        task = asyncio.ensure_future(self._cancel(self.client, self.task_id))
        _stopping.add(task)
        task.add_done_callback(_stopping.discard)

    async def _cancel(self, client: Client, task_id: str) -> None:
        from a2a.types import CancelTaskRequest

        try:
            async with asyncio.timeout(CANCEL_TIMEOUT_S):
                await client.cancel_task(CancelTaskRequest(id=task_id))
            log.info("a2a_task_cancelled", task_id=task_id)
        except Exception as exc:  # ended meanwhile, or unreachable: nothing more to do
            log.warning("a2a_task_cancel_failed", task_id=task_id, error=_said(exc))
        finally:
            await self.http.aclose()


def _state(task: Task) -> str:
    from a2a.types import TaskState

    return str(TaskState.Name(task.status.state))


def _outcome(task: Task, state: str) -> ChildOutcome:
    said = _text(task.status.message.parts) if task.status.HasField("message") else None
    if state in ASKS:
        error = f"the remote agent asks for input ({state}), which a sub-agent call cannot give"
        return ChildOutcome("failed", "error", error=f"{error}: {said}" if said else error)
    status = ENDED[state]
    if status == "failed":
        return ChildOutcome("failed", "error", error=said or state)
    answer = "\n".join(t for a in task.artifacts if (t := _text(a.parts))) or said
    meta: dict[str, Any] = _finishline_meta(task)
    reason = str(meta.get("reason") or ("cancelled" if status == "cancelled" else "finished"))
    degraded = bool(meta.get("degraded", False))
    return ChildOutcome(status, reason, answer, degraded)


def _finishline_meta(task: Task) -> dict[str, Any]:
    """`metadata.finishline` of the task's status (a finishline agent says its reason)."""
    from google.protobuf.json_format import MessageToDict

    found = MessageToDict(task.metadata).get("finishline", {})
    return found if isinstance(found, dict) else {}


def _text(parts: Any) -> str | None:
    texts = [p.text for p in parts if p.HasField("text")]
    return "\n".join(texts) if texts else None


def _said(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
