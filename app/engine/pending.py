"""Tool calls waiting for a person (DESIGN §9): what the engine hands over when a run
suspends, and what it is given back to resume with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call of a tool that needs approval, not executed: the run waits on it."""

    call_id: str
    tool: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingCall:
        return cls(data["call_id"], data["tool"], dict(data["arguments"]))


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's decision on a pending call. An approved call runs with `arguments` when
    given (else the model's); a rejected one gives the model an error carrying `message`.
    An approved call with a `result` (a client tool's, answered by the client) is not run:
    `result` is its observation."""

    call_id: str
    approved: bool
    message: str | None = None
    arguments: dict[str, Any] | None = None
    result: str | None = None
