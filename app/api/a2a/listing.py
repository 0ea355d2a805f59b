"""ListTasks (DESIGN §17): the caller's tasks of one agent, newest first, read from the run
store through `RunManager.list_runs` (no copy of them anywhere).

With a `contextId`, the context's tasks: its last run, then each one's `previous_run_id`
while it is of that context. Without, every run of the agent the caller may see. `status`
filters by the task's A2A state (a run `incomplete` with an answer is COMPLETED, without one
FAILED), `statusTimestampAfter` by the time of its last status. The page token is the SDK's
opaque encoding of the last task id of the page before; `totalSize` counts every match, so
a listing reads all of the caller's runs of the agent (within the store's retention).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from a2a.types import ListTasksRequest, ListTasksResponse, TaskState
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import (
    apply_history_length,
    decode_page_token,
    encode_page_token,
    validate_history_length,
    validate_page_size,
)

from app.api.a2a.conversations import RUN_ID, Conversations
from app.api.a2a.tasks import context_of, task_of, task_state, timestamp
from app.api.auth import Caller
from app.runs.errors import RunNotFoundError
from app.runs.records import RunRecord, RunStatus

SCAN_PAGE = 200
STATUSES: dict[int, tuple[RunStatus, ...]] = {
    TaskState.TASK_STATE_SUBMITTED: (RunStatus.QUEUED,),
    TaskState.TASK_STATE_WORKING: (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION),
    TaskState.TASK_STATE_INPUT_REQUIRED: (RunStatus.REQUIRES_ACTION,),
    TaskState.TASK_STATE_COMPLETED: (RunStatus.COMPLETED, RunStatus.INCOMPLETE),
    TaskState.TASK_STATE_FAILED: (RunStatus.FAILED, RunStatus.INCOMPLETE),
    TaskState.TASK_STATE_CANCELED: (RunStatus.CANCELLED,),
}
"""The run statuses a task state may come from (the store filters by those first)."""


def _token(params: ListTasksRequest) -> str | None:
    if not params.page_token:
        return None
    try:
        run_id = decode_page_token(params.page_token)
    except ValueError:
        run_id = ""
    if not RUN_ID.fullmatch(run_id):
        raise InvalidParamsError("pageToken: not a token this server gave")
    return run_id


async def _runs(
    conversations: Conversations, params: ListTasksRequest, caller: Caller
) -> AsyncIterator[RunRecord]:
    """The agent's runs the listing may hold, newest first."""
    manager = conversations.manager
    if params.context_id:
        context_id = params.context_id
        record = await conversations.head(context_id, caller)
        while record is not None and context_of(record) == context_id:
            yield record
            previous, record = record.previous_run_id, None
            if previous is not None:
                with contextlib.suppress(RunNotFoundError):
                    record = await manager.get(previous, caller.owner, any_owner=caller.any_owner)
        return
    state = params.status
    statuses = STATUSES.get(state, ()) if state != TaskState.TASK_STATE_UNSPECIFIED else ()
    if state != TaskState.TASK_STATE_UNSPECIFIED and not statuses:
        return  # REJECTED, AUTH_REQUIRED: no run is ever in those
    cursor: str | None = None
    while True:
        records, cursor = await manager.list_runs(
            owner=caller.owner,
            statuses=statuses,
            limit=SCAN_PAGE,
            cursor=cursor,
            any_owner=caller.any_owner,
        )
        for record in records:
            if record.request.agent == conversations.agent:
                yield record
        if cursor is None:
            return


def _matches(record: RunRecord, params: ListTasksRequest) -> bool:
    if params.status != TaskState.TASK_STATE_UNSPECIFIED and task_state(record) != params.status:
        return False
    if params.HasField("status_timestamp_after"):
        when = record.ended_at or record.started_at or record.created_at
        if timestamp(when).ToNanoseconds() <= params.status_timestamp_after.ToNanoseconds():
            return False
    return True


async def list_tasks(
    conversations: Conversations, params: ListTasksRequest, caller: Caller
) -> ListTasksResponse:
    validate_history_length(params)
    size = DEFAULT_LIST_TASKS_PAGE_SIZE
    if params.HasField("page_size"):
        validate_page_size(params.page_size)
        size = params.page_size
    token = _token(params)
    page: list[RunRecord] = []
    total, more = 0, False
    async for record in _runs(conversations, params, caller):
        if not _matches(record, params):
            continue
        total += 1
        if token is not None and record.id >= token:
            continue  # on the pages before
        if len(page) < size:
            page.append(record)
        else:
            more = True
    tasks = [apply_history_length(task_of(r), params) for r in page]
    return ListTasksResponse(
        tasks=tasks,
        next_page_token=encode_page_token(page[-1].id) if more else "",
        page_size=size,
        total_size=total,
    )
