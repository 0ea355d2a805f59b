"""Approvals across a tree of runs (DESIGN §15): what a parent waiting on a child that waits
for a person holds, and how decisions travel (worked out here; `ApprovalDesk` writes them).

- A parent whose sub-agent call waits on a child that waits for a person waits too: its
  `pending_approvals` list the child's calls (with the child's `run_id`, and the parent's
  own call they came through, `agent_call_id`); a grandchild's calls reach the root the same
  way, each ancestor listing them.
- A decision belongs to the run whose call it is: one sent to an ancestor (its call id alone
  when that is unambiguous in the ancestor's list, or with `run_id`) is forwarded there. Once
  recorded, it is recorded by every ancestor listing the call too (an `approval.decided`
  with the `run_id`).
- When a child goes on (every call it waited on decided) or ends, its parent goes on too: the
  calls it listed through that child are settled, and once none is left it is queued again,
  re-attaches to the child and waits on it (or waits again, if the child does); and so on up.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from app.engine.events import EventType
from app.engine.steps import Suspended
from app.runs.errors import AmbiguousCallError
from app.runs.records import ApprovalDecision, PendingApproval, RunRecord, RunStatus, utcnow
from app.runs.waiting import NewEvent, WaitChange


def pending_of(suspended: Suspended, now: datetime) -> list[PendingApproval]:
    """What a suspended run waits on: its own calls, and those its children wait on."""
    pending = []
    for call in suspended.pending:
        if call.child_run_id is None:
            pending.append(
                PendingApproval(
                    call_id=call.call_id, tool=call.tool, arguments=call.arguments, requested_at=now
                )
            )
            continue
        pending += [
            PendingApproval(
                call_id=w.call_id,
                tool=w.tool,
                arguments=w.arguments,
                requested_at=now,
                run_id=w.run_id,
                agent_call_id=call.call_id,
            )
            for w in call.waits_on
        ]
    return pending


def split(
    run_id: str, record: RunRecord | None, decisions: Sequence[ApprovalDecision]
) -> tuple[list[ApprovalDecision], dict[str, list[ApprovalDecision]]]:
    """A run's decisions: those on its own calls, and those it forwards, by the run whose
    call it is. A call id several listed calls have, without `run_id`: `AmbiguousCallError`."""
    own: list[ApprovalDecision] = []
    forwarded: dict[str, list[ApprovalDecision]] = {}
    waiting = record is not None and record.status == RunStatus.REQUIRES_ACTION
    listed = record.approval.undecided() if waiting and record and record.approval else []
    for index, decision in enumerate(decisions):
        found = [
            p
            for p in listed
            if p.call_id == decision.call_id
            and (decision.run_id is None or (p.run_id or run_id) == decision.run_id)
        ]
        if len(found) > 1:
            runs = sorted(p.run_id or run_id for p in found)
            raise AmbiguousCallError(
                f"decisions[{index}]: call {decision.call_id!r} is waited on in several runs "
                f"of this tree ({', '.join(runs)}): say which with run_id",
                run_id=run_id,
                call_id=decision.call_id,
                runs=runs,
            )
        owner = found[0].run_id if found else None
        if owner is not None:
            forwarded.setdefault(owner, []).append(decision.model_copy(update={"run_id": None}))
        else:
            own.append(decision.model_copy(update={"run_id": None}))
    return own, forwarded


def upward(
    parent: RunRecord | None,
    child: RunRecord,
    decided: Sequence[ApprovalDecision],
    went_on: bool,
) -> WaitChange | None:
    """The change to `parent` once `decided` (calls of the runs below it, each with its
    `run_id`) are recorded below, and, `went_on`, once `child` went on or ended: the calls
    it listed through that child are settled. None: nothing of it waits on them."""
    if parent is None or parent.status != RunStatus.REQUIRES_ACTION or parent.approval is None:
        return None
    state = parent.approval
    undecided = {p.key: p for p in state.undecided() if p.run_id is not None}
    mine = [d for d in decided if d.key in undecided]
    events = [
        NewEvent(
            EventType.APPROVAL_DECIDED,
            parent.usage.steps,
            {
                "call_id": d.call_id,
                "approved": d.approved,
                "message": d.message,
                "run_id": d.run_id,
            },
        )
        for d in mine
    ]
    before = len(state.decided)
    state.decided += mine
    if went_on:
        done = {d.key for d in mine}
        state.decided += [
            ApprovalDecision(call_id=p.call_id, approved=True, run_id=p.run_id)
            for key, p in undecided.items()
            if p.agent_call_id == child.parent_call_id and key not in done
        ]
    if len(state.decided) == before:
        return None  # nothing of it waits on them
    if state.undecided():
        return WaitChange(parent, events)
    parent.status = RunStatus.QUEUED
    state.requeued_at = state.requeued_at or utcnow()
    return WaitChange(parent, events, requeue=True)
