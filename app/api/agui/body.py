"""The run of a turn, read by POST /runs' own function (`app.api.runbody.run_body`: the model,
the caps, the digest), each refusal naming where in the AG-UI input the field came from
(`forwardedProps.finishline.settings.max_steps`, `messages`, `tools[0]`)."""

from __future__ import annotations

from functools import partial

from app.api.agui.turns import Turn, run_value, where
from app.api.runbody import run_body
from app.runs.spec import RunRequest
from app.settings import Settings


class TurnRunBody:
    """A turn's new run (an `app.api.agui.session.NewRun`); `size`: the bytes of the input."""

    def __init__(self, settings: Settings, size: int) -> None:
        self.settings = settings
        self.size = size

    async def __call__(self, turn: Turn, task: str) -> tuple[RunRequest, bool]:
        located = partial(where, turn=turn)
        body, request = await run_body(
            run_value(turn, task), self.settings, size=self.size, where=located
        )
        return request, body.on_disconnect == "cancel"
