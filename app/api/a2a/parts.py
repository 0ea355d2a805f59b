"""What an A2A message says to finishline: its text (a new task, or a steering message), and
the decisions a data part `{"decisions": [...]}` carries for a task waiting for input.

Text parts are joined by newlines; any other data part joins the text as its JSON. The
decisions are checked by the very model of `POST /runs/{id}/approvals` (`ApprovalsIn`),
each problem named where the message holds it (`message.parts[1].data.decisions[0].approve`).
File parts (raw bytes or a URL) are refused: runs take text.

`google.protobuf.Value` holds every number as a double: a whole number comes back as a float
(2 as 2.0) and is read as the integer it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from a2a.types import Message
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from app.api.schemas import ApprovalsIn
from app.engine.paths import field_path
from app.runs.records import ApprovalDecision

DECISIONS = "decisions"


@dataclass(frozen=True, slots=True)
class Said:
    text: str
    """The text parts, and other data parts as JSON, joined by newlines ('' for none)."""
    decisions: list[ApprovalDecision] = field(default_factory=list)
    decisions_at: str | None = None
    """Where the decisions part is (`message.parts[N]`), for the refusals that name it."""


def whole_numbers(value: Any) -> Any:
    """`value` with each float that is a whole number as an int (Value keeps doubles only)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def read_message(message: Message) -> Said:
    texts: list[str] = []
    decisions: list[ApprovalDecision] = []
    decisions_at: str | None = None
    for index, part in enumerate(message.parts):
        where = f"message.parts[{index}]"
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            value = whole_numbers(MessageToDict(part.data))
            if isinstance(value, dict) and DECISIONS in value:
                if decisions_at is not None:
                    raise InvalidParamsError(
                        f"{where}.data.decisions: the decisions are in {decisions_at} already; "
                        "send them in one data part"
                    )
                decisions, decisions_at = _decisions(value, f"{where}.data"), where
            else:
                texts.append(json.dumps(value, ensure_ascii=False))
        else:
            raise ContentTypeNotSupportedError(
                f"{where}: {kind or 'empty'} parts are not supported: send text or data parts",
                data={"type": "validation_error", "field": where},
            )
    return Said("\n".join(texts), decisions, decisions_at)


def _decisions(value: dict[str, Any], where: str) -> list[ApprovalDecision]:
    try:
        body = ApprovalsIn.model_validate(value)
    except ValidationError as exc:
        problems = [
            {
                "field": field_path(e["loc"], where),
                "message": "unknown field" if e["type"] == "extra_forbidden" else e["msg"],
            }
            for e in exc.errors(include_url=False)
        ]
        summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
        raise InvalidParamsError(
            summary, data={"type": "validation_error", "errors": problems}
        ) from None
    return [
        ApprovalDecision(
            call_id=d.call_id, approved=d.approve, message=d.message, arguments=d.arguments
        )
        for d in body.decisions
    ]
