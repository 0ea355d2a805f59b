"""Tool calls waiting for a person (DESIGN §9): what the engine hands over when a run
suspends, and what it is given back to resume with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChildApproval:
    """A call a sub-agent's child run (or one of its own children: `run_id`) waits on: what
    a person decides for the run that made the sub-agent call too (DESIGN §15)."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    run_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "run_id": self.run_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChildApproval:
        return cls(data["call_id"], data["tool"], dict(data["arguments"]), data["run_id"])


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call the run waits on: of a tool that needs approval, not executed; or of a
    sub-agent whose child run (`child_run_id`) waits for a person on `waits_on`."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    child_run_id: str | None = None
    waits_on: tuple[ChildApproval, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
        }
        if self.child_run_id is not None:
            data["child_run_id"] = self.child_run_id
            data["waits_on"] = [c.to_dict() for c in self.waits_on]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingCall:
        waits_on = tuple(ChildApproval.from_dict(c) for c in data.get("waits_on", ()))
        arguments = dict(data["arguments"])
        return cls(data["call_id"], data["tool"], arguments, data.get("child_run_id"), waits_on)


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
