"""A turn's `resume` (and a frontend tool's `tool` message) as the decisions of the calls its
thread's run waits on (`app.api.agui.session`): every call answered, nothing else; each
answer's payload checked, every refusal naming where it is in the input."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ag_ui.core import ResumeEntry

from app.api.agui.turns import Turn
from app.api.errors import ApiError
from app.runs.errors import InvalidRunError, RunNotFoundError
from app.runs.records import ApprovalDecision, PendingApproval, RunRecord

CANCELLED_MESSAGE = "cancelled in the client"


def no_interrupts(turn: Turn, ids: Sequence[str]) -> RunNotFoundError:
    return RunNotFoundError(
        f"resume: thread {turn.thread_id!r} has no interrupt {', '.join(map(repr, ids))}",
        field="resume",
        interrupts=list(ids),
    )


def decisions_for(
    turn: Turn, record: RunRecord, pending: Sequence[PendingApproval]
) -> list[ApprovalDecision]:
    """The decision on each call the run waits on, from the turn's `resume` (and, for a
    frontend tool, its `tool` message): every call answered (409 otherwise), nothing else."""
    entries = {entry.interrupt_id: entry for entry in turn.resume}
    index = {entry.interrupt_id: i for i, entry in enumerate(turn.resume)}
    client = {t.name for t in record.request.client_tools}
    decisions: list[ApprovalDecision] = []
    missing: list[str] = []
    for call in pending:
        entry = entries.pop(call.call_id, None)
        where = f"resume[{index[call.call_id]}]" if entry is not None else "resume"
        if entry is not None and entry.status == "cancelled":
            decisions.append(_rejected(call.call_id))
        elif call.tool in client:
            decision = _client_result(turn, call.call_id, entry, where)
            if decision is None:
                missing.append(call.call_id)
            else:
                decisions.append(decision)
        elif entry is None:
            missing.append(call.call_id)
        else:
            decisions.append(_approval(call.call_id, entry, where))
    if entries:
        raise no_interrupts(turn, list(entries))
    if missing:
        raise ApiError(
            409,
            "interrupts_pending",
            f"resume must answer every interrupt of thread {turn.thread_id!r}; unanswered: "
            + ", ".join(missing),
            run_id=record.id,
            interrupts=missing,
        )
    return decisions


def _rejected(call_id: str, message: str = CANCELLED_MESSAGE) -> ApprovalDecision:
    return ApprovalDecision(call_id=call_id, approved=False, message=message)


def _client_result(
    turn: Turn, call_id: str, entry: ResumeEntry | None, where: str
) -> ApprovalDecision | None:
    """A frontend tool's answer: its `tool` message, else `resume[].payload.result`."""
    sent = turn.results.get(call_id)
    if sent is not None:
        if sent.error is not None:
            return _rejected(call_id, f"the tool failed in the client: {sent.error}")
        return ApprovalDecision(call_id=call_id, approved=True, result=sent.content)
    if entry is None:
        return None
    payload = entry.payload
    if not isinstance(payload, dict) or "result" not in payload:
        raise InvalidRunError(
            f"{where}.payload",
            f"{call_id!r} is a frontend tool's call: send its result as a tool message, or "
            'as {"result": ...}',
        )
    result = payload["result"]
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return ApprovalDecision(call_id=call_id, approved=True, result=text)


APPROVAL_KEYS = {"approve", "approved", "message", "arguments", "editedArgs"}


def _approval(call_id: str, entry: ResumeEntry, where: str) -> ApprovalDecision:
    """`{approve, message?, arguments?}` (AG-UI's `approved` and `editedArgs` too)."""
    payload = entry.payload if entry.payload is not None else {}
    if not isinstance(payload, dict):
        raise InvalidRunError(
            f"{where}.payload", "must be an object {approve, message?, arguments?}"
        )
    unknown = sorted(set(payload) - APPROVAL_KEYS)
    if unknown:
        raise InvalidRunError(f"{where}.payload.{unknown[0]}", "unknown field")
    approve = payload.get("approve", payload.get("approved"))
    if not isinstance(approve, bool):
        raise InvalidRunError(f"{where}.payload.approve", "must be true or false")
    message = payload.get("message")
    if message is not None and not isinstance(message, str):
        raise InvalidRunError(f"{where}.payload.message", "must be a string")
    arguments = payload.get("arguments", payload.get("editedArgs"))
    if arguments is not None and not isinstance(arguments, dict):
        raise InvalidRunError(f"{where}.payload.arguments", "must be an object")
    return ApprovalDecision(call_id=call_id, approved=approve, message=message, arguments=arguments)
