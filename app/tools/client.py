"""Tools the client runs (`client_tools`; AG-UI's frontend tools, DESIGN §16).

The model sees such a tool like any other; a call to one is never executed here. It waits like
a call that needs a person's approval (DESIGN §9), and the client answers it with the tool's
result: a decision `{"call_id", "approve": true, "result": "..."}` (POST /runs/{id}/approvals,
or the next AG-UI run on the thread). The engine shows the model that result as the call's
observation; a rejection gives it an error observation, as for any rejected call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.errors import ToolError
from app.engine.ports import ToolContext
from app.tools.base import CompiledSchema, SchemaTool


class ClientTool(SchemaTool):
    """A tool declared by the client, answered by the client: `call` is never reached (every
    call waits for the client's result)."""

    def __init__(
        self, *, name: str, description: str, parameters: Mapping[str, Any] | CompiledSchema
    ) -> None:
        # not idempotent: the client may act on the world (a dialog, a navigation)
        super().__init__(
            name=name, description=description, parameters=parameters, idempotent=False
        )

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError(f"{self.name} runs in the client: its result comes with the decision")
