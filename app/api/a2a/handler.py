"""The A2A methods of one agent profile (DESIGN §17), as the SDK's `RequestHandler`: the
SDK's JSON-RPC dispatcher parses each request into the protocol's models and calls these.

The SDK's own task store, event queues and agent executor are not used: a task is a run, and
every method reads and changes runs through `RunManager`'s public methods (create, get,
list_runs, cancel, decide, post_message, wait, follow), so any replica serves any task with
the Redis store and no second copy of a run's state exists.

- SendMessage: a new run, or a message on one (`conversations`); blocking unless the request's
  configuration says `returnImmediately`, up to FINISHLINE_MAX_WAIT_S (then the task as it
  stands). A blocking call returns once the task has ended or waits for input.
- SendStreamingMessage, SubscribeToTask: the Task first, then its updates (`updates`) until it
  has ended or waits for input. A SendStreamingMessage whose task waits for input already (the
  same message sent again, decisions that leave calls undecided) is the Task alone.
  SubscribeToTask joins a task that waits already and follows it to its next wait or its end;
  an ended task has nothing to subscribe to.
- GetTask, ListTasks (`listing`), CancelTask. Push notifications are not offered.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from a2a.server.context import ServerCallContext
from a2a.server.events import Event as A2AEvent
from a2a.server.request_handlers.request_handler import (
    RequestHandler,
    validate_request_params,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length

from app.api.a2a.conversations import Conversations, Opened
from app.api.a2a.errors import translated
from app.api.a2a.listing import list_tasks
from app.api.a2a.tasks import context_of, state_name, task_of
from app.api.a2a.updates import UpdateMapper
from app.api.auth import Caller
from app.engine.events import EventType
from app.runs.follow.follower import Until

INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
"""States a stream ends at without the task having ended (A2A §3.1.2, §11.7)."""
CALLER = "finishline.caller"
"""The key of `ServerCallContext.state` that holds who is calling (`app.api.a2a.server`)."""


def caller_of(context: ServerCallContext) -> Caller:
    caller = context.state[CALLER]
    assert isinstance(caller, Caller)
    return caller


class FinishlineRequestHandler(RequestHandler):
    def __init__(self, conversations: Conversations, *, max_wait_s: float) -> None:
        self.conversations = conversations
        self.manager = conversations.manager
        self.max_wait_s = max_wait_s

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        validate_history_length(params)
        record = await self.conversations.task(params.id, caller_of(context))
        return apply_history_length(task_of(record), params)

    @validate_request_params
    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        return await list_tasks(self.conversations, params, caller_of(context))

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        caller = caller_of(context)
        record = await self.conversations.task(params.id, caller)
        with translated(cancelling=True):
            record = await self.manager.cancel(record.id, caller.owner, any_owner=caller.any_owner)
        return task_of(record)

    @validate_request_params
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        validate_history_length(params.configuration)
        caller = caller_of(context)
        record = (await self.conversations.open(params, caller)).record
        if not params.configuration.return_immediately:
            with translated():
                record = await self.manager.wait(
                    record.id, caller.owner, self.max_wait_s, any_owner=caller.any_owner
                )
        return apply_history_length(task_of(record), params.configuration)

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent]:
        validate_history_length(params.configuration)
        caller = caller_of(context)
        opened = await self.conversations.open(params, caller)
        task = task_of(opened.record)
        yield apply_history_length(task, params.configuration)
        if task.status.state in INTERRUPTED:  # it waits for input already (a message sent
            return  # again, decisions that leave calls undecided): the stream ends with it
        async for update in self._updates(opened, caller):
            yield update

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent]:
        caller = caller_of(context)
        record = await self.conversations.task(params.id, caller)
        if record.status.terminal:
            raise UnsupportedOperationError(
                f"task {record.id} has ended ({state_name(record)}): nothing to subscribe to; "
                "GetTask reads it",
                data={"type": "run_already_ended", "run_id": record.id},
            )
        # first: no event falls in between; a wait it joins is behind it
        after = await self.manager.follower.last_seq(record.id)
        record = await self.conversations.task(params.id, caller)
        yield task_of(record)
        async for update in self._updates(Opened(record, after), caller, Until.NEXT_WAIT):
            yield update

    async def _updates(
        self, opened: Opened, caller: Caller, until: Until = Until.WAIT
    ) -> AsyncGenerator[A2AEvent]:
        """The task's updates after `opened.after`, to its end or its wait (`until`)."""
        record = opened.record
        mapper = UpdateMapper(record.id, context_of(record))
        with translated():
            batches = self.manager.follow(
                record.id,
                caller.owner,
                opened.after,
                any_owner=caller.any_owner,
                until=until,
            )
            async with contextlib.aclosing(batches):
                async for batch in batches:
                    for event in batch:
                        if event.type == EventType.RUN_WAITING:
                            yield mapper.waiting(event)
                            return
                        for update in mapper.map(event):
                            yield update

    # -- not offered ------------------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError(
            "this agent has no extended card: its public card is the whole card"
        )
