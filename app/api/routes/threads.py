"""The /threads resource (DESIGN §19): a conversation, as a line of runs. Threads are made by
their first run (POST /runs with `thread_id`, an AG-UI threadId, an A2A contextId); here they
are listed, read, given metadata and deleted, per API key (another key's thread is a 404)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response

from app.api.deps import CallerDep, ManagerDep
from app.api.errors import ErrorBody
from app.api.routes.runs import require_json
from app.api.schemas import ThreadList, ThreadPatch, ThreadRunList
from app.runs.threads.view import ThreadView, to_thread_view
from app.runs.view import to_view

router = APIRouter(prefix="/threads", tags=["threads"])

NOT_YOURS = "No such thread of your API key (another key's thread of that id is its own)."
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    404: {"model": ErrorBody, "description": NOT_YOURS},
}
ThreadId = Annotated[str, Path(max_length=300, description="The thread's id.")]
Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]


@router.get(
    "",
    response_model=ThreadList,
    summary="List your threads, most recently active first",
    description="Every thread of your API key: those POST /runs made with `thread_id`, AG-UI's "
    "threads (`ag-ui:THREAD`) and A2A's contexts (`a2a:AGENT:CONTEXT`). Paged like GET /runs.",
    responses={401: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def list_threads(
    manager: ManagerDep,
    caller: CallerDep,
    limit: Limit = 50,
    cursor: Annotated[
        str | None, Query(max_length=600, description="next_cursor of the previous page.")
    ] = None,
) -> ThreadList:
    threads, next_cursor = await manager.threads.list_threads(
        caller.owner, limit=limit, cursor=cursor
    )
    return ThreadList(threads=[to_thread_view(t) for t in threads], next_cursor=next_cursor)


@router.get("/{thread_id}", response_model=ThreadView, summary="Read a thread", responses=ERRORS)
async def get_thread(thread_id: ThreadId, manager: ManagerDep, caller: CallerDep) -> ThreadView:
    return to_thread_view(await manager.threads.get(caller.owner, thread_id))


@router.get(
    "/{thread_id}/runs",
    response_model=ThreadRunList,
    summary="A thread's runs, oldest first",
    description="The runs of the thread still stored (a run deleted, or expired past the "
    "store's retention, is left out), each continuing from the one before it.",
    responses={**ERRORS, 422: {"model": ErrorBody}},
)
async def thread_runs(
    thread_id: ThreadId,
    manager: ManagerDep,
    caller: CallerDep,
    limit: Limit = 50,
    cursor: Annotated[
        str | None, Query(max_length=20, description="next_cursor of the previous page.")
    ] = None,
) -> ThreadRunList:
    records, next_cursor = await manager.threads.runs(
        caller.owner, thread_id, limit=limit, cursor=cursor
    )
    return ThreadRunList(runs=[to_view(r) for r in records], next_cursor=next_cursor)


@router.patch(
    "/{thread_id}",
    response_model=ThreadView,
    summary="Set a thread's metadata",
    responses={**ERRORS, 415: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def patch_thread(
    thread_id: ThreadId,
    caller: CallerDep,
    _: Annotated[None, Depends(require_json)],  # after the key: 401 before 415
    body: ThreadPatch,
    manager: ManagerDep,
) -> ThreadView:
    return to_thread_view(await manager.threads.update(caller.owner, thread_id, body.metadata))


@router.delete(
    "/{thread_id}",
    status_code=204,
    summary="Delete a thread and its runs",
    description="Forgets the thread and deletes its runs and their events. 409 thread_busy "
    "while its latest run has not ended (cancel it first).",
    responses={
        **ERRORS,
        409: {"model": ErrorBody, "description": "thread_busy: a run of it has not ended."},
    },
)
async def delete_thread(thread_id: ThreadId, manager: ManagerDep, caller: CallerDep) -> Response:
    await manager.threads.delete(caller.owner, thread_id)
    return Response(status_code=204)
