"""What one POST /ag-ui asks (DESIGN §16): the protocol's `RunAgentInput`, read into a `Turn`.

A turn is the client's threadId and runId, its new user message (the task), the messages
before it (the history, used only for a thread the server has not seen), its frontend tools
(`tools`, the run's `client_tools`), the tool results and `resume` answers it carries for a run
that waits, and the run's configuration: `forwardedProps.finishline`, every POST /runs body
field but `task`, `stream`, `previous_run_id`, `thread_id` and `multitask`, checked like POST
/runs (`run_value`, then `app.api.runbody.run_body`).

The protocol's `context` entries join the task; `state` and `parentRunId` are not used
(finishline keeps no shared state with the client: docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    Context,
    ResumeEntry,
    RunAgentInput,
    ToolMessage,
    UserMessage,
)

from app.runs.errors import InvalidRunError

MAX_ID_CHARS = 256
"""The longest threadId and runId taken (HttpAgent's are UUIDs, 36 characters)."""
PROPS = "forwardedProps.finishline"
NOT_IN_PROPS = {
    "task": "the task is the thread's new user message",
    "stream": "POST /ag-ui always streams",
    "previous_run_id": "a thread continues from its own last run",
    "thread_id": "the thread is the threadId",
    "multitask": "a thread's run is refused while its last run has not ended",
}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A frontend tool's result, as the client sent it (a `tool` message)."""

    content: str
    error: str | None = None


@dataclass(slots=True)
class Turn:
    thread_id: str
    run_id: str
    task: str | None
    """The new user message with the context entries, or None when the input ends with no
    user message (a turn that only answers a waiting run)."""
    earlier: list[Any]
    """The messages before it: the history of a thread the server has not seen (a known
    thread's is the server's own, and what the client re-sends of it is not read)."""
    props: dict[str, Any]
    client_tools: list[dict[str, Any]]
    results: dict[str, ToolResult] = field(default_factory=dict)
    resume: list[ResumeEntry] = field(default_factory=list)
    cancel_on_disconnect: bool = False
    """`forwardedProps.finishline.on_disconnect`, read on every turn (a new run's is checked
    again with the rest of its configuration)."""

    @property
    def first_task(self) -> str | None:
        """The task of a thread's first run: the history, then the new message."""
        history = _transcript(self.earlier)
        if self.task is None or history is None:
            return self.task
        return f"<earlier_conversation>\n{history}\n</earlier_conversation>\n\n{self.task}"


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    parts = []
    for index, part in enumerate(content):
        if getattr(part, "type", None) != "text":
            raise InvalidRunError(
                f"{where}.content[{index}]",
                f"{getattr(part, 'type', 'this')} parts are not supported: send text",
            )
        parts.append(part.text)
    return "\n".join(parts)


def _context(entries: list[Context] | None) -> str:
    if not entries:
        return ""
    lines = [f"- {c.description}: {c.value}" for c in entries]
    return "\n\n<context>\n" + "\n".join(lines) + "\n</context>"


def _transcript(messages: list[Any]) -> str | None:
    lines = []
    for index, message in enumerate(messages):
        role = message.role
        if isinstance(message, AssistantMessage):
            text = message.content or ""
            for call in message.tool_calls or []:
                text += f"\n[called {call.function.name}({call.function.arguments})]"
        elif isinstance(message, ToolMessage):
            text = f"[result of {message.tool_call_id}] " + _text(
                message.content, f"messages[{index}]"
            )
        elif hasattr(message, "content") and isinstance(message.content, str | list):
            text = _text(message.content, f"messages[{index}]")
        else:
            continue  # activity and reasoning messages are the client's display, not the talk
        if text.strip():
            lines.append(f"{role}: {text.strip()}")
    return "\n".join(lines) or None


def read_turn(raw: bytes) -> Turn:
    """The turn of a POST /ag-ui body; pydantic's ValidationError for one that is not a
    `RunAgentInput`, InvalidRunError (422 naming the field) for one finishline cannot run."""
    data = RunAgentInput.model_validate_json(raw)
    for name, value in (("threadId", data.thread_id), ("runId", data.run_id)):
        if not 0 < len(value) <= MAX_ID_CHARS:
            raise InvalidRunError(name, f"must be 1 to {MAX_ID_CHARS} characters")
    forwarded = data.forwarded_props
    props: Any = forwarded.get("finishline", {}) if isinstance(forwarded, dict) else {}
    if forwarded is not None and not isinstance(forwarded, dict):
        raise InvalidRunError("forwardedProps", "must be an object")
    if not isinstance(props, dict):
        raise InvalidRunError(PROPS, "must be an object of POST /runs fields")
    for name, why in NOT_IN_PROPS.items():
        if name in props:
            raise InvalidRunError(f"{PROPS}.{name}", f"not taken here: {why}")
    on_disconnect = props.get("on_disconnect", "continue")
    if on_disconnect not in ("continue", "cancel"):
        raise InvalidRunError(f"{PROPS}.on_disconnect", "must be 'continue' or 'cancel'")
    messages = list(data.messages)
    called: dict[str, int] = {}  # each call id: the last assistant message that made it
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            called.update((call.id, index) for call in message.tool_calls or [])
    results: dict[str, ToolResult] = {}
    for index, message in enumerate(messages):
        # a result answers the newest call of its id (an id may come back in a later run)
        if isinstance(message, ToolMessage) and index > called.get(message.tool_call_id, -1):
            content = _text(message.content, f"messages[{index}]")
            results[message.tool_call_id] = ToolResult(content, message.error)
    task: str | None = None
    history = messages
    if messages and isinstance(messages[-1], UserMessage):
        task = _text(messages[-1].content, f"messages[{len(messages) - 1}]")
        if not task.strip():
            raise InvalidRunError(f"messages[{len(messages) - 1}].content", "is empty")
        task += _context(data.context)
        history = messages[:-1]
    resume = list(data.resume or [])
    answered: dict[str, int] = {}
    for index, entry in enumerate(resume):
        if entry.interrupt_id in answered:
            raise InvalidRunError(
                f"resume[{index}].interruptId",
                f"answers {entry.interrupt_id!r} again (resume[{answered[entry.interrupt_id]}] "
                "answers it): answer each interrupt once",
                interrupts=[entry.interrupt_id],
            )
        answered[entry.interrupt_id] = index
    tools = [
        {"name": t.name, "description": t.description, **_parameters(t.parameters, i)}
        for i, t in enumerate(data.tools or [])
    ]
    return Turn(
        thread_id=data.thread_id,
        run_id=data.run_id,
        task=task,
        earlier=history,
        props=props,
        client_tools=tools,
        results=results,
        resume=resume,
        cancel_on_disconnect=on_disconnect == "cancel",
    )


def _parameters(parameters: Any, index: int) -> dict[str, Any]:
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InvalidRunError(f"tools[{index}].parameters", "must be a JSON schema object")
    return {"parameters": parameters}


def run_value(turn: Turn, task: str) -> dict[str, Any]:
    """The POST /runs body of the turn's new run: its configuration, its task, and its
    frontend tools as `client_tools` (before any the configuration declares)."""
    body: dict[str, Any] = {**turn.props, "task": task}
    if turn.client_tools:
        declared = body.get("client_tools", [])
        if isinstance(declared, list):  # (anything else is refused as POST /runs refuses it)
            body["client_tools"] = [*turn.client_tools, *declared]
    return body


def where(field_name: str, turn: Turn) -> str:
    """Where in the AG-UI input a POST /runs field of `run_value(turn)` came from."""
    head, _, rest = field_name.partition(".")
    name, bracket, index_rest = head.partition("[")
    if name == "task":
        return "messages" + (f".{rest}" if rest else "")
    if name == "body":
        return PROPS
    if name == "client_tools" and bracket:
        index_text, _, tail = index_rest.partition("]")
        if index_text.isdigit():
            index = int(index_text)
            count = len(turn.client_tools)
            suffix = tail + (f".{rest}" if rest else "")
            if index < count:
                return f"tools[{index}]{suffix}"
            return f"{PROPS}.client_tools[{index - count}]{suffix}"
    return f"{PROPS}.{field_name}"
