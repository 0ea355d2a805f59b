"""What an A2A message is to finishline (DESIGN §17): a new task, or a message on a task.

A message without a taskId starts a run of the endpoint's agent profile: its text is the task;
the request's `metadata.finishline` may carry any other `POST /runs` body field (settings,
tools, model, …; not `task`, `agent`, `previous_run_id`, `stream`, `on_disconnect`,
`thread_id`, `multitask`), and the body is read and checked by POST /runs' own function on
the parsed value (`app.api.runbody.run_body`), each refusal naming where the A2A request holds
the field. Its `contextId` is a conversation: a thread of the runs layer (`Threads`, DESIGN
§19: `a2a:AGENT:CONTEXT`, per API key), a context's new task continues from its last one
(`previous_run_id`), refused while that one has not ended. A message the server has seen (the
same messageId) finds the run it made (its idempotency key), on any replica, and streams it
from where it is.

A message with a taskId is for that run: a data part `{"decisions": [...]}` decides the calls
it waits on (`RunManager.decide`); text beside it, or on a task that waits on no call, is a
steering message (`RunManager.post_message`, delivered before its next LLM call, or when a
waiting run resumes). Text alone on a task waiting for approval rejects every call it waits
on, the text being the reason (`_rejections`): the run goes on, and the client is never left
waiting on a person it cannot see.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid
from dataclasses import dataclass
from typing import Any

from a2a.types import SendMessageRequest
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi.exceptions import RequestValidationError
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from app.api.a2a.errors import a2a_error, invalid_params, translated
from app.api.a2a.parts import Said, read_message, whole_numbers
from app.api.a2a.tasks import A2A_KEY, context_of, state_name, waiting_on
from app.api.auth import Caller
from app.api.runbody import relocated, run_body
from app.api.schemas import DecisionIn
from app.runs.errors import (
    IdempotencyConflictError,
    InvalidRunError,
    RunNotFoundError,
    ThreadBusyError,
)
from app.runs.manager import RunManager
from app.runs.records import ApprovalDecision, RunRecord
from app.runs.spec import RunRequest
from app.settings import Settings

PROPS = "metadata.finishline"
NOT_IN_PROPS = {
    "task": "the task is the message's text",
    "agent": "the endpoint is the agent",
    "previous_run_id": "a task continues its context (contextId)",
    "stream": "SendStreamingMessage streams",
    "on_disconnect": "a dropped stream leaves the task going (CancelTask cancels it)",
    "thread_id": "the task's thread is its context (contextId)",
    "multitask": "a context's new task is refused while its last has not ended",
}
MAX_ID_CHARS = 256
"""The longest messageId and contextId taken (clients send UUIDs, 36 characters)."""
RUN_ID = re.compile(r"^run_[0-9A-Z]{26}$")


@dataclass(frozen=True, slots=True)
class Opened:
    """The run a message made or reached, and the seq its stream follows it after."""

    record: RunRecord
    after: int


def message_key(agent: str, message_id: str) -> str:
    """The idempotency key of the run a message makes (per owner, as every key)."""
    digest = hashlib.sha256(f"{agent}\x00{message_id}".encode()).hexdigest()[:40]
    return f"a2a:{digest}"


def where(field_name: str) -> str:
    """Where in the A2A request a field of the new run's POST /runs body came from."""
    head = re.split(r"[.\[]", field_name, maxsplit=1)[0]
    if head == "task":
        return "message.parts"
    return f"{PROPS}.{field_name}"


def _busy(context_id: str, run_id: Any, state: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"context {context_id!r} is at task {run_id}, which has not ended ({state}): send this "
        "message with its taskId, or once it has ended",
        data={"type": "run_not_ended", "run_id": run_id},
    )


def _reused(message_id: str, run_id: Any) -> InvalidParamsError:
    return InvalidParamsError(
        f"message.messageId: {message_id!r} was sent before as another message (task "
        f"{run_id}); give each message an id of its own",
        data={"type": "idempotency_conflict", "run_id": run_id},
    )


def _checked_id(value: str, name: str) -> str:
    if len(value) > MAX_ID_CHARS:
        raise InvalidParamsError(f"{name}: at most {MAX_ID_CHARS} characters")
    return value


class Conversations:
    """The runs of one agent profile's A2A endpoint."""

    def __init__(self, manager: RunManager, settings: Settings, agent: str) -> None:
        self.manager = manager
        self.settings = settings
        self.agent = agent

    async def task(self, task_id: str, caller: Caller) -> RunRecord:
        """The run `task_id` names: one of this agent's runs the caller may see."""
        record: RunRecord | None = None
        with contextlib.suppress(RunNotFoundError):
            record = await self.manager.get(task_id, caller.owner, any_owner=caller.any_owner)
        if record is None or record.request.agent != self.agent:
            raise TaskNotFoundError(
                f"no task {task_id!r} of agent {self.agent!r}", data={"type": "not_found"}
            )
        return record

    async def open(self, params: SendMessageRequest, caller: Caller) -> Opened:
        if params.configuration.HasField("task_push_notification_config"):
            raise PushNotificationNotSupportedError(
                "configuration.taskPushNotificationConfig: this agent sends no push "
                "notifications: stream the task (SendStreamingMessage, SubscribeToTask) or "
                "poll it (GetTask)"
            )
        if "finishline" in MessageToDict(params.message.metadata):
            raise InvalidParamsError(
                f"message.metadata.finishline: the run's configuration goes in the request's "
                f"{PROPS}, not the message's"
            )
        props = MessageToDict(params.metadata).get("finishline") if params.metadata else None
        if params.message.task_id:
            if props is not None:
                raise InvalidParamsError(
                    f"{PROPS}: a message on a task cannot change its configuration; only a "
                    "message that starts a task takes it"
                )
            return await self._on_task(params, caller)
        return await self._start(params, caller, props)

    # -- a new task -------------------------------------------------------------------------

    async def _start(self, params: SendMessageRequest, caller: Caller, props: Any) -> Opened:
        message = params.message
        message_id = _checked_id(message.message_id, "message.messageId")
        said = read_message(message)
        if said.decisions:
            raise InvalidParamsError(
                f"{said.decisions_at}.data.decisions: decisions answer a task that waits for "
                "input: send them with its taskId"
            )
        context_id = _checked_id(message.context_id, "message.contextId") or str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"finishline:a2a:{self.agent}:{message_id}")
        )
        key = message_key(self.agent, message_id)
        head = await self.head(context_id, caller)
        size = params.ByteSize()
        if head is not None and head.idempotency_key == key:  # this message made it: again
            previous = head.previous_run_id
            read = await self._request(props, said, message_id, context_id, previous, size)
            if read.digest != head.request_hash:
                raise _reused(message_id, head.id)
            # first: no event falls in between; a wait it joins is behind it
            after = await self.manager.follower.last_seq(head.id)
            again = await self.manager.get(head.id, caller.owner, any_owner=caller.any_owner)
            return Opened(again, after)
        if head is not None and not head.status.terminal:
            raise _busy(context_id, head.id, state_name(head))
        previous = head.id if head is not None else None
        request = await self._request(props, said, message_id, context_id, previous, size)
        with translated():
            try:
                record, _ = await self.manager.threads.start(
                    request,
                    owner=caller.owner,
                    thread_id=self.thread(context_id),
                    idempotency_key=key,
                    origin=head,
                )
            except ThreadBusyError as exc:  # another message made its next task meanwhile
                raise _busy(context_id, exc.details.get("run_id"), "it") from None
            except InvalidRunError as exc:  # a server-side check (a cap, a tool or model name)
                raise relocated(exc, where) from None
            except IdempotencyConflictError as exc:
                raise _reused(message_id, exc.details.get("run_id")) from None
        return Opened(record, 0)

    def thread(self, context_id: str) -> str:
        """The context's thread: per agent (and, as every thread, per key)."""
        return f"a2a:{self.agent}:{context_id}"

    async def head(self, context_id: str, caller: Caller) -> RunRecord | None:
        """The last run of the context still stored; None for a context the server has not
        seen (or none of whose runs is left). A run made by POST /runs is a context of its
        own, named by its id."""
        record = await self.manager.threads.latest(caller.owner, self.thread(context_id))
        if record is None and RUN_ID.fullmatch(context_id):
            with contextlib.suppress(RunNotFoundError):
                record = await self.manager.get(
                    context_id, caller.owner, any_owner=caller.any_owner
                )
        if record is not None and record.request.agent == self.agent:
            return record if context_of(record) == context_id else None
        return None

    async def _request(
        self,
        props: Any,
        said: Said,
        message_id: str,
        context_id: str,
        previous_run_id: str | None,
        size: int,
    ) -> RunRequest:
        """The new run's request (its `digest` kept on it), read by POST /runs' own function
        (`size`: the bytes of the A2A request). Its body names the context's last run (a
        re-sent message's: the one it continued), as its digest always has."""
        props = whole_numbers(props) if props is not None else {}
        if not isinstance(props, dict):
            raise InvalidParamsError(f"{PROPS}: must be an object of POST /runs body fields")
        for name, why in NOT_IN_PROPS.items():
            if name in props:
                raise InvalidParamsError(f"{PROPS}.{name}: not taken here: {why}")
        metadata = props.get("metadata", {})
        if isinstance(metadata, dict):
            if A2A_KEY in metadata:
                raise InvalidParamsError(
                    f"{PROPS}.metadata.{A2A_KEY}: kept by the server for the task's context"
                )
            metadata = {**metadata, A2A_KEY: {"context_id": context_id, "message_id": message_id}}
        body: dict[str, Any] = {
            **props,
            "task": said.text,
            "agent": self.agent,
            "metadata": metadata,
        }
        if previous_run_id is not None:
            body["previous_run_id"] = previous_run_id
        try:
            _, request = await run_body(body, self.settings, size=size, where=where)
        except RequestValidationError as exc:
            raise invalid_params(exc) from None
        except InvalidRunError as exc:
            raise a2a_error(exc) from None
        return request

    # -- a message on a task ----------------------------------------------------------------

    async def _on_task(self, params: SendMessageRequest, caller: Caller) -> Opened:
        message = params.message
        record = await self.task(message.task_id, caller)
        context_id = context_of(record)
        if message.context_id and message.context_id != context_id:
            raise InvalidParamsError(
                f"message.contextId: task {record.id} is in context {context_id!r}, not "
                f"{message.context_id!r}"
            )
        said = read_message(message)
        if not said.text and not said.decisions:
            raise InvalidParamsError("message.parts: the message says nothing (no text, no data)")
        if record.status.terminal:
            raise UnsupportedOperationError(
                f"task {record.id} has ended ({state_name(record)}): to follow up, send a new "
                f"message in its context ({context_id!r}) without a taskId",
                data={"type": "run_already_ended", "run_id": record.id},
            )
        decisions, text = said.decisions, said.text
        if text and not decisions and waiting_on(record):
            decisions, text = _rejections(record, text), ""
        after = await self.manager.follower.last_seq(record.id)
        owner, anyone = caller.owner, caller.any_owner
        with translated():
            if decisions:
                try:
                    record = await self.manager.decide(
                        record.id, owner, decisions, any_owner=anyone
                    )
                except InvalidRunError as exc:  # edited arguments against the tool's schema
                    message_at = f"{said.decisions_at}.data.{exc.field}"
                    raise InvalidRunError(
                        message_at, exc.message.removeprefix(f"{exc.field}: ")
                    ) from None
            if text:
                record = await self.manager.post_message(record.id, owner, text, any_owner=anyone)
        return Opened(record, after)


def _rejections(record: RunRecord, text: str) -> list[ApprovalDecision]:
    """What text alone says to a task waiting for approvals: no to every call it waits on, the
    text the reason the model reads (as a person's rejection with a message). A generic A2A
    client answers INPUT_REQUIRED with text; taken as a steering message it decided nothing
    and left that client waiting on a person it cannot see. Rejecting cannot run anything."""
    try:
        DecisionIn(call_id="-", approve=False, message=text)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]["msg"]
        raise InvalidParamsError(
            f"message.parts: text alone on a task waiting for approval rejects its calls, the "
            f"text being the reason: {problem}"
        ) from None
    assert record.approval is not None
    return [
        ApprovalDecision(call_id=p.call_id, approved=False, message=text, run_id=p.run_id)
        for p in record.approval.undecided()
    ]
