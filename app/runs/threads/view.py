"""The public shape of a thread (DESIGN §19): what GET /threads/{id} answers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from app.runs.threads.threads import Thread, ThreadStatus


class ThreadLinks(BaseModel):
    """Where to find the thread and its runs."""

    self: str = Field(description="This thread.")
    runs: str = Field(description="Its runs, oldest first.")


class ThreadView(BaseModel):
    """A conversation: an ordered line of runs, each continuing from the one before it."""

    id: str = Field(
        description="The thread's id: POST /runs' `thread_id`; `ag-ui:THREAD` for an AG-UI "
        "threadId, `a2a:AGENT:CONTEXT` for an A2A contextId."
    )
    status: ThreadStatus = Field(
        description="idle (its latest run has ended, or it has none), busy (queued or "
        "running), requires_action (its latest run waits for a person: see the run's "
        "pending_approvals)."
    )
    runs: int = Field(description="How many runs the thread has had.")
    latest_run_id: str | None = Field(
        description="Its newest run still stored: what its next run continues from."
    )
    created_at: datetime = Field(description="When its first run was made.")
    updated_at: datetime = Field(description="When it last changed: a run, or its metadata.")
    metadata: dict[str, Any] = Field(description="Your own data (PATCH /threads/{id}).")
    links: ThreadLinks = Field(description="Related URLs.")


def to_thread_view(thread: Thread) -> ThreadView:
    entry = thread.entry
    path = f"/threads/{entry.thread_id}"
    return ThreadView(
        id=entry.thread_id,
        status=thread.status,
        runs=entry.runs,
        latest_run_id=thread.latest.id if thread.latest is not None else None,
        created_at=datetime.fromtimestamp(entry.created_at, UTC),
        updated_at=datetime.fromtimestamp(entry.updated_at, UTC),
        metadata=entry.metadata,
        links=ThreadLinks(self=path, runs=f"{path}/runs"),
    )
