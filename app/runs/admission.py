"""Admission: how a new run gets in (`RunManager.create`).

The request is checked (`RunAssembler`), an idempotent replay names the run its key made, a
follow-up's previous run must be visible and ended, and room is taken in one step with the
check for it: in this process, the queue's length and the runs being stored, with no await
between check and take; with replicas, the cluster's atomic reservation (`RunCoordinator`).
The run is then stored with its `run.queued` event in one write and queued.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from typing import Any

import anyio
import structlog

from app.engine.events import EventType
from app.runs.cluster import RunCoordinator
from app.runs.cluster_runs import _Active
from app.runs.errors import (
    IdempotencyConflictError,
    QueueFullError,
    RunNotEndedError,
    RunNotFoundError,
    ShuttingDownError,
)
from app.runs.metrics import RunMetrics
from app.runs.observer import RunObserver, RunTrace
from app.runs.ports import CheckedRequest, RunAssembler
from app.runs.records import RunRecord, WebhookState, new_run_id
from app.runs.spec import RunRequest
from app.runs.store import DuplicateRunError, RunStore
from app.runs.view import settings_dict

log = structlog.get_logger("finishline.runs")


def request_hash(request: RunRequest) -> str:
    body = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


class AdmissionRuns:
    """Mixed into `RunManager`, whose attributes these are: taking new runs in."""

    store: RunStore
    assembler: RunAssembler
    metrics: RunMetrics
    observer: RunObserver | None
    coordinator: RunCoordinator | None
    draining: bool
    max_concurrent_runs: int
    max_queued_runs: int
    _traces: dict[str, RunTrace]
    _active: dict[str, _Active]
    _running: set[str]
    _queue: deque[str]
    _admitting: int

    def _start_next(self) -> None:
        raise NotImplementedError("RunManager starts queued runs")

    async def get(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        raise NotImplementedError("RunManager reads runs")

    async def create(
        self,
        request: RunRequest,
        *,
        owner: str | None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        digest: str | None = None,
        sized: bool = False,
    ) -> tuple[RunRecord, bool]:
        """The new run and True, or the run an idempotent replay names and False.
        `traceparent`: the caller's W3C trace context, the parent of the run's trace.
        `digest`: the request's `request_hash` when the caller has it already (computed
        where the request was parsed); otherwise it is computed in a worker thread.
        `sized`: the request's sizes are checked against the caps already (`RunAssembler`)."""
        if self.draining:
            raise ShuttingDownError("the server is shutting down and takes no new runs")
        if digest is None:
            # in proportion to the request's size (64 KB of tool schemas: milliseconds)
            digest = await anyio.to_thread.run_sync(request_hash, request)
        if idempotency_key is not None:
            existing = await self.store.find_by_idempotency_key(owner, idempotency_key)
            if existing is not None:
                return self._replay(existing, digest), False
        checked = await self.assembler.check(request, sized=sized)
        request = checked.request  # with its agent profile applied, if it names one
        previous = None
        if request.previous_run_id is not None:
            previous = await self._previous(request.previous_run_id, owner)
        ticket: str | None = None
        if self.coordinator is None:
            # check for room and take it in one step (no await between): a run being stored
            # holds its place, so concurrent requests cannot all pass the check
            queued = len(self._queue) + self._admitting
            admitted = len(self._running) + queued
            full = admitted >= self.max_concurrent_runs + self.max_queued_runs
        else:  # the cluster's queue: one atomic check-and-take across replicas
            busy = len(self._running) >= self.max_concurrent_runs
            ticket, queued = await self.coordinator.reserve(cap=self.max_queued_runs, busy=busy)
            full = ticket is None
        if full:
            raise QueueFullError(
                f"{len(self._running)} runs are running here and {queued} are queued; "
                "try again later",
                retry_after_s=5,
            )
        self._admitting += 1
        try:
            return await self._admit(
                request, checked, previous, owner, idempotency_key, digest, traceparent
            )
        finally:
            self._admitting -= 1
            if ticket is not None and self.coordinator is not None:  # enqueued, or failed
                await self.coordinator.unreserve(ticket)

    async def _admit(
        self,
        request: RunRequest,
        checked: CheckedRequest,
        previous: RunRecord | None,
        owner: str | None,
        idempotency_key: str | None,
        digest: str,
        traceparent: str | None,
    ) -> tuple[RunRecord, bool]:
        record = RunRecord(
            id=new_run_id(),
            owner=owner,
            request=request,
            model=checked.model,
            settings=checked.limits,
            webhook=WebhookState(url=request.webhook) if request.webhook else None,
            idempotency_key=idempotency_key,
            request_hash=digest,
            previous_run_id=request.previous_run_id,
            inherited_system_prompt=(
                previous.system_prompt
                if previous is not None and request.system_prompt is None
                else None
            ),
        )
        trace = self.observer.open(record, traceparent) if self.observer is not None else None
        if trace is not None:
            record.trace_id = trace.trace_id
        queued: dict[str, Any] = {
            "task": request.task,
            "model": record.model,
            "tools": checked.tool_names,
            "settings": settings_dict(record.settings),
            **({"previous_run_id": record.previous_run_id} if record.previous_run_id else {}),
            **({"agent": request.agent} if request.agent else {}),
        }
        try:  # the run and its run.queued event in one write
            await self.store.create(record, first_event=(EventType.RUN_QUEUED, 0, queued))
        except DuplicateRunError:
            if idempotency_key is None:
                raise
            existing = await self.store.find_by_idempotency_key(owner, idempotency_key)
            if existing is None:
                raise
            return self._replay(existing, digest), False
        if trace is not None:
            self._traces[record.id] = trace
        self.metrics.run_queued()
        log.info("run_created", run_id=record.id, model=record.model)
        if self.coordinator is not None:
            await self.coordinator.enqueue(record.id)
            return record, True
        active = self._active[record.id] = _Active(record)
        self._queue.append(record.id)
        self._start_next()
        return active.record, True

    async def _previous(self, run_id: str, owner: str | None) -> RunRecord:
        """The run a follow-up continues: visible to the caller (404) and ended (409)."""
        try:
            previous = await self.get(run_id, owner)
        except RunNotFoundError:
            raise RunNotFoundError(
                f"previous_run_id: no run {run_id!r}", run_id=run_id, field="previous_run_id"
            ) from None
        if not previous.status.terminal:
            raise RunNotEndedError(
                f"previous_run_id: run {run_id!r} is {previous.status.value}; a follow-up "
                "starts from an ended run",
                run_id=run_id,
                field="previous_run_id",
            )
        return previous

    def _replay(self, existing: RunRecord, digest: str) -> RunRecord:
        if existing.request_hash != digest:
            raise IdempotencyConflictError(
                "this Idempotency-Key was used with a different request body", run_id=existing.id
            )
        active = self._active.get(existing.id)  # a run in progress: its live record
        return active.record if active is not None else existing
